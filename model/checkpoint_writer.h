// Writes a random, shape-faithful checkpoint (config.json + model.safetensors): `mtpspec
// make-checkpoint`'s weights, and the tests' and benchmarks' models. Tensor names and shapes come from the tensor table, so the result always loads.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "nlohmann/json.hpp"

namespace mtpspec {

struct RandomCheckpointOptions {
  uint64_t seed = 1;
  // Matrices and embeddings; norms stay f32. kF8E4M3 writes what the FP8 releases store: the
  // matrices they quantise as F8_E4M3 with 128 x 128 `weight_scale_inv` scales, the rest bf16.
  DType dtype = DType::kF32;
  // Matrix entries are uniform in ±scale/sqrt(in) so activations keep unit size through layers.
  double scale = 1.0;
  bool include_mtp = true;  // write layers num_hidden_layers … + num_nextn_predict_layers - 1
  bool mtp_copies = false;  // also the MTP layer's own embed_tokens and shared_head.head (as DeepSeek ships)
  int64_t max_shard_bytes = 0;  // > 0: split into shards with model.safetensors.index.json
  // Draw the values from a counter-based hash on every core (the default thread pool) instead of
  // one std::mt19937_64 stream: other values, same distributions, and fast enough for checkpoints
  // of tens of GB (bench/cuda_e2e_bench writes a truncated GLM-5.2 this way on the GPU machine).
  bool parallel = false;
  // Structure only: every matrix and embedding zero, written as a hole (no disk, no memory); FP8
  // scales 1, norm weights from the usual distribution. For checking layouts, shapes and counts
  // at real dimensions.
  bool zeros = false;
};

// Creates `dir` if needed and writes config.json (the given JSON, verbatim) and the weights.
absl::Status WriteRandomCheckpoint(const std::string& dir, const nlohmann::json& config,
                                   const RandomCheckpointOptions& options);

}  // namespace mtpspec
