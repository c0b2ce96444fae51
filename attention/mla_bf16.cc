#include "attention/mla_bf16.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "core/status.h"
#include "kernels/bf16_pairs.h"
#include "kernels/linear.h"

namespace mtpspec {
namespace {

// v · scale for a bf16 value v and a power of two `scale`: the product is a bf16 value (or ±inf), so
// dropping the f32 product's low half is exact.
inline uint16_t ScaleBf16(uint16_t v, float scale) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  f *= scale;
  uint32_t out;
  std::memcpy(&out, &f, sizeof(out));
  return static_cast<uint16_t>(out >> 16);
}

// The pair-major copy of a chunk of keys: by_pair[p · stride + i] = word p of rows[i] (rows[i] holds
// key i's [c; k_r] in bf16, `width` values), for i < count and p < pairs.
void StorePairMajor(const uint16_t* rows, int64_t width, int64_t count, int64_t pairs, uint32_t* by_pair,
                    int64_t stride) {
  int64_t p0 = 0;
#if defined(__AVX512F__)
  if (count == 16) {  // 16 keys × 16 pairs at a time: one 16 × 16 transpose of 32-bit words
    for (; p0 + 16 <= pairs; p0 += 16) {
      __m512i r[16], t[16], u[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows + i * width + 2 * p0);
      for (int i = 0; i < 16; i += 2) {  // rows 2m, 2m+1 interleaved within 128-bit lanes
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 16; i += 4) {  // per lane: u[i + c] holds word 4·lane + c of rows i .. i+3
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      for (int c = 0; c < 4; ++c) {  // gather lane l of u[c], u[4 + c], u[8 + c], u[12 + c]: word 4l + c
        const __m512i even_lanes_low = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
        const __m512i odd_lanes_low = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
        const __m512i even_lanes_high = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        const __m512i odd_lanes_high = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
        const __m512i word[4] = {_mm512_shuffle_i32x4(even_lanes_low, even_lanes_high, 0x88),   // lane 0
                                 _mm512_shuffle_i32x4(odd_lanes_low, odd_lanes_high, 0x88),     // lane 1
                                 _mm512_shuffle_i32x4(even_lanes_low, even_lanes_high, 0xDD),   // lane 2
                                 _mm512_shuffle_i32x4(odd_lanes_low, odd_lanes_high, 0xDD)};    // lane 3
        for (int l = 0; l < 4; ++l) _mm512_storeu_si512(by_pair + (p0 + 4 * l + c) * stride, word[l]);
      }
    }
  }
#endif
  for (int64_t p = p0; p < pairs; ++p) {
    uint32_t* dst = by_pair + p * stride;
    const uint16_t* src = rows + 2 * p;
    for (int64_t i = 0; i < count; ++i, src += width) std::memcpy(dst + i, src, sizeof(uint32_t));
  }
}

}  // namespace

void GatherBf16Keys(const LayerKvCache& cache, std::span<const int32_t> keys, Bf16KeyBlock* block) {
  MTPSPEC_CHECK(cache.fp8());
  const int64_t n = static_cast<int64_t>(keys.size()), r_kv = cache.latent_dim(), d_r = cache.rope_dim();
  const int64_t width = r_kv + d_r, pairs = width / 2, tiles = cache.latent_scale.dim(1);
  const int64_t padded = n + (n & 1);
  constexpr int64_t kLineWords = 16;  // one 64-byte cache line
  block->keys = n;
  block->padded = padded;
  block->pair_stride = (padded + kLineWords - 1) / kLineWords * kLineWords + kLineWords;
  block->key_pair_stride = (r_kv + kLineWords - 1) / kLineWords * kLineWords + kLineWords;
  block->by_pair.resize(pairs * block->pair_stride);
  block->by_key_pair.resize(padded / 2 * block->key_pair_stride);
  const uint8_t* codes = cache.latent.data<uint8_t>();      // [capacity, r_kv]
  const float* scales = cache.latent_scale.data<float>();   // [capacity, tiles]
  const uint16_t* rope = cache.rope_key.data<uint16_t>();   // [capacity, d_r]
  constexpr int64_t kChunk = 16;  // keys per chunk; even, so key pairs never straddle two chunks
  DefaultThreadPool().ParallelFor((n + kChunk - 1) / kChunk, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<uint16_t> rows;  // [kChunk, r_kv + d_r] the chunk's keys in bf16
    rows.resize(kChunk * width);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t k0 = chunk * kChunk, count = std::min(kChunk, padded - k0);
      for (int64_t i = 0; i < count; ++i) {
        uint16_t* row = rows.data() + i * width;
        if (k0 + i == n) {  // the padding key
          std::fill(row, row + width, uint16_t{0});
          continue;
        }
        const int64_t slot = keys[k0 + i];
        WidenFp8ToBf16(codes + slot * r_kv, r_kv, row);
        for (int64_t t = 0; t < tiles; ++t) {
          const float scale = scales[slot * tiles + t];
          const int64_t tile_end = std::min(r_kv, (t + 1) * kLatentFp8Tile);
          for (int64_t c = t * kLatentFp8Tile; c < tile_end; ++c) row[c] = ScaleBf16(row[c], scale);
        }
        std::memcpy(row + r_kv, rope + slot * d_r, d_r * sizeof(uint16_t));
      }
      StorePairMajor(rows.data(), width, count, pairs, block->by_pair.data() + k0, block->pair_stride);
      for (int64_t i = 0; i < count; i += 2) {
        const uint16_t* low = rows.data() + i * width;
        const uint16_t* high = low + width;
        uint32_t* dst = block->by_key_pair.data() + (k0 + i) / 2 * block->key_pair_stride;
        for (int64_t c = 0; c < r_kv; ++c) dst[c] = static_cast<uint32_t>(low[c]) | static_cast<uint32_t>(high[c]) << 16;
      }
    }
  });
}

void AttendBf16Keys(const float* q_lat, const float* q_rope, int64_t q_rope_stride, int64_t heads, int64_t r_kv,
                    int64_t d_r, float softmax_scale, const Bf16KeyBlock& block, float* z) {
  const int64_t n = block.keys, padded = block.padded, key_pairs = padded / 2;
  const int64_t latent_pairs = r_kv / 2, pairs = latent_pairs + d_r / 2;
  MTPSPEC_CHECK(n > 0 && static_cast<int64_t>(block.by_pair.size()) == pairs * block.pair_stride);
  // Scratch kept per thread and only grown: allocating these per call (hundreds of KiB) lets the heap
  // hand pages back and fault them in again on every call, which cost as much as the products.
  thread_local std::vector<uint32_t> q_pairs, weight_pairs;
  thread_local std::vector<float> scores;
  q_pairs.resize(heads * pairs);  // [heads, P] each head's [q_lat; q_rope] in bf16
  for (int64_t h = 0; h < heads; ++h) {
    uint32_t* dst = q_pairs.data() + h * pairs;
    const float* lat = q_lat + h * r_kv;
    const float* rot = q_rope + h * q_rope_stride;
    for (int64_t p = 0; p < latent_pairs; ++p) dst[p] = PackBf16Pair(lat[2 * p], lat[2 * p + 1]);
    for (int64_t p = 0; p < d_r / 2; ++p) dst[latent_pairs + p] = PackBf16Pair(rot[2 * p], rot[2 * p + 1]);
  }
  scores.resize(heads * n);  // [heads, n]
  CombineBf16Pairs(q_pairs.data(), heads, pairs, block.by_pair.data(), pairs, block.pair_stride, n, scores.data(), n);
  weight_pairs.resize(heads * key_pairs);  // [heads, padded / 2] softmax weights in bf16
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores.data() + h * n;
    for (int64_t k = 0; k < n; ++k) s[k] *= softmax_scale;
    SoftmaxInPlace(s, n);
    uint32_t* dst = weight_pairs.data() + h * key_pairs;
    for (int64_t m = 0; m < key_pairs; ++m) dst[m] = PackBf16Pair(s[2 * m], 2 * m + 1 < n ? s[2 * m + 1] : 0.0f);
  }
  CombineBf16Pairs(weight_pairs.data(), heads, key_pairs, block.by_key_pair.data(), key_pairs, block.key_pair_stride,
                   r_kv, z, r_kv);
}

}  // namespace mtpspec
