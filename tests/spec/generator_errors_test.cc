// Bad requests to Generate: each returns InvalidArgument naming the culprit, touches neither the
// target nor the drafter, and a normal request on the same objects works right afterwards.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/generator.h"
#include "tests/spec/fake_models.h"

namespace mtpspec {
namespace {

using spec_testing::FakeTarget;
using spec_testing::OracleLogits;
using spec_testing::OracleRange;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 16;
constexpr int64_t kCapacity = 32;

struct BadRequest {
  std::string label;
  std::function<void(GenerateOptions&)> options;  // mutates valid options
  std::vector<int32_t> prompt;                    // empty optional = the default prompt
  bool use_prompt = false;
  std::string expected;                           // must appear in the message
};

std::vector<BadRequest> BadRequests() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto opt = [](std::string label, std::function<void(GenerateOptions&)> f, std::string expected) {
    return BadRequest{std::move(label), std::move(f), {}, false, std::move(expected)};
  };
  auto prompt = [](std::string label, std::vector<int32_t> p, std::string expected) {
    return BadRequest{std::move(label), [](GenerateOptions&) {}, std::move(p), true, std::move(expected)};
  };
  return {
      opt("k < 0", [](GenerateOptions& o) { o.k = -1; }, "k must be in [0, 15]"),
      opt("k > 15", [](GenerateOptions& o) { o.k = kMaxDraftTokens + 1; }, "k must be in [0, 15]"),
      opt("max_new_tokens < 0", [](GenerateOptions& o) { o.max_new_tokens = -5; }, "max_new_tokens"),
      opt("temperature < 0", [](GenerateOptions& o) { o.accept.sampling.temperature = -0.5; }, "temperature"),
      opt("temperature NaN", [nan](GenerateOptions& o) { o.accept.sampling.temperature = nan; }, "temperature"),
      opt("top_k < 0", [](GenerateOptions& o) { o.accept.sampling.top_k = -2; }, "top_k"),
      opt("top_p = 0", [](GenerateOptions& o) { o.accept.sampling.top_p = 0.0; }, "top_p"),
      opt("top_p > 1", [](GenerateOptions& o) { o.accept.sampling.top_p = 1.5; }, "top_p"),
      opt("min_p < 0", [](GenerateOptions& o) { o.accept.sampling.min_p = -0.1; }, "min_p"),
      opt("min_p > 1", [](GenerateOptions& o) { o.accept.sampling.min_p = 1.1; }, "min_p"),
      opt("relaxed top_n < 1",
          [](GenerateOptions& o) {
            o.accept.rule = AcceptRule::kRelaxed;
            o.accept.relaxed_top_n = 0;
          },
          "top_n"),
      opt("relaxed delta < 0",
          [](GenerateOptions& o) {
            o.accept.rule = AcceptRule::kRelaxed;
            o.accept.relaxed_delta = -0.1;
          },
          "delta"),
      opt("synthetic rate > 1",
          [](GenerateOptions& o) {
            o.accept.rule = AcceptRule::kSynthetic;
            o.accept.synthetic_rates = {0.5, 1.2};
          },
          "synthetic acceptance rates"),
      prompt("empty prompt", {}, "prompt is empty"),
      prompt("token = vocab", {1, 2, 16}, "prompt token [2] = 16 is outside the vocabulary [0, 16)"),
      prompt("negative token", {-1, 2}, "prompt token [0] = -1"),
      prompt("prompt = capacity", OracleRange(0, kCapacity), "does not fit the cache"),
      prompt("prompt > capacity", OracleRange(0, kCapacity + 7), "does not fit the cache"),
  };
}

TEST(GeneratorErrorsTest, BadRequestsFailCleanlyAndLeaveTheObjectsUsable) {
  FakeTarget target(kVocab, kCapacity, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({6}));
  GenerateOptions good;
  good.k = 3;
  good.max_new_tokens = 8;
  const std::vector<int32_t> good_prompt = OracleRange(0, 4);

  for (const BadRequest& bad : BadRequests()) {
    for (Drafter* d : {static_cast<Drafter*>(&drafter), static_cast<Drafter*>(nullptr)}) {
      GenerateOptions options = good;
      bad.options(options);
      const std::vector<int32_t>& prompt = bad.use_prompt ? bad.prompt : good_prompt;
      const int64_t resets_before = target.reset_count();
      auto result = Generate(target, d, prompt, options);
      ASSERT_FALSE(result.ok()) << bad.label;
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << bad.label;
      EXPECT_THAT(std::string(result.status().message()), HasSubstr(bad.expected)) << bad.label;
      // Rejected before touching anything.
      EXPECT_EQ(target.reset_count(), resets_before) << bad.label;
      EXPECT_TRUE(target.violations().empty()) << bad.label;

      auto ok = Generate(target, d, good_prompt, good);
      ASSERT_TRUE(ok.ok()) << bad.label << ": " << ok.status();
      EXPECT_EQ(ok->tokens, OracleRange(4, 12)) << bad.label;
      EXPECT_EQ(target.cache(), OracleRange(0, 11)) << bad.label;
    }
  }
}

TEST(GeneratorErrorsTest, BoundaryValuesAreAccepted) {
  FakeTarget target(kVocab, kCapacity, OracleLogits());
  ScriptedDrafter drafter(OracleWithMistakes({}));
  for (int64_t k : {int64_t{0}, kMaxDraftTokens}) {
    GenerateOptions o;
    o.k = k;
    o.max_new_tokens = 20;
    auto r = Generate(target, &drafter, OracleRange(0, 4), o);
    ASSERT_TRUE(r.ok()) << "k " << k << ": " << r.status();
    EXPECT_EQ(r->tokens, OracleRange(4, 24));
  }
  GenerateOptions o;
  o.accept.sampling.top_p = 1.0;
  o.accept.sampling.min_p = 1.0;
  o.accept.sampling.temperature = 0.0;
  auto r = Generate(target, &drafter, OracleRange(0, kCapacity - 1), o);  // the longest prompt that fits
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop_reason, "capacity");
  EXPECT_EQ(r->tokens, OracleRange(kCapacity - 1, kCapacity + 1));
  // Every in-vocabulary token id is a valid prompt token.
  std::vector<int32_t> all_ids;
  for (int32_t t = 0; t < kVocab; ++t) all_ids.push_back(t);
  EXPECT_TRUE(Generate(target, &drafter, all_ids, o).ok());
}

TEST(GeneratorErrorsTest, ValidateGenerateOptionsAgreesWithGenerate) {
  for (const BadRequest& bad : BadRequests()) {
    if (bad.use_prompt) continue;  // prompt checks need the target
    GenerateOptions options;
    bad.options(options);
    const absl::Status status = ValidateGenerateOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.label;
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.expected)) << bad.label;
  }
  EXPECT_TRUE(ValidateGenerateOptions(GenerateOptions{}).ok());
}

// Non-finite target logits (a checkpoint with NaN weights, say) stop the request with DataLoss
// naming the input position, rather than being sampled as if they were numbers.
TEST(GeneratorErrorsTest, NonFiniteLogitsStopWithThePosition) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    // The logits that predict position 9 come from the row of input position 8.
    auto logits = [bad](int64_t position) {
      std::vector<float> row = OracleLogits()(position);
      if (position == 9) row[5] = bad;
      return row;
    };
    for (const int64_t k : {int64_t{0}, int64_t{3}}) {
      FakeTarget target(kVocab, kCapacity, logits);
      ScriptedDrafter drafter(OracleWithMistakes({}));
      GenerateOptions o;
      o.k = k;
      o.max_new_tokens = 20;
      auto r = Generate(target, k > 0 ? &drafter : nullptr, OracleRange(0, 4), o);
      ASSERT_FALSE(r.ok()) << "k " << k;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
      EXPECT_THAT(std::string(r.status().message()), HasSubstr("not finite at position 8 (vocabulary id 5"))
          << r.status();
    }
    // In the prompt's last row, the position is the prompt's last.
    FakeTarget target(kVocab, kCapacity, logits);
    auto r = Generate(target, nullptr, OracleRange(0, 9), GenerateOptions{});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("position 8")) << r.status();
  }
}

}  // namespace
}  // namespace mtpspec
