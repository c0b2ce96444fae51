#include "attention/mla_cuda.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/indexer_cuda_launch.h"
#include "attention/mla_cuda_launch.h"
#include "kernels/norm_cuda.h"

namespace mtpspec::cuda {
namespace {

// Upper bound on the split-softmax partial buffers of one attention launch; larger calls (long
// prefill chunks on the dense or mask path) are cut into row batches, which does not change any
// row's result.
constexpr int64_t kPartialBudgetFloats = int64_t{64} << 20;  // 256 MiB

absl::Status CheckShapes(const DeviceMlaWeights& w, const MlaDims& dims, const DeviceRope& rope) {
  const int64_t nh = dims.heads, d_qk = dims.nope_dim + dims.rope_dim;
  const int64_t r_kv = dims.kv_lora, d_r = dims.rope_dim;
  auto shape = [](const DeviceMatrix& m) { return absl::StrCat("[", m.out, ", ", m.in, "]"); };
  if (w.q_a_proj.out != dims.q_lora || w.q_a_proj.in != dims.hidden || w.q_b_proj.out != nh * d_qk ||
      w.q_b_proj.in != dims.q_lora || w.kv_a_proj.out != r_kv + d_r || w.kv_a_proj.in != dims.hidden ||
      w.kv_b_proj.out != nh * (dims.nope_dim + dims.v_dim) || w.kv_b_proj.in != r_kv ||
      w.o_proj.out != dims.hidden || w.o_proj.in != nh * dims.v_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlaForwardCuda: weight shapes do not match the dims: q_a ", shape(w.q_a_proj), " q_b ", shape(w.q_b_proj),
        " kv_a ", shape(w.kv_a_proj), " kv_b ", shape(w.kv_b_proj), " o ", shape(w.o_proj)));
  }
  if (rope.rotary_dim() != d_r) {
    return absl::InvalidArgumentError(
        absl::StrCat("MlaForwardCuda: rope tables have dim ", rope.rotary_dim(), ", qk_rope_head_dim is ", d_r));
  }
  if (r_kv > 1024) {
    return absl::UnimplementedError(absl::StrCat("MlaForwardCuda: kv_lora_rank ", r_kv, " > 1024 is not supported"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceMlaWeights> UploadMlaWeights(WeightArena& arena, const MlaWeights& host,
                                                  const std::string& name_prefix) {
  DeviceMlaWeights w;
  ASSIGN_OR_RETURN(w.q_a_proj, arena.UploadLinearMatrix(host.q_a_proj, name_prefix + "q_a_proj.weight"));
  ASSIGN_OR_RETURN(w.q_b_proj, arena.UploadLinearMatrix(host.q_b_proj, name_prefix + "q_b_proj.weight"));
  ASSIGN_OR_RETURN(w.kv_a_proj, arena.UploadLinearMatrix(host.kv_a_proj, name_prefix + "kv_a_proj_with_mqa.weight"));
  ASSIGN_OR_RETURN(w.kv_b_proj, arena.UploadMatrix(host.kv_b_proj, name_prefix + "kv_b_proj.weight"));
  ASSIGN_OR_RETURN(w.o_proj, arena.UploadLinearMatrix(host.o_proj, name_prefix + "o_proj.weight"));
  ASSIGN_OR_RETURN(w.q_a_norm, arena.UploadF32(host.q_a_norm.view(), name_prefix + "q_a_layernorm.weight"));
  ASSIGN_OR_RETURN(w.kv_a_norm, arena.UploadF32(host.kv_a_norm.view(), name_prefix + "kv_a_layernorm.weight"));
  if (host.indexer.has_value()) {
    ASSIGN_OR_RETURN(w.indexer, UploadIndexerWeights(arena, *host.indexer, name_prefix + "indexer."));
  }
  return w;
}

absl::StatusOr<AttentionPath> MlaForwardCuda(Context& ctx, const DeviceMlaWeights& w, const MlaDims& dims,
                                             const DeviceRope& rope, const float* x, int64_t rows,
                                             const int64_t* positions, DeviceKvCache& cache, int64_t layer,
                                             const AttentionOptions& options, DeviceTopK* topk, float* out) {
  if (rows <= 0) return absl::InvalidArgumentError("MlaForwardCuda: rows must be > 0");
  for (int64_t r = 1; r < rows; ++r) {
    if (positions[r] != positions[0] + r) {
      return absl::InvalidArgumentError("MlaForwardCuda: positions must be consecutive");
    }
  }
  if (layer < 0 || layer >= cache.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("MlaForwardCuda: layer ", layer, " of ", cache.num_layers()));
  }
  const int64_t first = positions[0];
  const int64_t num_keys = positions[rows - 1] + 1;  // T
  if (first < 0 || num_keys > cache.capacity() || num_keys > rope.max_positions()) {
    return absl::OutOfRangeError(absl::StrCat("MlaForwardCuda: positions [", first, ", ", num_keys,
                                              ") exceed the cache capacity ", cache.capacity(), " or rope table ",
                                              rope.max_positions()));
  }
  RETURN_IF_ERROR(CheckShapes(w, dims, rope));
  const int64_t nh = dims.heads, r_q = dims.q_lora, r_kv = dims.kv_lora, d_r = dims.rope_dim;
  const int64_t d_n = dims.nope_dim, d_qk = d_n + d_r, d_v = dims.v_dim;
  const int64_t k_top = dims.indexer.topk;
  const DeviceLayerCache& lc = cache.layer(layer);

  ASSIGN_OR_RETURN(const AttentionPath path, ChooseAttentionPath(num_keys, k_top, rows, options));
  if (options.form == AttentionForm::kNaive) {
    return absl::UnimplementedError("MlaForwardCuda: the naive attention form is not implemented on CUDA "
                                    "(every path runs the absorbed form; use form kAuto or kAbsorbed)");
  }
  const bool use_given_topk = !w.indexer.has_value() || options.reuse_topk;
  if (w.indexer.has_value() && lc.index_key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MlaForwardCuda: layer ", layer,
                                                   " has an indexer but its cache has no index keys"));
  }
  if (topk == nullptr && (path != AttentionPath::kDense || !use_given_topk)) {
    return absl::InvalidArgumentError("MlaForwardCuda: a DeviceTopK is needed for this layer and path");
  }

  // Row batches of the attention core (all rows at once unless the partial buffers get large).
  int64_t list_width = num_keys;  // dense and mask lists cover all T keys
  if (path == AttentionPath::kGather) list_width = use_given_topk ? topk->width : std::min(k_top, num_keys);
  const int64_t per_row = std::max<int64_t>(1, launch::LatentAttentionScratchFloats(1, nh, std::max<int64_t>(list_width, 1), r_kv));
  const int64_t batch_rows = std::clamp<int64_t>(kPartialBudgetFloats / per_row, 1, rows);

  const bool scoring = !use_given_topk && path != AttentionPath::kDense;
  const std::vector<size_t> sizes = {
      sizeof(float) * rows * r_q,                   // 0 q_latent [rows, r_q]
      sizeof(float) * rows * nh * d_qk,             // 1 q [rows, N_h, d_qk]
      sizeof(float) * rows * (r_kv + d_r),          // 2 kv [rows, r_kv + d_r]
      sizeof(float) * rows * nh * r_kv,             // 3 q_lat [rows, N_h, r_kv]
      sizeof(float) * rows * nh * r_kv,             // 4 z [rows, N_h, r_kv]
      sizeof(float) * rows * nh * d_v,              // 5 o [rows, N_h·d_v]
      sizeof(float) * batch_rows * per_row,         // 6 split-softmax partials
      scoring ? sizeof(float) * IndexerScoresScratchFloats(rows, dims.indexer) : 0,  // 7 indexer q, weights
      scoring ? sizeof(float) * rows * num_keys : 0,                                  // 8 scores [rows, T]
      scoring ? SelectTopKWorkspaceBytes(rows, num_keys) : 0,                         // 9 top-k workspace
      path == AttentionPath::kMask ? sizeof(int32_t) * rows * num_keys : 0,           // 10 masked keys [rows, T]
  };
  ASSIGN_OR_RETURN(std::vector<void*> scratch, cache.Scratch(sizes));
  float* q_latent = static_cast<float*>(scratch[0]);
  float* q = static_cast<float*>(scratch[1]);
  float* kv = static_cast<float*>(scratch[2]);
  float* q_lat = static_cast<float*>(scratch[3]);
  float* z = static_cast<float*>(scratch[4]);
  float* o = static_cast<float*>(scratch[5]);
  float* partials = static_cast<float*>(scratch[6]);

  // Query: c_q = RMSNorm(W_qa x); q = W_qb c_q with RoPE on each head's trailing d_r dims.
  RETURN_IF_ERROR(Linear(ctx, x, rows, w.q_a_proj, q_latent));
  RETURN_IF_ERROR(RmsNorm(ctx, q_latent, w.q_a_norm, rows, r_q, dims.latent_norm_eps, q_latent));
  RETURN_IF_ERROR(Linear(ctx, q_latent, rows, w.q_b_proj, q));
  RETURN_IF_ERROR(rope.Apply(ctx, q, rows, nh, nh * d_qk, d_qk, d_n, first, dims.rope_style));

  // The new tokens' latents (kv_a_layernorm, int8 when the cache is) and rotated rope keys.
  RETURN_IF_ERROR(Linear(ctx, x, rows, w.kv_a_proj, kv));
  RETURN_IF_ERROR(StoreLatents(ctx, lc, cache.capacity(), r_kv, kv, r_kv + d_r, w.kv_a_norm, dims.latent_norm_eps,
                               rows, first));
  RETURN_IF_ERROR(CopyRowsToSlots(ctx, kv + r_kv, rows, d_r, r_kv + d_r, lc.rope_key, cache.capacity(), first));
  RETURN_IF_ERROR(rope.Apply(ctx, lc.rope_key + first * d_r, rows, 1, d_r, d_r, 0, first, dims.rope_style));

  // Selection: full layers run their indexer; shared layers (and reuse_topk) take *topk as given.
  if (w.indexer.has_value()) {
    RETURN_IF_ERROR(IndexerWriteKeysCuda(ctx, *w.indexer, dims.indexer, rope, x, rows, first, lc.index_key,
                                         cache.capacity()));
  }
  if (!use_given_topk) {
    if (path != AttentionPath::kDense) {
      float* scores = static_cast<float*>(scratch[8]);
      RETURN_IF_ERROR(IndexerScoresCuda(ctx, *w.indexer, dims.indexer, rope, x, q_latent, rows, first, lc.index_key,
                                        num_keys, static_cast<float*>(scratch[7]), scores));
      RETURN_IF_ERROR(SelectTopKCuda(ctx, scores, rows, num_keys, k_top, first, scratch[9], topk));
    } else {
      RETURN_IF_ERROR(AllCausalKeysCuda(ctx, rows, num_keys, topk));
    }
  } else if (path != AttentionPath::kDense) {
    if (topk->width <= 0 || topk->rows != rows || topk->selected.size() < rows * topk->width) {
      return absl::InternalError(absl::StrCat(
          "DSA layer called without a top-k selection for these rows (shared layer without donor, or reuse_topk "
          "without a selection): have ", topk->rows, " x ", topk->width, ", need ", rows, " rows"));
    }
  }

  // Key list per row: identity over T (dense), the selection (gather), or the selection scattered
  // over T with −1 elsewhere (mask). The attention core re-masks non-causal entries.
  const int32_t* keys = nullptr;
  int64_t width = num_keys;
  if (path == AttentionPath::kGather) {
    keys = topk->selected.data();
    width = topk->width;
  } else if (path == AttentionPath::kMask) {
    int32_t* masked = static_cast<int32_t*>(scratch[10]);
    RETURN_IF_ERROR(FromCuda(launch::BuildMaskedKeys(topk->selected.data(), rows, topk->width, num_keys, masked,
                                                     ctx.stream()),
                             "BuildMaskedKeys"));
    keys = masked;
  }

  RETURN_IF_ERROR(FromCuda(launch::AbsorbQuery(q, rows, nh, d_n, d_r, dims.v_dim, r_kv, w.kv_b_proj.data, q_lat,
                                               ctx.stream()),
                           "AbsorbQuery"));
  launch::LatentCacheView view;
  view.latent = lc.latent;
  view.latent_i8 = lc.latent_i8;
  view.latent_scale = lc.latent_scale;
  view.rope_key = lc.rope_key;
  view.r_kv = r_kv;
  view.d_r = d_r;
  for (int64_t r0 = 0; r0 < rows; r0 += batch_rows) {
    launch::AttentionQuery query;
    query.rows = std::min(batch_rows, rows - r0);
    query.n_heads = nh;
    query.q_lat = q_lat + r0 * nh * r_kv;
    query.q_rope = q + r0 * nh * d_qk + d_n;
    query.q_rope_row_stride = nh * d_qk;
    query.q_rope_head_stride = d_qk;
    query.first_position = first + r0;
    query.softmax_scale = dims.softmax_scale;
    RETURN_IF_ERROR(FromCuda(launch::LatentAttention(query, view, keys != nullptr ? keys + r0 * width : nullptr, width,
                                                     num_keys, partials, z + r0 * nh * r_kv, ctx.stream()),
                             "LatentAttention"));
  }
  RETURN_IF_ERROR(FromCuda(launch::UnabsorbOutput(z, rows, nh, d_n, d_v, r_kv, w.kv_b_proj.data, o, ctx.stream()),
                           "UnabsorbOutput"));
  RETURN_IF_ERROR(Linear(ctx, o, rows, w.o_proj, out));
  return path;
}

}  // namespace mtpspec::cuda
