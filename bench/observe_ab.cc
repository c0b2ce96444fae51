// What an attached drafter costs plain decoding. Three configurations decode the same held-out
// window plainly (k = 0), interleaved over repetitions:
//   plain      no drafter;
//   observer   an MtpDrafter that only observes: it extends its cache over the prompt at the
//              prefill, then defers each committed row (as --k auto does while it decodes plainly);
//   deferring  the same drafter told to defer the prompt too (Drafter::DeferPrompt, what a carried
//              adaptive-k controller asks for when it expects plain decoding);
//   auto       the same drafter under --k auto with a fresh controller per request (k_max --k-max):
//              its warm-up, its first probe and the catch-up that probe pays.
// It prints the mean time of each decode cycle by its index and the tokens/s over the cycles after
// the first (the window tradeoff_bench's end-to-end runs time) against plain's. On a CPU with an L3
// smaller than the trunk, the prompt's MTP extend makes the next few target steps slower (the
// trunk's weights leave the L3); the auto column shows what a fresh controller's first probe costs.
//
//   build/release/bench/observe_ab --model models/glm-tiny-mtp --tokens build/heldout/prose.npy --reps 300
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "model/model.h"
#include "spec/generator.h"
#include "spec/mtp_drafter.h"
#include "spec/stats.h"
#include "cli/cli_args.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(observe_ab: plain decoding without a drafter, with an observing MtpDrafter, and with one
that also defers the prompt; per-step times and ratios.
  --model DIR      checkpoint with an MTP layer (default models/glm-tiny-mtp)
  --tokens FILE    held-out ids, .npy (default build/heldout/prose.npy)
  --context N      prompt length (default 8 x index_topk)
  --new-tokens N   decode steps per run (default 128)
  --reps N         timed repetitions of each configuration (default 100)
  --seed S         window choice (default 7)
  --k-max K        the auto configuration's maximum draft length (default 5)
)";

// Forwards to an MtpDrafter and asks it to defer the prompt after every Reset.
class DeferringDrafter : public Drafter {
 public:
  explicit DeferringDrafter(Drafter* inner) : inner_(inner) {}
  std::string name() const override { return "deferring"; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first, int64_t rows,
                       const TargetStep& step) override {
    return inner_->Observe(sequence, first, rows, step);
  }
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& s) override {
    return inner_->Propose(sequence, k, s);
  }
  void Reset() override {
    inner_->Reset();
    inner_->DeferPrompt();
  }

 private:
  Drafter* inner_;
};

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1, {"model", "tokens", "context", "new-tokens", "reps",
                                                                "seed", "k-max"}, {"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto model, Model::Load(args.Get("model", "models/glm-tiny-mtp")));
  ASSIGN_OR_RETURN(TokenCorpus corpus,
                   LoadTokenCorpus(args.Get("tokens", "build/heldout/prose.npy"), model->config().vocab_size));
  ASSIGN_OR_RETURN(int64_t context, args.GetInt("context", 8 * model->config().index_topk));
  ASSIGN_OR_RETURN(int64_t steps, args.GetInt("new-tokens", 128));
  ASSIGN_OR_RETURN(int64_t reps, args.GetInt("reps", 100));
  ASSIGN_OR_RETURN(uint64_t seed, args.GetUint64("seed", 7));
  ASSIGN_OR_RETURN(int64_t k_max, args.GetInt("k-max", 5));
  if (context < 1 || steps < 3 || reps < 1 || k_max < 1 || k_max > 16) {
    return absl::InvalidArgumentError("--context >= 1, --new-tokens >= 3, --reps >= 1 and --k-max in 1..16");
  }
  std::mt19937_64 rng(seed);
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, SampleWindow(corpus, context, rng));  // [context]
  ASSIGN_OR_RETURN(auto target, PrefixCachedTarget::Create(*model, context + steps + 8, LongContextAttention()));
  RETURN_IF_ERROR(target->Fill(prompt, 512));
  MtpOptions mtp_options;
  mtp_options.attention = LongContextAttention();
  ASSIGN_OR_RETURN(auto drafter, MtpDrafter::Create(*model, target->capacity(), mtp_options));
  DeferringDrafter deferring(drafter.get());
  const std::vector<std::pair<std::string, Drafter*>> configs = {
      {"plain", nullptr}, {"observer", drafter.get()}, {"deferring", &deferring}, {"auto", drafter.get()}};
  const size_t C = configs.size();
  const size_t kAuto = C - 1;
  std::vector<std::vector<double>> step_seconds(C, std::vector<double>(steps, 0.0));  // [C][cycles], summed
  std::vector<double> verify_seconds(C, 0.0);                                           // [C], summed
  std::vector<double> steady_seconds(C, 0.0), steady_tokens(C, 0.0);                   // [C] after the first cycle
  SpecStats auto_stats;                                                                 // the auto runs, merged
  for (int64_t rep = 0; rep <= reps; ++rep) {  // rep 0: an untimed warm-up
    for (size_t j = 0; j < C; ++j) {
      const size_t c = (j + static_cast<size_t>(rep)) % C;
      std::vector<double> marks;    // [cycles + 1] time of each commit
      std::vector<int64_t> counts;  // [cycles + 1] tokens of each commit
      GenerateOptions options;
      options.max_new_tokens = steps;
      options.k = c == kAuto ? k_max : 0;
      options.adaptive_k = c == kAuto;
      options.stop_at_eos = false;
      options.accept.sampling.temperature = 0;
      options.on_tokens = [&marks, &counts](std::span<const int32_t> batch) {
        marks.push_back(NowSeconds());
        counts.push_back(static_cast<int64_t>(batch.size()));
        return true;
      };
      ASSIGN_OR_RETURN(GenerateResult result, Generate(*target, configs[c].second, prompt, options));
      if (rep == 0) continue;
      for (size_t i = 1; i < marks.size() && i < static_cast<size_t>(steps); ++i) {
        step_seconds[c][i] += marks[i] - marks[i - 1];
      }
      for (size_t i = 2; i < marks.size(); ++i) steady_tokens[c] += static_cast<double>(counts[i]);
      if (marks.size() >= 3) steady_seconds[c] += marks.back() - marks[1];
      verify_seconds[c] += result.stats.verify_seconds;
      if (c == kAuto) auto_stats.Merge(result.stats);
    }
  }
  const double per_rep = 1e6 / static_cast<double>(reps);
  std::printf("cycle  plain_us  observer_us  deferring_us  auto_us   (cycle 1 includes the prompt's MTP extend)\n");
  std::vector<double> after_first(C, 0.0);  // [C] seconds of steps 2+
  for (int64_t i = 1; i < steps; ++i) {
    for (size_t c = 0; c < C; ++c) after_first[c] += i >= 2 ? step_seconds[c][i] : 0.0;
    if (i <= 12 || i % 16 == 0) {
      std::printf("%5ld  %8.1f  %11.1f  %12.1f  %7.1f\n", static_cast<long>(i), step_seconds[0][i] * per_rep,
                  step_seconds[1][i] * per_rep, step_seconds[2][i] * per_rep, step_seconds[kAuto][i] * per_rep);
    }
  }
  std::printf("steps 2+ over plain: observer %.4f, deferring %.4f; target forward seconds over plain: %.4f, %.4f\n",
              after_first[1] / after_first[0], after_first[2] / after_first[0], verify_seconds[1] / verify_seconds[0],
              verify_seconds[2] / verify_seconds[0]);
  const auto rate = [&](size_t c) { return steady_seconds[c] > 0 ? steady_tokens[c] / steady_seconds[c] : 0.0; };
  std::printf("tokens/s after the first cycle over plain: observer %.4f, deferring %.4f, auto %.4f; auto's cycles by k:",
              rate(1) / rate(0), rate(2) / rate(0), rate(kAuto) / rate(0));
  for (int64_t n : auto_stats.k_decisions) std::printf(" %ld", static_cast<long>(n));
  std::printf("\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) { return mtpspec::bench::ExitCode("observe_ab", mtpspec::bench::Run(argc, argv)); }
