// Typed weight structs of a loaded checkpoint. Matmul weights are views into the loaded safetensors
// files when stored as f32, bf16 or fp8 (zero copy; fp8 with its block scales attached); other
// dtypes (f16) are converted once at load into tensors the ModelWeights owns.
#pragma once

#include <cstdint>
#include <deque>
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

}  // namespace mtpspec
