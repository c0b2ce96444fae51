// Model: a loaded glm_moe_dsa / deepseek_v32 checkpoint that runs forward passes over a KvCache.
//
// Thread-compatible: one Forward at a time per cache; weights are read-only after Load, so several
// caches (requests) may share one Model when calls are serialised.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/kv_cache.h"
#include "attention/mla.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/loader.h"
#include "model/weights.h"

namespace mtpspec {

struct ForwardOptions {
  AttentionOptions attention;
  // Rows (indices into this call's tokens) whose logits are computed; empty = every row.
  std::vector<int64_t> logit_rows;
  bool capture_topk = false;  // keep each full layer's selection in ForwardOutput::topk
  // Run only the first `trunk_layers` trunk layers, then the final norm and head: the forward of the
  // checkpoint truncated to that many layers, without writing it (bench/real_scale_bench checks its
  // per-layer sums against these). -1: every layer. The cache's later layers are left untouched.
  int64_t trunk_layers = -1;
};

struct ForwardOutput {
  Tensor logits;           // [R, V] for the requested rows, in ForwardOptions::logit_rows order
  Tensor hidden_prenorm;   // [L, H] last layer output before model.norm
  Tensor hidden_postnorm;  // [L, H] after model.norm (what lm_head sees)
  std::vector<TopK> topk;  // [num_hidden_layers] when captured (shared layers: their donor's)
  std::vector<AttentionPath> paths;  // [num_hidden_layers] the path each layer took
};

// One sequence of a batched forward (Model::ForwardBatch): its own cache, its rows and their
// positions, as Forward takes them: consecutive for a chain, or a token tree's (its first slot + each
// row's depth) with its mask.
struct BatchSequence {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;     // [rows]
  std::span<const int64_t> positions;  // [rows]
  const TreeMask* tree = nullptr;      // a tree verify (as ForwardOptions::attention.tree), or null
};

struct BatchForwardOutput {
  std::vector<ForwardOutput> sequences;  // one per sequence, logits for every row
  std::vector<int64_t> experts_used;     // [num_hidden_layers] routed experts the batch's rows chose, 0 on dense layers
  int64_t rows = 0;                      // verify rows in the forward
};

// The trunk's cache layout for a configuration (no weights needed: memory planning, reports).
KvCacheShape CacheShapeFor(const ModelConfig& config, LatentStorage storage = LatentStorage::kF32,
                           IndexKeyStorage index_keys = IndexKeyStorage::kF32);

class Model {
 public:
  // Reads DIR/config.json and the safetensors checkpoint in DIR.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  const LoadReport& load_report() const { return report_; }
  const LayerContext& layer_context() const { return ctx_; }
  const std::string& dir() const { return dir_; }
  bool has_mtp() const { return !weights_->mtp.empty(); }

  // A cache for up to `capacity` positions (≤ max_position_embeddings). kInt8 stores the MLA
  // latent in int8 with per-token scales (rope and indexer keys stay f32).
  absl::StatusOr<std::unique_ptr<KvCache>> NewCache(int64_t capacity,
                                                    LatentStorage storage = LatentStorage::kF32) const;
  KvCacheShape CacheShape(LatentStorage storage = LatentStorage::kF32) const {
    return CacheShapeFor(config_, storage, index_keys_);
  }
  // How this model's caches keep the indexer keys (LoadOptions::index_keys).
  IndexKeyStorage index_key_storage() const { return index_keys_; }
  // The precision the Linear kernels take their input rows in (LoadOptions::activations).
  ActivationPrecision activation_precision() const { return activations_; }
  // Changes it without reloading (the first change to bf16 or fp8 reads each FP8 matrix once for its
  // line flags). Returns SetActivations' count (model/weights.h). Not while a forward runs.
  int64_t SetActivationPrecision(ActivationPrecision precision);

  // Runs tokens[i] at positions[i]. Positions must be consecutive and start at or before
  // cache.length(); a start before the end first truncates the cache there. On error the cache is
  // unchanged. With options.attention.tree (a tree verify, attention/tree_mask.h), row i writes
  // the tree's slot i and positions[i] is its RoPE position, first slot + its depth; the tree's root
  // (row 0) is at positions[0] = the first slot.
  absl::StatusOr<ForwardOutput> Forward(KvCache& cache, std::span<const int32_t> tokens,
                                        std::span<const int64_t> positions, const ForwardOptions& options = {}) const;

  // One forward over several sequences' rows, each with its own cache (continuous batching): the
  // projections, MLPs, experts and the head run once over all rows, so every weight is read once
  // for the batch and each expert once for all the rows routed to it; attention is block-diagonal,
  // each sequence seeing only its own cache. Every sequence's output is bit-identical to its own
  // Forward (the kernels run row-invariant, kernels/linear.h). A sequence may be a token tree
  // (BatchSequence::tree; options.attention.tree must stay null), logits come for every row (no
  // logit_rows), and the caches must be distinct. On error every cache is unchanged.
  absl::StatusOr<BatchForwardOutput> ForwardBatch(std::span<const BatchSequence> sequences,
                                                  const ForwardOptions& options = {}) const;

  // The argument rules of Forward for a cache of `cache_layers` layers holding `cache_length` of
  // `cache_capacity` positions (shared with the CUDA model, so both give the same errors).
  absl::Status CheckForwardArguments(int64_t cache_layers, int64_t cache_length, int64_t cache_capacity,
                                     std::span<const int32_t> tokens, std::span<const int64_t> positions,
                                     const ForwardOptions& options) const;
  // Validates ids against the vocabulary; errors name the argument and the offending index.
  absl::Status CheckTokens(std::span<const int32_t> tokens, const std::string& what) const;

  // out[rows, H] = table[tokens] widened to f32.
  void Embed(const TensorView& table, std::span<const int32_t> tokens, float* out) const;
  // logits[rows, V] = head · x
  void ApplyHead(const TensorView& head, const float* x, int64_t rows, float* logits) const;

 private:
  Model() = default;
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  LoadReport report_;
  LayerContext ctx_;
  IndexKeyStorage index_keys_ = IndexKeyStorage::kF32;
  ActivationPrecision activations_ = ActivationPrecision::kF32;
};

}  // namespace mtpspec
