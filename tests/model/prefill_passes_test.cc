// A call longer than ForwardInPasses' pass size runs in passes: each pass is exactly the
// Model::Forward of its rows on the cache the earlier passes filled (bit for bit, logits and hidden
// states), the whole agrees with one pass over every row to rounding, the cache it leaves decodes
// the same, and logit rows of the whole call come back in the order asked.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "model/prefill_passes.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

namespace tu = testing_util;

using testing_util::Tiny;

bool SameBits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

constexpr int64_t kPrompt = 30;

// ForwardInPasses at positions cache.length() …, every row's logits or the last row's.
absl::StatusOr<ForwardOutput> Passes(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits, int64_t pass) {
  const auto positions = tu::Range(cache.length(), cache.length() + static_cast<int64_t>(tokens.size()));
  ForwardOptions options;
  if (!all_logits) options.logit_rows = {static_cast<int64_t>(tokens.size()) - 1};
  return ForwardInPasses(Tiny(), cache, tokens, positions, options, pass);
}

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
      auto step = Passes(*cache, prompt, all_logits, pass);
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
      auto next = Passes(*cache, {tokens[kPrompt]}, false, pass);
      auto next_reference = Passes(*reference_cache, {tokens[kPrompt]}, false, pass);
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
  auto whole = Passes(*whole_cache, prompt, /*all_logits=*/true, /*pass=*/kPrompt);
  auto cache = *Tiny().NewCache(64);
  auto passes = Passes(*cache, prompt, /*all_logits=*/true, /*pass=*/8);
  ASSERT_TRUE(whole.ok() && passes.ok());
  EXPECT_LT(tu::RelativeMaxDiff(passes->logits.data<float>(), whole->logits.data<float>(), kPrompt * V), 2e-5);
}

TEST(PrefillPassesTest, ANonPositivePassSizeIsAnError) {
  auto cache = *Tiny().NewCache(64);
  auto step = Passes(*cache, tu::TestTokens(4, Tiny().config().vocab_size), false, 0);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("pass_rows"), std::string::npos);
  EXPECT_EQ(cache->length(), 0);
}

// Logit rows of the whole call, in any order and across passes, come back in the order asked, each
// equal to that row of the every-row call; rows outside the call and a captured selection over
// several passes are errors that leave nothing half-said.
TEST(PrefillPassesTest, LogitRowsIndexTheWholeCall) {
  const int64_t V = Tiny().config().vocab_size;
  const auto prompt = tu::TestTokens(kPrompt, V, 23);
  auto every_cache = *Tiny().NewCache(64);
  auto every = Passes(*every_cache, prompt, /*all_logits=*/true, /*pass=*/8);
  ASSERT_TRUE(every.ok()) << every.status();
  ForwardOptions options;
  options.logit_rows = {29, 3, 17, 3, 8};  // passes of 8: rows in the fourth, first, third, first, second
  auto cache = *Tiny().NewCache(64);
  auto some = ForwardInPasses(Tiny(), *cache, prompt, tu::Range(0, kPrompt), options, 8);
  ASSERT_TRUE(some.ok()) << some.status();
  ASSERT_EQ(some->logits.dim(0), 5);
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_TRUE(SameBits(some->logits.data<float>() + j * V, every->logits.data<float>() + options.logit_rows[j] * V, V))
        << "row " << options.logit_rows[j];
  }
  options.logit_rows = {kPrompt};
  auto fresh = *Tiny().NewCache(64);
  auto outside = ForwardInPasses(Tiny(), *fresh, prompt, tu::Range(0, kPrompt), options, 8);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("logit row 30"), std::string::npos) << outside.status();
  ForwardOptions topk;
  topk.capture_topk = true;
  auto captured = ForwardInPasses(Tiny(), *fresh, prompt, tu::Range(0, kPrompt), topk, 8);
  ASSERT_FALSE(captured.ok());
  EXPECT_NE(captured.status().message().find("one pass"), std::string::npos) << captured.status();
  EXPECT_EQ(fresh->length(), 0);
}

}  // namespace
}  // namespace mtpspec
