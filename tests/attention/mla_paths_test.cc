// The MLA attention's paths (dense, mask, gather) and forms (naive, absorbed) through the whole tiny
// model: every path and form gives the same logits, over several naive row blocks too, and each
// form is charged the multiply-adds attention/mla.h defines.
#include <algorithm>
#include <utility>
#include <vector>

#include "attention/mla.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

using testing_util::Range;
using testing_util::RelativeMaxDiff;
using testing_util::TestTokens;
using testing_util::TinyModelEnv;

using testing_util::RunTiny;
using testing_util::Tiny;


// For L rows at total length T, every path (and both attention forms) gives the same logits.
// T runs from K-2 to K+L+6, so some rows have fewer than K causal keys (the gather re-mask).
TEST(MlaPathsTest, DenseMaskAndGatherPathsAgree) {
  const int64_t k = Tiny().config().index_topk;
  const auto tokens = TestTokens(64, Tiny().config().vocab_size, 11);
  for (int64_t rows = 1; rows <= 16; ++rows) {
    for (int64_t total = std::max<int64_t>(rows, k - 2); total <= k + rows + 6; ++total) {
      const int64_t prefix = total - rows;
      std::vector<int32_t> head(tokens.begin(), tokens.begin() + prefix);
      std::vector<int32_t> tail(tokens.begin() + prefix, tokens.begin() + total);
      std::vector<std::pair<AttentionPath, AttentionForm>> variants = {
          {AttentionPath::kMask, AttentionForm::kNaive},
          {AttentionPath::kMask, AttentionForm::kAbsorbed},
          {AttentionPath::kGather, AttentionForm::kAbsorbed}};
      if (total <= k) {
        variants.push_back({AttentionPath::kDense, AttentionForm::kNaive});
        variants.push_back({AttentionPath::kDense, AttentionForm::kAbsorbed});
      }
      std::vector<ForwardOutput> outs;
      for (auto [path, form] : variants) {
        auto cache = *Tiny().NewCache(64);
        if (prefix > 0) RunTiny(*cache, head, 0);
        ForwardOptions options;
        options.attention.path = path;
        options.attention.form = form;
        outs.push_back(RunTiny(*cache, tail, prefix, options));
        for (AttentionPath used : outs.back().paths) ASSERT_EQ(used, path);
      }
      for (size_t v = 1; v < outs.size(); ++v) {
        EXPECT_LT(RelativeMaxDiff(outs[v].logits, outs[0].logits), 1e-5)
            << "rows " << rows << " T " << total << " variant " << v;
      }
    }
  }
}

// Prefill-sized calls: the naive form runs head by head in blocks of kNaiveRowBlock rows, each over
// the keys its block reaches. Over several blocks (150 rows: 64 + 64 + 22), after no prefix and
// after one, it agrees with the absorbed form on the dense and the mask paths, and the automatic
// choice gives exactly one of the two forms' logits.
TEST(MlaPathsTest, PrefillFormsAgreeOverSeveralRowBlocks) {
  constexpr int64_t kRows = 150;
  const int64_t k = Tiny().config().index_topk;
  const auto tokens = TestTokens(kRows + 40, Tiny().config().vocab_size, 13);
  for (const int64_t prefix : {int64_t{0}, int64_t{40}}) {
    std::vector<int32_t> head(tokens.begin(), tokens.begin() + prefix);
    std::vector<int32_t> tail(tokens.begin() + prefix, tokens.begin() + prefix + kRows);
    const bool dense_possible = prefix + kRows <= k;
    const AttentionPath forced = dense_possible ? AttentionPath::kDense : AttentionPath::kMask;
    for (const AttentionPath path : {forced, AttentionPath::kAuto}) {
      std::vector<ForwardOutput> outs;  // naive, absorbed, auto
      for (const AttentionForm form : {AttentionForm::kNaive, AttentionForm::kAbsorbed, AttentionForm::kAuto}) {
        auto cache = *Tiny().NewCache(kRows + 64);
        if (prefix > 0) RunTiny(*cache, head, 0);
        ForwardOptions options;
        options.attention.path = path;
        options.attention.form = form;
        outs.push_back(RunTiny(*cache, tail, prefix, options));
      }
      EXPECT_LT(RelativeMaxDiff(outs[0].logits, outs[1].logits), 1e-5) << "prefix " << prefix;
      const auto same_bits = [](const Tensor& a, const Tensor& b) {
        return std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
      };
      EXPECT_TRUE(same_bits(outs[2].logits, outs[0].logits) || same_bits(outs[2].logits, outs[1].logits))
          << "prefix " << prefix;
    }
  }
}

// The multiply-adds each form is charged with, from their definition in attention/mla.h, on shapes
// small enough to count by hand: per weight pass N_h·(d_n + d_v)·r_kv = 2·7·5 = 70, naive per key
// N_h·(d_qk + d_v) = 2·9 = 18, absorbed per key N_h·(2·r_kv + d_r) = 2·12 = 24.
TEST(MlaPathsTest, AttentionFormCostsCountTheirMultiplyAdds) {
  MlaDims dims;
  dims.heads = 2;
  dims.nope_dim = 3;
  dims.rope_dim = 2;
  dims.v_dim = 4;
  dims.kv_lora = 5;
  const std::vector<int64_t> three = {4, 5, 6};
  AttentionFormCost cost = AttentionFormCosts(dims, 6, three, /*index_topk=*/0);
  EXPECT_EQ(cost.naive, 6 * 70 + 3 * 6 * 18);   // one block reaching 6 keys
  EXPECT_EQ(cost.absorbed, 3 * 70 + 15 * 24);   // 4 + 5 + 6 keys used
  cost = AttentionFormCosts(dims, 6, three, /*index_topk=*/4);
  EXPECT_EQ(cost.naive, 6 * 70 + 3 * 6 * 18);   // the naive form scores every key it reaches
  EXPECT_EQ(cost.absorbed, 3 * 70 + 12 * 24);   // at most 4 keys a row
  std::vector<int64_t> chain(kNaiveRowBlock + 1);  // rows 0..64 at positions 0..64
  for (int64_t r = 0; r <= kNaiveRowBlock; ++r) chain[r] = r + 1;
  cost = AttentionFormCosts(dims, kNaiveRowBlock + 1, chain, 0);
  EXPECT_EQ(cost.naive, 65 * 70 + (64 * 64 + 1 * 65) * 18);  // blocks of 64 rows reaching 64, 1 reaching 65
  EXPECT_EQ(cost.absorbed, 65 * 70 + (65 * 66 / 2) * 24);
}

}  // namespace
}  // namespace mtpspec
