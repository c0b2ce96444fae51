#include "attention/indexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "attention/indexer_fp8.h"
#include "kernels/bf16_pairs.h"
#include "kernels/linear.h"
#include "core/parallel.h"
#include "kernels/row_kernels.h"
#include "core/status.h"

namespace mtpspec {
namespace {

// Norm and RoPE on each projected key [rows, d_I] in place, then write(slot, key) stores it.
template <typename Write>
void StoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, float* projected_keys,
               int64_t rows, const int64_t* positions, const TreeMask* tree, const Write& write) {
  const int64_t d = dims.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    float* k = projected_keys + r * d;
    LayerNorm(k, w.k_norm_weight.data<float>(), w.k_norm_bias.data<float>(), d, 1e-6, k);
    rope.Apply(k, positions[r], dims.rope_style);
    write(tree ? tree->slots[r] : positions[r], k);
  }
}

bool IsPowerOfTwo(int64_t d) { return d > 0 && (d & (d - 1)) == 0; }

// RoPE on the queries q [rows, N_I, d_I] and the head scale on head_weights [rows, N_I], in place.
void PrepareQueries(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights, int64_t rows,
                    const int64_t* positions) {
  const int64_t nh = dims.n_heads, d = dims.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < nh; ++h) rope.Apply(q + (r * nh + h) * d, positions[r], dims.rope_style);
  }
  // fp32 end to end (docs/models.md, "The DSA lightning indexer")
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(nh));
  for (int64_t i = 0; i < rows * nh; ++i) head_weights[i] *= head_scale;
}

// The scores of every key block from the block's raw dot products: BlockDots(b, n, out) writes the
// q · k of all heads of all rows against the n keys of block b, out: [rows·N_I, n]. Then ReLU and the
// weighted head sum per (row, key), with head_weights [rows, N_I] already scaled, and with key_scales
// [≥ num_keys] (FP8 keys; else null) the sum times the key's scale.
template <typename BlockDots>
void ScoreBlocks(const IndexerDims& dims, const float* head_weights, int64_t rows, const int64_t* positions,
                 int64_t num_keys, float* scores, const TreeMask* tree, const float* key_scales,
                 const BlockDots& block_dots) {
  const int64_t nh = dims.n_heads;
  const float dot_scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));

  // Split by key block; each (row, head, key) dot product is one chain over the d_I elements, in
  // order, whatever the block, the split or the number of rows.
  const float neg_inf = -std::numeric_limits<float>::infinity();
  constexpr int64_t kBlocksPerTask = 4;
  DefaultThreadPool().ParallelFor(IndexKeyBlocks(num_keys), kBlocksPerTask, [&](int64_t b_begin, int64_t b_end) {
    std::vector<float> head_scores(rows * nh * kIndexKeyBlock);  // [rows·N_I, block]
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t j0 = b * kIndexKeyBlock;
      const int64_t n = std::min(kIndexKeyBlock, num_keys - j0);
      block_dots(b, n, head_scores.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float* weights = head_weights + r * nh;      // [N_I]
        const float* s = head_scores.data() + r * nh * n;  // [N_I, block]
        float* out = scores + r * num_keys + j0;           // [block]
        const int64_t own_slot = tree ? tree->slots[r] : positions[r];
        const int64_t causal = std::clamp<int64_t>(own_slot + 1 - j0, 0, n);
        std::fill(out, out + causal, 0.0f);
        // Explicit fma: the vectorised body and the scalar remainder of this loop must round alike,
        // since where a key falls depends on the block boundaries.
        for (int64_t h = 0; h < nh; ++h) {
          for (int64_t k = 0; k < causal; ++k) {
            out[k] = std::fma(weights[h], std::max(s[h * n + k] * dot_scale, 0.0f), out[k]);
          }
        }
        if (key_scales != nullptr) {
          for (int64_t k = 0; k < causal; ++k) out[k] *= key_scales[j0 + k];
        }
        std::fill(out + causal, out + n, neg_inf);
        if (tree) {  // the tree slots before the row's own that are not its ancestors
          for (int64_t k = std::max<int64_t>(tree->first_slot - j0, 0); k < causal; ++k) {
            if (!tree->Visible(r, j0 + k)) out[k] = neg_inf;
          }
        }
      }
    }
  });
}

// Order-preserving map from a float to an unsigned key; −0 is folded onto +0 so that equal floats
// get equal keys.
inline uint32_t OrderKey(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Writes to dst, in increasing index order, the `want` largest of row[0, n), equal scores going to
// the lower index (the order of a stable descending sort). Radix select: three histogram passes
// (11, 11 and 10 bits of the key) find the want-th largest key t exactly, then one pass takes every
// key above t and the first keys equal to t. Linear and branch-light, unlike a comparison select.
void TopKIndices(const float* row, int64_t n, int64_t want, std::vector<uint32_t>& keys, int32_t* dst) {
  keys.resize(n);  // [n]
  for (int64_t j = 0; j < n; ++j) keys[j] = OrderKey(row[j]);
  constexpr int kShift[3] = {21, 10, 0};
  constexpr int kBits[3] = {11, 11, 10};
  int64_t histogram[1 << 11];
  uint32_t threshold = 0, known_bits = 0;  // the bits of t found so far, and which they are
  int64_t need = want;                     // keys still to take at or below the threshold so far
  for (int pass = 0; pass < 3; ++pass) {
    const uint32_t buckets = 1u << kBits[pass];
    std::fill(histogram, histogram + buckets, 0);
    for (int64_t j = 0; j < n; ++j) {
      if ((keys[j] & known_bits) == threshold) ++histogram[(keys[j] >> kShift[pass]) & (buckets - 1)];
    }
    uint32_t b = buckets - 1;
    for (; b > 0 && histogram[b] < need; --b) need -= histogram[b];
    threshold |= b << kShift[pass];
    known_bits |= (buckets - 1) << kShift[pass];
  }
  int64_t count = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (keys[j] > threshold || (keys[j] == threshold && need-- > 0)) dst[count++] = static_cast<int32_t>(j);
  }
  MTPSPEC_CHECK(count == want);
}

}  // namespace

void IndexerWriteKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                      int64_t rows, const int64_t* positions, float* index_key_cache) {
  std::vector<float> keys(rows * dims.head_dim);  // [rows, d_I]
  Linear(x, rows, w.wk, keys.data());
  IndexerStoreKeys(w, dims, rope, keys.data(), rows, positions, index_key_cache);
}

void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, float* index_key_cache,
                      const TreeMask* tree) {
  StoreKeys(w, dims, rope, projected_keys, rows, positions, tree, [&](int64_t slot, const float* key) {
    WriteIndexKey(index_key_cache, slot, key, dims.head_dim);
  });
}

void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, uint16_t* index_key_cache,
                      const TreeMask* tree) {
  MTPSPEC_CHECK(dims.head_dim % 2 == 0);
  StoreKeys(w, dims, rope, projected_keys, rows, positions, tree, [&](int64_t slot, const float* key) {
    WriteIndexKey(index_key_cache, slot, key, dims.head_dim);
  });
}

void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, uint8_t* index_key_cache,
                      float* index_key_scales, const TreeMask* tree) {
  const int64_t d = dims.head_dim;
  MTPSPEC_CHECK(IsPowerOfTwo(d));
  std::vector<uint8_t> bytes(d);  // [d_I] one key in e4m3
  StoreKeys(w, dims, rope, projected_keys, rows, positions, tree, [&](int64_t slot, float* key) {
    HadamardRotate(key, d);
    index_key_scales[slot] = QuantizeFp8Row(key, d, bytes.data());
    WriteIndexKey(index_key_cache, slot, bytes.data(), d);
  });
}

void IndexerScores(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                   const float* q_latent, int64_t rows, const int64_t* positions, const float* index_key_cache,
                   int64_t num_keys, float* scores) {
  std::vector<float> q(rows * dims.n_heads * dims.head_dim);  // [rows, N_I, d_I]
  std::vector<float> head_weights(rows * dims.n_heads);       // [rows, N_I]
  Linear(q_latent, rows, w.wq_b, q.data());
  Linear(x, rows, w.weights_proj, head_weights.data());
  IndexerScoresFromProjections(dims, rope, q.data(), head_weights.data(), rows, positions, index_key_cache, num_keys,
                               scores);
}

void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const float* index_key_cache,
                                  int64_t num_keys, float* scores, const TreeMask* tree) {
  // All heads of all rows against a block of 64 keys is one product, [rows·N_I, d_I] × [d_I, 64]:
  // each head's query combines the block's d_I rows (kIndexKeyBlock), one multiply-add chain per
  // (row, head, key).
  const int64_t d = dims.head_dim, query_rows = rows * dims.n_heads;
  PrepareQueries(dims, rope, q, head_weights, rows, positions);
  ScoreBlocks(dims, head_weights, rows, positions, num_keys, scores, tree, nullptr, [&](int64_t b, int64_t n, float* out) {
    std::vector<const float*> key_rows(d);  // [d_I] the rows of block b
    for (int64_t t = 0; t < d; ++t) key_rows[t] = index_key_cache + IndexKeyOffset(b * kIndexKeyBlock, t, d);
    CombineRows(q, query_rows, d, key_rows.data(), d, n, out, n);
  });
}

void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const uint16_t* index_key_cache,
                                  int64_t num_keys, float* scores, const TreeMask* tree) {
  const int64_t d = dims.head_dim, query_rows = rows * dims.n_heads, pairs = d / 2;
  MTPSPEC_CHECK(d % 2 == 0);
  PrepareQueries(dims, rope, q, head_weights, rows, positions);
  std::vector<uint32_t> q_pairs(query_rows * pairs);  // [rows·N_I, d_I / 2] the rotated queries in bf16
  for (int64_t i = 0; i < query_rows * pairs; ++i) q_pairs[i] = PackBf16Pair(q[2 * i], q[2 * i + 1]);
  // Block b is [d_I / 2, 64] pairs: pair row p of its 64 slots at b·(d_I / 2)·64 + p·64.
  const uint32_t* blocks = reinterpret_cast<const uint32_t*>(index_key_cache);
  ScoreBlocks(dims, head_weights, rows, positions, num_keys, scores, tree, nullptr, [&](int64_t b, int64_t n, float* out) {
    CombineBf16Pairs(q_pairs.data(), query_rows, pairs, blocks + b * pairs * kIndexKeyBlock, pairs, kIndexKeyBlock, n,
                     out, n);
  });
}

void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const uint8_t* index_key_cache,
                                  const float* index_key_scales, int64_t num_keys, float* scores,
                                  const TreeMask* tree) {
  const int64_t d = dims.head_dim, query_rows = rows * dims.n_heads, pairs = d / 2;
  MTPSPEC_CHECK(IsPowerOfTwo(d));
  PrepareQueries(dims, rope, q, head_weights, rows, positions);
  // Each rotated query head in e4m3 with its scale (which joins the head's weight), widened to bf16.
  std::vector<uint16_t> q_bf16(query_rows * d);  // [rows·N_I, d_I], read as [rows·N_I, d_I / 2] pairs
  std::vector<uint8_t> bytes(d);                 // [d_I]
  for (int64_t i = 0; i < query_rows; ++i) {
    HadamardRotate(q + i * d, d);
    head_weights[i] *= QuantizeFp8Row(q + i * d, d, bytes.data());
    WidenFp8ToBf16(bytes.data(), d, q_bf16.data() + i * d);
  }
  const uint32_t* q_pairs = reinterpret_cast<const uint32_t*>(q_bf16.data());
  ScoreBlocks(dims, head_weights, rows, positions, num_keys, scores, tree, index_key_scales,
              [&](int64_t b, int64_t n, float* out) {
                // Block b's d_I · 64 bytes widened in order: the bf16 cache's block layout.
                thread_local std::vector<uint16_t> block;  // [d_I / 2, 64] pairs
                block.resize(d * kIndexKeyBlock);
                WidenFp8ToBf16(index_key_cache + b * d * kIndexKeyBlock, d * kIndexKeyBlock, block.data());
                CombineBf16Pairs(q_pairs, query_rows, pairs, reinterpret_cast<const uint32_t*>(block.data()), pairs,
                                 kIndexKeyBlock, n, out, n);
              });
}

TopK SelectTopK(const float* scores, int64_t rows, int64_t num_keys, int64_t k, const int64_t* positions,
                const TreeMask* tree) {
  TopK out;
  out.width = std::min(k, num_keys);
  out.selected.assign(rows * out.width, -1);
  // Rows are independent, so they split across the pool (a prefill chunk's rows each select over
  // their T keys); a few rows stay on the calling thread.
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(num_keys, 1));
  DefaultThreadPool().ParallelFor(rows, min_rows, [&](int64_t r_begin, int64_t r_end) {
    std::vector<uint32_t> keys;  // [T] scratch
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t causal = std::min((tree ? tree->slots[r] : positions[r]) + 1, num_keys);
      int32_t* dst = out.selected.data() + r * out.width;
      if (tree && tree->VisibleCount(r) <= out.width) {
        // Every key the row sees, by index (the invisible tree slots score −∞ and are left out).
        int64_t count = 0;
        for (int64_t j = 0; j < causal; ++j) {
          if (tree->Visible(r, j)) dst[count++] = static_cast<int32_t>(j);
        }
        continue;
      }
      if (causal <= out.width) {
        // Every causal key, then the earliest future keys (all −∞ in a full top-k).
        for (int64_t j = 0; j < out.width; ++j) dst[j] = static_cast<int32_t>(j);
        continue;
      }
      // Larger score first, equal scores by lower index (deterministic); listed by index.
      TopKIndices(scores + r * num_keys, causal, out.width, keys, dst);
    }
  });
  return out;
}

TopK AllCausalKeys(int64_t rows, int64_t num_keys, const int64_t* positions, const TreeMask* tree) {
  TopK out;
  out.width = num_keys;
  out.selected.resize(rows * num_keys);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* dst = out.selected.data() + r * num_keys;
    if (tree == nullptr) {
      for (int64_t j = 0; j < num_keys; ++j) dst[j] = static_cast<int32_t>(j);
      continue;
    }
    int64_t count = 0;
    for (int64_t j = 0; j < num_keys; ++j) {
      if (tree->Visible(r, j)) dst[count++] = static_cast<int32_t>(j);
    }
    std::fill(dst + count, dst + num_keys, -1);
  }
  return out;
}

}  // namespace mtpspec
