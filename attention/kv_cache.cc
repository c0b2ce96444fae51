#include "attention/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace mtpspec {

KvCache::KvCache(const KvCacheShape& shape, int64_t capacity) : shape_(shape), capacity_(capacity) {
  layers_.resize(shape.has_indexer.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l].latent = Tensor::Zeros(DType::kF32, {capacity, shape.kv_lora_rank});
    layers_[l].rope_key = Tensor::Zeros(DType::kF32, {capacity, shape.rope_dim});
    if (shape.has_indexer[l]) layers_[l].index_key = Tensor::Zeros(DType::kF32, {capacity, shape.index_head_dim});
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

int64_t KvCache::BytesPerToken() const {
  int64_t values = 0;
  for (bool full : shape_.has_indexer) {
    values += shape_.kv_lora_rank + shape_.rope_dim + (full ? shape_.index_head_dim : 0);
  }
  return values * static_cast<int64_t>(sizeof(float));
}

}  // namespace mtpspec
