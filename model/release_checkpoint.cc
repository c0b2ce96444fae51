#include "model/release_checkpoint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "model/checkpoint_writer.h"
#include "model/release_configs.h"  // generated from model/release_configs/*.json

namespace mtpspec {

namespace {

struct ReleaseFacts {
  Release release;
  const char* name;
  const char* config;
  bool mtp_copies;
  bool fp8;
};

constexpr ReleaseFacts kReleases[] = {
    {Release::kGlm52, "glm-5.2", kGlm52Config, /*mtp_copies=*/false, /*fp8=*/true},
    {Release::kDeepSeekV32, "deepseek-v3.2", kDeepSeekV32Config, /*mtp_copies=*/true, /*fp8=*/true},
    {Release::kGlm47Flash, "glm-4.7-flash", kGlm47FlashConfig, /*mtp_copies=*/true, /*fp8=*/false},
    {Release::kDeepSeekV3, "deepseek-v3", kDeepSeekV3Config, /*mtp_copies=*/true, /*fp8=*/true},
};

const ReleaseFacts& FactsOf(Release release) {
  for (const ReleaseFacts& facts : kReleases) {
    if (facts.release == release) return facts;
  }
  return kReleases[0];
}

}  // namespace

absl::StatusOr<Release> ParseRelease(const std::string& name) {
  for (const ReleaseFacts& facts : kReleases) {
    if (name == facts.name) return facts.release;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("release must be glm-5.2, deepseek-v3.2, glm-4.7-flash or deepseek-v3, got \"", name, "\""));
}

const char* ReleaseName(Release release) { return FactsOf(release).name; }
bool ReleaseHasMtpCopies(Release release) { return FactsOf(release).mtp_copies; }
bool ReleaseIsFp8(Release release) { return FactsOf(release).fp8; }

nlohmann::json ReleaseConfig(Release release) { return nlohmann::json::parse(FactsOf(release).config); }

absl::StatusOr<nlohmann::json> CutConfig(Release release, int64_t layers, int64_t experts) {
  nlohmann::json c = ReleaseConfig(release);
  const int64_t all_layers = c["num_hidden_layers"].get<int64_t>();
  const int64_t all_experts = c["n_routed_experts"].get<int64_t>();
  const int64_t groups = c.value("n_group", int64_t{1});
  if (layers < 0 || layers > all_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layers must be in [1, ", all_layers, "] (0: all), got ", layers));
  }
  if (experts < 0 || experts > all_experts || (experts > 0 && experts % groups != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("experts must be a multiple of n_group = ", groups, " in [", groups,
                                                   ", ", all_experts, "] (0: all), got ", experts));
  }
  if (layers == 0 && experts == 0) return c;
  nlohmann::json cut_from = {{"release", ReleaseName(release)}};
  if (layers > 0 && layers < all_layers) {
    cut_from["num_hidden_layers"] = all_layers;
    c["num_hidden_layers"] = layers;
    for (const char* schedule : {"indexer_types", "mlp_layer_types"}) {
      if (c.contains(schedule) && c[schedule].is_array()) {
        nlohmann::json kept = nlohmann::json::array();
        for (int64_t l = 0; l < layers; ++l) kept.push_back(c[schedule][l]);
        c[schedule] = kept;
      }
    }
  }
  if (experts > 0 && experts < all_experts) {
    cut_from["n_routed_experts"] = all_experts;
    c["n_routed_experts"] = experts;
    const int64_t per_token = c["num_experts_per_tok"].get<int64_t>();
    if (per_token > experts) {
      cut_from["num_experts_per_tok"] = per_token;
      c["num_experts_per_tok"] = experts;
    }
    const int64_t topk_group = c.value("topk_group", int64_t{1});
    if (topk_group > groups) c["topk_group"] = groups;
  }
  // MTP and quantization_config entries name layer indices: the MTP layer is now layer `layers`.
  if (c.contains("quantization_config") && c["quantization_config"].contains("modules_to_not_convert")) {
    nlohmann::json kept = nlohmann::json::array();
    const int64_t trunk = c["num_hidden_layers"].get<int64_t>();
    for (const auto& m : c["quantization_config"]["modules_to_not_convert"]) {
      std::string name = m.get<std::string>();
      const std::string prefix = "model.layers.";
      if (name.rfind(prefix, 0) == 0) {
        const int64_t l = std::stoll(name.substr(prefix.size()));
        if (l == all_layers) {
          name = absl::StrCat(prefix, trunk, name.substr(prefix.size() + std::to_string(l).size()));
        } else if (l >= trunk) {
          continue;
        }
      }
      kept.push_back(name);
    }
    c["quantization_config"]["modules_to_not_convert"] = kept;
  }
  if (cut_from.size() > 1) c["mtpspec_cut_from"] = cut_from;
  return c;
}

nlohmann::json UncutConfig(const nlohmann::json& config) {
  if (!config.contains("mtpspec_cut_from")) return config;
  const nlohmann::json& from = config["mtpspec_cut_from"];
  absl::StatusOr<Release> release = ParseRelease(from.value("release", ""));
  if (!release.ok()) return config;
  return ReleaseConfig(*release);
}

absl::Status WriteReleaseCheckpoint(const std::string& dir, const ReleaseCheckpointOptions& options) {
  ASSIGN_OR_RETURN(nlohmann::json config, CutConfig(options.release, options.layers, options.experts));
  RandomCheckpointOptions write;
  write.seed = options.seed;
  write.dtype = ReleaseIsFp8(options.release) ? DType::kF8E4M3 : DType::kBF16;
  write.parallel = true;
  write.zeros = options.zeros;
  write.max_shard_bytes = std::max<int64_t>(options.shard_bytes, 1);
  write.mtp_copies = ReleaseHasMtpCopies(options.release);
  return WriteRandomCheckpoint(dir, config, write);
}

}  // namespace mtpspec
