// One pre-norm decoder layer: h += Attn(RMSNorm(h)); h += FFN(RMSNorm(h)). Shared by the trunk
// and the MTP module.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "attention/mla.h"
#include "model/config.h"
#include "model/weights.h"

namespace mtpspec {

// The per-model constants every layer needs.
struct LayerContext {
  const ModelConfig* config = nullptr;
  MlaDims mla;
  RotaryEmbedding rope;
};

LayerContext MakeLayerContext(const ModelConfig& config);

// hidden: [rows, H], updated in place. `topk` carries the selection between full and shared
// layers (written by full layers, read by shared ones). `path_used` may be null; `experts_used`
// (may be null) receives the routed experts the rows chose between them, 0 on a dense layer.
absl::Status DecoderLayerForward(const DecoderLayerWeights& w, const LayerContext& ctx, float* hidden, int64_t rows,
                                 const int64_t* positions, LayerKvCache& cache, int64_t capacity,
                                 const AttentionOptions& options, TopK* topk, AttentionPath* path_used,
                                 int64_t* experts_used = nullptr);

// The layer over several sequences' rows at once (a batched verify): hidden: [Σ rows, H] in
// segment order. Attention is block-diagonal (MlaForwardSegments); the norms, the MLP and the MoE
// run over every row together, so each expert's weights are read once for all the rows that chose
// it. `experts_used` (may be null) receives the routed experts the rows chose between them, 0 on a
// dense layer.
absl::Status DecoderLayerForwardSegments(const DecoderLayerWeights& w, const LayerContext& ctx, float* hidden,
                                         std::span<MlaSegment> segments, const AttentionOptions& options,
                                         int64_t* experts_used);

}  // namespace mtpspec
