// The benchmarks' prefix-replaying target against ModelTarget, the oracle: a request run through it
// (its prompt replayed from the stored prefix, or run afresh) gives exactly ModelTarget's tokens,
// for chains and for token trees, whose verify and kept path it runs with the same routines. The
// randomly filled MTP drafter takes the prompt as extended: its cache holds FillCacheRandom's rows
// for the older pairs and the newest pair's row as the MTP layer writes it; in a batch such drafters
// still draft together, and each request gives the tokens it gives alone.
#include "bench/prefix_target.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "spec/batch.h"
#include "spec/generator.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
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


TEST(FillPromptRandomlyTest, FillsTheOlderPairsAndExtendsTheNewest) {
  auto model = Model::Load(absl::StrCat(MTPSPEC_GOLDEN_DIR, "/glm_a"));
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t K = (*model)->config().index_topk, n = K + 6, capacity = 96;
  const std::vector<int32_t> prompt = testing_util::TestTokens(n, (*model)->config().vocab_size, 17);
  auto target = PrefixCachedTarget::Create(**model, capacity, LongContextAttention());
  ASSERT_TRUE(target.ok()) << target.status();
  ASSERT_TRUE((*target)->FillRandom(prompt, 3).ok());
  MtpOptions options;
  options.attention = LongContextAttention();
  auto reference = MtpDrafter::Create(**model, capacity, options);
  auto inner = MtpDrafter::Create(**model, capacity, options);
  ASSERT_TRUE(reference.ok() && inner.ok());
  FillPromptRandomly(**inner, 11);
  MtpDrafter& drafter = **inner;

  // The prompt's step as the target gives it, observed by both drafters.
  (*target)->Reset();
  auto step = (*target)->Run(prompt, false);
  ASSERT_TRUE(step.ok()) << step.status();
  std::vector<int32_t> sequence = prompt;
  sequence.push_back(1);  // the pending token
  ASSERT_TRUE((*reference)->Observe(sequence, 0, n, *step).ok());
  ASSERT_TRUE(drafter.Observe(sequence, 0, n, *step).ok());
  EXPECT_EQ((*inner)->committed_pairs(), n);

  auto expected_fill = (*model)->NewCache(capacity);  // what FillCacheRandom writes for the seed
  ASSERT_TRUE(expected_fill.ok());
  FillCacheRandom(**expected_fill, n - 1, 11);
  const LayerKvCache& got = (*inner)->host_cache()->layer(0);
  const LayerKvCache& fill = (*expected_fill)->layer(0);
  const LayerKvCache& extended = (*reference)->host_cache()->layer(0);
  const int64_t r = got.latent.dim(1), d = got.rope_key.dim(1);
  EXPECT_EQ(0, std::memcmp(got.latent.data<float>(), fill.latent.data<float>(), (n - 1) * r * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.rope_key.data<float>(), fill.rope_key.data<float>(), (n - 1) * d * sizeof(float)));
  // A slot's rows depend on its own pair only: the newest equals the full extend's.
  EXPECT_EQ(0, std::memcmp(got.latent.data<float>() + (n - 1) * r, extended.latent.data<float>() + (n - 1) * r,
                           r * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.rope_key.data<float>() + (n - 1) * d, extended.rope_key.data<float>() + (n - 1) * d,
                           d * sizeof(float)));

  // It drafts end to end in Generate, and a later Observe goes to the drafter as it is.
  GenerateOptions o = Options({}, 2);
  auto run = Generate(**target, &drafter, prompt, o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(static_cast<int64_t>(run->tokens.size()), o.max_new_tokens);
  EXPECT_GT(run->stats.num_drafts, 0);
  EXPECT_GT((*inner)->committed_pairs(), n);
}

TEST(FillPromptRandomlyTest, FilledDraftersStillDraftTogetherAndEachRequestEqualsItsRunAlone) {
  auto model = Model::Load(absl::StrCat(MTPSPEC_GOLDEN_DIR, "/glm_a"));
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t K = (*model)->config().index_topk, n = K + 6, capacity = 96, B = 3;
  MtpOptions mtp_options;
  mtp_options.attention = LongContextAttention();
  std::vector<std::unique_ptr<PrefixCachedTarget>> targets;
  std::vector<std::unique_ptr<MtpDrafter>> drafters;
  std::vector<BatchSlot> slots;
  std::vector<BatchRequest> requests;
  for (int64_t s = 0; s < B; ++s) {
    BatchRequest& r = requests.emplace_back();
    r.prompt = testing_util::TestTokens(n, (*model)->config().vocab_size, 30 + static_cast<uint64_t>(s));
    r.options = Options({}, 1 + s);
    r.options.accept.sampling.seed = 8 + static_cast<uint64_t>(s);
    auto target = PrefixCachedTarget::Create(**model, capacity, LongContextAttention());
    auto drafter = MtpDrafter::Create(**model, capacity, mtp_options);
    ASSERT_TRUE(target.ok() && drafter.ok());
    ASSERT_TRUE((*target)->FillRandom(r.prompt, 5 + static_cast<uint64_t>(s)).ok());
    FillPromptRandomly(**drafter, 40 + static_cast<uint64_t>(s));
    slots.push_back({target->get(), drafter->get()});
    targets.push_back(std::move(*target));
    drafters.push_back(std::move(*drafter));
  }
  std::vector<std::vector<int32_t>> alone;
  for (int64_t s = 0; s < B; ++s) {
    auto run = Generate(*targets[s], drafters[s].get(), requests[s].prompt, requests[s].options);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_GT(run->stats.num_drafts, 0);
    alone.push_back(run->tokens);
  }
  ModelBatchVerifier verifier(**model);
  MtpBatchDrafter batch_drafter;
  BatchOptions options;
  options.verifier = &verifier;
  options.drafter = &batch_drafter;
  auto batch = GenerateBatch(slots, requests, options);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_GT(batch->stats.batched_drafts, 0);  // the filled drafters drafted in one forward per depth
  for (int64_t s = 0; s < B; ++s) {
    ASSERT_TRUE(batch->requests[s].status.ok()) << batch->requests[s].status;
    EXPECT_EQ(batch->requests[s].result.tokens, alone[s]) << "request " << s;
  }
}

}  // namespace
}  // namespace mtpspec::bench
