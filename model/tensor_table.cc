#include "model/tensor_table.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mtpspec {
namespace {

void AddMlp(std::vector<TensorSpec>& specs, const std::string& prefix, int64_t hidden, int64_t width) {
  specs.push_back({absl::StrCat(prefix, "gate_proj.weight"), {width, hidden}});
  specs.push_back({absl::StrCat(prefix, "up_proj.weight"), {width, hidden}});
  specs.push_back({absl::StrCat(prefix, "down_proj.weight"), {hidden, width}});
}

// The decoder block shared by trunk and MTP layers.
void AddBlock(std::vector<TensorSpec>& specs, const ModelConfig& c, int64_t layer, bool dense_mlp, bool indexer) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  const int64_t H = c.hidden_size;
  specs.push_back({p + "input_layernorm.weight", {H}, TensorKind::kVector});
  specs.push_back({p + "post_attention_layernorm.weight", {H}, TensorKind::kVector});
  const std::string a = p + "self_attn.";
  specs.push_back({a + "q_a_proj.weight", {c.q_lora_rank, H}});
  specs.push_back({a + "q_a_layernorm.weight", {c.q_lora_rank}, TensorKind::kVector});
  specs.push_back({a + "q_b_proj.weight", {c.num_attention_heads * c.qk_head_dim(), c.q_lora_rank}});
  specs.push_back({a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}});
  specs.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorKind::kVector});
  specs.push_back({a + "kv_b_proj.weight", {c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim),
                                            c.kv_lora_rank}});
  specs.push_back({a + "o_proj.weight", {H, c.num_attention_heads * c.v_head_dim}});
  if (indexer) {
    const std::string i = a + "indexer.";
    specs.push_back({i + "wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank}});
    specs.push_back({i + "wk.weight", {c.index_head_dim, H}});
    specs.push_back({i + "k_norm.weight", {c.index_head_dim}, TensorKind::kVector});
    specs.push_back({i + "k_norm.bias", {c.index_head_dim}, TensorKind::kVector});
    specs.push_back({i + "weights_proj.weight", {c.index_n_heads, H}});
  }
  const std::string m = p + "mlp.";
  if (dense_mlp) {
    AddMlp(specs, m, H, c.intermediate_size);
    return;
  }
  specs.push_back({m + "gate.weight", {c.n_routed_experts, H}});
  specs.push_back({m + "gate.e_score_correction_bias", {c.n_routed_experts}, TensorKind::kVector});
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    AddMlp(specs, absl::StrCat(m, "experts.", e, "."), H, c.moe_intermediate_size);
  }
  if (c.n_shared_experts > 0) {
    AddMlp(specs, m + "shared_experts.", H, c.moe_intermediate_size * c.n_shared_experts);
  }
}

}  // namespace

std::vector<TensorSpec> GlobalTensorSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, TensorKind::kEmbedding});
  specs.push_back({"model.norm.weight", {c.hidden_size}, TensorKind::kVector});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return specs;
}

std::vector<TensorSpec> DecoderLayerTensorSpecs(const ModelConfig& c, int64_t layer) {
  std::vector<TensorSpec> specs;
  AddBlock(specs, c, layer, c.layer_is_dense[layer], c.layer_has_indexer[layer]);
  return specs;
}

std::vector<TensorSpec> MtpLayerTensorSpecs(const ModelConfig& c, int64_t layer) {
  std::vector<TensorSpec> specs;
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  const int64_t H = c.hidden_size;
  specs.push_back({p + "enorm.weight", {H}, TensorKind::kVector});
  specs.push_back({p + "hnorm.weight", {H}, TensorKind::kVector});
  specs.push_back({p + "eh_proj.weight", {H, 2 * H}});
  specs.push_back({p + "shared_head.norm.weight", {H}, TensorKind::kVector});
  specs.push_back({p + "embed_tokens.weight", {c.vocab_size, H}, TensorKind::kEmbedding, /*optional=*/true});
  specs.push_back({p + "shared_head.head.weight", {c.vocab_size, H}, TensorKind::kMatrix, /*optional=*/true});
  // MTP blocks are sparse (MoE) and own an indexer where the type has one (docs/models.md, "IndexShare",
  // "The MTP layer as a drafter").
  AddBlock(specs, c, layer, /*dense_mlp=*/false, /*indexer=*/c.has_indexer);
  return specs;
}

ParameterCount CountConfigParameters(const ModelConfig& config) {
  auto count = [](const std::vector<TensorSpec>& specs, int64_t* experts, int64_t* optional = nullptr) {
    int64_t n = 0;
    for (const TensorSpec& s : specs) {
      int64_t numel = 1;
      for (int64_t d : s.shape) numel *= d;
      if (s.optional) {
        if (optional != nullptr) *optional += numel;
        continue;
      }
      n += numel;
      if (experts != nullptr && absl::StrContains(s.name, ".mlp.experts.")) *experts += numel;
    }
    return n;
  };
  ParameterCount p;
  p.trunk = count(GlobalTensorSpecs(config), nullptr);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) p.trunk += count(DecoderLayerTensorSpecs(config, l), &p.routed_experts);
  for (int64_t k = 0; k < config.num_nextn_predict_layers; ++k) {
    p.mtp += count(MtpLayerTensorSpecs(config, config.num_hidden_layers + k), nullptr, &p.mtp_copies);
  }
  return p;
}

int64_t CountFp8BlockScales(const ModelConfig& config) {
  int64_t n = 0;
  auto add = [&n](const std::vector<TensorSpec>& specs) {
    for (const TensorSpec& s : specs) {
      if (!ReleaseStoresFp8(s)) continue;
      const std::vector<int64_t> shape = ScaleShapeOf(s.shape);
      n += shape[0] * shape[1];
    }
  };
  add(GlobalTensorSpecs(config));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) add(DecoderLayerTensorSpecs(config, l));
  for (int64_t k = 0; k < config.num_nextn_predict_layers; ++k) {
    add(MtpLayerTensorSpecs(config, config.num_hidden_layers + k));
  }
  return n;
}

bool ReleaseStoresFp8(const TensorSpec& spec) {
  if (spec.kind != TensorKind::kMatrix) return false;
  for (absl::string_view bf16 : {"mlp.gate.weight", "indexer.weights_proj.", "eh_proj.", "lm_head.", "shared_head.head."}) {
    if (absl::StrContains(spec.name, bf16)) return false;
  }
  return true;
}

std::string ScaleNameOf(const std::string& weight_name) {
  absl::string_view base = weight_name;
  absl::ConsumeSuffix(&base, "weight");
  return absl::StrCat(base, "weight_scale_inv");
}

std::vector<int64_t> ScaleShapeOf(const std::vector<int64_t>& shape) {
  return {(shape[0] + 127) / 128, (shape[1] + 127) / 128};
}

}  // namespace mtpspec
