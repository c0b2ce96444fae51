// The speculative decoding loop: prefill, then cycles of draft → one verify forward over
// [last token, d1 … dk] → acceptance → commit and rollback, each a step of spec/loop.h. With no
// drafter (or k = 0) it is plain decoding through the same code, which is what the lossless tests
// compare against.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "core/limits.h"
#include "spec/adaptive_k.h"
#include "spec/interfaces.h"
#include "spec/stats.h"
#include "verify/acceptance.h"

namespace mtpspec {

class LoopObserver;

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  int64_t k = 3;               // drafts per cycle, 0 … kMaxDraftTokens (core/limits.h)
  bool adaptive_k = false;     // choose k each cycle (k is then the maximum)
  // With adaptive_k: a controller to carry across requests (its learned costs and acceptance, see
  // spec/adaptive_k.h), made with k_max = max(k, 1) and used by one request at a time. Null: a fresh
  // controller per request.
  std::shared_ptr<AdaptiveK> adaptive_controller;
  AcceptParams accept;         // rule + sampling (temperature, top-k/p, min-p, seed)
  bool sample_drafts = false;  // q-sampled drafts (useful with rejection sampling at T > 0)
  bool stop_at_eos = true;
  // Replaces the target's end-of-sequence ids (config.json's eos_token_id) when set; stopping on
  // them still needs stop_at_eos. Each must be in the vocabulary.
  std::optional<std::vector<int64_t>> eos_token_ids;
  // Further ids that end the request once emitted (stop reason "stop_token"), stop_at_eos or not.
  std::vector<int64_t> stop_token_ids;
  // Also return each emitted token's log-probability under the target's raw distribution
  // (log softmax of its logits at temperature 1, before top-k/p and min-p), whatever the sampling.
  // The logits must then reach the host, so the CUDA target does not sample on the device.
  bool logprobs = false;
  // Called with each batch of committed tokens; returning false stops generation (cancellation).
  std::function<bool(std::span<const int32_t>)> on_tokens;
  // Research hook: when set, replaces `accept.rule` for every verify block that carries drafts
  // (plain steps still use the sampler). It must return 0 <= accepted <= drafts and accepted + 1
  // tokens, the first `accepted` equal to the drafts; an error stops generation with that status.
  // Statistics report the rule as "custom" (and lossy, since nothing is known about it).
  std::function<absl::StatusOr<AcceptResult>(const VerifyBlock&)> custom_accept;
  // Optional: sees every step's record (spec/loop.h), after the statistics and adaptive k. Not owned.
  LoopObserver* observer = nullptr;
  // Tree drafting (core/draft_tree.h, spec/tree_loop.h) instead of a chain of k: a static shape or
  // a node budget. Needs a drafter that can branch (MTP on the host), sampler-equality or rejection,
  // argmax drafts and a fixed shape (no adaptive k); k is then unused.
  TreeShape tree;
  // Where the loop reads the time for its statistics and adaptive k. Not owned; null: SteadyClock().
  const Clock* clock = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens only
  std::vector<float> logprobs;  // [tokens] with GenerateOptions::logprobs, else empty
  SpecStats stats;
  std::string stop_reason;      // "eos", "stop_token", "max_new_tokens", "capacity", "cancelled"
};

absl::Status ValidateGenerateOptions(const GenerateOptions& options);

// Runs one request. `drafter` may be null (plain decoding). The target and drafter are reset first.
absl::StatusOr<GenerateResult> Generate(Target& target, Drafter* drafter, std::span<const int32_t> prompt,
                                        const GenerateOptions& options);

}  // namespace mtpspec
