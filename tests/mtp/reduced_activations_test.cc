// The trained model with its matrices in FP8 and their input rows in bf16 or fp8, or in bf16 with bf16
// rows (LoadOptions::activations): how far the next-token distributions move from those with f32 rows, on
// a sequence the model itself writes, and MTP speculative output equal to plain output with them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "spec/generator.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"

namespace mtpspec {
namespace {

using testing_util::LoadMtpTestModel;
using testing_util::Range;
using testing_util::TestTokens;

std::vector<int32_t> Greedy(const Model& model, Drafter* drafter, const std::vector<int32_t>& prompt, int64_t k,
                            int64_t new_tokens) {
  auto target = ModelTarget::Create(model, 256);
  EXPECT_TRUE(target.ok()) << target.status();
  GenerateOptions options;
  options.max_new_tokens = new_tokens;
  options.k = k;
  options.stop_at_eos = false;
  auto result = Generate(**target, drafter, prompt, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result->tokens;
}

struct Agreement {
  double mean_kl = 0;      // nats, KL(f32 rows ‖ reduced rows), mean over positions
  double argmax_same = 0;  // fraction of positions with the same most likely token
};

Agreement Compare(const Model& reference, const Model& reduced, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), vocab = reference.config().vocab_size;
  auto a_cache = *reference.NewCache(T);
  auto b_cache = *reduced.NewCache(T);
  auto a = reference.Forward(*a_cache, tokens, Range(0, T));
  auto b = reduced.Forward(*b_cache, tokens, Range(0, T));
  EXPECT_TRUE(a.ok() && b.ok());
  Agreement agreement;
  for (int64_t t = 0; t < T; ++t) {
    const float* p = a->logits.data<float>() + t * vocab;
    const float* q = b->logits.data<float>() + t * vocab;
    const double p_max = *std::max_element(p, p + vocab), q_max = *std::max_element(q, q + vocab);
    double p_sum = 0, q_sum = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      p_sum += std::exp(p[v] - p_max);
      q_sum += std::exp(q[v] - q_max);
    }
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double log_p = p[v] - p_max - std::log(p_sum), log_q = q[v] - q_max - std::log(q_sum);
      kl += std::exp(log_p) * (log_p - log_q);
    }
    agreement.mean_kl += kl / T;
    agreement.argmax_same += (std::max_element(p, p + vocab) - p == std::max_element(q, q + vocab) - q) ? 1.0 / T : 0.0;
  }
  return agreement;
}

// Against the same weights with f32 rows: FP8 matrices with bf16 rows move the distributions by a
// mean KL of about 6e-6 nats, with fp8 rows by about 1.2e-3, and bf16 matrices with bf16 rows by about
// 4.5e-5 (the bounds below leave a factor of about 5-8); the most likely token stays the same at nearly
// every position (all 128 with bf16 rows, 125 with fp8).
TEST(ReducedActivationsTest, TrainedModelDistributionsStayClose) {
  for (const auto& [base, name, max_kl, min_same] :
       {std::tuple{"trained+fp8-weights", "trained+fp8-weights+bf16-act", 5e-5, 0.99},
        std::tuple{"trained+fp8-weights", "trained+fp8-weights+fp8-act", 6e-3, 0.93},
        std::tuple{"trained+bf16-weights", "trained+bf16-weights+bf16-act", 3e-4, 0.99}}) {
    const Model& f32_rows = LoadMtpTestModel(base);
    const std::vector<int32_t> prompt = TestTokens(8, f32_rows.config().vocab_size, 5);
    const std::vector<int32_t> written = Greedy(f32_rows, nullptr, prompt, 0, 120);
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), written.begin(), written.end());
    const Agreement a = Compare(f32_rows, LoadMtpTestModel(name), tokens);
    std::printf("%s: mean KL %.3g nats, argmax agreement %.4f over %zu positions\n", name, a.mean_kl, a.argmax_same,
                tokens.size());
    EXPECT_GT(a.mean_kl, 0.0) << name;
    EXPECT_LT(a.mean_kl, max_kl) << name;
    EXPECT_GE(a.argmax_same, min_same) << name;
  }
}

// With reduced rows the verify still gives each row the decode's bits: MTP output equals plain output.
TEST(ReducedActivationsTest, TrainedModelMtpEqualsPlain) {
  for (const char* name :
       {"trained+fp8-weights+bf16-act", "trained+fp8-weights+fp8-act", "trained+bf16-weights+bf16-act"}) {
    const Model& model = LoadMtpTestModel(name);
    const std::vector<int32_t> prompt = TestTokens(10, model.config().vocab_size, 7);
    const std::vector<int32_t> plain = Greedy(model, nullptr, prompt, 0, 48);
    auto drafter = MtpDrafter::Create(model, 256, MtpOptions{});
    ASSERT_TRUE(drafter.ok()) << drafter.status();
    EXPECT_EQ(Greedy(model, drafter->get(), prompt, 3, 48), plain) << name;
  }
}

}  // namespace
}  // namespace mtpspec
