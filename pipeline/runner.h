// Running requests as every front end runs them: one request, or a series on one loaded model whose
// k = auto requests carry one adaptive-k controller from request to request; each streams its
// committed tokens to a callback and may end at stop strings. The CLI's generate and Python's
// Model.generate run single requests and series through RequestRunner, batches through
// RunBatchRequests, and the server through the live engine (spec/batch_engine.h) with the same
// StopStrings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/batch.h"
#include "pipeline/request.h"
#include "pipeline/stop_strings.h"

namespace mtpspec {

struct RunHooks {
  // Each step's committed tokens; returning false cancels the request (stop reason "cancelled").
  std::function<bool(std::span<const int32_t>)> on_tokens;
  // Ends the request at the first of these in its text (null: none): its tokens and logprobs are
  // cut after the token that completed it, its stop reason is "stop_string".
  StopStrings* stops = nullptr;
};

// The callback that feeds `stops` (if any) and then the caller's `on_tokens` with the tokens the
// request keeps, as RequestRunner and the batch front ends install it.
std::function<bool(std::span<const int32_t>)> StoppingCallback(StopStrings* stops,
                                                               std::function<bool(std::span<const int32_t>)> on_tokens);
// A result whose stop strings hit: its tokens and logprobs cut to the hit, stop reason "stop_string".
void ApplyStopStrings(const StopStrings& stops, GenerateResult& result);

class RequestRunner {
 public:
  // The pipeline (target and drafter) for `options` on `model`, with caches of `capacity` positions,
  // kept for every Run. The options are validated here.
  static absl::StatusOr<std::unique_ptr<RequestRunner>> Create(const Model& model, const RequestOptions& options,
                                                               int64_t capacity, Frontend frontend);
  // Replaces the controller a k = auto request starts from (e.g. a Python AdaptiveController's);
  // by default the runner makes one with its first k = auto request and carries it across Runs.
  void set_adaptive_controller(std::shared_ptr<AdaptiveK> controller) { controller_ = std::move(controller); }
  // Extends the loop's options (a caller's acceptance hook or observer) for every Run.
  GenerateOptions& generate_options() { return options_; }

  // One request on the runner's pipeline.
  absl::StatusOr<GenerateResult> Run(std::span<const int32_t> prompt, const RunHooks& hooks = {});

 private:
  RequestRunner(Pipeline pipeline, GenerateOptions options)
      : pipeline_(std::move(pipeline)), options_(std::move(options)) {}
  Pipeline pipeline_;
  GenerateOptions options_;
  std::shared_ptr<AdaptiveK> controller_;
};

// Requests B at a time through GenerateBatch on a batch pipeline for `shared` (what the slots
// share: the drafter, its settings, the cache), with caches of `capacity` positions.
absl::StatusOr<BatchResult> RunBatchRequests(const Model& model, const RequestOptions& shared, int64_t capacity,
                                             int64_t batch, std::span<const BatchRequest> requests,
                                             std::vector<BatchKStep> k_schedule, Frontend frontend);

}  // namespace mtpspec
