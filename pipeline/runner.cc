#include "pipeline/runner.h"

#include <algorithm>
#include <utility>

namespace mtpspec {

std::function<bool(std::span<const int32_t>)> StoppingCallback(StopStrings* stops,
                                                               std::function<bool(std::span<const int32_t>)> on_tokens) {
  if (stops == nullptr) return on_tokens;
  return [stops, on_tokens = std::move(on_tokens)](std::span<const int32_t> tokens) {
    const int64_t before = stops->fed();
    if (stops->Feed(tokens)) return on_tokens ? on_tokens(tokens) : true;
    // The stop string ends the request: the caller hears the tokens up to the one that completed it.
    const int64_t keep = std::clamp<int64_t>(stops->hit_tokens() - before, 0, static_cast<int64_t>(tokens.size()));
    if (on_tokens && keep > 0) on_tokens(tokens.first(static_cast<size_t>(keep)));
    return false;
  };
}

void ApplyStopStrings(const StopStrings& stops, GenerateResult& result) {
  if (!stops.hit()) return;
  const size_t keep = std::min(result.tokens.size(), static_cast<size_t>(stops.hit_tokens()));
  result.tokens.resize(keep);
  if (result.logprobs.size() > keep) result.logprobs.resize(keep);
  result.stop_reason = "stop_string";
}

absl::StatusOr<std::unique_ptr<RequestRunner>> RequestRunner::Create(const Model& model, const RequestOptions& options,
                                                                     int64_t capacity, Frontend frontend) {
  ASSIGN_OR_RETURN(Pipeline pipeline, BuildPipeline(model, options, capacity, frontend));
  return std::unique_ptr<RequestRunner>(new RequestRunner(std::move(pipeline), ToGenerateOptions(options)));
}

absl::StatusOr<GenerateResult> RequestRunner::Run(std::span<const int32_t> prompt, const RunHooks& hooks) {
  GenerateOptions options = options_;
  if (options.adaptive_k && options.adaptive_controller == nullptr) {
    if (controller_ == nullptr) controller_ = std::make_shared<AdaptiveK>(std::max<int64_t>(options.k, 1));
    options.adaptive_controller = controller_;
  }
  options.on_tokens = StoppingCallback(hooks.stops, hooks.on_tokens);
  ASSIGN_OR_RETURN(GenerateResult result, Generate(*pipeline_.target, pipeline_.drafter.get(), prompt, options));
  if (hooks.stops != nullptr) ApplyStopStrings(*hooks.stops, result);
  return result;
}

absl::StatusOr<BatchResult> RunBatchRequests(const Model& model, const RequestOptions& shared, int64_t capacity,
                                             int64_t batch, std::span<const BatchRequest> requests,
                                             std::vector<BatchKStep> k_schedule, Frontend frontend) {
  ASSIGN_OR_RETURN(BatchPipeline pipeline, BuildBatchPipeline(model, shared, capacity, batch, frontend));
  BatchOptions options;
  options.verifier = pipeline.verifier.get();
  options.drafter = pipeline.drafter.get();
  options.k_schedule = std::move(k_schedule);
  return GenerateBatch(pipeline.slots, requests, options);
}

}  // namespace mtpspec
