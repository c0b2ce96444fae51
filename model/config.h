// ModelConfig: everything mtpspec reads from a Hugging Face `config.json` of a `glm_moe_dsa`
// (GLM-5.x), `deepseek_v32` (DeepSeek-V3.2), `glm4_moe_lite` (GLM-4.7-Flash) or `deepseek_v3`
// (DeepSeek-V3, R1, V3.1) checkpoint. The last two have no DSA indexer: every layer attends densely.
// Field meanings, defaults and the IndexShare priority rule follow docs/models.md, "Notation and
// configuration", "IndexShare" and "Model types without an indexer".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/rope.h"
#include "nlohmann/json.hpp"

namespace mtpspec {

enum class ModelType { kGlmMoeDsa, kDeepseekV32, kGlm4MoeLite, kDeepseekV3 };

// The index_topk of a model type without an indexer: more keys than any cache holds, so every
// attention call takes the dense path (attention/mla.h, ChooseAttentionPath).
inline constexpr int64_t kNoIndexerTopK = int64_t{1} << 31;

struct ModelConfig {
  ModelType model_type = ModelType::kGlmMoeDsa;
  std::string model_type_name;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;           // H
  int64_t num_hidden_layers = 0;     // L (trunk layers; MTP layers follow)
  int64_t num_attention_heads = 0;   // N_h
  int64_t q_lora_rank = 0;           // r_q
  int64_t kv_lora_rank = 0;          // r_kv
  int64_t qk_nope_head_dim = 0;      // d_n
  int64_t qk_rope_head_dim = 0;      // d_r
  int64_t v_head_dim = 0;            // d_v
  int64_t intermediate_size = 0;     // dense MLP width
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 3;
  int64_t moe_layer_freq = 1;
  int64_t n_routed_experts = 0;      // E
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;   // k_e
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool rope_interleave = true;       // main MLA RoPE
  int64_t max_position_embeddings = 0;
  // Whether the type has the DSA lightning indexer (glm_moe_dsa, deepseek_v32). Without one, every
  // layer (the MTP layer too) attends over every causal key, index_topk is kNoIndexerTopK and the
  // index_* fields are 0.
  bool has_indexer = true;
  int64_t index_n_heads = 0;         // N_I
  int64_t index_head_dim = 0;        // d_I
  int64_t index_topk = 2048;         // K
  bool indexer_rope_interleave = false;
  std::string indexer_rope_source;       // "config", or the model type's default when the key is absent
  bool index_share_for_mtp_iteration = false;
  int64_t num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  // `quantization_config` (docs/models.md, "FP8 checkpoints"). The releases write
  // {quant_method: fp8, fmt: e4m3, weight_block_size: [128, 128], activation_scheme: dynamic,
  // scale_fmt: ue8m0 (DeepSeek-V3.2) or absent, modules_to_not_convert: [...] (GLM)}.
  struct Quantization {
    bool fp8 = false;                            // the config declares FP8 weights
    std::string scale_fmt;                       // "" / "float" (any positive scale) or "ue8m0" (powers of two)
    std::vector<std::string> modules_to_not_convert;  // module paths whose weights stay unquantised
  } quantization;
  std::vector<int64_t> eos_token_ids;
  std::string hidden_act = "silu";
  // The MTP chain's default for k > 1: carry the block's raw output into the next draft step (true)
  // or its shared_head.norm output (false), and where that default comes from (docs/models.md,
  // "Chaining the MTP layer"). An open question between the engines; `--mtp-chain` overrides it.
  bool mtp_chain_raw = false;
  std::string mtp_chain_source;

  // Derived.
  std::vector<bool> layer_is_dense;      // [L] dense SwiGLU MLP (true) or MoE (false)
  std::vector<bool> layer_has_indexer;   // [L] "full" (true) or "shared" (false)
  std::string index_schedule_source;     // which rule produced layer_has_indexer

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Softmax scale of the main attention, with YaRN mscale folded in (docs/models.md, "RoPE").
  double softmax_scale() const;
  // For shared layer l, the full layer whose top-k it reuses (l itself when full; -1 without an indexer).
  int64_t IndexDonor(int64_t layer) const;
};

// Whether `quantization_config.modules_to_not_convert` lists the module of tensor `name` (the
// tensor's path or a prefix of it, ending at a dot). GLM's releases list `self_attn.indexers_proj`,
// a module that does not exist: it is the indexer's `weights_proj`, and is matched as such.
bool ModuleIsNotConverted(const ModelConfig& config, const std::string& name);

// Parses and validates a config. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, const std::string& source);
absl::StatusOr<ModelConfig> ParseModelConfigText(const std::string& text, const std::string& source);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// The per-layer IndexShare schedule by the priority rule of docs/models.md, "IndexShare", exposed for tests.
// `file` names the config in errors; `*rule` receives which rule produced the schedule.
absl::StatusOr<std::vector<bool>> DeriveIndexSchedule(const nlohmann::json& json, int64_t num_layers,
                                                      const std::string& file, std::string* rule);

}  // namespace mtpspec
