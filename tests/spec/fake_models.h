// Weight-free stand-ins for the two seams of the speculative loop (spec/interfaces.h).
//
// FakeTarget: logits are a function of the absolute position alone, so the "right" output of any
// request is known in advance. Every Run / Truncate / Reset is recorded, and misuse (running past
// the capacity, truncating beyond the length, out-of-vocabulary tokens) is recorded as a violation
// and refused, so tests can assert on the exact rollback positions the loop chose.
//
// ScriptedDrafter: proposes, for each absolute position, whatever a script says (the oracle with
// deliberate mistakes, the target's own sampler draws, ...). DistributionDrafter: proposes from a
// fixed per-position draft distribution q, either its argmax or a counter-based draw from q.
// Both record every Observe and Propose call.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "spec/interfaces.h"
#include "verify/sampler.h"

namespace mtpspec::spec_testing {

// The target's logits for the token at absolute position `position` ([V] values).
using LogitsFn = std::function<std::vector<float>(int64_t position)>;

// The oracle string: the token at absolute position p. With vocab 16 every token recurs exactly
// every 16 positions (7 is invertible mod 16), so the first position of any token is known.
inline int32_t OracleToken(int64_t p, int64_t vocab = 16) { return static_cast<int32_t>((7 * p + 3) % vocab); }

inline std::vector<int32_t> OracleRange(int64_t begin, int64_t end, int64_t vocab = 16) {
  std::vector<int32_t> out;
  for (int64_t p = begin; p < end; ++p) out.push_back(OracleToken(p, vocab));
  return out;
}

// Logits peaked at the oracle token: `peak` there, 0 elsewhere. Greedy decoding reproduces the
// oracle string; at T = 1 the oracle token has probability e^peak / (e^peak + V − 1).
inline LogitsFn OracleLogits(int64_t vocab = 16, float peak = 4.0f) {
  return [vocab, peak](int64_t position) {
    std::vector<float> logits(vocab, 0.0f);
    logits[OracleToken(position, vocab)] = peak;
    return logits;
  };
}

// A clock that moves only when told: the fake models advance it by the costs they stand for.
class FakeClock final : public Clock {
 public:
  double Seconds() const override { return now_; }
  void Advance(double seconds) { now_ += seconds; }

 private:
  double now_ = 0;
};

struct RunCall {
  int64_t start = 0;              // length() before the call = position of tokens[0]
  std::vector<int32_t> tokens;
  bool all_logits = false;
};

class FakeTarget : public Target {
 public:
  FakeTarget(int64_t vocab, int64_t capacity, LogitsFn logits)
      : vocab_(vocab), capacity_(capacity), logits_(std::move(logits)) {}

  int64_t vocab_size() const override { return vocab_; }
  int64_t capacity() const override { return capacity_; }
  int64_t length() const override { return static_cast<int64_t>(cache_.size()); }
  std::vector<int64_t> eos_tokens() const override { return eos_; }

  absl::StatusOr<TargetStep> Run(std::span<const int32_t> tokens, bool all_logits) override {
    ++run_count_;
    if (fail_at_run_ == run_count_) return absl::InternalError("injected target failure");
    runs_.push_back({length(), std::vector<int32_t>(tokens.begin(), tokens.end()), all_logits});
    if (tokens.empty()) return Violation("Run with no tokens");
    if (length() + static_cast<int64_t>(tokens.size()) > capacity_) {
      return Violation(absl::StrCat("Run of ", tokens.size(), " tokens at length ", length(), " overflows capacity ",
                                    capacity_));
    }
    for (int32_t t : tokens) {
      if (t < 0 || t >= vocab_) return Violation(absl::StrCat("Run with out-of-vocabulary token ", t));
    }
    const int64_t start = length();
    if (seconds_per_row_ > 0 || seconds_per_run_ > 0) {
      const double seconds = seconds_per_run_ + seconds_per_row_ * static_cast<double>(tokens.size());
      if (clock_ != nullptr) {
        clock_->Advance(seconds);
      } else {
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    }
    cache_.insert(cache_.end(), tokens.begin(), tokens.end());
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t rows = all_logits ? n : 1;
    TargetStep step;
    step.logits = Tensor::Empty(DType::kF32, {rows, vocab_});
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t input_position = start + (all_logits ? r : n - 1);
      const std::vector<float> row = logits_(input_position + 1);
      std::copy(row.begin(), row.end(), step.logits.data<float>() + r * vocab_);
    }
    return step;
  }

  absl::Status Truncate(int64_t new_length) override {
    truncations_.push_back(new_length);
    if (new_length < 0 || new_length > length()) {
      return Violation(absl::StrCat("Truncate(", new_length, ") at length ", length()));
    }
    cache_.resize(new_length);
    return absl::OkStatus();
  }

  void Reset() override {
    ++reset_count_;
    cache_.clear();
    runs_.clear();
    truncations_.clear();
    run_count_ = 0;
  }

  void set_eos(std::vector<int64_t> eos) { eos_ = std::move(eos); }
  // Each Run takes this long per row, so that timing-driven code (adaptive k) sees verify costs that
  // grow with the rows: on `clock` when one is set (the loop then sees exactly these costs), else
  // busy-waiting, well above the microseconds of scheduling noise.
  void set_seconds_per_row(double seconds) { seconds_per_row_ = seconds; }
  // … plus this long per Run whatever its rows (a memory-bound step: extra verify rows come cheap).
  void set_seconds_per_run(double seconds) { seconds_per_run_ = seconds; }
  // Runs advance this clock by their cost instead of waiting (give the loop the same clock through
  // GenerateOptions::clock). Not owned.
  void set_clock(FakeClock* clock) { clock_ = clock; }
  // The n-th Run after the next Reset (1-based) fails with an Internal error; 0 = never.
  void FailAtRun(int64_t n) { fail_at_run_ = n; }

  const std::vector<int32_t>& cache() const { return cache_; }
  const std::vector<RunCall>& runs() const { return runs_; }
  const std::vector<int64_t>& truncations() const { return truncations_; }
  const std::vector<std::string>& violations() const { return violations_; }
  int64_t reset_count() const { return reset_count_; }

 private:
  absl::Status Violation(std::string what) {
    violations_.push_back(what);
    return absl::FailedPreconditionError(what);
  }

  int64_t vocab_, capacity_;
  LogitsFn logits_;
  std::vector<int64_t> eos_;
  std::vector<int32_t> cache_;
  std::vector<RunCall> runs_;
  std::vector<int64_t> truncations_;
  std::vector<std::string> violations_;  // never cleared: survives Reset
  int64_t reset_count_ = 0, run_count_ = 0, fail_at_run_ = 0;
  double seconds_per_row_ = 0, seconds_per_run_ = 0;
  FakeClock* clock_ = nullptr;
};

struct ObserveCall {
  int64_t first_position = 0;
  int64_t rows = 0;
  int64_t sequence_size = 0;
  int32_t last_token = -1;  // sequence.back(): the newest (not yet run) token
};

struct ProposeCall {
  int64_t sequence_size = 0;  // = the absolute position of the first draft
  int64_t k = 0;
  std::vector<int32_t> proposed;
};

// Records Observe / Propose; subclasses decide the tokens.
class RecordingDrafter : public Drafter {
 public:
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                       const TargetStep&) override {
    observes_.push_back({first_position, rows, static_cast<int64_t>(sequence.size()),
                         sequence.empty() ? -1 : sequence.back()});
    return absl::OkStatus();
  }
  void Reset() override {
    ++reset_count_;
    observes_.clear();
    proposes_.clear();
  }
  void DeferPrompt() override { ++defer_prompt_count_; }
  const std::vector<ObserveCall>& observes() const { return observes_; }
  int64_t defer_prompt_count() const { return defer_prompt_count_; }
  const std::vector<ProposeCall>& proposes() const { return proposes_; }
  int64_t reset_count() const { return reset_count_; }

 protected:
  std::vector<ObserveCall> observes_;
  std::vector<ProposeCall> proposes_;
  int64_t reset_count_ = 0;
  int64_t defer_prompt_count_ = 0;
};

// The token the drafter proposes for absolute position p (the script may look at the request's
// sampling parameters, e.g. to reproduce the target sampler's own draws).
using ScriptFn = std::function<int32_t(int64_t position, const DraftSampling& sampling)>;

class ScriptedDrafter : public RecordingDrafter {
 public:
  explicit ScriptedDrafter(ScriptFn script) : script_(std::move(script)) {}
  std::string name() const override { return "scripted"; }

  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override {
    if (fail_next_propose_) {
      fail_next_propose_ = false;
      return absl::UnavailableError("injected drafter failure");
    }
    Draft draft;
    const int64_t first = static_cast<int64_t>(sequence.size());
    for (int64_t j = 0; j < std::min(k, max_tokens_); ++j) draft.tokens.push_back(script_(first + j, sampling));
    proposes_.push_back({first, k, draft.tokens});
    return draft;
  }

  // Propose at most n tokens whatever k is (a drafter that runs out of ideas).
  void set_max_tokens(int64_t n) { max_tokens_ = n; }
  void FailNextPropose() { fail_next_propose_ = true; }

 private:
  ScriptFn script_;
  int64_t max_tokens_ = 1 << 30;
  bool fail_next_propose_ = false;
};

// The oracle string with a wrong token (oracle + 1 mod V) at every position in `mistakes`.
inline ScriptFn OracleWithMistakes(std::vector<int64_t> mistakes, int64_t vocab = 16) {
  return [mistakes = std::move(mistakes), vocab](int64_t position, const DraftSampling&) {
    const int32_t right = OracleToken(position, vocab);
    const bool wrong = std::find(mistakes.begin(), mistakes.end(), position) != mistakes.end();
    return wrong ? static_cast<int32_t>((right + 1) % vocab) : right;
  };
}

// The draft distribution q for absolute position p ([V], sums to 1).
using DraftDistFn = std::function<std::vector<double>(int64_t position)>;

// Drafts from q: with DraftSampling::sample, token ~ q drawn with the Philox uniform keyed by
// (request seed, position, kDraft) and q returned alongside; otherwise argmax q (lowest index).
class DistributionDrafter : public RecordingDrafter {
 public:
  explicit DistributionDrafter(DraftDistFn q) : q_(std::move(q)) {}
  std::string name() const override { return "distribution"; }

  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override {
    Draft draft;
    const int64_t first = static_cast<int64_t>(sequence.size());
    for (int64_t j = 0; j < k; ++j) {
      const std::vector<double> q = q_(first + j);
      int32_t token = 0;
      if (sampling.sample) {
        token = DrawFrom(q, UniformAt(sampling.sampling.seed, static_cast<uint64_t>(first + j),
                                      static_cast<uint32_t>(RngStream::kDraft)));
        draft.probs.push_back(q);
      } else {
        token = static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
      }
      draft.tokens.push_back(token);
    }
    proposes_.push_back({first, k, draft.tokens});
    return draft;
  }

 private:
  DraftDistFn q_;
};

// softmax(logits / temperature) in float64, computed independently of verify/sampler.cc.
inline std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - max_logit) / temperature);
  for (double& x : p) x /= total;
  return p;
}

}  // namespace mtpspec::spec_testing
