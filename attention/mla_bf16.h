// The absorbed attention over an fp8 latent cache (LatentStorage::kFp8, attention/kv_cache.h),
// computed as FlashMLA computes DeepSeek-V3.2's sparse decoding over that cache: the selected keys
// dequantised to bf16 (exactly: an e4m3 value times a power of two is a bf16 value), the queries
// rounded to bf16, the scores and the softmax-weighted latents as chains of bf16 pair products summed
// in f32 (kernels/bf16_pairs.h), and the softmax weights rounded to bf16 before they weight the
// latents. The softmax itself is f32. Each row's keys are laid out once for the two products, and
// every (row, head) result is one fixed chain: a verify row gives the bits a decode row gives.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/kv_cache.h"

namespace mtpspec {

// One query row's usable keys, laid out for the two pair products. With P = (r_kv + d_r) / 2:
// The rows of both layouts lie one cache line further apart than their width, so that the products,
// which read a few lines of every row, do not find them all in the same cache sets.
struct Bf16KeyBlock {
  int64_t keys = 0;    // n
  int64_t padded = 0;  // n rounded up to even; the padding key is all zeros
  // Word (p, k) = elements 2p (low half) and 2p + 1 (high half) of key k's [c_k; k_r_k] in bf16:
  // the scores' operand, a chain over p per (head, key). [P, pair_stride ≥ padded]
  std::vector<uint32_t> by_pair;
  int64_t pair_stride = 0;
  // Word (m, c) = element c of c_{2m} (low half) and of c_{2m+1} (high half): the weighted sum's
  // operand, a chain over key pairs m per (head, c). [padded / 2, key_pair_stride ≥ r_kv]
  std::vector<uint32_t> by_key_pair;
  int64_t key_pair_stride = 0;
};

// Lays out the cache slots `keys` (all < the cache's capacity, written) of an fp8 cache. Parallel over
// key ranges on the default pool when called outside its jobs; the attention calls it from each of its
// threads, each for itself.
void GatherBf16Keys(const LayerKvCache& cache, std::span<const int32_t> keys, Bf16KeyBlock* block);

// For heads [0, heads) of one row, with s[h, k] = softmax_scale · (q_lat^h · c_k + q_rope^h · k_r_k):
//   z^h = Σ_k bf16(softmax(s[h, ·])_k) · c_k.
// q_lat: [heads, r_kv]; q_rope: head h's d_r values at q_rope + h · q_rope_stride; z: [heads, r_kv].
// `block` holds at least one key.
void AttendBf16Keys(const float* q_lat, const float* q_rope, int64_t q_rope_stride, int64_t heads, int64_t r_kv,
                    int64_t d_r, float softmax_scale, const Bf16KeyBlock& block, float* z);

}  // namespace mtpspec
