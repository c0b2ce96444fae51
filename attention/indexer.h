// DSA lightning indexer (docs/models.md, "The DSA lightning indexer"): scores every cached key for each query row and keeps the
// top-K. Only "full" layers own one; "shared" layers reuse the nearest full layer's selection
// (IndexShare, §5).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/rope.h"
#include "attention/tree_mask.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace mtpspec {

// The CPU indexer key cache keeps its slots in blocks of kIndexKeyBlock, each block transposed:
// element t of slot j lies at IndexKeyOffset(j, t, d_I) = ((j / 64)·d_I + t)·64 + j % 64, so a block
// is [d_I, 64] and its row t holds element t of its 64 slots. The scores then combine a block's d_I
// rows for each query head (CombineRows: 64 keys per pass of multiply-adds, and no reduction per
// (head, key) pair, which bound a dot product over d_I = 128). A cache of `capacity` slots is
// [IndexKeyBlocks(capacity), d_I, 64] f32.
inline constexpr int64_t kIndexKeyBlock = 64;
inline int64_t IndexKeyOffset(int64_t slot, int64_t t, int64_t d) {
  return ((slot / kIndexKeyBlock) * d + t) * kIndexKeyBlock + slot % kIndexKeyBlock;
}
inline int64_t IndexKeyBlocks(int64_t capacity) { return (capacity + kIndexKeyBlock - 1) / kIndexKeyBlock; }
// Slot `slot`'s key [d] into such a cache, and out of it.
inline void WriteIndexKey(float* cache, int64_t slot, const float* key, int64_t d) {
  for (int64_t t = 0; t < d; ++t) cache[IndexKeyOffset(slot, t, d)] = key[t];
}
inline void ReadIndexKey(const float* cache, int64_t slot, int64_t d, float* key) {
  for (int64_t t = 0; t < d; ++t) key[t] = cache[IndexKeyOffset(slot, t, d)];
}

// A cache with bf16 keys (IndexKeyStorage::kBf16, attention/kv_cache.h) keeps the same 64-slot blocks
// as pairs: a block is [d_I / 2, 64] words of two bf16, word (p, i) holding elements 2p (low half) and
// 2p + 1 (high half) of the block's slot i, so that the scores' bf16 pair products
// (kernels/bf16_pairs.h) read pair p of 64 slots at once. d_I must be even. Element t of slot j is
// bf16 number IndexKeyPairOffset(j, t, d_I); a cache of `capacity` slots is
// [IndexKeyBlocks(capacity), d_I / 2, 64] pairs, [IndexKeyBlocks(capacity), d_I, 64] bf16 values.
inline int64_t IndexKeyPairOffset(int64_t slot, int64_t t, int64_t d) {
  return ((slot / kIndexKeyBlock) * d + (t & ~int64_t{1})) * kIndexKeyBlock + (slot % kIndexKeyBlock) * 2 + (t & 1);
}
// Slot `slot`'s key [d] into a bf16 cache (rounded to nearest even), and out of it (widened).
inline void WriteIndexKey(uint16_t* cache, int64_t slot, const float* key, int64_t d) {
  for (int64_t t = 0; t < d; ++t) cache[IndexKeyPairOffset(slot, t, d)] = F32ToBf16(key[t]);
}
inline void ReadIndexKey(const uint16_t* cache, int64_t slot, int64_t d, float* key) {
  for (int64_t t = 0; t < d; ++t) key[t] = Bf16ToF32(cache[IndexKeyPairOffset(slot, t, d)]);
}

// A cache with FP8 keys (IndexKeyStorage::kFp8, attention/indexer_fp8.h) keeps the same pair layout
// with one float8_e4m3fn byte per value (IndexKeyPairOffset counts bytes): [IndexKeyBlocks(capacity),
// d_I, 64] bytes, and one f32 scale per slot beside them. Slot `slot`'s bytes [d] in and out:
inline void WriteIndexKey(uint8_t* cache, int64_t slot, const uint8_t* key_bytes, int64_t d) {
  for (int64_t t = 0; t < d; ++t) cache[IndexKeyPairOffset(slot, t, d)] = key_bytes[t];
}
inline void ReadIndexKey(const uint8_t* cache, int64_t slot, int64_t d, uint8_t* key_bytes) {
  for (int64_t t = 0; t < d; ++t) key_bytes[t] = cache[IndexKeyPairOffset(slot, t, d)];
}

struct IndexerWeights {
  TensorView wq_b;           // [N_I·d_I, r_q] f32|bf16
  TensorView wk;             // [d_I, H]
  Tensor k_norm_weight;      // [d_I] f32
  Tensor k_norm_bias;        // [d_I] f32
  TensorView weights_proj;   // [N_I, H]
};

struct IndexerDims {
  int64_t n_heads = 0;   // N_I
  int64_t head_dim = 0;  // d_I
  int64_t rope_dim = 0;  // d_r: RoPE on the FIRST d_r dims of each head (opposite of MLA)
  int64_t topk = 0;      // K
  RopeStyle rope_style = RopeStyle::kHalfSplit;
};

// The selection of one forward call: for query row r, keys selected[r·width .. r·width + width).
// Entries may name future positions (rows with fewer than K causal keys pick the earliest future
// keys, as a top-k over −∞ scores would) or be −1; consumers must re-mask both.
struct TopK {
  int64_t width = 0;              // min(K, T)
  std::vector<int32_t> selected;  // [rows, width]
  const int32_t* row(int64_t r) const { return selected.data() + r * width; }
};

// k^I = RoPE(LayerNorm(W_wk x)) for each row, written to slot positions[r] of index_key_cache.
// x: [rows, H] normalized layer input; index_key_cache: [IndexKeyBlocks(capacity), d_I, 64].
//
// Every function here takes an optional `tree` (attention/tree_mask.h): row r then writes slot
// tree->slots[r] (RoPE still at positions[r]) and sees only the slots the tree lets it see; without
// one, row r writes slot positions[r] and sees every slot up to it.
void IndexerWriteKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                      int64_t rows, const int64_t* positions, float* index_key_cache);

// Scores I[r, j] = Σ_h w[r,h] · ReLU(q^I[r,h] · k^I_j · d_I^-½) with w = W_wp x · N_I^-½ for keys
// j < num_keys, restricted causally to j ≤ positions[r]. Writes [rows, num_keys] (−∞ where masked).
// q_latent: [rows, r_q] normalized q latent (c_q).
void IndexerScores(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope, const float* x,
                   const float* q_latent, int64_t rows, const int64_t* positions, const float* index_key_cache,
                   int64_t num_keys, float* scores);

// The same two steps with the projections already made (MlaForward batches them with its own):
//   projected_keys = x · wkᵀ [rows, d_I];  q = c_q · wq_bᵀ [rows, N_I·d_I];
//   head_weights = x · weights_projᵀ [rows, N_I].
// All three are modified in place (norm, RoPE, scaling).
void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, float* index_key_cache,
                      const TreeMask* tree = nullptr);
void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const float* index_key_cache,
                                  int64_t num_keys, float* scores, const TreeMask* tree = nullptr);
// The same with the keys in bf16 (the cache layout above). Each query head is rounded to bf16 and
// each (row, head, key) dot product is one chain of bf16 pair steps in order (kernels/bf16_pairs.h);
// the ReLU, the head weights and the masks are as in f32. Twice the multiply-adds per instruction
// and half the bytes of the f32 keys; the scores differ from f32's by the rounding of q and k.
void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, uint16_t* index_key_cache,
                      const TreeMask* tree = nullptr);
void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const uint16_t* index_key_cache,
                                  int64_t num_keys, float* scores, const TreeMask* tree = nullptr);
// The same with FP8 keys and their scales [capacity] (attention/indexer_fp8.h): keys and query heads
// rotated and quantised; each (row, head, key) dot product of the e4m3 values is one chain of bf16
// pair steps (e4m3 values are bf16 values, and their products exact in f32); the query's scale joins
// its head weight and the key's scale multiplies the key's score. d_I must be a power of two.
void IndexerStoreKeys(const IndexerWeights& w, const IndexerDims& dims, const RotaryEmbedding& rope,
                      float* projected_keys, int64_t rows, const int64_t* positions, uint8_t* index_key_cache,
                      float* index_key_scales, const TreeMask* tree = nullptr);
void IndexerScoresFromProjections(const IndexerDims& dims, const RotaryEmbedding& rope, float* q, float* head_weights,
                                  int64_t rows, const int64_t* positions, const uint8_t* index_key_cache,
                                  const float* index_key_scales, int64_t num_keys, float* scores,
                                  const TreeMask* tree = nullptr);

// Top-min(K, num_keys) per row of `scores` ([rows, num_keys], −∞ = masked). A row that sees at
// most K keys selects all of them; with a tree, the rest of its row is −1.
TopK SelectTopK(const float* scores, int64_t rows, int64_t num_keys, int64_t k, const int64_t* positions,
                const TreeMask* tree = nullptr);

// Every visible key: the selection when num_keys ≤ K (the indexer is then a no-op, §4.5); with a
// tree, each row lists the keys it sees, then −1.
TopK AllCausalKeys(int64_t rows, int64_t num_keys, const int64_t* positions, const TreeMask* tree = nullptr);

}  // namespace mtpspec
