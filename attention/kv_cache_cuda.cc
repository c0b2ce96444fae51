#include "attention/kv_cache_cuda.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "attention/kv_cache_cuda_launch.h"

namespace mtpspec::cuda {
namespace {

// A zeroed device allocation of `bytes`, kept in `storage`.
absl::StatusOr<void*> AllocateZeroed(std::vector<DeviceArray<uint8_t>>& storage, int64_t bytes,
                                     const std::string& what) {
  ASSIGN_OR_RETURN(DeviceArray<uint8_t> block, DeviceArray<uint8_t>::Create(bytes, what));
  if (bytes > 0) RETURN_IF_ERROR(FromCuda(cudaMemset(block.data(), 0, static_cast<size_t>(bytes)), what));
  void* p = block.data();
  storage.push_back(std::move(block));
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceKvCache>> DeviceKvCache::Create(const KvCacheShape& shape, int64_t capacity) {
  if (capacity <= 0 || shape.kv_lora_rank <= 0 || shape.rope_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceKvCache: need capacity, kv_lora_rank and rope_dim > 0, got ",
                                                   capacity, ", ", shape.kv_lora_rank, ", ", shape.rope_dim));
  }
  if (shape.latent_storage == LatentStorage::kFp8) {
    return absl::UnimplementedError(
        "DeviceKvCache: the fp8 latent cache is CPU only; the CUDA cache keeps the latent in f32 or int8");
  }
  if (shape.index_key_storage != IndexKeyStorage::kF32) {
    return absl::UnimplementedError(absl::StrCat("DeviceKvCache: indexer keys in ",
                                                 IndexKeyStorageName(shape.index_key_storage),
                                                 " are CPU only; the CUDA cache keeps them in f32"));
  }
  for (bool full : shape.has_indexer) {
    if (full && shape.index_head_dim <= 0) {
      return absl::InvalidArgumentError("DeviceKvCache: a full layer needs index_head_dim > 0");
    }
  }
  std::unique_ptr<DeviceKvCache> cache(new DeviceKvCache());
  cache->shape_ = shape;
  cache->capacity_ = capacity;
  const int64_t r_kv = shape.kv_lora_rank;
  for (size_t l = 0; l < shape.has_indexer.size(); ++l) {
    const std::string name = absl::StrCat("kv cache layer ", l);
    DeviceLayerCache layer;
    if (shape.latent_storage == LatentStorage::kInt8) {
      ASSIGN_OR_RETURN(void* q, AllocateZeroed(cache->storage_, capacity * r_kv, name + " int8 latent"));
      ASSIGN_OR_RETURN(void* s, AllocateZeroed(cache->storage_, capacity * 4, name + " latent scales"));
      layer.latent_i8 = static_cast<int8_t*>(q);
      layer.latent_scale = static_cast<float*>(s);
    } else {
      ASSIGN_OR_RETURN(void* c, AllocateZeroed(cache->storage_, capacity * r_kv * 4, name + " latent"));
      layer.latent = static_cast<float*>(c);
    }
    ASSIGN_OR_RETURN(void* kr, AllocateZeroed(cache->storage_, capacity * shape.rope_dim * 4, name + " rope key"));
    layer.rope_key = static_cast<float*>(kr);
    if (shape.has_indexer[l]) {
      ASSIGN_OR_RETURN(void* ki,
                       AllocateZeroed(cache->storage_, capacity * shape.index_head_dim * 4, name + " index key"));
      layer.index_key = static_cast<float*>(ki);
    }
    cache->layers_.push_back(layer);
  }
  return cache;
}

absl::Status DeviceKvCache::Truncate(int64_t n) {
  if (n < 0 || n > length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceKvCache::Truncate: n = ", n, " is outside [0, length = ", length_, "]"));
  }
  length_ = n;
  return absl::OkStatus();
}

int64_t DeviceKvCache::BytesPerToken() const { return CacheBytesPerToken(shape_); }

absl::StatusOr<std::vector<void*>> DeviceKvCache::Scratch(const std::vector<size_t>& sizes) {
  constexpr size_t kAlign = 256;
  size_t total = 0;
  for (size_t s : sizes) total += (s + kAlign - 1) / kAlign * kAlign;
  if (total > scratch_.bytes()) {
    // cudaFree inside the reset waits for the device, so buffers in flight are not reused early.
    scratch_ = DeviceArray<uint8_t>();
    ASSIGN_OR_RETURN(scratch_, DeviceArray<uint8_t>::Create(static_cast<int64_t>(total), "attention scratch"));
  }
  std::vector<void*> regions;
  size_t offset = 0;
  for (size_t s : sizes) {
    regions.push_back(scratch_.data() + offset);
    offset += (s + kAlign - 1) / kAlign * kAlign;
  }
  return regions;
}

absl::Status StoreLatents(Context& ctx, const DeviceLayerCache& layer, int64_t capacity, int64_t r_kv,
                          const float* kv, int64_t kv_stride, const float* norm_weight, double eps, int64_t rows,
                          int64_t first_position) {
  if (rows < 0 || first_position < 0 || first_position + rows > capacity || kv_stride < r_kv) {
    return absl::OutOfRangeError(absl::StrCat("StoreLatents: slots [", first_position, ", ", first_position + rows,
                                              ") outside the cache capacity ", capacity, " or kv stride ", kv_stride,
                                              " < r_kv ", r_kv));
  }
  return FromCuda(launch::NormStoreLatent(kv, rows, kv_stride, r_kv, norm_weight, static_cast<float>(eps),
                                          layer.latent, layer.latent_i8, layer.latent_scale, first_position,
                                          ctx.stream()),
                  "NormStoreLatent");
}

absl::Status CopyRowsToSlots(Context& ctx, const float* src, int64_t rows, int64_t n, int64_t src_stride, float* dst,
                             int64_t capacity, int64_t first_position) {
  if (rows < 0 || first_position < 0 || first_position + rows > capacity || src_stride < n) {
    return absl::OutOfRangeError(absl::StrCat("CopyRowsToSlots: slots [", first_position, ", ", first_position + rows,
                                              ") outside the capacity ", capacity));
  }
  if (rows == 0) return absl::OkStatus();
  return FromCuda(cudaMemcpy2DAsync(dst + first_position * n, static_cast<size_t>(n) * 4, src,
                                    static_cast<size_t>(src_stride) * 4, static_cast<size_t>(n) * 4,
                                    static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, ctx.stream()),
                  "cudaMemcpy2DAsync (cache rows)");
}

absl::Status LoadLatents(Context& ctx, const DeviceLayerCache& layer, int64_t r_kv, int64_t count, float* out) {
  if (count < 0) return absl::InvalidArgumentError("LoadLatents: negative count");
  if (count == 0) return absl::OkStatus();
  if (layer.int8()) {
    return FromCuda(launch::DequantiseLatents(layer.latent_i8, layer.latent_scale, count, r_kv, out, ctx.stream()),
                    "DequantiseLatents");
  }
  return FromCuda(cudaMemcpyAsync(out, layer.latent, static_cast<size_t>(count * r_kv) * 4, cudaMemcpyDeviceToDevice,
                                  ctx.stream()),
                  "cudaMemcpyAsync (latents)");
}

}  // namespace mtpspec::cuda
