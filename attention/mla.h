// Multi-head latent attention with DSA sparse selection (docs/models.md, "Attention: MLA", "Key-selection paths").
//
// One call processes L query rows of one layer: it projects q and the latent, appends the new
// latents/rope keys (and indexer keys on full layers) to the cache, selects keys, and attends.
// Three interchangeable key-selection paths exist, chosen by shape and tested against each other:
//   dense  — T ≤ K: every causal key (the indexer would select them all);
//   mask   — all T keys scored, keys outside (top-K ∧ causal) set to −∞; O(L·T);
//   gather — each row's top-K latents gathered and attended in the absorbed form, with keys that
//            are not causal for that row re-masked; O(L·K), independent of T.
#pragma once

#include <cstdint>
#include <span>
#include <optional>

#include "absl/status/statusor.h"
#include "attention/indexer.h"
#include "attention/kv_cache.h"
#include "attention/rope.h"
#include "attention/tree_mask.h"
#include "core/limits.h"
#include "core/profile.h"
#include "core/tensor.h"

namespace mtpspec {

struct MlaWeights {
  TensorView q_a_proj;         // [r_q, H]
  Tensor q_a_norm;             // [r_q] f32
  TensorView q_b_proj;         // [N_h·(d_n+d_r), r_q]; per head [nope | rope]
  TensorView kv_a_proj;        // [r_kv + d_r, H]; rows [latent | rope]
  Tensor kv_a_norm;            // [r_kv] f32
  TensorView kv_b_proj;        // [N_h·(d_n+d_v), r_kv]; per head [k_nope | v]
  TensorView o_proj;           // [H, N_h·d_v]
  std::optional<IndexerWeights> indexer;  // present on full layers only
};

struct MlaDims {
  int64_t hidden = 0;       // H
  int64_t heads = 0;        // N_h
  int64_t q_lora = 0;       // r_q
  int64_t kv_lora = 0;      // r_kv
  int64_t nope_dim = 0;     // d_n
  int64_t rope_dim = 0;     // d_r
  int64_t v_dim = 0;        // d_v
  float softmax_scale = 0;  // d_qk^-½ · mscale²
  double latent_norm_eps = 1e-6;  // q_a_layernorm / kv_a_layernorm (transformers' value)
  RopeStyle rope_style = RopeStyle::kInterleaved;
  IndexerDims indexer;
};

enum class AttentionPath { kAuto, kDense, kMask, kGather };
enum class AttentionForm { kAuto, kNaive, kAbsorbed };
const char* AttentionPathName(AttentionPath path);

struct AttentionOptions {
  AttentionPath path = AttentionPath::kAuto;
  AttentionForm form = AttentionForm::kAuto;  // dense and mask paths only; gather is absorbed
  int64_t gather_max_rows = kMaxVerifyRows;  // auto: gather when L ≤ this and T > K
  // Full layers skip indexer scoring and attend over the selection already in *topk (its rows must
  // match this call's). Used by `index_share_for_mtp_iteration` (docs/models.md, "The MTP layer as a drafter"); the new
  // tokens' indexer keys are still written to the cache.
  bool reuse_topk = false;
  ForwardProfile* profile = nullptr;  // optional per-component timing (benchmarks)
  // The call's rows as a token tree (attention/tree_mask.h): each row writes its tree slot and sees
  // the committed context plus its own path. Null: a chain at consecutive positions.
  const TreeMask* tree = nullptr;
};

// The key-selection path for `rows` query rows over T = num_keys keys, with index_topk K: the path
// the options force, else dense when T ≤ K, gather when rows ≤ gather_max_rows, else mask. A forced
// dense path with T > K is an error. MlaForward and its CUDA twin both choose through this.
absl::StatusOr<AttentionPath> ChooseAttentionPath(int64_t num_keys, int64_t index_topk, int64_t rows,
                                                 const AttentionOptions& options);

// Multiply-adds of one call's attention in each form, the rule kAuto follows for calls of more than
// gather_max_rows rows outside a RowInvariantScope (prefill): the form with fewer. Both forms pass
// through kv_b_proj's N_h·(d_n + d_v)·r_kv weights: the naive form once per key (expanding keys
// [0, T)), the absorbed form once per row (folding the query, un-absorbing the output). Per key a
// row attends, the naive form then spends N_h·(d_qk + d_v) on the expanded keys, over the keys its
// row block of kNaiveRowBlock rows reaches, and the absorbed form N_h·(2·r_kv + d_r) on the latents,
// over the keys the row uses.
inline constexpr int64_t kNaiveRowBlock = 64;
struct AttentionFormCost {
  double naive = 0;
  double absorbed = 0;
};
// reach[r]: the keys [0, reach[r]) row r may see (its own slot + 1); index_topk: K, or 0 on the dense
// path (a row then uses every key it reaches, else min(reach, K)).
AttentionFormCost AttentionFormCosts(const MlaDims& dims, int64_t num_keys, std::span<const int64_t> reach,
                                     int64_t index_topk);

struct MlaStepResult {
  AttentionPath path_used = AttentionPath::kAuto;
};

// Runs attention for `rows` query rows at absolute `positions` (consecutive, starting at or before
// the cache length; slots from positions[0] on are overwritten). x: [rows, H] the layer's normed
// input; out: [rows, H]. On a full layer the selection is computed and written to *topk; on a
// shared layer `*topk` must hold the donor's selection for these rows (ignored when T ≤ K).
// With options.tree, `positions` are the rows' RoPE positions (any order), row r writes slot
// tree->slots[r], and T is tree->num_slots().
absl::StatusOr<MlaStepResult> MlaForward(const MlaWeights& w, const MlaDims& dims, const RotaryEmbedding& rope,
                                         const float* x, int64_t rows, const int64_t* positions,
                                         LayerKvCache& cache, int64_t capacity, const AttentionOptions& options,
                                         TopK* topk, float* out);

// One sequence's rows in a segmented MLA call.
struct MlaSegment {
  int64_t rows = 0;
  const int64_t* positions = nullptr;  // [rows] as MlaForward's
  LayerKvCache* cache = nullptr;       // the sequence's own cache layer
  int64_t capacity = 0;
  const TreeMask* tree = nullptr;      // as AttentionOptions::tree, for this segment
  TopK* topk = nullptr;                // as MlaForward's, for this segment's rows
  AttentionPath path_used = AttentionPath::kAuto;  // out: the path this segment took
};

// MlaForward over several sequences at once (a batched verify): x: [Σ rows, H], the segments' rows
// in order; out: [Σ rows, H]. The projections run once over every row, so each weight is read once
// for the batch; attention is block-diagonal: each segment chooses its path and attends over its
// own cache only. Inside a RowInvariantScope (kernels/linear.h), every segment's rows come out
// exactly as its own MlaForward would give them. options.tree is ignored (each segment has its own).
absl::Status MlaForwardSegments(const MlaWeights& w, const MlaDims& dims, const RotaryEmbedding& rope, const float* x,
                                std::span<MlaSegment> segments, const AttentionOptions& options, float* out);

}  // namespace mtpspec
