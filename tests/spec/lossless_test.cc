// The lossless claim on real (golden, random-weight) models: speculative output is bit-identical to
// plain decoding with the same seed — greedy and sampled, for k = 1..5, with prompts of K−3 … K+10
// tokens so the verify rows cross the index_topk threshold (where the gather re-mask matters).
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/generator.h"
#include "spec/lookup_drafter.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"

namespace mtpspec {
namespace {

using testing_util::ScopedTempDir;
using testing_util::TestTokens;

// "tiny_fp8": a random checkpoint in the FP8 releases' layout (F8_E4M3 matrices with 128 x 128
// block scales, used in place), with dimensions that leave partial scale blocks. Written once per
// process into a directory of its own (ctest runs these tests in parallel processes).
std::string WriteFp8Model() {
  static ScopedTempDir scratch;
  static const std::string dir = [] {
    const std::string d = scratch.File("tiny_fp8");
    RandomCheckpointOptions options;
    options.dtype = DType::kF8E4M3;
    options.seed = 5;
    EXPECT_TRUE(WriteRandomCheckpoint(d, TinyGlmConfigWithPartialFp8Blocks(), options).ok());
    return d;
  }();
  return dir;
}

const Model& Golden(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>>* models = new std::map<std::string, std::unique_ptr<Model>>();
  auto& slot = (*models)[name];
  if (!slot) {
    LoadOptions options;
    if (testing_util::ParseTestModelName(name, &options) != "tiny_fp8") return testing_util::LoadMtpTestModel(name);
    auto m = Model::Load(WriteFp8Model(), options);
    EXPECT_TRUE(m.ok()) << m.status();
    slot = std::move(*m);
  }
  return *slot;
}

std::vector<int32_t> Decode(const Model& model, Drafter* drafter, const std::vector<int32_t>& prompt,
                         const GenerateOptions& options, SpecStats* stats = nullptr, bool samples_in_target = false,
                         int64_t capacity = 96, LatentStorage storage = LatentStorage::kF32) {
  auto target = ModelTarget::Create(model, capacity, {}, storage);
  EXPECT_TRUE(target.ok()) << target.status();
  (*target)->set_samples_in_target(samples_in_target);
  auto result = Generate(**target, drafter, prompt, options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (stats) *stats = result->stats;
  return result->tokens;
}

GenerateOptions Options(int64_t k, double temperature, uint64_t seed, double top_p = 1.0) {
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.k = k;
  o.accept.sampling.temperature = temperature;
  o.accept.sampling.seed = seed;
  o.accept.sampling.top_p = top_p;
  o.stop_at_eos = false;  // longer outputs test more
  return o;
}

class LosslessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LosslessTest, GreedyMtpEqualsPlainAcrossTheTopKThreshold) {
  const Model& model = Golden(GetParam());
  const int64_t K = testing_util::SparseThreshold(model.config());
  auto drafter = *MtpDrafter::Create(model, 96, MtpOptions{});
  int64_t accepted_somewhere = 0;
  for (int64_t len = K - 3; len <= K + 10; ++len) {
    const auto prompt = TestTokens(len, model.config().vocab_size, 100 + len);
    const auto plain = Decode(model, nullptr, prompt, Options(0, 0.0, 0));
    for (int64_t k = 1; k <= 5; ++k) {
      SpecStats stats;
      EXPECT_EQ(Decode(model, drafter.get(), prompt, Options(k, 0.0, 0), &stats), plain) << "len " << len << " k " << k;
      accepted_somewhere += stats.num_accepted_tokens;
      EXPECT_LE(stats.num_accepted_tokens, stats.num_draft_tokens);
    }
  }
  // Random weights accept rarely; the lookup drafter below forces acceptance paths too.
  RecordProperty("accepted", static_cast<int>(accepted_somewhere));
}

// Drafts from a script: the reference continuation with a deliberate mistake every `period`-th
// proposal, so blocks are accepted in full, in part and not at all. With an inner MTP drafter it
// also runs that drafter's cache rebuild on multi-token commits (its own proposals are discarded).
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> reference, int64_t prompt_len, int64_t period, Drafter* inner)
      : reference_(std::move(reference)), prompt_len_(prompt_len), period_(period), inner_(inner) {}
  std::string name() const override { return "scripted"; }
  absl::Status Observe(std::span<const int32_t> seq, int64_t first, int64_t rows, const TargetStep& step) override {
    return inner_ ? inner_->Observe(seq, first, rows, step) : absl::OkStatus();
  }
  absl::StatusOr<Draft> Propose(std::span<const int32_t> seq, int64_t k, const DraftSampling& sampling) override {
    if (inner_) {
      auto inner = inner_->Propose(seq, k, sampling);
      if (!inner.ok()) return inner.status();
    }
    Draft d;
    const int64_t next = static_cast<int64_t>(seq.size()) - prompt_len_;  // index into reference_
    for (int64_t i = 0; i < k && next + i < static_cast<int64_t>(reference_.size()); ++i) {
      int32_t token = reference_[next + i];
      if (++proposals_ % period_ == 0) token = (token + 1) % 64;  // a mistake
      d.tokens.push_back(token);
    }
    return d;
  }
  void Reset() override {
    proposals_ = 0;
    if (inner_) inner_->Reset();
  }

 private:
  std::vector<int32_t> reference_;
  int64_t prompt_len_, period_, proposals_ = 0;
  Drafter* inner_;
};

TEST_P(LosslessTest, AcceptedBlocksAndRollbackStayLossless) {
  const Model& model = Golden(GetParam());
  auto mtp = *MtpDrafter::Create(model, 96, MtpOptions{});
  for (double temperature : {0.0, 0.9}) {
    const auto prompt = TestTokens(10, model.config().vocab_size, 77);
    const auto plain = Decode(model, nullptr, prompt, Options(0, temperature, 5));
    for (int64_t k = 1; k <= 5; ++k) {
      for (int64_t period : {3, 7}) {
        ScriptedDrafter scripted(plain, static_cast<int64_t>(prompt.size()), period, mtp.get());
        SpecStats stats;
        EXPECT_EQ(Decode(model, &scripted, prompt, Options(k, temperature, 5), &stats), plain)
            << "T " << temperature << " k " << k << " period " << period;
        EXPECT_GE(stats.num_accepted_tokens, 8);  // many blocks accepted in full or in part
        EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens);
      }
    }
  }
}

// Sampled: sampler-equality output is identical to plain sampling with the same seed.
TEST_P(LosslessTest, SampledSamplerEqualityEqualsPlain) {
  const Model& model = Golden(GetParam());
  auto mtp = *MtpDrafter::Create(model, 96, MtpOptions{});
  LookupDrafter lookup(LookupOptions{});
  for (double temperature : {0.7, 1.0}) {
    for (uint64_t seed : {1, 2, 3}) {
      const auto prompt = TestTokens(12, model.config().vocab_size, seed);
      const auto plain = Decode(model, nullptr, prompt, Options(0, temperature, seed, 0.9));
      for (int64_t k : {1, 3, 5}) {
        EXPECT_EQ(Decode(model, mtp.get(), prompt, Options(k, temperature, seed, 0.9)), plain)
            << "T " << temperature << " seed " << seed << " k " << k;
        EXPECT_EQ(Decode(model, &lookup, prompt, Options(k, temperature, seed, 0.9)), plain)
            << "lookup T " << temperature << " seed " << seed << " k " << k;
      }
    }
  }
}

// The device-sampling path of the loop (RunKeepingLogits + SampleLastRun, as the CUDA target runs
// it), emulated on the host: the same tokens as host sampling, with blocks accepted in full, in
// part and not at all. Rules that read the distributions keep sampling the host logits.
TEST_P(LosslessTest, SamplingInTheTargetEqualsHostSampling) {
  const Model& model = Golden(GetParam());
  auto mtp = *MtpDrafter::Create(model, 96, MtpOptions{});
  for (double temperature : {0.0, 0.8}) {
    const auto prompt = TestTokens(11, model.config().vocab_size, 31);
    const auto plain = Decode(model, nullptr, prompt, Options(0, temperature, 6, 0.9));
    SpecStats stats;
    EXPECT_EQ(Decode(model, nullptr, prompt, Options(0, temperature, 6, 0.9), &stats, true), plain);
    EXPECT_TRUE(stats.sampled_on_device);
    for (int64_t k : {1, 3, 5}) {
      ScriptedDrafter scripted(plain, static_cast<int64_t>(prompt.size()), 4, mtp.get());
      EXPECT_EQ(Decode(model, &scripted, prompt, Options(k, temperature, 6, 0.9), &stats, true), plain)
          << "T " << temperature << " k " << k;
      EXPECT_TRUE(stats.sampled_on_device);
      EXPECT_GE(stats.num_accepted_tokens, 4);
      EXPECT_EQ(Decode(model, mtp.get(), prompt, Options(k, temperature, 6, 0.9), &stats, true), plain);
    }
    GenerateOptions rejection = Options(3, temperature, 6, 0.9);
    rejection.accept.rule = AcceptRule::kRejection;
    const auto host_rejection = Decode(model, mtp.get(), prompt, rejection);
    EXPECT_EQ(Decode(model, mtp.get(), prompt, rejection, &stats, true), host_rejection);
    EXPECT_FALSE(stats.sampled_on_device);
  }
}

TEST_P(LosslessTest, AdaptiveKIsLossless) {
  const Model& model = Golden(GetParam());
  constexpr int64_t kCapacity = 128;  // the golden models' max_position_embeddings
  auto mtp = *MtpDrafter::Create(model, kCapacity, MtpOptions{});
  const auto prompt = TestTokens(15, model.config().vocab_size, 5);
  GenerateOptions plain_options = Options(0, 0.8, 4);
  plain_options.max_new_tokens = 110;
  const auto plain = Decode(model, nullptr, prompt, plain_options, nullptr, false, kCapacity);
  GenerateOptions adaptive = plain_options;
  adaptive.k = 4;
  adaptive.adaptive_k = true;
  // A 5% exploration budget, so that the first probes fit this short request (at 1% they need
  // ≥ 197 tokens, more than the golden models' cache holds).
  adaptive.adaptive_controller = std::make_shared<AdaptiveK>(4, kProbeInterval, kMaxProbeInterval,
                                                                 /*exploration_budget=*/0.05);
  SpecStats stats;
  EXPECT_EQ(Decode(model, mtp.get(), prompt, adaptive, &stats, false, kCapacity), plain);
  EXPECT_GT(stats.num_drafts, 0);  // the rows after a probe's drafts are checked too
}

TEST_P(LosslessTest, VariantsOfTheMtpHeadStayLossless) {
  const Model& model = Golden(GetParam());
  const auto prompt = TestTokens(14, model.config().vocab_size, 8);
  const auto plain = Decode(model, nullptr, prompt, Options(0, 0.0, 0));
  for (MtpHidden hidden : {MtpHidden::kPostNorm, MtpHidden::kPreNorm}) {
    for (MtpChain chain : {MtpChain::kNormed, MtpChain::kRaw}) {
      for (MtpIndexShare share : {MtpIndexShare::kExact, MtpIndexShare::kShared}) {
        auto drafter = MtpDrafter::Create(model, 96, MtpOptions{hidden, chain, share, {}});
        if (!model.config().has_indexer && share == MtpIndexShare::kShared) {  // nothing to share: refused
          EXPECT_FALSE(drafter.ok());
          continue;
        }
        ASSERT_TRUE(drafter.ok()) << drafter.status();
        EXPECT_EQ(Decode(model, drafter->get(), prompt, Options(4, 0.0, 0)), plain);
      }
    }
  }
}

// "+bf16-keys", "+fp8-keys": the same models with their indexer keys in bf16 or fp8 (a different
// selection, and still speculative output equal to plain output). "+bf16-act", "+fp8-act": the FP8
// matrices take their input rows in bf16 or fp8 (the pair tiles, whose rows must stay independent
// for the verify to give the decode's bits); "+fp8-weights" quantises the golden models at load, and
// "+bf16-weights" stores them in bf16, whose matrices then take bf16 rows too.
INSTANTIATE_TEST_SUITE_P(Models, LosslessTest,
                         ::testing::Values("glm_a", "dsv32_b", "glm47_c", "dsv3_d", "tiny_fp8", "glm_a+bf16-keys",
                                           "dsv32_b+bf16-keys", "glm_a+fp8-keys", "dsv32_b+fp8-keys", "tiny_fp8+fp8-act",
                                           "tiny_fp8+bf16-act", "dsv32_b+fp8-weights+fp8-act",
                                           "glm_a+fp8-weights+bf16-act+bf16-keys", "dsv3_d+fp8-weights+fp8-act",
                                           "glm47_c+bf16-weights+bf16-act"));

// The fp8 latent cache (DeepSeek-V3.2's served cache, attended in bf16 products): MTP drafts and
// scripted blocks accepted in full, in part and not at all give the plain decode's tokens with the same
// cache, greedy and sampled, with prompts on both sides of the top-k threshold (dense and gather paths).
TEST(Fp8LatentCacheLosslessTest, SpeculativeEqualsPlainWithTheServedCache) {
  for (const char* name : {"glm_a", "dsv32_b"}) {
    const Model& model = Golden(name);
    const int64_t K = testing_util::SparseThreshold(model.config());
    auto mtp = *MtpDrafter::Create(model, 96, MtpOptions{});
    int64_t differs_from_f32 = 0;
    for (double temperature : {0.0, 0.9}) {
      for (int64_t len : {K - 2, K + 6}) {
        const auto prompt = TestTokens(len, model.config().vocab_size, 300 + len);
        const auto plain =
            Decode(model, nullptr, prompt, Options(0, temperature, 7), nullptr, false, 96, LatentStorage::kFp8);
        differs_from_f32 += plain != Decode(model, nullptr, prompt, Options(0, temperature, 7));
        for (int64_t k = 1; k <= 4; ++k) {
          EXPECT_EQ(Decode(model, mtp.get(), prompt, Options(k, temperature, 7), nullptr, false, 96,
                           LatentStorage::kFp8),
                    plain)
              << name << " T " << temperature << " len " << len << " k " << k;
          ScriptedDrafter scripted(plain, len, 3, mtp.get());
          SpecStats stats;
          EXPECT_EQ(Decode(model, &scripted, prompt, Options(k, temperature, 7), &stats, false, 96, LatentStorage::kFp8),
                    plain)
              << name << " scripted T " << temperature << " len " << len << " k " << k;
          EXPECT_GE(stats.num_accepted_tokens, 8);
        }
      }
    }
    RecordProperty(std::string(name) + "_outputs_differing_from_f32", static_cast<int>(differs_from_f32));
  }
}

// index_share_for_mtp_iteration: identical drafts to exact mode whenever the MTP cache ≤ K.
TEST(MtpIndexShareTest, SharedEqualsExactWhileTheCacheFitsTopK) {
  const Model& model = Golden("glm_a");
  const int64_t K = testing_util::SparseThreshold(model.config());
  for (int64_t len = 3; len + 4 <= K; ++len) {
    const auto prompt = TestTokens(len, model.config().vocab_size, 40 + len);
    std::vector<int32_t> drafts[2];
    for (int mode = 0; mode < 2; ++mode) {
      auto drafter = *MtpDrafter::Create(
          model, 96, MtpOptions{MtpHidden::kPostNorm, MtpChain::kNormed,
                                mode == 0 ? MtpIndexShare::kExact : MtpIndexShare::kShared, {}});
      auto target = *ModelTarget::Create(model, 96);
      auto prefill = target->Run(prompt, true);
      ASSERT_TRUE(prefill.ok());
      std::vector<int32_t> sequence = prompt;
      sequence.push_back(3);
      ASSERT_TRUE(drafter->Observe(sequence, 0, len, *prefill).ok());
      auto draft = drafter->Propose(sequence, 3, DraftSampling{});
      ASSERT_TRUE(draft.ok());
      drafts[mode] = draft->tokens;
    }
    EXPECT_EQ(drafts[0], drafts[1]) << "prompt length " << len;
  }
}

// Without MTP weights the model still loads; MTP drafting fails clearly, lookup still works.
TEST(NoMtpTest, MtpDraftingFailsClearlyLookupWorks) {
  ScopedTempDir tmp;
  RandomCheckpointOptions options;
  options.include_mtp = false;
  ASSERT_TRUE(WriteRandomCheckpoint(tmp.File("m"), TinyGlmConfig(), options).ok());
  auto model = Model::Load(tmp.File("m"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto drafter = MtpDrafter::Create(**model, 64, MtpOptions{});
  ASSERT_FALSE(drafter.ok());
  EXPECT_EQ(drafter.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(drafter.status().message()), ::testing::HasSubstr("no MTP weights"));
  LookupDrafter lookup(LookupOptions{});
  const auto prompt = TestTokens(10, 128, 1);
  EXPECT_EQ(Decode(**model, &lookup, prompt, Options(3, 0.0, 0)), Decode(**model, nullptr, prompt, Options(0, 0.0, 0)));
}

TEST(GenerateBadInputTest, PromptLongerThanTheCache) {
  const Model& model = Golden("glm_a");
  auto target = *ModelTarget::Create(model, 16);
  auto result = Generate(*target, nullptr, TestTokens(16, model.config().vocab_size), Options(0, 0.0, 0));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr("does not fit the cache"));
  // The target is still usable.
  EXPECT_TRUE(Generate(*target, nullptr, TestTokens(8, model.config().vocab_size), Options(0, 0.0, 0)).ok());
}

}  // namespace
}  // namespace mtpspec
