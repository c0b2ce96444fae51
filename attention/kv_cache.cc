#include "attention/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/indexer.h"
#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "kernels/linear.h"

namespace mtpspec {
namespace {

static_assert(kLatentFp8Tile == kFp8Block, "LoadLatent widens a slot as one FP8 row with its block scales");

int64_t LatentFp8Tiles(int64_t r_kv) { return (r_kv + kLatentFp8Tile - 1) / kLatentFp8Tile; }

}  // namespace

KvCache::KvCache(const KvCacheShape& shape, int64_t capacity) : shape_(shape), capacity_(capacity) {
  layers_.resize(shape.has_indexer.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int64_t r_kv = shape.kv_lora_rank;
    switch (shape.latent_storage) {
      case LatentStorage::kInt8:
        layers_[l].latent = Tensor::Zeros(DType::kI8, {capacity, r_kv});
        layers_[l].latent_scale = Tensor::Zeros(DType::kF32, {capacity});
        break;
      case LatentStorage::kFp8:
        layers_[l].latent = Tensor::Zeros(DType::kF8E4M3, {capacity, r_kv});
        layers_[l].latent_scale = Tensor::Zeros(DType::kF32, {capacity, LatentFp8Tiles(r_kv)});
        break;
      default: layers_[l].latent = Tensor::Zeros(DType::kF32, {capacity, r_kv});
    }
    const DType rope_dtype = shape.latent_storage == LatentStorage::kFp8 ? DType::kBF16 : DType::kF32;
    layers_[l].rope_key = Tensor::Zeros(rope_dtype, {capacity, shape.rope_dim});
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
  if (text == "fp8") return LatentStorage::kFp8;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be f32, int8 or fp8, got \"", text, "\""));
}

const char* LatentStorageName(LatentStorage storage) {
  switch (storage) {
    case LatentStorage::kInt8: return "int8";
    case LatentStorage::kFp8: return "fp8";
    default: return "f32";
  }
}

absl::Status CheckLatentStorage(LatentStorage storage, int64_t kv_lora_rank, int64_t rope_dim) {
  if (storage != LatentStorage::kFp8) return absl::OkStatus();
  if (kv_lora_rank % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("an fp8 latent cache needs an even kv_lora_rank, got ", kv_lora_rank));
  }
  if (rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("an fp8 latent cache needs an even qk_rope_head_dim, got ", rope_dim));
  }
  return absl::OkStatus();
}

float Fp8CacheTileScale(float max_abs) { return PowerOfTwoAtLeast(std::max(max_abs / 448.0f, 1e-4f)); }

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
  const int64_t r_kv = shape.kv_lora_rank, d_r = shape.rope_dim, d = shape.index_head_dim;
  int64_t latent_and_rope_bytes = 0;
  switch (shape.latent_storage) {
    case LatentStorage::kInt8: latent_and_rope_bytes = r_kv + 4 + d_r * 4; break;
    case LatentStorage::kFp8: latent_and_rope_bytes = r_kv + 4 * LatentFp8Tiles(r_kv) + d_r * 2; break;
    default: latent_and_rope_bytes = (r_kv + d_r) * 4;
  }
  const int64_t index_key_bytes = shape.index_key_storage == IndexKeyStorage::kBf16  ? d * 2
                                  : shape.index_key_storage == IndexKeyStorage::kFp8 ? d + 4  // + its scale
                                                                                     : d * 4;
  int64_t bytes = 0;
  for (bool full : shape.has_indexer) bytes += latent_and_rope_bytes + (full ? index_key_bytes : 0);
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
  if (fp8()) {
    uint8_t* codes = latent.data<uint8_t>() + j * n;
    float* scales = latent_scale.data<float>() + j * LatentFp8Tiles(n);
    for (int64_t t = 0; t * kLatentFp8Tile < n; ++t) {
      const int64_t begin = t * kLatentFp8Tile, end = std::min(n, begin + kLatentFp8Tile);
      float max_abs = 0.0f;
      for (int64_t i = begin; i < end; ++i) max_abs = std::max(max_abs, std::fabs(c[i]));
      const float scale = Fp8CacheTileScale(max_abs);
      scales[t] = scale;
      for (int64_t i = begin; i < end; ++i) codes[i] = F32ToF8E4M3(c[i] / scale);  // c / 2^e: exact
    }
    return;
  }
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
  if (fp8()) {
    WidenFp8Row(latent.data<uint8_t>() + j * n, latent_scale.data<float>() + j * LatentFp8Tiles(n), n, out);
    return;
  }
  if (!int8()) {
    std::copy(latent.data<float>() + j * n, latent.data<float>() + (j + 1) * n, out);
    return;
  }
  const int8_t* q = latent.data<int8_t>() + j * n;
  const float scale = latent_scale.data<float>()[j];
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

void LayerKvCache::StoreRopeKey(int64_t j, const float* k) {
  const int64_t d_r = rope_dim();
  if (rope_key.dtype() == DType::kBF16) {
    uint16_t* dst = rope_key.data<uint16_t>() + j * d_r;
    for (int64_t i = 0; i < d_r; ++i) dst[i] = F32ToBf16(k[i]);
  } else {
    std::copy(k, k + d_r, rope_key.data<float>() + j * d_r);
  }
}

void LayerKvCache::LoadRopeKey(int64_t j, float* out) const {
  const int64_t d_r = rope_dim();
  if (rope_key.dtype() == DType::kBF16) {
    const uint16_t* src = rope_key.data<uint16_t>() + j * d_r;
    for (int64_t i = 0; i < d_r; ++i) out[i] = Bf16ToF32(src[i]);
  } else {
    std::copy(rope_key.data<float>() + j * d_r, rope_key.data<float>() + (j + 1) * d_r, out);
  }
}

float LayerKvCache::DotLatent(const float* x, int64_t j) const {
  const int64_t n = latent_dim();
  if (fp8()) {
    std::vector<float> c(n);  // [r_kv]
    LoadLatent(j, c.data());
    return DotF32(x, c.data(), n);
  }
  if (!int8()) return DotF32(x, latent.data<float>() + j * n, n);
  const int8_t* q = latent.data<int8_t>() + j * n;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * static_cast<float>(q[i]);
  return sum * latent_scale.data<float>()[j];
}

void LayerKvCache::AxpyLatent(float a, int64_t j, float* y) const {
  const int64_t n = latent_dim();
  if (fp8()) {
    std::vector<float> c(n);  // [r_kv]
    LoadLatent(j, c.data());
    Axpy(a, c.data(), y, n);
    return;
  }
  if (!int8()) {
    Axpy(a, latent.data<float>() + j * n, y, n);
    return;
  }
  const int8_t* q = latent.data<int8_t>() + j * n;
  const float as = a * latent_scale.data<float>()[j];
  for (int64_t i = 0; i < n; ++i) y[i] += as * static_cast<float>(q[i]);
}

}  // namespace mtpspec
