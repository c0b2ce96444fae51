// The per-sequence attention cache of an MLA + DSA model (docs/models.md, "Attention: MLA", "The DSA lightning indexer").
//
// Per token and layer it holds only the compressed latent c_j (kv_lora_rank values, after
// kv_a_layernorm) and the rotated rope key k_r_j (qk_rope_head_dim values). Full (indexer) layers
// also hold the indexer key k^I_j (index_head_dim values). Slot j holds absolute position j.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace mtpspec {

// How the MLA latent is stored.
// - kInt8 keeps one int8 per value plus one f32 scale per token (symmetric, scale = max|c| / 127);
//   the rope key stays f32.
// - kFp8 keeps the cache as DeepSeek-V3.2 is served (FlashMLA's sparse decoding cache: 656 bytes a
//   token at its dimensions): the latent as float8_e4m3fn with one f32 scale per 128 values, each the
//   smallest power of two ≥ max(max|c| / 448, 1e-4) (Fp8CacheTileScale), and the rope key in bf16.
//   The decode and verify attention over it multiplies in bf16 pairs with f32 sums (attention/mla_bf16.h).
// The indexer key is stored as IndexKeyStorage says, whatever the latent's storage.
enum class LatentStorage { kF32, kInt8, kFp8 };
// "f32", "int8" or "fp8"; the error names `what` (the flag or argument the text came from).
absl::StatusOr<LatentStorage> ParseLatentStorage(const std::string& text, const std::string& what);
const char* LatentStorageName(LatentStorage storage);
// Whether a model with these dimensions can keep its latent so (fp8: kv_lora_rank and
// qk_rope_head_dim even, for the bf16 pairs); the error names the field.
absl::Status CheckLatentStorage(LatentStorage storage, int64_t kv_lora_rank, int64_t rope_dim);
// The fp8 cache's values per scale, and the scale of a tile whose largest magnitude is max_abs.
inline constexpr int64_t kLatentFp8Tile = 128;
float Fp8CacheTileScale(float max_abs);

// How the indexer keys are stored, and so computed with (attention/indexer.h): kF32; kBf16 (keys
// rounded to bf16, scored with bf16 pair products; the index_head_dim must be even); or kFp8 (keys and
// queries rotated and quantised to e4m3 with a power-of-two scale each, as DeepSeek-V3.2's reference
// inference code does, attention/indexer_fp8.h; the index_head_dim must be a power of two).
enum class IndexKeyStorage { kF32, kBf16, kFp8 };
// "f32", "bf16" or "fp8"; the error names `what`.
absl::StatusOr<IndexKeyStorage> ParseIndexKeyStorage(const std::string& text, const std::string& what);
const char* IndexKeyStorageName(IndexKeyStorage storage);
// Whether a model with this index_head_dim can keep its indexer keys so; the error names the field.
absl::Status CheckIndexKeyStorage(IndexKeyStorage storage, int64_t index_head_dim);

struct KvCacheShape {
  LatentStorage latent_storage = LatentStorage::kF32;
  IndexKeyStorage index_key_storage = IndexKeyStorage::kF32;
  int64_t kv_lora_rank = 0;       // r_kv
  int64_t rope_dim = 0;           // d_r
  int64_t index_head_dim = 0;     // d_I
  std::vector<bool> has_indexer;  // [layers] true for full layers (their own indexer keys)
};

struct LayerKvCache {
  Tensor latent;        // [capacity, r_kv] f32, I8 with kInt8 storage, F8E4M3 with kFp8
  Tensor latent_scale;  // [capacity] f32 per-token scales (kInt8), [capacity, ⌈r_kv / 128⌉] per tile (kFp8)
  Tensor rope_key;      // [capacity, d_r] f32, bf16 with kFp8
  Tensor index_key;     // [⌈capacity / 64⌉, d_I, 64] f32, slots in transposed blocks (attention/indexer.h,
                        // IndexKeyOffset), or bf16 or e4m3 in pairs (IndexKeyPairOffset); empty on shared layers
  Tensor index_key_scale;  // [capacity] f32, each slot's scale (e4m3 indexer keys only)

  bool int8() const { return latent.dtype() == DType::kI8; }
  bool fp8() const { return latent.dtype() == DType::kF8E4M3; }
  int64_t latent_dim() const { return latent.dim(1); }
  int64_t rope_dim() const { return rope_key.dim(1); }
  // Stores the normalized latent c [r_kv] of position j (quantising when int8 or fp8).
  void StoreLatent(int64_t j, const float* c);
  // c_j widened to f32. out: [r_kv]
  void LoadLatent(int64_t j, float* out) const;
  // Stores the rotated rope key k [d_r] of position j (rounded to bf16 with kFp8), and reads it back.
  void StoreRopeKey(int64_t j, const float* k);
  void LoadRopeKey(int64_t j, float* out) const;
  // q · c_j and y += a · c_j without materialising c_j.
  float DotLatent(const float* q, int64_t j) const;
  void AxpyLatent(float a, int64_t j, float* y) const;
};

// Bytes one token takes in a cache of this shape, as stored (the latent in f32, int8 + its scale, or
// e4m3 + its tile scales with a bf16 rope key; the indexer key in f32, bf16, or e4m3 + its scale).
int64_t CacheBytesPerToken(const KvCacheShape& shape);
// The same values counted at 2 bytes each (bf16), the unit engines usually quote (§3.4).
int64_t CacheBf16BytesPerToken(const KvCacheShape& shape);

class KvCache {
 public:
  KvCache(const KvCacheShape& shape, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  // Number of committed positions (slots 0 .. length-1 are valid).
  int64_t length() const { return length_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  LayerKvCache& layer(int64_t i) { return layers_[i]; }
  const LayerKvCache& layer(int64_t i) const { return layers_[i]; }
  const KvCacheShape& shape() const { return shape_; }

  // Rolls the cache back to its first n positions (speculative rollback). n ≤ length.
  absl::Status Truncate(int64_t n);
  // Keeps the accepted path of a tree verify: slot slots[i] moves to first + i in every layer
  // (latent, its scale, rope key, indexer key), then the cache is truncated to first + slots.size().
  // slots must increase, with slots[i] ≥ first + i and < length. Their RoPE positions were already
  // first + i (each node's depth), so the moved rows are what a chain would have written there.
  absl::Status KeepSlots(int64_t first, std::span<const int64_t> slots);
  // Marks positions [length, n) valid after a forward wrote them. Internal to the model.
  void SetLength(int64_t n) { length_ = n; }
  void Clear() { length_ = 0; }

  // Bytes stored per token over all layers, as stored (CacheBytesPerToken).
  int64_t BytesPerToken() const;
  // The same values counted at 2 bytes each (bf16), the unit engines usually quote (§3.4).
  int64_t Bf16BytesPerToken() const;

 private:
  KvCacheShape shape_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<LayerKvCache> layers_;
};

}  // namespace mtpspec
