#include "bench/bench_model.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "model/checkpoint_writer.h"

#ifndef MTPSPEC_BENCH_MODEL_DIR_DEFAULT
#define MTPSPEC_BENCH_MODEL_DIR_DEFAULT "build/bench_model"
#endif

namespace mtpspec::bench {
namespace {

namespace fs = std::filesystem;

constexpr char kMarkerFile[] = "bench_model.json";
constexpr uint64_t kSeed = 20240601;
constexpr int64_t kMaxShardBytes = int64_t{256} << 20;

// What the completion marker holds: the generator's inputs. A model is reused only when they match.
nlohmann::json MarkerJson() {
  return {{"generator", "mtpspec bench/bench_model.cc v1"},
          {"seed", kSeed},
          {"dtype", "bf16"},
          {"max_shard_bytes", kMaxShardBytes},
          {"config", BenchModelConfig()}};
}

bool ReadJson(const fs::path& path, nlohmann::json* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  *out = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return !out->is_discarded();
}

bool IsCurrentBenchModel(const fs::path& dir) {
  nlohmann::json marker, config;
  return ReadJson(dir / kMarkerFile, &marker) && marker == MarkerJson() &&
         ReadJson(dir / "config.json", &config) && config == BenchModelConfig();
}

int64_t Bytes(const TensorView& view) { return view.empty() ? 0 : static_cast<int64_t>(view.nbytes()); }
int64_t Bytes(const Tensor& tensor) { return Bytes(tensor.view()); }

int64_t MlpBytes(const MlpWeights& w) { return Bytes(w.gate) + Bytes(w.up) + Bytes(w.down); }

// Attention weights one decode step reads on a layer (indexer included where it runs).
int64_t AttentionBytes(const MlaWeights& w, bool indexer_scores) {
  int64_t bytes = Bytes(w.q_a_proj) + Bytes(w.q_a_norm) + Bytes(w.q_b_proj) + Bytes(w.kv_a_proj) +
                  Bytes(w.kv_a_norm) + Bytes(w.kv_b_proj) + Bytes(w.o_proj);
  if (w.indexer.has_value()) {
    const IndexerWeights& ix = *w.indexer;
    bytes += Bytes(ix.wk) + Bytes(ix.k_norm_weight) + Bytes(ix.k_norm_bias);  // keys of the new token
    if (indexer_scores) bytes += Bytes(ix.wq_b) + Bytes(ix.weights_proj);    // scoring
  }
  return bytes;
}

}  // namespace

nlohmann::json BenchModelConfig() {
  // 10 layers: F F S S F S S F S S — full layers run the indexer, shared ones reuse the selection.
  nlohmann::json indexer_types = nlohmann::json::array();
  for (const char* t : {"full", "full", "shared", "shared", "full", "shared", "shared", "full", "shared", "shared"}) {
    indexer_types.push_back(t);
  }
  return nlohmann::json{
      {"model_type", "glm_moe_dsa"},
      {"architectures", {"GlmMoeDsaForCausalLM"}},
      {"vocab_size", 32768},
      {"hidden_size", 1024},
      {"num_hidden_layers", 10},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 16},
      {"q_lora_rank", 384},
      {"kv_lora_rank", 256},
      {"qk_nope_head_dim", 64},
      {"qk_rope_head_dim", 32},
      {"v_head_dim", 64},
      {"intermediate_size", 2816},
      {"moe_intermediate_size", 512},
      {"first_k_dense_replace", 1},
      {"n_routed_experts", 32},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 4},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"rms_norm_eps", 1e-5},
      {"rope_parameters", {{"rope_theta", 1000000}, {"rope_type", "default"}}},
      {"rope_interleave", true},
      {"max_position_embeddings", 16384},
      {"index_n_heads", 8},
      {"index_head_dim", 64},
      {"index_topk", 512},
      {"indexer_rope_interleave", true},
      {"indexer_types", indexer_types},
      {"num_nextn_predict_layers", 1},
      {"tie_word_embeddings", false},
      {"eos_token_id", {1}},
  };
}

std::string DefaultBenchModelDir() {
  if (const char* env = std::getenv("MTPSPEC_BENCH_MODEL_DIR"); env != nullptr && *env != '\0') return env;
  return MTPSPEC_BENCH_MODEL_DIR_DEFAULT;
}

std::string PathForReport(const std::string& path) {
  std::error_code error;
  const fs::path here = fs::current_path(error);
  if (error || !fs::path(path).is_absolute()) return path;
  const fs::path relative = fs::path(path).lexically_normal().lexically_relative(here);
  if (relative.empty() || *relative.begin() == "..") return path;
  return relative.string();
}

absl::Status EnsureBenchModel(const std::string& dir, bool* generated) {
  if (generated != nullptr) *generated = false;
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "dir/" → "dir"
  if (IsCurrentBenchModel(target)) return absl::OkStatus();
  // Only an older bench model is replaced: never a mistyped path or another checkpoint.
  if (fs::exists(target) && !fs::exists(target / "config.json")) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists but holds no config.json; refusing to replace it with the bench model"));
  }
  if (IsOtherCheckpoint(target.string())) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " holds a checkpoint that is not a bench model (no ",
                                                      kMarkerFile, "); refusing to replace it with the bench model"));
  }

  // Write next to the target and rename, so an interrupted run never leaves a model that looks
  // complete.
  const fs::path temp = fs::path(target.string() + ".tmp." + std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(temp, ec);
  RandomCheckpointOptions options;
  options.seed = kSeed;
  options.dtype = DType::kBF16;
  options.include_mtp = true;
  options.max_shard_bytes = kMaxShardBytes;
  absl::Status status = WriteRandomCheckpoint(temp.string(), BenchModelConfig(), options);
  if (status.ok()) {
    std::ofstream marker(temp / kMarkerFile);
    marker << MarkerJson().dump(2) << "\n";
    if (!marker) status = absl::InternalError(absl::StrCat((temp / kMarkerFile).string(), ": write failed"));
  }
  if (!status.ok()) {
    fs::remove_all(temp, ec);
    return status;
  }
  if (fs::exists(target)) {
    fs::remove_all(target, ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot remove stale model: ", ec.message()));
  }
  fs::create_directories(target.parent_path().empty() ? fs::path(".") : target.parent_path(), ec);
  fs::rename(temp, target, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", temp.string(), " -> ", dir, ": ", ec.message()));
  if (generated != nullptr) *generated = true;
  return absl::OkStatus();
}

bool IsOtherCheckpoint(const std::string& dir) {
  const fs::path path(dir);
  return fs::exists(path / "config.json") && !fs::exists(path / kMarkerFile);
}

DecodeTraffic DecodeStepTraffic(const Model& model, int64_t num_keys) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const bool indexer_scores = num_keys > c.index_topk;  // T ≤ K: dense path, no scoring
  DecodeTraffic traffic;
  int64_t& bytes = traffic.weight_bytes;
  bytes += c.hidden_size * static_cast<int64_t>(DTypeSize(w.embed.dtype));  // one embedding row
  bytes += Bytes(w.final_norm) + Bytes(w.lm_head);
  for (const DecoderLayerWeights& layer : w.layers) {
    bytes += Bytes(layer.input_norm) + Bytes(layer.post_attention_norm);
    bytes += AttentionBytes(layer.attn, indexer_scores);
    if (layer.dense_mlp) {
      bytes += MlpBytes(layer.mlp);
    } else {
      const MoeWeights& moe = layer.moe;
      bytes += Bytes(moe.router) + Bytes(moe.router_bias);
      if (moe.shared.has_value()) bytes += MlpBytes(*moe.shared);
      bytes += c.num_experts_per_tok * MlpBytes(moe.experts.front());
    }
  }

  const int64_t attended = std::min(num_keys, c.index_topk);
  const int64_t f32 = static_cast<int64_t>(sizeof(float));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    traffic.cache_bytes += attended * (c.kv_lora_rank + c.qk_rope_head_dim) * f32;
    if (c.layer_has_indexer[l] && indexer_scores) traffic.cache_bytes += num_keys * c.index_head_dim * f32;
  }
  return traffic;
}

int64_t TrunkWeightBytes(const Model& model) {
  const ModelWeights& w = model.weights();
  int64_t bytes = Bytes(w.embed) + Bytes(w.final_norm) + Bytes(w.lm_head);
  for (const DecoderLayerWeights& layer : w.layers) {
    bytes += Bytes(layer.input_norm) + Bytes(layer.post_attention_norm) + AttentionBytes(layer.attn, true);
    if (layer.dense_mlp) {
      bytes += MlpBytes(layer.mlp);
    } else {
      bytes += Bytes(layer.moe.router) + Bytes(layer.moe.router_bias);
      if (layer.moe.shared.has_value()) bytes += MlpBytes(*layer.moe.shared);
      for (const MlpWeights& expert : layer.moe.experts) bytes += MlpBytes(expert);
    }
  }
  return bytes;
}

}  // namespace mtpspec::bench
