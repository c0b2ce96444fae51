#include "pipeline/cuda_target.h"

#include "absl/strings/str_cat.h"
#include "verify/sampler_cuda.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<CudaTarget>> CudaTarget::Create(cuda::CudaModel& model, int64_t capacity,
                                                               const CudaTargetOptions& options) {
  ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity, options.storage));
  return std::unique_ptr<CudaTarget>(new CudaTarget(model, std::move(cache), options));
}

absl::StatusOr<TargetStep> CudaTarget::RunDevice(std::span<const int32_t> tokens, bool all_logits,
                                                  bool logits_to_host) {
  std::vector<int64_t> positions;
  for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(cache_->length() + static_cast<int64_t>(i));
  ForwardOptions options;
  options.attention = options_.attention;
  if (!all_logits && !tokens.empty()) options.logit_rows = {static_cast<int64_t>(tokens.size()) - 1};
  const int64_t first = cache_->length();
  ASSIGN_OR_RETURN(last_, model_.ForwardDevice(*cache_, tokens, positions, options));
  last_first_position_ = first;
  TargetStep step;
  cuda::Context& ctx = model_.ctx();
  if (logits_to_host) {
    ASSIGN_OR_RETURN(step.logits, cuda::CopyToHostTensor(ctx, last_.logits, last_.logit_rows,
                                                         model_.config().vocab_size, "target logits"));
  }
  if (options_.hidden_to_host) {
    const int64_t H = model_.config().hidden_size;
    ASSIGN_OR_RETURN(step.hidden_postnorm,
                     cuda::CopyToHostTensor(ctx, last_.hidden_postnorm, last_.rows, H, "target post-norm hidden"));
    ASSIGN_OR_RETURN(step.hidden_prenorm,
                     cuda::CopyToHostTensor(ctx, last_.hidden_prenorm, last_.rows, H, "target pre-norm hidden"));
  }
  return step;
}

absl::StatusOr<std::vector<int32_t>> CudaTarget::SampleLastRun(const SamplingParams& params, int64_t first_position) {
  if (last_.logits == nullptr || last_.logit_rows <= 0) {
    return absl::FailedPreconditionError("CudaTarget::SampleLastRun: no forward has run yet");
  }
  if (first_position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaTarget::SampleLastRun: first_position ", first_position,
                                                   " is negative"));
  }
  std::vector<int64_t> positions;  // [R] absolute position of each row's draw
  for (int64_t r = 0; r < last_.logit_rows; ++r) positions.push_back(first_position + r);
  return cuda::SampleTokensCuda(model_.ctx(), last_.logits, last_.logit_rows, model_.config().vocab_size, params,
                                positions.data());
}

}  // namespace mtpspec
