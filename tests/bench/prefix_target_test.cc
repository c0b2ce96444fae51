// The benchmarks' prefix-replaying target against ModelTarget, the oracle: a request run through it
// (its prompt replayed from the stored prefix, or run afresh) gives exactly ModelTarget's tokens,
// for chains and for token trees, whose verify and kept path it runs with the same routines.
#include "bench/prefix_target.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/generator.h"
#include "spec/model_target.h"
#include "spec/mtp_drafter.h"
#include "tests/model/model_test_util.h"

namespace mtpspec::bench {
namespace {

GenerateOptions Options(TreeShape tree, int64_t k) {
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.k = k;
  o.tree = std::move(tree);
  o.accept.sampling.temperature = 0.7;
  o.accept.sampling.seed = 4;
  o.stop_at_eos = false;
  return o;
}

TEST(PrefixCachedTargetTest, ChainsAndTreesGiveModelTargetsTokens) {
  auto model = Model::Load(absl::StrCat(MTPSPEC_GOLDEN_DIR, "/glm_a"));
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t K = (*model)->config().index_topk;
  const std::vector<int32_t> prompt = testing_util::TestTokens(K + 6, (*model)->config().vocab_size, 17);
  auto reference = ModelTarget::Create(**model, 96, LongContextAttention());
  auto replaying = PrefixCachedTarget::Create(**model, 96, LongContextAttention());
  ASSERT_TRUE(reference.ok() && replaying.ok());
  ASSERT_TRUE((*replaying)->Fill(prompt, 8).ok());
  auto drafter = MtpDrafter::Create(**model, 96, MtpOptions{});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  for (const GenerateOptions& options : {Options({}, 0), Options({}, 3), Options(TreeShape{{3, 2}}, 0),
                                         Options(TreeShape{{}, 6, 3}, 0)}) {
    auto expected = Generate(**reference, drafter->get(), prompt, options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    for (int round = 0; round < 2; ++round) {
      auto got = Generate(**replaying, drafter->get(), prompt, options);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->tokens, expected->tokens) << "tree " << options.tree.Name() << " k " << options.k;
      EXPECT_EQ(got->stats.num_accepted_tokens, expected->stats.num_accepted_tokens);
      EXPECT_EQ(got->stats.accepted_per_depth_rank, expected->stats.accepted_per_depth_rank);
    }
  }
  EXPECT_EQ((*replaying)->replays(), 8);  // every request's prompt came from the stored prefix
}

}  // namespace
}  // namespace mtpspec::bench
