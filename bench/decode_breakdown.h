// Profiling helpers for the decode benchmark: a single-token decode step assembled from the
// model's public building blocks with a timer around each part, and the list of weight matrices a
// step streams (to time the bf16 GEMV kernel alone).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "model/model.h"

namespace mtpspec::bench {

// Seconds spent in each part of decode steps, accumulated over steps.
struct StepTimes {
  double attention_full = 0;    // MlaForward on full layers (projections, indexer, top-k, attention)
  double attention_shared = 0;  // MlaForward on shared layers (projections, attention)
  double dense_mlp = 0;         // dense SwiGLU layers
  double moe = 0;               // router, shared expert and routed experts
  double head = 0;              // final norm and lm_head
  double other = 0;             // embedding, pre-norms, residual adds
  double Total() const { return attention_full + attention_shared + dense_mlp + moe + head + other; }
};

// Runs `token` at `position` (the cache is truncated to `position` first) exactly as
// Model::Forward → DecoderLayerForward do for one row, adding the time of each part to *times.
// logits: [V] receives the step's logits.
absl::Status TimedDecodeStep(const Model& model, KvCache& cache, int32_t token, int64_t position,
                             std::vector<float>& logits, StepTimes* times);

// The weight matrices a single-token decode step multiplies by, in execution order, with the
// routed experts of each MoE layer chosen as experts (step·k_e + i) mod E so that consecutive
// steps touch different experts. Indexer scoring matrices are included (T > K).
std::vector<TensorView> DecodeStepMatrices(const Model& model, int64_t step);

}  // namespace mtpspec::bench
