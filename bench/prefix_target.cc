#include "bench/prefix_target.h"

#include "pipeline/model_target.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/indexer.h"
#include "attention/indexer_fp8.h"
#include "bench/run_info.h"

namespace mtpspec::bench {

AttentionOptions LongContextAttention() {
  AttentionOptions options;
  options.gather_max_rows = std::numeric_limits<int32_t>::max();
  return options;
}

absl::StatusOr<std::unique_ptr<PrefixCachedTarget>> PrefixCachedTarget::Create(const Model& model, int64_t capacity,
                                                                               AttentionOptions attention) {
  ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity));
  return std::unique_ptr<PrefixCachedTarget>(new PrefixCachedTarget(model, std::move(cache), attention));
}

void PrefixCachedTarget::Forget() {
  prefix_.clear();
  last_logits_ = Tensor();
  hidden_post_ = Tensor();
  hidden_pre_ = Tensor();
}

absl::Status PrefixCachedTarget::Fill(std::span<const int32_t> prefix, int64_t chunk, double* seconds) {
  const double start = NowSeconds();
  Forget();
  cache_->Clear();
  fresh_ = false;
  const int64_t n = static_cast<int64_t>(prefix.size());
  const int64_t H = model_.config().hidden_size;
  if (n == 0) return absl::InvalidArgumentError("Fill: the prefix is empty");
  if (n >= cache_->capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("Fill: a prefix of ", n, " tokens needs a cache larger than ",
                                                   cache_->capacity()));
  }
  if (chunk < 1) return absl::InvalidArgumentError("Fill: chunk must be >= 1");
  Tensor post = Tensor::Empty(DType::kF32, {n, H});  // [N, H]
  Tensor pre = Tensor::Empty(DType::kF32, {n, H});   // [N, H]
  ForwardOptions options;
  options.attention = attention_;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t rows = std::min(chunk, n - begin);
    std::vector<int64_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = begin + r;
    options.logit_rows = {rows - 1};  // only the last chunk's is kept
    ASSIGN_OR_RETURN(ForwardOutput out, model_.Forward(*cache_, prefix.subspan(begin, rows), positions, options));
    std::memcpy(post.data<float>() + begin * H, out.hidden_postnorm.data<float>(), rows * H * sizeof(float));
    std::memcpy(pre.data<float>() + begin * H, out.hidden_prenorm.data<float>(), rows * H * sizeof(float));
    if (begin + rows == n) last_logits_ = std::move(out.logits);
  }
  prefix_.assign(prefix.begin(), prefix.end());
  hidden_post_ = std::move(post);
  hidden_pre_ = std::move(pre);
  if (seconds != nullptr) *seconds = NowSeconds() - start;
  return absl::OkStatus();
}

void FillCacheRandom(KvCache& cache, int64_t n, uint64_t seed) {
  MTPSPEC_CHECK(n <= cache.capacity());
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    LayerKvCache& layer = cache.layer(l);
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(l));
    std::normal_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> latent(layer.latent_dim());  // [r_kv]
    for (int64_t j = 0; j < n; ++j) {
      for (float& v : latent) v = unit(rng);
      layer.StoreLatent(j, latent.data());
      std::vector<float> rope(layer.rope_dim());  // [d_r]
      for (float& v : rope) v = unit(rng);
      layer.StoreRopeKey(j, rope.data());
      if (!layer.index_key.empty()) {
        std::vector<float> key(layer.index_key.dim(1));  // [d_I]
        for (float& v : key) v = unit(rng);
        if (layer.index_key.dtype() == DType::kBF16) {
          WriteIndexKey(layer.index_key.data<uint16_t>(), j, key.data(), layer.index_key.dim(1));
        } else if (layer.index_key.dtype() == DType::kF8E4M3) {
          std::vector<uint8_t> bytes(key.size());  // [d_I]
          layer.index_key_scale.data<float>()[j] = QuantizeFp8Row(key.data(), layer.index_key.dim(1), bytes.data());
          WriteIndexKey(layer.index_key.data<uint8_t>(), j, bytes.data(), layer.index_key.dim(1));
        } else {
          WriteIndexKey(layer.index_key.data<float>(), j, key.data(), layer.index_key.dim(1));
        }
      }
    }
  }
  cache.SetLength(n);
}

absl::Status PrefixCachedTarget::FillRandom(std::span<const int32_t> prefix, uint64_t seed) {
  Forget();
  cache_->Clear();
  fresh_ = false;
  const int64_t n = static_cast<int64_t>(prefix.size()), H = model_.config().hidden_size;
  if (n == 0 || n >= cache_->capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("FillRandom: a prefix of ", n, " tokens does not fit a cache of ",
                                                   cache_->capacity()));
  }
  FillCacheRandom(*cache_, n, seed);
  Tensor post = Tensor::Empty(DType::kF32, {n, H});  // [N, H]
  Tensor pre = Tensor::Empty(DType::kF32, {n, H});   // [N, H]
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (int64_t i = 0; i < n * H; ++i) post.data<float>()[i] = pre.data<float>()[i] = unit(rng);
  last_logits_ = Tensor::Zeros(DType::kF32, {1, model_.config().vocab_size});
  prefix_.assign(prefix.begin(), prefix.end());
  hidden_post_ = std::move(post);
  hidden_pre_ = std::move(pre);
  return absl::OkStatus();
}

absl::StatusOr<TargetStep> PrefixCachedTarget::Run(std::span<const int32_t> tokens, bool all_logits) {
  const bool replay = fresh_ && !prefix_.empty() && std::equal(tokens.begin(), tokens.end(), prefix_.begin(),
                                                               prefix_.end());
  if (replay && !all_logits) {
    RETURN_IF_ERROR(cache_->Truncate(prefix_length()));
    fresh_ = false;
    ++replays_;
    TargetStep step;
    step.logits = last_logits_.Clone();
    step.hidden_postnorm = hidden_post_.Clone();
    step.hidden_prenorm = hidden_pre_.Clone();
    return step;
  }
  BeforeBatchedRun();
  return RunOnCache(model_, *cache_, tokens, attention_, all_logits);
}

absl::StatusOr<TargetStep> PrefixCachedTarget::RunTree(std::span<const int32_t> tokens,
                                                       std::span<const int32_t> parents) {
  BeforeBatchedRun();
  const int64_t n = cache_->length();
  ASSIGN_OR_RETURN(TargetStep step, RunTreeOnCache(model_, *cache_, tokens, parents, attention_));
  tree_first_ = n;
  tree_parents_.assign(parents.begin(), parents.end());
  return step;
}

absl::Status PrefixCachedTarget::KeepTreePath(std::span<const int64_t> path) {
  if (tree_first_ < 0) return absl::FailedPreconditionError("KeepTreePath: no RunTree since the last Run");
  RETURN_IF_ERROR(KeepTreePathOnCache(*cache_, tree_first_, tree_parents_, path));
  tree_first_ = -1;
  return absl::OkStatus();
}

void PrefixCachedTarget::BeforeBatchedRun() {
  tree_first_ = -1;
  if (fresh_) {
    cache_->Clear();
    fresh_ = false;
  }
  if (cache_->length() < prefix_length()) Forget();  // this forward overwrites prefix slots
}

absl::Status PrefixCachedTarget::Truncate(int64_t length) {
  tree_first_ = -1;
  if (fresh_) return length == 0 ? absl::OkStatus() : absl::InvalidArgumentError("Truncate past the length");
  if (length < prefix_length()) Forget();
  return cache_->Truncate(length);
}

void FillPromptRandomly(MtpDrafter& drafter, uint64_t seed) {
  drafter.set_prompt_fill([seed](KvCache& cache, int64_t pairs) { FillCacheRandom(cache, pairs, seed); });
}

}  // namespace mtpspec::bench
