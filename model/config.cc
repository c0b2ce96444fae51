#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/tensor.h"
#include "core/status.h"

namespace mtpspec {
namespace {

using json = nlohmann::json;

// Reads typed fields from one JSON object and names the source file and field in every error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source) : obj_(obj), source_(std::move(source)) {}

  bool Has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const std::string& source() const { return source_; }

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field \"", key, "\" ", what));
  }

  // Integer field. JSON floats with an integral value (2048.0) are accepted.
  absl::StatusOr<int64_t> Int(const std::string& key) const {
    if (!Has(key)) return Error(key, "is required but missing");
    const json& v = obj_.at(key);
    // Beyond int64 (10000000000000000000) JSON holds an unsigned value that would wrap negative.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(key, absl::StrCat("= ", v.dump(), " is too large"));
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
  }
  absl::StatusOr<int64_t> Int(const std::string& key, int64_t fallback) const {
    return Has(key) ? Int(key) : fallback;
  }
  // Any JSON number (an integer such as 8000000 parses as a number too).
  absl::StatusOr<double> Number(const std::string& key) const {
    if (!Has(key)) return Error(key, "is required but missing");
    const json& v = obj_.at(key);
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    double d = v.get<double>();
    if (!std::isfinite(d)) return Error(key, "must be finite");
    return d;
  }
  absl::StatusOr<double> Number(const std::string& key, double fallback) const {
    return Has(key) ? Number(key) : fallback;
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& v = obj_.at(key);
    if (!v.is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const std::string& key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const json& v = obj_.at(key);
    if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }

 private:
  const json& obj_;
  std::string source_;
};

absl::Status RequirePositive(const std::string& source, const std::string& key, int64_t value) {
  if (value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field \"", key, "\" must be > 0, got ", value));
  }
  return absl::OkStatus();
}

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// RoPE: nested `rope_parameters` wins over legacy top-level `rope_theta` / `rope_scaling`.
absl::StatusOr<RopeConfig> ParseRope(const json& root, const std::string& source) {
  RopeConfig rope;
  FieldReader top(root, source);
  const json* params = nullptr;
  std::string where;
  if (top.Has("rope_parameters")) {
    params = &root.at("rope_parameters");
    where = "rope_parameters";
  } else if (top.Has("rope_scaling")) {
    params = &root.at("rope_scaling");
    where = "rope_scaling";
  }
  if (params != nullptr && !params->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": field \"", where, "\" must be an object"));
  }
  if (params != nullptr) {
    FieldReader p(*params, absl::StrCat(source, " (", where, ")"));
    if (p.Has("rope_theta")) {
      ASSIGN_OR_RETURN(rope.theta, p.Number("rope_theta"));
    } else {
      ASSIGN_OR_RETURN(rope.theta, top.Number("rope_theta"));
    }
    // HF v5 spells it `rope_type`; the legacy dict uses `type`.
    std::string type = "default";
    if (p.Has("rope_type")) {
      ASSIGN_OR_RETURN(type, p.String("rope_type", "default"));
    } else if (p.Has("type")) {
      ASSIGN_OR_RETURN(type, p.String("type", "default"));
    }
    rope.type = type;
    if (type == "yarn") {
      ASSIGN_OR_RETURN(rope.factor, p.Number("factor"));
      ASSIGN_OR_RETURN(rope.original_max_position_embeddings, p.Int("original_max_position_embeddings"));
      ASSIGN_OR_RETURN(rope.beta_fast, p.Number("beta_fast", 32.0));
      ASSIGN_OR_RETURN(rope.beta_slow, p.Number("beta_slow", 1.0));
      ASSIGN_OR_RETURN(rope.mscale, p.Number("mscale", 0.0));
      ASSIGN_OR_RETURN(rope.mscale_all_dim, p.Number("mscale_all_dim", 0.0));
      ASSIGN_OR_RETURN(rope.attention_factor, p.Number("attention_factor", 0.0));
      ASSIGN_OR_RETURN(rope.truncate, p.Bool("truncate", true));
      if (rope.factor <= 0) return p.Error("factor", "must be > 0");
      RETURN_IF_ERROR(RequirePositive(source, "original_max_position_embeddings",
                                      rope.original_max_position_embeddings));
    } else if (type != "default") {
      return p.Error(p.Has("rope_type") ? "rope_type" : "type",
                     absl::StrCat("\"", type, "\" is not supported (supported: default, yarn)"));
    }
  } else {
    ASSIGN_OR_RETURN(rope.theta, top.Number("rope_theta"));
  }
  if (rope.theta <= 1.0) return top.Error("rope_theta", "must be > 1");
  return rope;
}

}  // namespace

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.type != "default" && rope.mscale_all_dim != 0.0) {
    double m = YarnMscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

int64_t ModelConfig::IndexDonor(int64_t layer) const {
  if (!has_indexer) return -1;
  if (layer >= num_hidden_layers) return layer;  // MTP layers always own an indexer
  for (int64_t l = layer; l >= 0; --l) {
    if (layer_has_indexer[l]) return l;
  }
  return -1;  // unreachable with an indexer: layer 0 is validated to be full
}

absl::StatusOr<std::vector<bool>> DeriveIndexSchedule(const json& root, int64_t num_layers, const std::string& file,
                                                      std::string* source_out) {
  FieldReader r(root, file);
  std::vector<bool> full(num_layers, true);
  std::string source;
  if (r.Has("indexer_types")) {
    const json& types = root.at("indexer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != num_layers) {
      return r.Error("indexer_types", absl::StrCat("must be a list of ", num_layers, " entries"));
    }
    for (int64_t l = 0; l < num_layers; ++l) {
      const json& t = types[l];
      if (t == "full") {
        full[l] = true;
      } else if (t == "shared") {
        full[l] = false;
      } else {
        return r.Error("indexer_types", absl::StrCat("entry ", l, " must be \"full\" or \"shared\", got ", t.dump()));
      }
    }
    source = "indexer_types";
  } else if (r.Has("index_topk_pattern")) {
    const json& pattern = root.at("index_topk_pattern");
    if (!pattern.is_string()) return r.Error("index_topk_pattern", "must be a string of 'F'/'S'");
    const std::string p = pattern.get<std::string>();
    if (static_cast<int64_t>(p.size()) > num_layers) {
      return r.Error("index_topk_pattern", absl::StrCat("has ", p.size(), " entries for ", num_layers, " layers"));
    }
    for (size_t l = 0; l < p.size(); ++l) {
      if (p[l] != 'F' && p[l] != 'S') {
        return r.Error("index_topk_pattern", absl::StrCat("character ", l, " must be 'F' or 'S'"));
      }
      full[l] = p[l] == 'F';
    }
    // Layers beyond the pattern's length stay full (vLLM's reading).
    source = "index_topk_pattern";
  } else {
    ASSIGN_OR_RETURN(int64_t freq, r.Int("index_topk_freq", 1));
    ASSIGN_OR_RETURN(int64_t offset, r.Int("index_skip_topk_offset", 2));
    freq = std::max<int64_t>(freq, 1);
    for (int64_t l = 0; l < num_layers; ++l) {
      full[l] = std::max<int64_t>(l - offset + 1, 0) % freq == 0;
    }
    source = absl::StrCat("index_topk_freq=", freq, ", index_skip_topk_offset=", offset);
  }
  if (num_layers > 0 && !full[0]) {
    return r.Error(source == "indexer_types" ? "indexer_types" : "index_topk_pattern",
                   "makes layer 0 shared, but a shared layer needs a full layer below it");
  }
  if (source_out) *source_out = source;
  return full;
}

namespace {

// quantization_config: only what the releases write (block FP8 e4m3 with 128 x 128 blocks and
// dynamic activations) is accepted; anything else is an error naming the field.
absl::Status ParseQuantization(const json& q, const std::string& source, ModelConfig& c) {
  const std::string where = absl::StrCat(source, ": quantization_config");
  if (!q.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
  FieldReader r(q, where);
  ASSIGN_OR_RETURN(const std::string method, r.String("quant_method", ""));
  if (method != "fp8") {
    return r.Error("quant_method", absl::StrCat("is \"", method, "\"; mtpspec reads fp8 (e4m3 with 128 x 128 block scales)"));
  }
  ASSIGN_OR_RETURN(const std::string fmt, r.String("fmt", "e4m3"));
  if (fmt != "e4m3") return r.Error("fmt", absl::StrCat("is \"", fmt, "\"; only e4m3 is supported"));
  ASSIGN_OR_RETURN(const std::string activations, r.String("activation_scheme", "dynamic"));
  if (activations != "dynamic") {
    return r.Error("activation_scheme", absl::StrCat("is \"", activations, "\"; only dynamic (weights-only FP8) is supported"));
  }
  if (r.Has("weight_block_size")) {
    const json& b = q.at("weight_block_size");
    if (b != json::array({kFp8Block, kFp8Block})) {
      return r.Error("weight_block_size", absl::StrCat("is ", b.dump(), "; only [128, 128] blocks are supported"));
    }
  }
  ASSIGN_OR_RETURN(c.quantization.scale_fmt, r.String("scale_fmt", ""));
  if (c.quantization.scale_fmt != "" && c.quantization.scale_fmt != "float" && c.quantization.scale_fmt != "ue8m0") {
    return r.Error("scale_fmt", absl::StrCat("is \"", c.quantization.scale_fmt, "\"; expected float or ue8m0"));
  }
  if (r.Has("modules_to_not_convert")) {
    const json& list = q.at("modules_to_not_convert");
    if (!list.is_array()) return r.Error("modules_to_not_convert", "must be a list of module names");
    for (const json& m : list) {
      if (!m.is_string()) return r.Error("modules_to_not_convert", absl::StrCat("holds ", m.dump(), ", not a string"));
      c.quantization.modules_to_not_convert.push_back(m.get<std::string>());
    }
  }
  c.quantization.fp8 = true;
  return absl::OkStatus();
}

// What each model type fills in where its released config.json is silent (docs/models.md,
// "Model types without an indexer" lists the sources).
struct TypeDefaults {
  ModelType type = ModelType::kGlmMoeDsa;
  bool has_indexer = true;
  int64_t first_k_dense_replace = 3;
  int64_t num_nextn_predict_layers = 0;
  double routed_scaling_factor = 2.5;
  double rms_norm_eps = 1e-6;
  bool mtp_chain_raw = false;
  std::string mtp_chain_source;
};

absl::StatusOr<TypeDefaults> DefaultsOf(const std::string& name, const FieldReader& r) {
  TypeDefaults d;
  if (name == "glm_moe_dsa") {
    d.rms_norm_eps = 1e-5;
    d.mtp_chain_source = "vLLM's GLM-5 MTP and SGLang's GLM NextN carry the normed state";
  } else if (name == "deepseek_v32") {
    d.type = ModelType::kDeepseekV32;
    d.mtp_chain_source = "SGLang's DeepSeek NextN carries the normed state (vLLM's deepseek_mtp carries the raw one)";
  } else if (name == "glm4_moe_lite") {
    // transformers' Glm4MoeLiteConfig: dense layer 0 only (mlp_layer_types), routed scaling 1.8.
    d.type = ModelType::kGlm4MoeLite;
    d.has_indexer = false;
    d.first_k_dense_replace = 1;
    d.routed_scaling_factor = 1.8;
    d.rms_norm_eps = 1e-5;
    d.mtp_chain_raw = true;
    d.mtp_chain_source = "vLLM's glm4_moe_lite_mtp carries the raw state";
  } else if (name == "deepseek_v3") {
    d.type = ModelType::kDeepseekV3;
    d.has_indexer = false;
    d.num_nextn_predict_layers = 1;  // transformers' DeepseekV3Config: num_mtp_layers = 1
    d.mtp_chain_raw = true;
    d.mtp_chain_source = "vLLM's deepseek_mtp carries the raw state";
  } else {
    return r.Error("model_type", absl::StrCat("\"", name,
                                              "\" is not supported (supported: glm_moe_dsa, deepseek_v32, "
                                              "glm4_moe_lite, deepseek_v3)"));
  }
  return d;
}

// A type without an indexer names none of its keys: one that does is a config of another type.
absl::Status RefuseIndexerKeys(const FieldReader& r, const std::string& type) {
  for (const char* key : {"index_n_heads", "index_head_dim", "index_topk", "indexer_types", "index_topk_pattern",
                          "index_topk_freq", "index_skip_topk_offset", "indexer_rope_interleave",
                          "index_share_for_mtp_iteration"}) {
    if (r.Has(key)) {
      return r.Error(key, absl::StrCat("belongs to the DSA indexer, which ", type,
                                       " does not have (glm_moe_dsa and deepseek_v32 do)"));
    }
  }
  return absl::OkStatus();
}

// Every rope dimension rotates: a partial_rotary_factor other than 1 (top level or in
// rope_parameters) describes a model mtpspec does not run.
absl::Status RefusePartialRotary(const json& root, const FieldReader& r) {
  auto check = [](const FieldReader& reader) -> absl::Status {
    ASSIGN_OR_RETURN(const double factor, reader.Number("partial_rotary_factor", 1.0));
    if (factor != 1.0) {
      return reader.Error("partial_rotary_factor",
                          absl::StrCat("= ", factor, " is not supported (MLA rotates all qk_rope_head_dim values: 1)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(r));
  if (r.Has("rope_parameters") && root.at("rope_parameters").is_object()) {
    RETURN_IF_ERROR(check(FieldReader(root.at("rope_parameters"), absl::StrCat(r.source(), " (rope_parameters)"))));
  }
  return absl::OkStatus();
}

}  // namespace

bool ModuleIsNotConverted(const ModelConfig& config, const std::string& name) {
  for (std::string module : config.quantization.modules_to_not_convert) {
    const size_t alias = module.find("indexers_proj");
    if (alias != std::string::npos) module.replace(alias, std::string("indexers_proj").size(), "indexer.weights_proj");
    if (name == module || (name.size() > module.size() && name.compare(0, module.size(), module) == 0 &&
                           name[module.size()] == '.')) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<ModelConfig> ParseModelConfig(const json& root, const std::string& source) {
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  FieldReader r(root, source);
  ModelConfig c;
  ASSIGN_OR_RETURN(c.model_type_name, r.String("model_type", ""));
  ASSIGN_OR_RETURN(const TypeDefaults defaults, DefaultsOf(c.model_type_name, r));
  c.model_type = defaults.type;
  c.has_indexer = defaults.has_indexer;
  c.mtp_chain_raw = defaults.mtp_chain_raw;
  c.mtp_chain_source = defaults.mtp_chain_source;
  const bool glm = c.model_type == ModelType::kGlmMoeDsa;
  if (!c.has_indexer) RETURN_IF_ERROR(RefuseIndexerKeys(r, c.model_type_name));

  ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size"));
  ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size"));
  ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads"));
  if (!r.Has("q_lora_rank")) {
    return r.Error("q_lora_rank", "must be set: mtpspec runs MLA with a query latent (q_a_proj, q_b_proj)");
  }
  ASSIGN_OR_RETURN(c.q_lora_rank, r.Int("q_lora_rank"));
  ASSIGN_OR_RETURN(c.kv_lora_rank, r.Int("kv_lora_rank"));
  ASSIGN_OR_RETURN(c.qk_nope_head_dim, r.Int("qk_nope_head_dim"));
  ASSIGN_OR_RETURN(c.qk_rope_head_dim, r.Int("qk_rope_head_dim"));
  ASSIGN_OR_RETURN(c.v_head_dim, r.Int("v_head_dim"));
  ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size"));
  ASSIGN_OR_RETURN(c.first_k_dense_replace, r.Int("first_k_dense_replace", defaults.first_k_dense_replace));
  ASSIGN_OR_RETURN(c.moe_layer_freq, r.Int("moe_layer_freq", 1));
  ASSIGN_OR_RETURN(c.n_routed_experts, r.Int("n_routed_experts"));
  ASSIGN_OR_RETURN(c.n_shared_experts, r.Int("n_shared_experts", 1));
  ASSIGN_OR_RETURN(c.num_experts_per_tok, r.Int("num_experts_per_tok"));
  ASSIGN_OR_RETURN(c.moe_intermediate_size, r.Int("moe_intermediate_size"));
  ASSIGN_OR_RETURN(c.n_group, r.Int("n_group", 1));
  ASSIGN_OR_RETURN(c.topk_group, r.Int("topk_group", 1));
  ASSIGN_OR_RETURN(c.norm_topk_prob, r.Bool("norm_topk_prob", true));
  ASSIGN_OR_RETURN(c.routed_scaling_factor, r.Number("routed_scaling_factor", defaults.routed_scaling_factor));
  ASSIGN_OR_RETURN(c.scoring_func, r.String("scoring_func", "sigmoid"));
  ASSIGN_OR_RETURN(c.topk_method, r.String("topk_method", "noaux_tc"));
  ASSIGN_OR_RETURN(c.rms_norm_eps, r.Number("rms_norm_eps", defaults.rms_norm_eps));
  ASSIGN_OR_RETURN(c.rope, ParseRope(root, source));
  ASSIGN_OR_RETURN(c.rope_interleave, r.Bool("rope_interleave", true));
  ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings"));
  if (c.has_indexer) {
    ASSIGN_OR_RETURN(c.index_n_heads, r.Int("index_n_heads", glm ? 32 : 64));
    ASSIGN_OR_RETURN(c.index_head_dim, r.Int("index_head_dim", 128));
    ASSIGN_OR_RETURN(c.index_topk, r.Int("index_topk", 2048));
    // The GLM indexer is interleaved (transformers' GlmMoeDsa runs it so and writes no key); the
    // DeepSeek-V3.2 indexer is half-split (docs/models.md, "The DSA lightning indexer").
    ASSIGN_OR_RETURN(c.indexer_rope_interleave, r.Bool("indexer_rope_interleave", glm));
    c.indexer_rope_source = r.Has("indexer_rope_interleave")
                                ? "config"
                                : absl::StrCat(c.model_type_name, " default (the config has no indexer_rope_interleave)");
    ASSIGN_OR_RETURN(c.index_share_for_mtp_iteration, r.Bool("index_share_for_mtp_iteration", false));
  } else {
    c.index_topk = kNoIndexerTopK;
    c.indexer_rope_source = absl::StrCat(c.model_type_name, " has no indexer");
  }
  RETURN_IF_ERROR(RefusePartialRotary(root, r));
  ASSIGN_OR_RETURN(c.num_nextn_predict_layers, r.Int("num_nextn_predict_layers", defaults.num_nextn_predict_layers));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  ASSIGN_OR_RETURN(c.hidden_act, r.String("hidden_act", "silu"));

  if (r.Has("quantization_config")) RETURN_IF_ERROR(ParseQuantization(root.at("quantization_config"), source, c));

  if (r.Has("eos_token_id")) {
    const json& eos = root.at("eos_token_id");
    auto too_large = [](const json& e) {
      return e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
    };
    if (too_large(eos) || (eos.is_array() && std::any_of(eos.begin(), eos.end(), too_large))) {
      return r.Error("eos_token_id", "holds a value beyond the vocabulary");
    }
    if (eos.is_number_integer()) {
      c.eos_token_ids.push_back(eos.get<int64_t>());
    } else if (eos.is_array()) {
      for (const json& e : eos) {
        if (!e.is_number_integer()) return r.Error("eos_token_id", "must be an integer or a list of integers");
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      return r.Error("eos_token_id", "must be an integer or a list of integers");
    }
  }

  // Validation: every dimension positive and mutually consistent.
  for (auto [key, value] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"vocab_size", c.vocab_size},
           {"hidden_size", c.hidden_size},
           {"num_hidden_layers", c.num_hidden_layers},
           {"num_attention_heads", c.num_attention_heads},
           {"q_lora_rank", c.q_lora_rank},
           {"kv_lora_rank", c.kv_lora_rank},
           {"qk_nope_head_dim", c.qk_nope_head_dim},
           {"qk_rope_head_dim", c.qk_rope_head_dim},
           {"v_head_dim", c.v_head_dim},
           {"intermediate_size", c.intermediate_size},
           {"moe_intermediate_size", c.moe_intermediate_size},
           {"n_routed_experts", c.n_routed_experts},
           {"num_experts_per_tok", c.num_experts_per_tok},
           {"n_group", c.n_group},
           {"topk_group", c.topk_group},
           {"max_position_embeddings", c.max_position_embeddings},
           {"moe_layer_freq", c.moe_layer_freq}}) {
    RETURN_IF_ERROR(RequirePositive(source, key, value));
  }
  if (c.has_indexer) {
    for (auto [key, value] : std::initializer_list<std::pair<const char*, int64_t>>{
             {"index_n_heads", c.index_n_heads}, {"index_head_dim", c.index_head_dim}, {"index_topk", c.index_topk}}) {
      RETURN_IF_ERROR(RequirePositive(source, key, value));
    }
  }
  // Upper bounds keep absurd configs from turning into absurd allocations (and int32 token ids).
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (auto [key, value, limit] : std::initializer_list<std::tuple<const char*, int64_t, int64_t>>{
           {"vocab_size", c.vocab_size, int64_t{1} << 30},
           {"hidden_size", c.hidden_size, kMaxDim},
           {"num_hidden_layers", c.num_hidden_layers, 4096},
           {"num_attention_heads", c.num_attention_heads, 4096},
           {"q_lora_rank", c.q_lora_rank, kMaxDim},
           {"kv_lora_rank", c.kv_lora_rank, kMaxDim},
           {"qk_nope_head_dim", c.qk_nope_head_dim, 65536},
           {"qk_rope_head_dim", c.qk_rope_head_dim, 65536},
           {"v_head_dim", c.v_head_dim, 65536},
           {"intermediate_size", c.intermediate_size, kMaxDim},
           {"moe_intermediate_size", c.moe_intermediate_size, kMaxDim},
           {"n_routed_experts", c.n_routed_experts, 65536},
           {"n_shared_experts", c.n_shared_experts, 65536},
           {"max_position_embeddings", c.max_position_embeddings, int64_t{1} << 31},
           {"index_n_heads", c.index_n_heads, 4096},
           {"index_head_dim", c.index_head_dim, 65536},
           {"index_topk", c.index_topk, int64_t{1} << 31},
           {"num_nextn_predict_layers", c.num_nextn_predict_layers, 64}}) {
    if (value > limit) return r.Error(key, absl::StrCat("= ", value, " exceeds the supported maximum ", limit));
  }
  if (c.qk_rope_head_dim % 2 != 0) return r.Error("qk_rope_head_dim", "must be even");
  if (c.has_indexer && c.index_head_dim < c.qk_rope_head_dim) {
    return r.Error("index_head_dim", absl::StrCat("(", c.index_head_dim, ") must be >= qk_rope_head_dim (",
                                                  c.qk_rope_head_dim, ")"));
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    return r.Error("num_experts_per_tok", absl::StrCat("(", c.num_experts_per_tok, ") exceeds n_routed_experts (",
                                                       c.n_routed_experts, ")"));
  }
  if (c.n_routed_experts % c.n_group != 0) {
    return r.Error("n_group", absl::StrCat("(", c.n_group, ") must divide n_routed_experts (", c.n_routed_experts, ")"));
  }
  if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2) {
    return r.Error("n_group", "needs at least 2 experts per group (group score = sum of the top 2)");
  }
  if (c.topk_group > c.n_group) {
    return r.Error("topk_group", absl::StrCat("(", c.topk_group, ") exceeds n_group (", c.n_group, ")"));
  }
  if (c.topk_group * (c.n_routed_experts / c.n_group) < c.num_experts_per_tok) {
    return r.Error("topk_group", "keeps fewer experts than num_experts_per_tok");
  }
  if (c.n_shared_experts < 0) return r.Error("n_shared_experts", "must be >= 0");
  if (c.num_nextn_predict_layers < 0) return r.Error("num_nextn_predict_layers", "must be >= 0");
  if (c.first_k_dense_replace < 0) return r.Error("first_k_dense_replace", "must be >= 0");
  if (r.Has("num_key_value_heads")) {
    ASSIGN_OR_RETURN(int64_t kv_heads, r.Int("num_key_value_heads"));
    if (kv_heads != c.num_attention_heads) {
      return r.Error("num_key_value_heads", absl::StrCat("(", kv_heads, ") must equal num_attention_heads (",
                                                         c.num_attention_heads, ") for MLA"));
    }
  }
  if (c.attention_bias) return r.Error("attention_bias", "= true is not supported (no released model uses it)");
  if (c.hidden_act != "silu") return r.Error("hidden_act", absl::StrCat("\"", c.hidden_act, "\" is not supported"));
  if (c.scoring_func != "sigmoid") {
    return r.Error("scoring_func", absl::StrCat("\"", c.scoring_func, "\" is not supported (sigmoid only)"));
  }
  // Values outside these ranges load and then produce NaN or garbage: refuse them by name.
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps <= 0.1)) {
    return r.Error("rms_norm_eps", absl::StrCat("= ", c.rms_norm_eps, " is outside (0, 0.1]"));
  }
  if (!(c.routed_scaling_factor > 0 && c.routed_scaling_factor <= 1000)) {
    return r.Error("routed_scaling_factor", absl::StrCat("= ", c.routed_scaling_factor, " is outside (0, 1000]"));
  }
  if (!(c.rope.theta > 1)) return r.Error("rope_theta", absl::StrCat("= ", c.rope.theta, " must be > 1"));
  for (int64_t eos : c.eos_token_ids) {
    if (eos < 0 || eos >= c.vocab_size) {
      return r.Error("eos_token_id", absl::StrCat("entry ", eos, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }

  // Per-layer MLP kind: explicit `mlp_layer_types`, else first_k_dense_replace and moe_layer_freq.
  c.layer_is_dense.assign(c.num_hidden_layers, false);
  if (r.Has("mlp_layer_types")) {
    const json& types = root.at("mlp_layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers) {
      return r.Error("mlp_layer_types", absl::StrCat("must be a list of ", c.num_hidden_layers, " entries"));
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (types[l] == "dense") {
        c.layer_is_dense[l] = true;
      } else if (types[l] != "sparse") {
        return r.Error("mlp_layer_types", absl::StrCat("entry ", l, " must be \"dense\" or \"sparse\""));
      }
    }
  } else {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      c.layer_is_dense[l] = l < c.first_k_dense_replace || l % c.moe_layer_freq != 0;
    }
  }
  if (glm) {
    ASSIGN_OR_RETURN(c.layer_has_indexer, DeriveIndexSchedule(root, c.num_hidden_layers, source, &c.index_schedule_source));
  } else if (c.has_indexer) {
    c.layer_has_indexer.assign(c.num_hidden_layers, true);  // DeepSeek-V3.2: every layer is full
    c.index_schedule_source = "deepseek_v32 (all full)";
  } else {
    c.layer_has_indexer.assign(c.num_hidden_layers, false);  // no indexer: every layer dense
    c.index_schedule_source = absl::StrCat(c.model_type_name, " (no indexer)");
  }
  return c;
}

absl::StatusOr<ModelConfig> ParseModelConfigText(const std::string& text, const std::string& source) {
  ASSIGN_OR_RETURN(json root, ParseJsonText(text, source, "config"));
  return ParseModelConfig(root, source);
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path, kMaxJsonFileBytes));
  return ParseModelConfigText(text, path);
}

}  // namespace mtpspec
