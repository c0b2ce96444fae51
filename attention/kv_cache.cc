#include "attention/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "attention/indexer.h"
#include "kernels/linear.h"

namespace mtpspec {

KvCache::KvCache(const KvCacheShape& shape, int64_t capacity) : shape_(shape), capacity_(capacity) {
  layers_.resize(shape.has_indexer.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (shape.latent_storage == LatentStorage::kInt8) {
      layers_[l].latent = Tensor::Zeros(DType::kI8, {capacity, shape.kv_lora_rank});
      layers_[l].latent_scale = Tensor::Zeros(DType::kF32, {capacity});
    } else {
      layers_[l].latent = Tensor::Zeros(DType::kF32, {capacity, shape.kv_lora_rank});
    }
    layers_[l].rope_key = Tensor::Zeros(DType::kF32, {capacity, shape.rope_dim});
    if (shape.has_indexer[l]) {
      const DType dtype = shape.index_key_storage == IndexKeyStorage::kBf16  ? DType::kBF16
                          : shape.index_key_storage == IndexKeyStorage::kFp8 ? DType::kF8E4M3
                                                                             : DType::kF32;
      layers_[l].index_key = Tensor::Zeros(dtype, {IndexKeyBlocks(capacity), shape.index_head_dim, kIndexKeyBlock});
      if (dtype == DType::kF8E4M3) layers_[l].index_key_scale = Tensor::Zeros(DType::kF32, {capacity});
    }
  }
}

absl::Status KvCache::Truncate(int64_t n) {
  if (n < 0 || n > length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvCache::Truncate: n = ", n, " is outside [0, length = ", length_, "]"));
  }
  length_ = n;
  return absl::OkStatus();
}

absl::Status KvCache::KeepSlots(int64_t first, std::span<const int64_t> slots) {
  const int64_t kept = static_cast<int64_t>(slots.size());
  for (int64_t i = 0; i < kept; ++i) {
    if (slots[i] < first + i || slots[i] >= length_ || (i > 0 && slots[i] <= slots[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("KvCache::KeepSlots: slots[", i, "] = ", slots[i],
                                                     " must increase and lie in [", first + i, ", length = ", length_,
                                                     ")"));
    }
  }
  auto move_row = [](Tensor& t, int64_t from, int64_t to) {
    if (t.empty() || t.numel() == 0 || from == to) return;
    const int64_t row_bytes = t.view().nbytes() / t.dim(0);
    uint8_t* base = t.data<uint8_t>();
    std::memmove(base + to * row_bytes, base + from * row_bytes, row_bytes);
  };
  // The indexer keys lie in blocks (attention/indexer.h), a slot's elements apart: each element's
  // bytes move as they are, whatever the storage.
  auto move_index_key = [](Tensor& t, int64_t from, int64_t to) {
    if (t.empty() || from == to) return;
    const int64_t d = t.dim(1), size = static_cast<int64_t>(DTypeSize(t.dtype()));
    const auto offset = t.dtype() == DType::kF32 ? IndexKeyOffset : IndexKeyPairOffset;
    uint8_t* base = t.data<uint8_t>();
    for (int64_t e = 0; e < d; ++e) std::memcpy(base + offset(to, e, d) * size, base + offset(from, e, d) * size, size);
  };
  for (LayerKvCache& layer : layers_) {
    for (int64_t i = 0; i < kept; ++i) {
      for (Tensor* t : {&layer.latent, &layer.latent_scale, &layer.rope_key, &layer.index_key_scale}) {
        move_row(*t, slots[i], first + i);
      }
      move_index_key(layer.index_key, slots[i], first + i);
    }
  }
  length_ = first + kept;
  return absl::OkStatus();
}

absl::StatusOr<LatentStorage> ParseLatentStorage(const std::string& text, const std::string& what) {
  if (text == "f32") return LatentStorage::kF32;
  if (text == "int8") return LatentStorage::kInt8;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be f32 or int8, got \"", text, "\""));
}

const char* LatentStorageName(LatentStorage storage) { return storage == LatentStorage::kInt8 ? "int8" : "f32"; }

absl::Status CheckIndexKeyStorage(IndexKeyStorage storage, int64_t index_head_dim) {
  const int64_t d = index_head_dim;
  if (storage == IndexKeyStorage::kBf16 && d % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bf16 indexer keys need an even index_head_dim, got ", d));
  }
  if (storage == IndexKeyStorage::kFp8 && (d < 2 || (d & (d - 1)) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 indexer keys (Hadamard-rotated) need index_head_dim a power of two, got ", d));
  }
  return absl::OkStatus();
}

absl::StatusOr<IndexKeyStorage> ParseIndexKeyStorage(const std::string& text, const std::string& what) {
  if (text == "f32") return IndexKeyStorage::kF32;
  if (text == "bf16") return IndexKeyStorage::kBf16;
  if (text == "fp8") return IndexKeyStorage::kFp8;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be f32, bf16 or fp8, got \"", text, "\""));
}

const char* IndexKeyStorageName(IndexKeyStorage storage) {
  switch (storage) {
    case IndexKeyStorage::kBf16: return "bf16";
    case IndexKeyStorage::kFp8: return "fp8";
    default: return "f32";
  }
}

int64_t CacheBytesPerToken(const KvCacheShape& shape) {
  const bool int8 = shape.latent_storage == LatentStorage::kInt8;
  const int64_t d = shape.index_head_dim;
  const int64_t index_key_bytes = shape.index_key_storage == IndexKeyStorage::kBf16  ? d * 2
                                  : shape.index_key_storage == IndexKeyStorage::kFp8 ? d + 4  // + its scale
                                                                                     : d * 4;
  int64_t bytes = 0;
  for (bool full : shape.has_indexer) {
    bytes += int8 ? shape.kv_lora_rank + 4 : shape.kv_lora_rank * 4;  // latent (+ scale)
    bytes += shape.rope_dim * 4 + (full ? index_key_bytes : 0);
  }
  return bytes;
}

int64_t KvCache::BytesPerToken() const { return CacheBytesPerToken(shape_); }

int64_t CacheBf16BytesPerToken(const KvCacheShape& shape) {
  int64_t values = 0;
  for (bool full : shape.has_indexer) values += shape.kv_lora_rank + shape.rope_dim + (full ? shape.index_head_dim : 0);
  return values * 2;
}

int64_t KvCache::Bf16BytesPerToken() const { return CacheBf16BytesPerToken(shape_); }

void LayerKvCache::StoreLatent(int64_t j, const float* c) {
  const int64_t n = latent_dim();
  if (!int8()) {
    std::copy(c, c + n, latent.data<float>() + j * n);
    return;
  }
  float max_abs = 0.0f;
  for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(c[i]));
  const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  const float inv = 1.0f / scale;
  int8_t* q = latent.data<int8_t>() + j * n;
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::lrint(std::clamp(c[i] * inv, -127.0f, 127.0f)));
  latent_scale.data<float>()[j] = scale;
}

void LayerKvCache::LoadLatent(int64_t j, float* out) const {
  const int64_t n = latent_dim();
  if (!int8()) {
    std::copy(latent.data<float>() + j * n, latent.data<float>() + (j + 1) * n, out);
    return;
  }
  const int8_t* q = latent.data<int8_t>() + j * n;
  const float scale = latent_scale.data<float>()[j];
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

float LayerKvCache::DotLatent(const float* x, int64_t j) const {
  const int64_t n = latent_dim();
  if (!int8()) return DotF32(x, latent.data<float>() + j * n, n);
  const int8_t* q = latent.data<int8_t>() + j * n;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * static_cast<float>(q[i]);
  return sum * latent_scale.data<float>()[j];
}

void LayerKvCache::AxpyLatent(float a, int64_t j, float* y) const {
  const int64_t n = latent_dim();
  if (!int8()) {
    Axpy(a, latent.data<float>() + j * n, y, n);
    return;
  }
  const int8_t* q = latent.data<int8_t>() + j * n;
  const float as = a * latent_scale.data<float>()[j];
  for (int64_t i = 0; i < n; ++i) y[i] += as * static_cast<float>(q[i]);
}

}  // namespace mtpspec
