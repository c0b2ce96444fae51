#include "testing/tiny_configs.h"

namespace mtpspec {

nlohmann::json TinyGlmConfigWithPartialFp8Blocks() {
  nlohmann::json config = TinyGlmConfig();
  config["hidden_size"] = 144;
  config["intermediate_size"] = 200;
  config["moe_intermediate_size"] = 136;
  return config;
}

nlohmann::json TinyGlmConfig() {
  return nlohmann::json{
      {"model_type", "glm_moe_dsa"},
      {"architectures", {"GlmMoeDsaForCausalLM"}},
      {"vocab_size", 128},
      {"hidden_size", 64},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 4},
      {"q_lora_rank", 48},
      {"kv_lora_rank", 32},
      {"qk_nope_head_dim", 16},
      {"qk_rope_head_dim", 8},
      {"v_head_dim", 16},
      {"intermediate_size", 96},
      {"moe_intermediate_size", 32},
      {"first_k_dense_replace", 1},
      {"n_routed_experts", 8},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 2},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"rms_norm_eps", 1e-5},
      {"rope_parameters", {{"rope_theta", 10000}, {"rope_type", "default"}}},
      {"rope_interleave", true},
      {"max_position_embeddings", 256},
      {"index_n_heads", 8},
      {"index_head_dim", 16},
      {"index_topk", 8},
      {"indexer_rope_interleave", true},
      {"indexer_types", {"full", "full", "shared", "full"}},
      {"num_nextn_predict_layers", 1},
      {"tie_word_embeddings", false},
      {"eos_token_id", {1}},
  };
}

}  // namespace mtpspec
