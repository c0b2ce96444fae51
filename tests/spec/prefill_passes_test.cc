// A prompt longer than RunOnCache's pass size runs in passes: each pass is exactly the Model::Forward
// of its rows on the cache the earlier passes filled (bit for bit, logits and hidden states), the
// whole agrees with one pass over every row to rounding, and the cache it leaves decodes the same.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "spec/model_target.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

namespace tu = testing_util;

const Model& Tiny() { return tu::TinyModelEnv::Get().model(); }

bool SameBits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

constexpr int64_t kPrompt = 30;

// The prompt through Model::Forward in chunks of `chunk` rows, every row's logits and hidden states.
ForwardOutput ChunkedForwards(KvCache& cache, const std::vector<int32_t>& tokens, int64_t chunk) {
  const int64_t H = Tiny().config().hidden_size, V = Tiny().config().vocab_size;
  ForwardOutput all;
  all.logits = Tensor::Empty(DType::kF32, {kPrompt, V});            // [rows, V]
  all.hidden_postnorm = Tensor::Empty(DType::kF32, {kPrompt, H});   // [rows, H]
  all.hidden_prenorm = Tensor::Empty(DType::kF32, {kPrompt, H});    // [rows, H]
  for (int64_t first = 0; first < kPrompt; first += chunk) {
    const int64_t n = std::min(chunk, kPrompt - first);
    const std::vector<int32_t> part(tokens.begin() + first, tokens.begin() + first + n);
    auto out = Tiny().Forward(cache, part, tu::Range(first, first + n), {});
    EXPECT_TRUE(out.ok()) << out.status();
    std::memcpy(all.logits.data<float>() + first * V, out->logits.data<float>(), n * V * sizeof(float));
    std::memcpy(all.hidden_postnorm.data<float>() + first * H, out->hidden_postnorm.data<float>(), n * H * sizeof(float));
    std::memcpy(all.hidden_prenorm.data<float>() + first * H, out->hidden_prenorm.data<float>(), n * H * sizeof(float));
  }
  return all;
}

TEST(PrefillPassesTest, EachPassIsTheForwardOfItsRows) {
  const int64_t H = Tiny().config().hidden_size, V = Tiny().config().vocab_size;
  const auto tokens = tu::TestTokens(kPrompt + 1, V, 17);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + kPrompt);
  for (const int64_t pass : {1, 7, 16, 29}) {
    SCOPED_TRACE(pass);
    auto reference_cache = *Tiny().NewCache(64);
    const ForwardOutput reference = ChunkedForwards(*reference_cache, prompt, pass);
    for (const bool all_logits : {false, true}) {
      auto cache = *Tiny().NewCache(64);
      auto step = RunOnCache(Tiny(), *cache, prompt, {}, all_logits, pass);
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(cache->length(), kPrompt);
      ASSERT_EQ(step->hidden_postnorm.dim(0), kPrompt);
      EXPECT_TRUE(SameBits(step->hidden_postnorm.data<float>(), reference.hidden_postnorm.data<float>(), kPrompt * H));
      EXPECT_TRUE(SameBits(step->hidden_prenorm.data<float>(), reference.hidden_prenorm.data<float>(), kPrompt * H));
      if (all_logits) {
        ASSERT_EQ(step->logits.dim(0), kPrompt);
        EXPECT_TRUE(SameBits(step->logits.data<float>(), reference.logits.data<float>(), kPrompt * V));
      } else {
        ASSERT_EQ(step->logits.dim(0), 1);
        EXPECT_TRUE(SameBits(step->logits.data<float>(), reference.logits.data<float>() + (kPrompt - 1) * V, V));
      }
      // The cache the passes left decodes the next token as the chunked forwards' cache does.
      auto next = RunOnCache(Tiny(), *cache, std::vector<int32_t>{tokens[kPrompt]}, {}, false, pass);
      auto next_reference = RunOnCache(Tiny(), *reference_cache, std::vector<int32_t>{tokens[kPrompt]}, {}, false, pass);
      ASSERT_TRUE(next.ok() && next_reference.ok());
      EXPECT_TRUE(SameBits(next->logits.data<float>(), next_reference->logits.data<float>(), V));
      ASSERT_TRUE(reference_cache->Truncate(kPrompt).ok());
    }
  }
}

TEST(PrefillPassesTest, PassesAgreeWithOneForwardOverEveryRow) {
  const int64_t V = Tiny().config().vocab_size;
  const auto prompt = tu::TestTokens(kPrompt, V, 19);
  auto whole_cache = *Tiny().NewCache(64);
  auto whole = RunOnCache(Tiny(), *whole_cache, prompt, {}, /*all_logits=*/true, /*pass_rows=*/kPrompt);
  auto cache = *Tiny().NewCache(64);
  auto passes = RunOnCache(Tiny(), *cache, prompt, {}, /*all_logits=*/true, /*pass_rows=*/8);
  ASSERT_TRUE(whole.ok() && passes.ok());
  EXPECT_LT(tu::RelativeMaxDiff(passes->logits.data<float>(), whole->logits.data<float>(), kPrompt * V), 2e-5);
}

TEST(PrefillPassesTest, ANonPositivePassSizeIsAnError) {
  auto cache = *Tiny().NewCache(64);
  auto step = RunOnCache(Tiny(), *cache, tu::TestTokens(4, Tiny().config().vocab_size), {}, false, 0);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("pass_rows"), std::string::npos);
  EXPECT_EQ(cache->length(), 0);
}

}  // namespace
}  // namespace mtpspec
