// The benchmark model: a random, shape-faithful bf16 glm_moe_dsa checkpoint with GLM-5-like ratios
// and more than 1 GiB of weights, so a decode step streams its weights from DRAM rather than from
// the last-level cache. It is written once and cached on disk; see bench/README.md.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace mtpspec::bench {

// config.json of the benchmark model (10 layers: dense first, then MoE with 32 experts top-4 and
// one shared expert; IndexShare schedule F F S S F S S F S S; index_topk 512; one MTP layer).
nlohmann::json BenchModelConfig();

// The default cache directory (build/bench_model next to the build tree), overridable by the
// MTPSPEC_BENCH_MODEL_DIR environment variable.
std::string DefaultBenchModelDir();

// `path` as a report should record it: relative to the working directory when it lies below it
// (DefaultBenchModelDir is an absolute path fixed at build time), else as given.
std::string PathForReport(const std::string& path);

// Makes sure `dir` holds the benchmark checkpoint. A directory whose config.json equals
// BenchModelConfig() and that carries the completion marker is reused; otherwise the model is
// written to a sibling temporary directory (bf16, sharded) and renamed into place, replacing a
// stale bench model in `dir`. A directory holding anything else (another checkpoint: a config.json
// without the bench model's marker; or no config.json at all) is never replaced: that is an error.
// `*generated` (may be null) tells whether it was written now.
absl::Status EnsureBenchModel(const std::string& dir, bool* generated);

// Whether `dir` holds a checkpoint other than a bench model (a config.json without the bench
// model's marker), which a benchmark given that directory runs as it is.
bool IsOtherCheckpoint(const std::string& dir);

// Memory traffic of one single-token decode step over a cache holding `num_keys` keys (T, counting
// the new token).
struct DecodeTraffic {
  // Every weight byte the step reads: the embedding row, all attention projections and norms,
  // the indexer projections where the indexer runs (wk always on full layers; wq_b and
  // weights_proj only when T > index_topk), dense MLPs, MoE routers, shared experts, exactly
  // k_e routed experts per MoE layer (a single row routes to k_e distinct experts, and all
  // experts of a layer have the same shape, so this count is exact), the final norm and lm_head.
  int64_t weight_bytes = 0;
  // Cache bytes read, counting each element once: indexer keys of all T keys on full layers
  // (T > K), and the latent + rope key of the min(T, K) attended keys on every layer.
  int64_t cache_bytes = 0;
};
DecodeTraffic DecodeStepTraffic(const Model& model, int64_t num_keys);

// Bytes of all trunk weights (what a step could touch at most; excludes the MTP layer).
int64_t TrunkWeightBytes(const Model& model);

}  // namespace mtpspec::bench
