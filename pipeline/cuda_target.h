// Target adapter for the GPU: a CudaModel plus its DeviceKvCache behind the spec::Target interface.
//
// Weights, the cache and activations stay on the device. Per Run, what crosses to the host is the
// logits of the requested rows ([R, V]; the loop's acceptance rules and sampler read them there),
// and the hidden states only when CudaTargetOptions::hidden_to_host asks for them (host drafters).
// With sampler-equality and argmax drafts the loop calls RunKeepingLogits instead and draws the
// tokens with the device sampler (SampleLastRun): then only token ids cross.
// The GPU MTP drafter (pipeline/cuda_mtp_drafter.h) reads the hidden states on the device instead,
// through last_forward().
//
// Bit-identity: a verify block of L = k + 1 ≤ 16 rows computes every row exactly as a one-row
// decode step does, so with the same sampler speculative output equals plain output; above 16
// rows (k ≥ 16) the head and projections go through cuBLAS and that guarantee is lost (the CLI
// rejects k > 15 on the GPU).
#pragma once

#include <memory>
#include <vector>

#include "model/model_cuda.h"
#include "spec/interfaces.h"

namespace mtpspec {

struct CudaTargetOptions {
  AttentionOptions attention;
  LatentStorage storage = LatentStorage::kF32;
  bool hidden_to_host = false;  // also copy both hidden states into TargetStep (host drafters)
};

class CudaTarget : public Target {
 public:
  // `model` must outlive the target.
  static absl::StatusOr<std::unique_ptr<CudaTarget>> Create(cuda::CudaModel& model, int64_t capacity,
                                                            const CudaTargetOptions& options = {});
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int64_t capacity() const override { return cache_->capacity(); }
  int64_t length() const override { return cache_->length(); }
  std::vector<int64_t> eos_tokens() const override { return model_.config().eos_token_ids; }
  absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) override {
    return RunDevice(tokens, all_logits, /*logits_to_host=*/true);
  }
  bool samples_on_device() const override { return true; }
  absl::StatusOr<TargetStep> RunKeepingLogits(std::span<const int32_t> tokens, bool all_logits) override {
    return RunDevice(tokens, all_logits, /*logits_to_host=*/false);
  }
  absl::Status Truncate(int64_t length) override { return cache_->Truncate(length); }
  void Reset() override { cache_->Clear(); }
  // The device sampler (verify/sampler_cuda.h) over the last Run's logits, still on the GPU.
  absl::StatusOr<std::vector<int32_t>> SampleLastRun(const SamplingParams& params, int64_t first_position) override;

  cuda::CudaModel& model() const { return model_; }
  cuda::DeviceKvCache& cache() const { return *cache_; }
  // The device results of the last Run (valid until the next forward on the model) and the
  // position of its first row.
  const cuda::DeviceForward& last_forward() const { return last_; }
  int64_t last_first_position() const { return last_first_position_; }

 private:
  absl::StatusOr<TargetStep> RunDevice(std::span<const int32_t> tokens, bool all_logits, bool logits_to_host);
  CudaTarget(cuda::CudaModel& model, std::unique_ptr<cuda::DeviceKvCache> cache, const CudaTargetOptions& options)
      : model_(model), cache_(std::move(cache)), options_(options) {}
  cuda::CudaModel& model_;
  std::unique_ptr<cuda::DeviceKvCache> cache_;
  CudaTargetOptions options_;
  cuda::DeviceForward last_;
  int64_t last_first_position_ = -1;
};

}  // namespace mtpspec
