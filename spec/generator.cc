#include "spec/generator.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "spec/request.h"

namespace mtpspec {

absl::Status ValidateGenerateOptions(const GenerateOptions& o) {
  if (o.k < 0 || o.k > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("k must be in [0, ", kMaxDraftTokens, "], got ", o.k));
  }
  if (o.max_new_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be >= 0, got ", o.max_new_tokens));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(o.accept.sampling));
  if (o.accept.rule == AcceptRule::kRelaxed && (o.accept.relaxed_top_n < 1 || o.accept.relaxed_delta < 0)) {
    return absl::InvalidArgumentError("relaxed acceptance needs top_n >= 1 and delta >= 0");
  }
  for (double r : o.accept.synthetic_rates) {
    if (!(r >= 0.0 && r <= 1.0)) return absl::InvalidArgumentError("synthetic acceptance rates must be in [0, 1]");
  }
  for (size_t depth = 0; depth < o.accept.synthetic_tree_rates.size(); ++depth) {
    const std::vector<double>& row = o.accept.synthetic_tree_rates[depth];
    if (row.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("synthetic_tree_rates[", depth, "] is empty"));
    }
    for (size_t rank = 0; rank < row.size(); ++rank) {
      if (!(row[rank] >= 0.0 && row[rank] <= 1.0)) {
        return absl::InvalidArgumentError(absl::StrCat("synthetic_tree_rates[", depth, "][", rank, "] = ", row[rank],
                                                       " is outside [0, 1]"));
      }
    }
  }
  if (!o.tree.empty()) {
    RETURN_IF_ERROR(ValidateTreeShape(o.tree, "tree"));
    if (o.custom_accept || !(IsLossless(o.accept.rule) || o.accept.rule == AcceptRule::kSynthetic)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tree drafting verifies with sampler-equality, rejection or (benchmarks) synthetic; accept = ",
          o.custom_accept ? "custom" : AcceptRuleName(o.accept.rule), " does not support trees"));
    }
    if (o.sample_drafts && o.tree.dynamic()) {
      return absl::InvalidArgumentError(
          "a dynamic tree grows by the head's probabilities and takes argmax drafts; sample_drafts needs a static tree");
    }
    if (o.adaptive_k) return absl::InvalidArgumentError("tree drafting has a fixed shape; adaptive k must be off");
  }
  if (o.adaptive_controller && !o.adaptive_k) {
    return absl::InvalidArgumentError("adaptive_controller is set but adaptive_k is false");
  }
  if (o.adaptive_controller && o.adaptive_controller->k_max() != std::max<int64_t>(o.k, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("adaptive_controller was made for k_max = ",
                                                   o.adaptive_controller->k_max(), ", this request has k = ", o.k));
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerateResult> Generate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                        const GenerateOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Request> request, Request::Start(target, drafter, prompt, options));
  while (request->BeginCycle()) {
    if (request->tree()) {
      RETURN_IF_ERROR(request->RunTreeCycle());
      continue;
    }
    RETURN_IF_ERROR(request->Draft(request->DraftLength()).status());
    RETURN_IF_ERROR(request->Verify());
    RETURN_IF_ERROR(request->EndCycle());
  }
  return request->Finish();
}

}  // namespace mtpspec
