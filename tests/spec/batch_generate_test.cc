// Batched generation on real models (two golden random-weight ones and the trained tiny model):
// with ModelBatchVerifier running one forward for every request's verify block, each request's
// tokens and acceptance equal the same request run alone through Generate, for batch sizes 1..8,
// queues longer than the batch, every drafter (mtp, lookup, hybrid, none), k from 0 to 4,
// temperatures 0 / 0.7 / 1, rejection and sampler-equality, prompts on either side of index_topk
// (dense and gather attention) and requests that finish mid-batch, with the drafts batched
// (MtpBatchDrafter) or not. Adaptive-k requests in a batch still give plain decoding's tokens; the
// expert union is counted; a batched Propose gives every drafter its own Propose's drafts; tree
// requests verify their trees in the batch's forward, or alone with a verifier that takes chains only;
// with the fp8 latent cache, batched requests still equal themselves run alone.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/batch.h"
#include "spec/lookup_drafter.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"

namespace mtpspec {
namespace {

using testing_util::TestTokens;

constexpr int64_t kCapacity = 128;

const Model& Load(const std::string& name) { return testing_util::LoadMtpTestModel(name); }

enum class Kind { kMtp, kLookup, kHybrid, kNone };

std::unique_ptr<Drafter> MakeDrafter(const Model& model, Kind kind) {
  auto mtp = [&]() -> std::unique_ptr<Drafter> {
    auto d = MtpDrafter::Create(model, kCapacity, MtpOptions{});
    EXPECT_TRUE(d.ok()) << d.status();
    return std::move(*d);
  };
  switch (kind) {
    case Kind::kMtp: return mtp();
    case Kind::kLookup: return std::make_unique<LookupDrafter>(LookupOptions{});
    case Kind::kHybrid: return std::make_unique<HybridDrafter>(std::make_unique<LookupDrafter>(LookupOptions{}), mtp());
    case Kind::kNone: return nullptr;
  }
  return nullptr;
}

// Slot s's drafter: mostly MTP, with every other kind in the mix.
Kind SlotKind(int64_t s) { return std::vector<Kind>{Kind::kMtp, Kind::kLookup, Kind::kMtp, Kind::kHybrid, Kind::kNone}[s % 5]; }

struct Slots {
  Slots(const Model& model, int64_t b, LatentStorage storage = LatentStorage::kF32) {
    for (int64_t s = 0; s < b; ++s) {
      auto target = ModelTarget::Create(model, kCapacity, {}, storage);
      EXPECT_TRUE(target.ok()) << target.status();
      targets.push_back(std::move(*target));
      drafters.push_back(MakeDrafter(model, SlotKind(s)));
      slots.push_back({targets.back().get(), drafters.back().get()});
    }
  }
  std::vector<std::unique_ptr<ModelTarget>> targets;
  std::vector<std::unique_ptr<Drafter>> drafters;
  std::vector<BatchSlot> slots;
};

// Request r: a prompt on either side of index_topk, its own k, temperature, seed, rule and budget.
// The prompts repeat a phrase so that the lookup drafter finds n-grams.
BatchRequest MixedRequest(const Model& model, int64_t r) {
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size;
  const std::vector<int32_t> phrase = TestTokens(7, V, 50 + r);
  BatchRequest request;
  const int64_t length = r % 2 == 0 ? K - 4 + r % 3 : K + 3 + r % 5;
  const std::vector<int32_t> noise = TestTokens(length, V, 900 + r);
  for (int64_t i = 0; i < length; ++i) request.prompt.push_back(i % 3 == 0 ? noise[i] : phrase[i % 7]);
  GenerateOptions& o = request.options;
  o.k = r % 5;
  o.max_new_tokens = 8 + (r * 11) % 25;
  o.accept.sampling.temperature = std::vector<double>{0.0, 0.7, 1.0}[r % 3];
  o.accept.sampling.seed = 7 + r;
  if (r % 4 == 3) o.accept.rule = AcceptRule::kRejection;
  o.stop_at_eos = false;
  return request;
}

GenerateResult Alone(const Model& model, Kind kind, const BatchRequest& request,
                     LatentStorage storage = LatentStorage::kF32) {
  auto target = ModelTarget::Create(model, kCapacity, {}, storage);
  EXPECT_TRUE(target.ok());
  std::unique_ptr<Drafter> drafter = MakeDrafter(model, kind);
  auto result = Generate(**target, drafter.get(), request.prompt, request.options);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

class BatchGenerateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchGenerateTest, EveryRequestEqualsItselfRunAlone) {
  const Model& model = Load(GetParam());
  for (int64_t b : {1, 2, 3, 5, 8}) {
    Slots slots(model, b);
    ModelBatchVerifier verifier(model);
    MtpBatchDrafter drafter;
    std::vector<BatchRequest> requests;
    for (int64_t r = 0; r < b + 3; ++r) {
      requests.push_back(MixedRequest(model, r));
      if (r % 4 == 3) requests.back().options.sample_drafts = true;  // q-sampled drafts for rejection
    }
    BatchOptions options;
    options.verifier = &verifier;
    options.drafter = b % 2 == 1 ? &drafter : nullptr;  // drafts batched, or each alone
    auto result = GenerateBatch(slots.slots, requests, options);
    ASSERT_TRUE(result.ok()) << result.status();
    for (size_t r = 0; r < requests.size(); ++r) {
      const BatchRequestResult& batched = result->requests[r];
      ASSERT_TRUE(batched.status.ok()) << batched.status;
      const GenerateResult alone = Alone(model, SlotKind(batched.slot), requests[r]);
      const std::string where = absl::StrCat(GetParam(), " B = ", b, " request ", r, " slot ", batched.slot);
      EXPECT_EQ(batched.result.tokens, alone.tokens) << where;
      EXPECT_EQ(batched.result.stop_reason, alone.stop_reason) << where;
      EXPECT_EQ(batched.result.stats.num_draft_tokens, alone.stats.num_draft_tokens) << where;
      EXPECT_EQ(batched.result.stats.accepted_per_pos, alone.stats.accepted_per_pos) << where;
    }
    const BatchStats& stats = result->stats;
    EXPECT_EQ(stats.failed, 0);
    EXPECT_EQ(stats.batched_drafts > 0, options.drafter != nullptr) << GetParam() << " B = " << b;
    // With the drafts batched, the MTP drafters' extends of committed rows run with them.
    if (options.drafter != nullptr) {
      EXPECT_GT(stats.draft_extend_seconds, 0.0) << GetParam() << " B = " << b;
    }
    EXPECT_EQ(stats.forwards, stats.cycles);
    EXPECT_EQ(stats.batched_forwards, stats.cycles);
    if (b > 1) {
      EXPECT_GT(stats.mean_batch(), 1.0) << GetParam() << " B = " << b;
    }
    if (model.config().n_routed_experts > 0) {
      EXPECT_GT(stats.experts_read, 0);
      EXPECT_LE(stats.experts_read, stats.expert_choices) << "the union never exceeds the choices";
      if (b > 1) {
        EXPECT_LT(stats.experts_read, stats.expert_choices) << "rows of a batch share experts";
      }
    }
  }
}

TEST_P(BatchGenerateTest, AdaptiveKRequestsInABatchGivePlainOutput) {
  const Model& model = Load(GetParam());
  Slots slots(model, 3);
  ModelBatchVerifier verifier(model);
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 4; ++r) {
    BatchRequest request = MixedRequest(model, r);
    request.options.accept.rule = AcceptRule::kSamplerEquality;
    request.options.k = 4;
    request.options.adaptive_k = true;
    request.options.max_new_tokens = 30;
    requests.push_back(std::move(request));
  }
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(slots.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (size_t r = 0; r < requests.size(); ++r) {
    ASSERT_TRUE(result->requests[r].status.ok()) << result->requests[r].status;
    GenerateOptions plain = requests[r].options;
    plain.adaptive_k = false;
    plain.k = 0;
    auto target = ModelTarget::Create(model, kCapacity);
    auto alone = Generate(**target, nullptr, requests[r].prompt, plain);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(result->requests[r].result.tokens, alone->tokens) << GetParam() << " request " << r;
  }
}

// MtpBatchDrafter::ProposeBatch gives every drafter the drafts (and draft distributions) of its own
// Propose: contexts on either side of index_topk, k from 0 to 6, argmax and q-sampled drafts, a
// drafter near its cache's end (fewer drafts), and a lookup drafter mixed in (proposes alone).
TEST(BatchDrafterTest, EveryDrafterGetsTheDraftsOfItsOwnPropose) {
  const Model& model = Load("trained");
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size;
  const std::vector<int64_t> lengths = {K - 5, K + 9, 3 * K, 20, K + 1, 60};
  const std::vector<int64_t> ks = {3, 0, 6, 1, 4, 5};
  const int64_t capacity = 4 * K;
  std::vector<std::unique_ptr<Drafter>> batched, alone;
  std::vector<std::vector<int32_t>> sequences;
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> prompt = TestTokens(lengths[i], V, 300 + static_cast<int64_t>(i));
    auto target = *ModelTarget::Create(model, capacity);
    auto prefill = target->Run(prompt, /*all_logits=*/false);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    prompt.push_back(static_cast<int32_t>((7 * i + 1) % V));  // the pending token
    for (auto* list : {&batched, &alone}) {
      list->push_back(i == 3 ? std::unique_ptr<Drafter>(std::make_unique<LookupDrafter>(LookupOptions{}))
                             : std::unique_ptr<Drafter>(*MtpDrafter::Create(model, i == 5 ? 63 : capacity, MtpOptions{})));
      ASSERT_TRUE(list->back()->Observe(prompt, 0, lengths[i], *prefill).ok());
    }
    sequences.push_back(std::move(prompt));
  }
  for (bool sample : {false, true}) {
    std::vector<DraftSampling> samplings(lengths.size());
    for (size_t i = 0; i < samplings.size(); ++i) {
      samplings[i].sample = sample;
      samplings[i].sampling.temperature = 0.8;
      samplings[i].sampling.seed = 40 + i;
    }
    std::vector<Drafter*> drafters;
    std::vector<std::span<const int32_t>> views;
    for (size_t i = 0; i < lengths.size(); ++i) {
      drafters.push_back(batched[i].get());
      views.push_back(sequences[i]);
    }
    MtpBatchDrafter batch;
    EXPECT_TRUE(batch.CanBatch(*batched[0]));
    EXPECT_FALSE(batch.CanBatch(*batched[3]));
    std::vector<absl::StatusOr<Draft>> drafts = batch.ProposeBatch(drafters, views, ks, samplings);
    ASSERT_EQ(drafts.size(), lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      ASSERT_TRUE(drafts[i].ok()) << drafts[i].status();
      auto own = alone[i]->Propose(sequences[i], ks[i], samplings[i]);
      ASSERT_TRUE(own.ok()) << own.status();
      EXPECT_EQ(drafts[i]->tokens, own->tokens) << "drafter " << i << (sample ? " sampled" : " argmax");
      EXPECT_EQ(drafts[i]->probs, own->probs) << "drafter " << i;
      if (i == 2) {
        EXPECT_EQ(drafts[i]->tokens.size(), 6u);
      }
    }
    EXPECT_LT(drafts[5]->tokens.size(), 5u) << "the small cache cuts the chain short";
  }
}

// A verifier that leaves token trees to verify alone (BatchVerifier's default for trees).
class ChainsOnlyVerifier : public ModelBatchVerifier {
 public:
  using ModelBatchVerifier::ModelBatchVerifier;
  bool CanBatchTree(const Target&) const override { return false; }
};

// Tree requests in a batch: their trees verify in the batch's forward, each under its own tree
// mask, beside chains and plain requests, and every request still equals itself run alone; with a
// verifier that takes chains only, the trees verify alone in the same cycle, with the same tokens.
TEST_P(BatchGenerateTest, TreeRequestsVerifyInTheBatchedForward) {
  const Model& model = Load(GetParam());
  const int64_t b = 4;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 7; ++r) {
    BatchRequest request = MixedRequest(model, r);
    GenerateOptions& o = request.options;
    o.accept.rule = AcceptRule::kSamplerEquality;
    o.sample_drafts = false;
    switch (r % 4) {
      case 0: o.tree = TreeShape{{3, 2, 1}}; break;
      case 1: o.tree = TreeShape{{}, 8, 4}; break;  // dynamic
      case 2:  // sampled children under rejection
        o.tree = TreeShape{{2, 2}};
        o.sample_drafts = true;
        o.accept.rule = AcceptRule::kRejection;
        o.accept.sampling.temperature = 0.8;
        break;
      default: break;  // a chain of k = r % 5, or plain
    }
    o.max_new_tokens = 10 + (r * 7) % 20;
    requests.push_back(std::move(request));
  }
  for (const bool trees_batched : {true, false}) {
    std::vector<std::unique_ptr<ModelTarget>> targets;
    std::vector<std::unique_ptr<Drafter>> drafters;
    std::vector<BatchSlot> slots;
    for (int64_t s = 0; s < b; ++s) {
      targets.push_back(*ModelTarget::Create(model, kCapacity));
      drafters.push_back(MakeDrafter(model, Kind::kMtp));
      slots.push_back({targets.back().get(), drafters.back().get()});
    }
    ModelBatchVerifier all(model);
    ChainsOnlyVerifier chains_only(model);
    MtpBatchDrafter drafter;
    BatchOptions options;
    options.verifier = trees_batched ? static_cast<BatchVerifier*>(&all) : &chains_only;
    options.drafter = &drafter;
    auto result = GenerateBatch(slots, requests, options);
    ASSERT_TRUE(result.ok()) << result.status();
    int64_t tree_cycles = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      const BatchRequestResult& batched = result->requests[r];
      ASSERT_TRUE(batched.status.ok()) << batched.status;
      const GenerateResult alone = Alone(model, Kind::kMtp, requests[r]);
      const std::string where = absl::StrCat(GetParam(), " request ", r, trees_batched ? " trees batched" : " trees alone");
      EXPECT_EQ(batched.result.tokens, alone.tokens) << where;
      EXPECT_EQ(batched.result.stats.num_draft_tokens, alone.stats.num_draft_tokens) << where;
      EXPECT_EQ(batched.result.stats.accepted_per_pos, alone.stats.accepted_per_pos) << where;
      EXPECT_EQ(batched.result.stats.accepted_per_depth_rank, alone.stats.accepted_per_depth_rank) << where;
      if (!requests[r].options.tree.empty()) {
        EXPECT_GT(batched.result.stats.num_drafts, 0) << where;
        tree_cycles += batched.result.stats.num_drafts;
      }
    }
    const BatchStats& stats = result->stats;
    EXPECT_EQ(stats.failed, 0);
    if (trees_batched) {  // one forward per cycle, trees included
      EXPECT_EQ(stats.forwards, stats.cycles) << GetParam();
      EXPECT_EQ(stats.batched_forwards, stats.cycles) << GetParam();
    } else {  // the trees' cycles with nodes verify alone, beside the batch's forward
      EXPECT_EQ(stats.forwards, stats.batched_forwards + tree_cycles) << GetParam();
    }
  }
}

TEST(BatchVerifierTest, RefusesTargetsOfAnotherModelOrThatSampleInTheTarget) {
  const Model& a = Load("glm_a");
  const Model& b = Load("dsv32_b");
  ModelBatchVerifier verifier(a);
  auto own = *ModelTarget::Create(a, 32);
  auto other = *ModelTarget::Create(b, 32);
  auto sampling = *ModelTarget::Create(a, 32);
  sampling->set_samples_in_target(true);
  EXPECT_TRUE(verifier.CanBatch(*own));
  EXPECT_FALSE(verifier.CanBatch(*other));
  EXPECT_FALSE(verifier.CanBatch(*sampling));
  std::vector<Target*> targets = {own.get(), other.get()};
  std::vector<std::vector<int32_t>> blocks = {{1, 2}, {3}};
  auto refused = verifier.VerifyBatch(targets, blocks);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("target 1 cannot join"));
  EXPECT_EQ(own->length(), 0) << "nothing ran";
  // A block with an out-of-vocabulary id fails the whole forward and leaves every cache as it was.
  auto second = *ModelTarget::Create(a, 32);
  targets = {own.get(), second.get()};
  blocks = {{1, 2}, {3, static_cast<int32_t>(a.config().vocab_size)}};
  auto bad = verifier.VerifyBatch(targets, blocks);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("sequence 1"));
  EXPECT_EQ(own->length(), 0);
  EXPECT_EQ(second->length(), 0);
}

// A tree block in a batched forward gives what the target's own RunTree gives, bit for bit, and
// leaves the target ready for KeepTreePath; a parents list that does not fit its block is refused
// with every cache as it was.
TEST(BatchVerifierTest, TreeBlocksEqualRunTreeAndAreChecked) {
  const Model& model = Load("glm_a");
  const int64_t V = model.config().vocab_size;
  ModelBatchVerifier verifier(model);
  std::vector<std::unique_ptr<ModelTarget>> batched, alone;
  for (int i = 0; i < 2; ++i) {
    batched.push_back(*ModelTarget::Create(model, 64));
    alone.push_back(*ModelTarget::Create(model, 64));
    const std::vector<int32_t> prompt = TestTokens(5 + 3 * i, V, 40 + i);
    ASSERT_TRUE(batched.back()->Run(prompt, false).ok());
    ASSERT_TRUE(alone.back()->Run(prompt, false).ok());
  }
  EXPECT_TRUE(verifier.CanBatchTree(*batched[0]));
  std::vector<Target*> targets = {batched[0].get(), batched[1].get()};
  const std::vector<std::vector<int32_t>> blocks = {{4, 5, 6}, {7, 8, 9, 10, 11}};
  std::vector<std::vector<int32_t>> parents = {{}, {-1, 0, 0, 1, 2}};
  auto together = verifier.VerifyBatchWithTrees(targets, blocks, parents);
  ASSERT_TRUE(together.ok()) << together.status();
  auto chain = alone[0]->Run(blocks[0], true);
  auto tree = alone[1]->RunTree(blocks[1], parents[1]);
  ASSERT_TRUE(chain.ok() && tree.ok());
  const auto same = [](const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(together->steps[0].logits, chain->logits));
  EXPECT_TRUE(same(together->steps[1].logits, tree->logits));
  EXPECT_TRUE(same(together->steps[1].hidden_postnorm, tree->hidden_postnorm));
  const std::vector<int64_t> path = {0, 2, 4};
  ASSERT_TRUE(batched[1]->KeepTreePath(path).ok());
  ASSERT_TRUE(alone[1]->KeepTreePath(path).ok());
  const std::vector<int32_t> next = {3};
  auto next_batched = batched[1]->Run(next, false);
  auto next_alone = alone[1]->Run(next, false);
  ASSERT_TRUE(next_batched.ok() && next_alone.ok());
  EXPECT_TRUE(same(next_batched->logits, next_alone->logits)) << "the kept path decodes as the one kept alone";

  const int64_t before0 = batched[0]->length(), before1 = batched[1]->length();
  parents = {{}, {-1, 0}};
  auto refused = verifier.VerifyBatchWithTrees(targets, blocks, parents);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("block 1 has 5 tokens but 2 parents"));
  EXPECT_EQ(batched[0]->length(), before0);
  EXPECT_EQ(batched[1]->length(), before1);
}

// With the fp8 latent cache (bf16 attention over each request's own cache inside the batched
// forward), every request still equals itself run alone with that cache.
TEST_P(BatchGenerateTest, Fp8CacheRequestsEqualThemselvesRunAlone) {
  const Model& model = Load(GetParam());
  Slots slots(model, 3, LatentStorage::kFp8);
  ModelBatchVerifier verifier(model);
  MtpBatchDrafter drafter;
  std::vector<BatchRequest> requests;
  for (int64_t r = 0; r < 6; ++r) requests.push_back(MixedRequest(model, r));
  BatchOptions options;
  options.verifier = &verifier;
  options.drafter = &drafter;
  auto result = GenerateBatch(slots.slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (size_t r = 0; r < requests.size(); ++r) {
    const BatchRequestResult& batched = result->requests[r];
    ASSERT_TRUE(batched.status.ok()) << batched.status;
    const GenerateResult alone = Alone(model, SlotKind(batched.slot), requests[r], LatentStorage::kFp8);
    EXPECT_EQ(batched.result.tokens, alone.tokens) << GetParam() << " request " << r;
    EXPECT_EQ(batched.result.stats.accepted_per_pos, alone.stats.accepted_per_pos) << GetParam() << " request " << r;
  }
  EXPECT_GT(result->stats.mean_batch(), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchGenerateTest,
                         ::testing::Values("glm_a", "dsv32_b", "glm47_c", "dsv3_d", "trained"));

}  // namespace
}  // namespace mtpspec
