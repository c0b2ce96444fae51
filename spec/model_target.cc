#include "spec/model_target.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<ModelTarget>> ModelTarget::Create(const Model& model, int64_t capacity,
                                                                 AttentionOptions attention, LatentStorage storage) {
  ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity, storage));
  return std::unique_ptr<ModelTarget>(new ModelTarget(model, std::move(cache), attention));
}

absl::StatusOr<TargetStep> RunOnCache(const Model& model, KvCache& cache, std::span<const int32_t> tokens,
                                      const AttentionOptions& attention, bool all_logits) {
  std::vector<int64_t> positions;
  for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(cache.length() + static_cast<int64_t>(i));
  ForwardOptions options;
  options.attention = attention;
  if (!all_logits) options.logit_rows = {static_cast<int64_t>(tokens.size()) - 1};
  ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(cache, tokens, positions, options));
  TargetStep step;
  step.logits = std::move(out.logits);
  step.hidden_postnorm = std::move(out.hidden_postnorm);
  step.hidden_prenorm = std::move(out.hidden_prenorm);
  return step;
}

absl::StatusOr<TargetStep> ModelTarget::Run(std::span<const int32_t> tokens, bool all_logits) {
  kept_logits_ = Tensor();
  return RunOnCache(model_, *cache_, tokens, attention_, all_logits);
}

absl::StatusOr<TargetStep> ModelTarget::RunKeepingLogits(std::span<const int32_t> tokens, bool all_logits) {
  ASSIGN_OR_RETURN(TargetStep step, RunOnCache(model_, *cache_, tokens, attention_, all_logits));
  kept_logits_ = std::move(step.logits);
  step.logits = Tensor();  // none cross to the caller
  return step;
}

absl::StatusOr<std::vector<int32_t>> ModelTarget::SampleLastRun(const SamplingParams& params, int64_t first_position) {
  if (!samples_in_target_) return Target::SampleLastRun(params, first_position);
  if (kept_logits_.empty()) {
    return absl::FailedPreconditionError("ModelTarget::SampleLastRun: no RunKeepingLogits has run since the last Run");
  }
  RETURN_IF_ERROR(ValidateSamplingParams(params));
  const int64_t rows = kept_logits_.dim(0), vocab = kept_logits_.dim(1);
  std::vector<int32_t> draws;  // [R]
  for (int64_t r = 0; r < rows; ++r) {
    draws.push_back(SampleToken(kept_logits_.data<float>() + r * vocab, vocab, params, first_position + r));
  }
  return draws;
}

}  // namespace mtpspec
