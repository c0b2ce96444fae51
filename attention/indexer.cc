#include "attention/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/linear.h"
#include "core/parallel.h"
#include "core/status.h"

namespace mtpspec {

void IndexerWriteKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                      int64_t rows, const int64_t* positions, float* index_key_cache) {
  const int64_t d = dims.head_dim;
  std::vector<float> keys(rows * d);  // [rows, d_I]
  Linear(x, rows, w.wk, keys.data());
  for (int64_t r = 0; r < rows; ++r) {
    float* k = keys.data() + r * d;
    LayerNorm(k, w.k_norm_weight.data<float>(), w.k_norm_bias.data<float>(), d, 1e-6, k);
    rope.Apply(k, positions[r], dims.rope_style);
    std::copy(k, k + d, index_key_cache + positions[r] * d);
  }
}

void IndexerScores(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                   const float* q_latent, int64_t rows, const int64_t* positions, const float* index_key_cache,
                   int64_t num_keys, float* scores) {
  const int64_t nh = dims.n_heads, d = dims.head_dim;
  std::vector<float> q(rows * nh * d);  // [rows, N_I, d_I]
  Linear(q_latent, rows, w.wq_b, q.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < nh; ++h) rope.Apply(q.data() + (r * nh + h) * d, positions[r], dims.rope_style);
  }
  std::vector<float> head_weights(rows * nh);  // [rows, N_I], fp32 end to end (model-spec §10 #12)
  Linear(x, rows, w.weights_proj, head_weights.data());
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(nh));
  const float dot_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (float& v : head_weights) v *= head_scale;

  const float neg_inf = -std::numeric_limits<float>::infinity();
  DefaultThreadPool().ParallelFor(rows * num_keys, 256, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t r = idx / num_keys, j = idx % num_keys;
      if (j > positions[r]) {
        scores[idx] = neg_inf;
        continue;
      }
      const float* key = index_key_cache + j * d;
      float total = 0.0f;
      for (int64_t h = 0; h < nh; ++h) {
        const float s = DotF32(q.data() + (r * nh + h) * d, key, d) * dot_scale;
        total += head_weights[r * nh + h] * std::max(s, 0.0f);
      }
      scores[idx] = total;
    }
  });
}

TopK SelectTopK(const float* scores, int64_t rows, int64_t num_keys, int64_t k, const int64_t* positions) {
  TopK out;
  out.width = std::min(k, num_keys);
  out.selected.assign(rows * out.width, -1);
  std::vector<int32_t> order(num_keys);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores + r * num_keys;
    const int64_t causal = std::min(positions[r] + 1, num_keys);
    int32_t* dst = out.selected.data() + r * out.width;
    if (causal <= out.width) {
      // Every causal key, then the earliest future keys (all −∞ in a full top-k).
      for (int64_t j = 0; j < out.width; ++j) dst[j] = static_cast<int32_t>(j);
      continue;
    }
    std::iota(order.begin(), order.begin() + causal, 0);
    // Larger score first; equal scores by lower index, so the choice is deterministic.
    auto better = [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    std::nth_element(order.begin(), order.begin() + out.width, order.begin() + causal, better);
    std::sort(order.begin(), order.begin() + out.width);
    std::copy(order.begin(), order.begin() + out.width, dst);
  }
  return out;
}

TopK AllCausalKeys(int64_t rows, int64_t num_keys, const int64_t* positions) {
  TopK out;
  out.width = num_keys;
  out.selected.resize(rows * num_keys);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < num_keys; ++j) out.selected[r * num_keys + j] = static_cast<int32_t>(j);
  }
  return out;
}

}  // namespace mtpspec
