// The tensor table: the one list, per layer kind, of every checkpoint tensor with the shape the
// config implies. Loading, strict validation (missing / unexpected / wrong shape) and the `info`
// command all iterate it. Names are the Hugging Face checkpoint names, verbatim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace mtpspec {

enum class TensorKind {
  kMatrix,  // a matmul weight: may be fp8 with a `weight_scale_inv` companion
  kVector,  // norm weights, biases: converted to f32
  kEmbedding,
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorKind kind = TensorKind::kMatrix;
  bool optional = false;  // e.g. the MTP layer's own embed_tokens / shared_head.head copies
};

// Tensors outside the decoder layers: embedding, final norm, lm_head.
std::vector<TensorSpec> GlobalTensorSpecs(const ModelConfig& config);
// Every tensor of trunk layer `layer` (its kind follows layer_is_dense / layer_has_indexer).
std::vector<TensorSpec> DecoderLayerTensorSpecs(const ModelConfig& config, int64_t layer);
// Every tensor of MTP layer `layer` (index ≥ num_hidden_layers): a sparse block with its own
// indexer (where the model type has one) plus enorm, hnorm, eh_proj, shared_head.norm and the optional embed/head copies.
std::vector<TensorSpec> MtpLayerTensorSpecs(const ModelConfig& config, int64_t layer);

// Parameters of every tensor a config implies: the trunk (embedding, layers, norm, head), the MTP
// layers without their optional embedding and head copies, and those copies apart (a release that
// ships them counts them in its total).
struct ParameterCount {
  int64_t trunk = 0;
  int64_t mtp = 0;
  int64_t mtp_copies = 0;      // the MTP layers' own embed_tokens and shared_head.head
  int64_t routed_experts = 0;  // of the trunk, in routed experts
};
ParameterCount CountConfigParameters(const ModelConfig& config);
// The f32 block scales an FP8 release stores beside its matrices (ReleaseStoresFp8), trunk and MTP
// layers: the hub's parameter count of an FP8 checkpoint includes them.
int64_t CountFp8BlockScales(const ModelConfig& config);

// Whether the released FP8 checkpoints store this tensor as F8_E4M3 with block scales: every
// matmul weight except the router (`mlp.gate`), the indexer's `weights_proj`, the MTP layer's
// `eh_proj` and the head, which stay bf16 like the embedding and the norms.
bool ReleaseStoresFp8(const TensorSpec& spec);

// The fp8 block-scale companion of a matrix weight: [ceil(out/128), ceil(in/128)] f32.
std::string ScaleNameOf(const std::string& weight_name);
std::vector<int64_t> ScaleShapeOf(const std::vector<int64_t>& weight_shape);

}  // namespace mtpspec
