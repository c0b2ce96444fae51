#include "attention/indexer_cuda.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "attention/indexer_cuda_launch.h"
#include "kernels/norm_cuda.h"

namespace mtpspec::cuda {

absl::Status DeviceTopK::Reshape(int64_t new_rows, int64_t new_width) {
  if (new_rows < 0 || new_width < 0) return absl::InvalidArgumentError("DeviceTopK::Reshape: negative shape");
  if (new_rows * new_width > selected.size()) {
    ASSIGN_OR_RETURN(selected, DeviceArray<int32_t>::Create(new_rows * new_width, "top-k selection"));
  }
  rows = new_rows;
  width = new_width;
  return absl::OkStatus();
}

absl::StatusOr<DeviceIndexerWeights> UploadIndexerWeights(WeightArena& arena, const IndexerWeights& host,
                                                          const std::string& name_prefix) {
  DeviceIndexerWeights w;
  ASSIGN_OR_RETURN(w.wq_b, arena.UploadLinearMatrix(host.wq_b, name_prefix + "wq_b.weight"));
  ASSIGN_OR_RETURN(w.wk, arena.UploadLinearMatrix(host.wk, name_prefix + "wk.weight"));
  ASSIGN_OR_RETURN(w.weights_proj, arena.UploadLinearMatrix(host.weights_proj, name_prefix + "weights_proj.weight"));
  ASSIGN_OR_RETURN(w.k_norm_weight, arena.UploadF32(host.k_norm_weight.view(), name_prefix + "k_norm.weight"));
  ASSIGN_OR_RETURN(w.k_norm_bias, arena.UploadF32(host.k_norm_bias.view(), name_prefix + "k_norm.bias"));
  return w;
}

namespace {

absl::Status CheckRope(const DeviceRope& rope, const IndexerDims& dims) {
  if (rope.rotary_dim() != dims.rope_dim || dims.rope_dim > dims.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("indexer: rope tables of dim ", rope.rotary_dim(),
                                                   " but indexer rope_dim ", dims.rope_dim, " (head_dim ",
                                                   dims.head_dim, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IndexerWriteKeysCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims,
                                  const DeviceRope& rope, const float* x, int64_t rows, int64_t first_position,
                                  float* index_key_cache, int64_t capacity) {
  RETURN_IF_ERROR(CheckRope(rope, dims));
  const int64_t d = dims.head_dim;
  if (w.wk.out != d) return absl::InvalidArgumentError(absl::StrCat("indexer wk has ", w.wk.out, " rows, d_I = ", d));
  if (first_position < 0 || first_position + rows > capacity) {
    return absl::OutOfRangeError(absl::StrCat("IndexerWriteKeysCuda: slots [", first_position, ", ",
                                              first_position + rows, ") outside capacity ", capacity));
  }
  // Consecutive positions: the new keys are the contiguous cache rows [first_position, +rows).
  float* keys = index_key_cache + first_position * d;  // [rows, d_I]
  RETURN_IF_ERROR(Linear(ctx, x, rows, w.wk, keys));
  RETURN_IF_ERROR(LayerNorm(ctx, keys, w.k_norm_weight, w.k_norm_bias, rows, d, 1e-6, keys));
  return rope.Apply(ctx, keys, rows, 1, d, d, 0, first_position, dims.rope_style);
}

int64_t IndexerScoresScratchFloats(int64_t rows, const IndexerDims& dims) {
  return rows * dims.n_heads * dims.head_dim + rows * dims.n_heads;
}

absl::Status IndexerScoresCuda(Context& ctx, const DeviceIndexerWeights& w, const IndexerDims& dims,
                               const DeviceRope& rope, const float* x, const float* q_latent, int64_t rows,
                               int64_t first_position, const float* index_key_cache, int64_t num_keys, float* scratch,
                               float* scores) {
  RETURN_IF_ERROR(CheckRope(rope, dims));
  const int64_t nh = dims.n_heads, d = dims.head_dim;
  if (w.wq_b.out != nh * d || w.weights_proj.out != nh) {
    return absl::InvalidArgumentError(absl::StrCat("indexer weights: wq_b has ", w.wq_b.out, " rows (want ", nh * d,
                                                   "), weights_proj ", w.weights_proj.out, " (want ", nh, ")"));
  }
  float* q = scratch;                        // [rows, N_I, d_I]
  float* head_weights = q + rows * nh * d;   // [rows, N_I]
  RETURN_IF_ERROR(Linear(ctx, q_latent, rows, w.wq_b, q));
  RETURN_IF_ERROR(rope.Apply(ctx, q, rows, nh, nh * d, d, 0, first_position, dims.rope_style));
  RETURN_IF_ERROR(Linear(ctx, x, rows, w.weights_proj, head_weights));
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(nh));
  return FromCuda(launch::IndexerScoreKeys(q, head_weights, head_scale, rows, nh, d, first_position, index_key_cache,
                                           num_keys, scores, ctx.stream()),
                  "IndexerScoreKeys");
}

absl::Status IndexerScoreKeys(Context& ctx, const float* q, const float* head_weights, int64_t rows, int64_t n_heads,
                              int64_t head_dim, int64_t first_position, const float* index_key_cache,
                              int64_t num_keys, float* scores) {
  if (rows < 0 || n_heads <= 0 || head_dim <= 0 || num_keys < 0 || first_position < 0) {
    return absl::InvalidArgumentError("IndexerScoreKeys: bad shape");
  }
  return FromCuda(launch::IndexerScoreKeys(q, head_weights, 1.0f, rows, n_heads, head_dim, first_position,
                                           index_key_cache, num_keys, scores, ctx.stream()),
                  "IndexerScoreKeys");
}

size_t SelectTopKWorkspaceBytes(int64_t rows, int64_t num_keys) {
  return launch::RadixTopKWorkspaceBytes(rows, num_keys);
}

absl::Status SelectTopKCuda(Context& ctx, const float* scores, int64_t rows, int64_t num_keys, int64_t k,
                            int64_t first_position, void* workspace, DeviceTopK* topk) {
  if (rows <= 0 || num_keys <= 0 || k <= 0 || first_position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SelectTopKCuda: need rows, num_keys, k > 0 (got ", rows, ", ",
                                                   num_keys, ", ", k, ")"));
  }
  if (rows > 65535 || num_keys > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("SelectTopKCuda: unsupported shape rows ", rows, " x keys ",
                                                   num_keys, " (rows ≤ 65535, keys < 2^31)"));
  }
  const int64_t width = std::min(k, num_keys);
  RETURN_IF_ERROR(topk->Reshape(rows, width));
  return FromCuda(launch::RadixTopK(scores, rows, num_keys, width, first_position, workspace, topk->selected.data(),
                                    ctx.stream()),
                  "RadixTopK");
}

absl::Status AllCausalKeysCuda(Context& ctx, int64_t rows, int64_t num_keys, DeviceTopK* topk) {
  RETURN_IF_ERROR(topk->Reshape(rows, num_keys));
  return FromCuda(launch::IotaRows(rows, num_keys, topk->selected.data(), ctx.stream()), "IotaRows");
}

}  // namespace mtpspec::cuda
