// Stop ids, the end-of-sequence override and per-token log-probabilities (spec/generator.h), on the
// fake target whose logits are known in closed form: every answer is checked against the oracle
// string and against log softmax written out here, and speculative runs must equal plain ones.
#include <cmath>
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
using spec_testing::OracleToken;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 16;

GenerateResult MustGenerate(Target& target, Drafter* drafter, const std::vector<int32_t>& prompt,
                            const GenerateOptions& options) {
  absl::StatusOr<GenerateResult> r = Generate(target, drafter, prompt, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : GenerateResult{};
}

GenerateOptions Options(int64_t k, int64_t max_new_tokens) {
  GenerateOptions o;
  o.k = k;
  o.max_new_tokens = max_new_tokens;
  return o;
}

// Plain decoding and speculative decoding with draft mistakes at `mistakes`.
struct Variant {
  int64_t k;
  std::vector<int64_t> mistakes;
};
const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {{0, {}}, {3, {}}, {4, {6}}, {2, {5, 9, 10}}};
  return v;
}

TEST(StopTokensTest, AStopIdEndsTheRequestWhereverItIsEmitted) {
  // o10 = 9 first occurs at position 10 (the oracle string repeats every 16 positions).
  const int32_t stop = OracleToken(10);
  for (const Variant& v : Variants()) {
    FakeTarget target(kVocab, 64, OracleLogits());
    ScriptedDrafter drafter(OracleWithMistakes(v.mistakes));
    GenerateOptions o = Options(v.k, 30);
    o.stop_token_ids = {stop};
    const GenerateResult r = MustGenerate(target, v.k > 0 ? &drafter : nullptr, OracleRange(0, 4), o);
    EXPECT_EQ(r.tokens, OracleRange(4, 11)) << "k " << v.k;
    EXPECT_EQ(r.stop_reason, "stop_token");
    // A stop id holds with stop_at_eos off, too: it is not an end-of-sequence id.
    o.stop_at_eos = false;
    EXPECT_EQ(MustGenerate(target, v.k > 0 ? &drafter : nullptr, OracleRange(0, 4), o).stop_reason, "stop_token");
  }
}

TEST(StopTokensTest, TheEosOverrideReplacesTheTargetsIds) {
  FakeTarget target(kVocab, 64, OracleLogits());
  target.set_eos({OracleToken(6)});
  ScriptedDrafter drafter(OracleWithMistakes({}));
  GenerateOptions o = Options(3, 30);
  EXPECT_EQ(MustGenerate(target, &drafter, OracleRange(0, 4), o).tokens, OracleRange(4, 7));

  o.eos_token_ids = std::vector<int64_t>{OracleToken(12)};  // the target's o6 no longer stops
  GenerateResult r = MustGenerate(target, &drafter, OracleRange(0, 4), o);
  EXPECT_EQ(r.tokens, OracleRange(4, 13));
  EXPECT_EQ(r.stop_reason, "eos");

  o.eos_token_ids = std::vector<int64_t>{};  // no end-of-sequence ids at all
  r = MustGenerate(target, &drafter, OracleRange(0, 4), o);
  EXPECT_EQ(r.tokens, OracleRange(4, 34));
  EXPECT_EQ(r.stop_reason, "max_new_tokens");

  o.eos_token_ids = std::vector<int64_t>{OracleToken(12)};
  o.stop_at_eos = false;  // the override is still an EOS list: stop_at_eos turns it off
  EXPECT_EQ(MustGenerate(target, &drafter, OracleRange(0, 4), o).stop_reason, "max_new_tokens");
}

TEST(StopTokensTest, IdsOutsideTheVocabularyAreNamed) {
  FakeTarget target(kVocab, 64, OracleLogits());
  GenerateOptions o = Options(0, 5);
  o.stop_token_ids = {3, kVocab};
  auto r = Generate(target, nullptr, OracleRange(0, 4), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("stop_token_ids[1] = 16 is outside the vocabulary"));
  o.stop_token_ids = {};
  o.eos_token_ids = std::vector<int64_t>{-1};
  r = Generate(target, nullptr, OracleRange(0, 4), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("eos_token_id[0] = -1"));
  EXPECT_TRUE(target.runs().empty());  // refused before any forward
}

// Logits that vary by position: row p has value (p * 3 + i * 5) % 7 / 2 at id i, plus a peak of 4
// at the oracle token, so every emitted token's log-probability differs from the next.
std::vector<float> VaryingLogits(int64_t position) {
  std::vector<float> row(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) row[i] = static_cast<float>((position * 3 + i * 5) % 7) / 2.0f;
  row[OracleToken(position)] += 4.0f;
  return row;
}

double ExpectedLogProb(int64_t position, int32_t token) {
  const std::vector<float> row = VaryingLogits(position);
  double sum = 0.0;
  for (float x : row) sum += std::exp(static_cast<double>(x));
  return static_cast<double>(row[token]) - std::log(sum);
}

TEST(LogProbsTest, EachEmittedTokenGetsItsRawLogProbability) {
  for (const double temperature : {0.0, 0.7}) {
    std::vector<float> plain;
    for (const Variant& v : Variants()) {
      FakeTarget target(kVocab, 64, VaryingLogits);
      ScriptedDrafter drafter(OracleWithMistakes(v.mistakes));
      GenerateOptions o = Options(v.k, 20);
      o.logprobs = true;
      o.accept.sampling.temperature = temperature;
      o.accept.sampling.seed = 11;
      const GenerateResult r = MustGenerate(target, v.k > 0 ? &drafter : nullptr, OracleRange(0, 4), o);
      ASSERT_EQ(r.logprobs.size(), r.tokens.size()) << "k " << v.k;
      for (size_t i = 0; i < r.tokens.size(); ++i) {
        // Raw: the same at T = 0.7 as at T = 0, whatever the sampler did.
        EXPECT_NEAR(r.logprobs[i], ExpectedLogProb(4 + static_cast<int64_t>(i), r.tokens[i]), 1e-5)
            << "k " << v.k << " T " << temperature << " token " << i;
      }
      if (v.k == 0) {
        plain = r.logprobs;
      } else if (temperature == 0.0) {
        EXPECT_EQ(r.logprobs, plain) << "k " << v.k;  // same tokens, same rows, same bits
      }
    }
  }
  FakeTarget target(kVocab, 64, VaryingLogits);
  EXPECT_TRUE(MustGenerate(target, nullptr, OracleRange(0, 4), Options(0, 5)).logprobs.empty());
}

}  // namespace
}  // namespace mtpspec
