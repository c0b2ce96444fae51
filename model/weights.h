// Typed weight structs of a loaded checkpoint. Matmul weights are views into the loaded safetensors
// files when stored as f32, bf16 or fp8 (zero copy; fp8 with its block scales attached); other
// dtypes (f16) are converted once at load into tensors the ModelWeights owns.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "attention/mla.h"
#include "io/safetensors.h"
#include "core/tensor.h"

namespace mtpspec {

struct MlpWeights {
  TensorView gate;  // [I, H]
  TensorView up;    // [I, H]
  TensorView down;  // [H, I]
};

struct MoeWeights {
  TensorView router;               // [E, H]
  Tensor router_bias;              // [E] f32 e_score_correction_bias (selection only)
  std::vector<MlpWeights> experts;  // [E]
  std::optional<MlpWeights> shared;
};

struct DecoderLayerWeights {
  Tensor input_norm;           // [H] f32
  Tensor post_attention_norm;  // [H] f32
  MlaWeights attn;
  bool dense_mlp = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

// The MTP module's extra tensors around its decoder block (docs/models.md, "The MTP layer as a drafter").
struct MtpLayerWeights {
  Tensor enorm;             // [H] f32
  Tensor hnorm;             // [H] f32
  TensorView eh_proj;       // [H, 2H]: columns 0..H-1 multiply enorm(e), H..2H-1 multiply hnorm(h)
  Tensor shared_head_norm;  // [H] f32
  TensorView embed;         // [V, H] the layer's own copy, or the main embedding
  TensorView head;          // [V, H] the layer's own shared_head.head, or the main lm_head
  bool own_embed = false;
  bool own_head = false;
  DecoderLayerWeights block;
};

struct ModelWeights {
  TensorView embed;    // [V, H]
  Tensor final_norm;   // [H] f32
  TensorView lm_head;  // [V, H]
  std::vector<DecoderLayerWeights> layers;  // [L]
  std::vector<MtpLayerWeights> mtp;         // [num_nextn_predict_layers] when present

  std::unique_ptr<SafetensorsStore> store;  // keeps the mmaps alive
  std::deque<Tensor> owned;                 // converted tensors (stable addresses)
  int64_t parameter_count = 0;              // trunk parameters
  int64_t mtp_parameter_count = 0;
  int64_t weight_bytes = 0;                 // bytes of the weights as used for compute
};

// Calls fn on every matrix the Linear kernels read: the attention's projections but kv_b_proj (the
// absorbed attention's row kernels read it), the indexer's, the dense MLPs', the experts' and shared
// experts', the MTP layers' eh_proj, blocks and heads, and the head. Not the MoE routers: Linear reads
// them too, but their scores pick the experts, and they stay exact.
void ForEachLinearMatrix(ModelWeights& weights, const std::function<void(TensorView&)>& fn);

// Sets the precision of the input rows of every FP8 and bf16 matrix ForEachLinearMatrix names
// (TensorView::activations; a bf16 matrix takes bf16 rows under kBf16 and f32 rows otherwise), giving
// each FP8 one its line flags (kernels/fp8_pairs.h, kept in weights.owned) the first time it takes
// bf16 or fp8 rows. Returns how many matrices take reduced rows (f32: how many FP8 matrices it set).
// Not while a forward reads the weights.
int64_t SetActivations(ModelWeights& weights, ActivationPrecision precision);

// Whether two weights hold the same values as stored: the same dtype and shape, the same bytes, and
// for FP8 the same block scales. Tells an MTP layer's own embed_tokens / shared_head.head copies
// from the trunk's (mtpspec info).
bool SameStoredValues(const TensorView& a, const TensorView& b);

}  // namespace mtpspec
