// The latent KV cache on the GPU, the twin of attention/kv_cache.h (same layout, same int8 rule).
//
// Per layer: the latent c_j after kv_a_layernorm (f32, or int8 with one f32 scale per token:
// scale = max|c| / 127, q = rint(clamp(c / scale, −127, 127)), as KvCache does), the rotated rope
// key, and on full layers the indexer key. Slot j holds absolute position j.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/kv_cache.h"
#include "core/cuda_context.h"

namespace mtpspec::cuda {

// Device pointers of one layer (owned by the DeviceKvCache).
struct DeviceLayerCache {
  float* latent = nullptr;        // [capacity, r_kv] f32 (kF32 storage)
  int8_t* latent_i8 = nullptr;    // [capacity, r_kv] (kInt8 storage), with
  float* latent_scale = nullptr;  // [capacity] per-token scales
  float* rope_key = nullptr;      // [capacity, d_r]
  float* index_key = nullptr;     // [capacity, d_I]; null on shared layers
  bool int8() const { return latent_i8 != nullptr; }
};

class DeviceKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceKvCache>> Create(const KvCacheShape& shape, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Marks positions [0, n) valid after a forward wrote them (no device work).
  void SetLength(int64_t n) { length_ = n; }
  void Clear() { length_ = 0; }
  // Rolls back to the first n positions (speculative rollback). n ≤ length, else an error naming
  // n and length. Slots ≥ n are simply overwritten by the next forward (no device work).
  absl::Status Truncate(int64_t n);
  DeviceLayerCache& layer(int64_t i) { return layers_[i]; }
  const DeviceLayerCache& layer(int64_t i) const { return layers_[i]; }
  const KvCacheShape& shape() const { return shape_; }
  // Bytes stored per token over all layers, as stored (f32, or int8 latent + scale).
  int64_t BytesPerToken() const;

  // Grow-only device scratch owned by the cache, for the temporaries of one forward call (the
  // forward of a sequence runs on one stream, so one buffer per cache suffices). Valid until the
  // next Scratch call with a larger size; slot i of `sizes` gets its own aligned region.
  absl::StatusOr<std::vector<void*>> Scratch(const std::vector<size_t>& sizes);

 private:
  DeviceKvCache() = default;
  KvCacheShape shape_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<DeviceLayerCache> layers_;
  std::vector<DeviceArray<uint8_t>> storage_;  // one allocation per layer and tensor
  DeviceArray<uint8_t> scratch_;               // see Scratch()
};

// For each row r: c = RMSNorm(kv[r, 0:r_kv]) · norm_weight (kv_a_layernorm), stored in slot
// first_position + r of `layer` (f32, or int8 with the per-token scale exactly as KvCache stores
// it). kv: device [rows, kv_stride] (the kv_a_proj output; its first r_kv columns are the latent).
absl::Status StoreLatents(Context& ctx, const DeviceLayerCache& layer, int64_t capacity, int64_t r_kv,
                          const float* kv, int64_t kv_stride, const float* norm_weight, double eps, int64_t rows,
                          int64_t first_position);
// Copies rows of src [rows, n] (row stride src_stride) to dst rows [first_position, first_position
// + rows) of a [capacity, n] table. Device pointers.
absl::Status CopyRowsToSlots(Context& ctx, const float* src, int64_t rows, int64_t n, int64_t src_stride,
                             float* dst, int64_t capacity, int64_t first_position);
// Device latents of slots [0, count) widened to f32, for tests and the naive form. out: [count, r_kv].
absl::Status LoadLatents(Context& ctx, const DeviceLayerCache& layer, int64_t r_kv, int64_t count, float* out);

}  // namespace mtpspec::cuda
