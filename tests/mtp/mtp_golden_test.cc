// The MTP module against the oracle: research/golden/make_golden.py assembles the MTP layer from
// transformers' own decoder-layer class and follows docs/models.md, "The MTP layer as a drafter".
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/safetensors.h"
#include "gtest/gtest.h"
#include "mtp/mtp_module.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"

namespace mtpspec {
namespace {

using testing_util::Range;
using testing_util::RelativeMaxDiff;

struct GoldenMtp {
  std::unique_ptr<Model> model;
  std::unique_ptr<SafetensorsFile> fixture;
  std::unique_ptr<MtpModule> mtp;
  std::vector<int32_t> ids;
  ForwardOutput prefill;

  TensorView Get(const std::string& name) const {
    auto v = fixture->Get(name);
    EXPECT_TRUE(v.ok()) << v.status();
    return *v;
  }
};

GoldenMtp Load(const std::string& name) {
  GoldenMtp g;
  const std::string dir = absl::StrCat(MTPSPEC_GOLDEN_DIR, "/", name);
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  g.model = std::move(*model);
  auto fixture = SafetensorsFile::Open(dir + "/fixture.safetensors");
  EXPECT_TRUE(fixture.ok()) << fixture.status();
  g.fixture = std::move(*fixture);
  auto mtp = MtpModule::Create(*g.model);
  EXPECT_TRUE(mtp.ok()) << mtp.status();
  g.mtp = std::move(*mtp);
  const TensorView ids = g.Get("input_ids");
  for (int64_t i = 0; i < ids.numel(); ++i) g.ids.push_back(static_cast<int32_t>(ids.as<int64_t>()[i]));
  auto cache = *g.model->NewCache(64);
  auto out = g.model->Forward(*cache, g.ids, Range(0, static_cast<int64_t>(g.ids.size())));
  EXPECT_TRUE(out.ok()) << out.status();
  g.prefill = std::move(*out);
  return g;
}

// Pairs (h_t, x_{t+1}) for t = 0 … T−2 in one causal chunk.
MtpStepOutput MtpPrefill(const GoldenMtp& g, KvCache& cache, const Tensor& hidden, const MtpOptions& options) {
  const int64_t T = static_cast<int64_t>(g.ids.size());
  std::vector<int32_t> next(g.ids.begin() + 1, g.ids.end());
  auto out = g.mtp->Forward(cache, hidden.data<float>(), next, Range(0, T - 1), options);
  EXPECT_TRUE(out.ok()) << out.status();
  return std::move(*out);
}

class MtpGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpGoldenTest, PrefillPairsMatchOracle) {
  GoldenMtp g = Load(GetParam());
  MtpOptions options;
  auto cache = *g.mtp->NewCache(64);
  MtpStepOutput post = MtpPrefill(g, *cache, g.prefill.hidden_postnorm, options);
  EXPECT_LT(RelativeMaxDiff(post.logits.data<float>(), g.Get("mtp_prefill_logits").as<float>(), post.logits.numel()),
            1e-4);
  auto pre_cache = *g.mtp->NewCache(64);
  MtpStepOutput pre = MtpPrefill(g, *pre_cache, g.prefill.hidden_prenorm, options);
  EXPECT_LT(RelativeMaxDiff(pre.logits.data<float>(), g.Get("mtp_prefill_logits_prenorm").as<float>(),
                            pre.logits.numel()),
            1e-4);
}

void CheckChain(const GoldenMtp& g, MtpChain chain, const std::string& prefix) {
  const int64_t T = static_cast<int64_t>(g.ids.size()), H = g.model->config().hidden_size;
  const int64_t V = g.model->config().vocab_size;
  MtpOptions options;
  options.chain = chain;
  auto cache = *g.mtp->NewCache(64);
  MtpPrefill(g, *cache, g.prefill.hidden_postnorm, options);
  const int32_t first = static_cast<int32_t>(g.Get("mtp_chain_first_token").as<int64_t>()[0]);
  ASSERT_EQ(first, Argmax(g.prefill.logits.data<float>() + (T - 1) * V, V));
  const TensorView logits = g.Get(prefix + "_logits");
  const TensorView tokens = g.Get(prefix + "_tokens");
  std::vector<float> hidden(g.prefill.hidden_postnorm.data<float>() + (T - 1) * H,
                            g.prefill.hidden_postnorm.data<float>() + T * H);
  int32_t token = first;
  for (int64_t j = 0; j < logits.dim(0); ++j) {
    const int64_t position = T - 1 + j;
    auto step = g.mtp->Forward(*cache, hidden.data(), std::vector<int32_t>{token}, std::vector<int64_t>{position},
                               options);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(RelativeMaxDiff(step->logits.data<float>(), logits.as<float>() + j * V, V), 1e-4) << prefix << " " << j;
    token = Argmax(step->logits.data<float>(), V);
    EXPECT_EQ(token, tokens.as<int64_t>()[j]) << prefix << " step " << j;
    const Tensor& fed = chain == MtpChain::kNormed ? step->normed : step->raw;
    std::copy(fed.data<float>(), fed.data<float>() + H, hidden.begin());
  }
}

TEST_P(MtpGoldenTest, ChainedNormedStepsMatchOracle) { CheckChain(Load(GetParam()), MtpChain::kNormed, "mtp_chain_normed"); }
TEST_P(MtpGoldenTest, ChainedRawStepsMatchOracle) { CheckChain(Load(GetParam()), MtpChain::kRaw, "mtp_chain_raw"); }

// transformers drafts with a DeepSeek-V3 MTP layer itself (generate(use_mtp=True), k = 1, the trunk's
// embedding and head, which dsv3_d's copies equal): over the same committed sequence, the MTP
// module's draft after each anchor t must be its draft, logits and token.
TEST(MtpGoldenTest, DeepSeekV3DraftsEqualTransformersUseMtp) {
  GoldenMtp g = Load("dsv3_d");
  const TensorView sequence = g.Get("hf_mtp_sequence");
  const TensorView anchors = g.Get("hf_mtp_draft_anchor");
  const TensorView drafts = g.Get("hf_mtp_draft_tokens");
  const TensorView logits = g.Get("hf_mtp_draft_logits");
  const int64_t V = g.model->config().vocab_size;
  const int64_t last = anchors.as<int64_t>()[anchors.numel() - 1];
  std::vector<int32_t> ids;  // x_0 … x_{last+1}
  for (int64_t i = 0; i <= last + 1; ++i) ids.push_back(static_cast<int32_t>(sequence.as<int64_t>()[i]));
  const int64_t n = static_cast<int64_t>(ids.size());
  auto cache = *g.model->NewCache(64);
  auto trunk = g.model->Forward(*cache, ids, Range(0, n));
  ASSERT_TRUE(trunk.ok()) << trunk.status();
  // Pairs (h_s, x_{s+1}) for s = 0 … last: row s drafts x_{s+2}.
  auto mtp_cache = *g.mtp->NewCache(64);
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  auto out = g.mtp->Forward(*mtp_cache, trunk->hidden_postnorm.data<float>(), next, Range(0, n - 1), MtpOptions{});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t i = 0; i < anchors.numel(); ++i) {
    const int64_t t = anchors.as<int64_t>()[i];
    const float* ours = out->logits.data<float>() + t * V;
    EXPECT_LT(RelativeMaxDiff(ours, logits.as<float>() + i * V, V), 1e-4) << "anchor " << t;
    EXPECT_EQ(Argmax(ours, V), drafts.as<int64_t>()[i]) << "anchor " << t;
  }
}

// The drafter's own bookkeeping (prefill pairs, anchor position, chaining) reproduces the oracle's
// greedy chain.
TEST_P(MtpGoldenTest, DrafterProposesOracleChain) {
  GoldenMtp g = Load(GetParam());
  const int64_t T = static_cast<int64_t>(g.ids.size());
  for (MtpChain chain : {MtpChain::kNormed, MtpChain::kRaw}) {
    MtpOptions options;
    options.chain = chain;
    auto drafter = *MtpDrafter::Create(*g.model, 64, options);
    std::vector<int32_t> sequence = g.ids;
    sequence.push_back(static_cast<int32_t>(g.Get("mtp_chain_first_token").as<int64_t>()[0]));
    TargetStep step;
    step.hidden_postnorm = g.prefill.hidden_postnorm.Clone();
    step.hidden_prenorm = g.prefill.hidden_prenorm.Clone();
    ASSERT_TRUE(drafter->Observe(sequence, 0, T, step).ok());
    auto draft = drafter->Propose(sequence, 3, DraftSampling{});
    ASSERT_TRUE(draft.ok()) << draft.status();
    const TensorView tokens = g.Get(chain == MtpChain::kNormed ? "mtp_chain_normed_tokens" : "mtp_chain_raw_tokens");
    ASSERT_EQ(draft->tokens.size(), 3u);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(draft->tokens[j], tokens.as<int64_t>()[j]) << MtpChainName(chain) << " " << j;
  }
}

// Filling the MTP cache in chunks equals filling it one pair at a time.
TEST_P(MtpGoldenTest, ChunkedCacheFillEqualsOnePairAtATime) {
  GoldenMtp g = Load(GetParam());
  const int64_t T = static_cast<int64_t>(g.ids.size()), H = g.model->config().hidden_size;
  const int64_t V = g.model->config().vocab_size;
  MtpOptions options;
  auto chunked = *g.mtp->NewCache(64);
  MtpStepOutput whole = MtpPrefill(g, *chunked, g.prefill.hidden_postnorm, options);
  auto single = *g.mtp->NewCache(64);
  for (int64_t t = 0; t + 1 < T; ++t) {
    auto step = g.mtp->Forward(*single, g.prefill.hidden_postnorm.data<float>() + t * H,
                               std::vector<int32_t>{g.ids[t + 1]}, std::vector<int64_t>{t}, options);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(RelativeMaxDiff(step->logits.data<float>(), whole.logits.data<float>() + t * V, V), 1e-5) << t;
  }
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* a = chunked->layer(0).latent.data<float>() + t * g.model->config().kv_lora_rank;
    const float* b = single->layer(0).latent.data<float>() + t * g.model->config().kv_lora_rank;
    EXPECT_LT(RelativeMaxDiff(a, b, g.model->config().kv_lora_rank), 1e-6);
  }
}

// Rows [begin, end) of the prefill's hidden states as the TargetStep that committed them.
TargetStep CommittedRows(const GoldenMtp& g, int64_t begin, int64_t end) {
  const int64_t H = g.model->config().hidden_size;
  TargetStep step;
  for (auto [from, to] : {std::pair{&g.prefill.hidden_postnorm, &step.hidden_postnorm},
                          std::pair{&g.prefill.hidden_prenorm, &step.hidden_prenorm}}) {
    *to = Tensor::Empty(DType::kF32, {end - begin, H});  // [rows, H]
    std::memcpy(to->data<float>(), from->data<float>() + begin * H, (end - begin) * H * sizeof(float));
  }
  return step;
}

// The drafter's chunked extend equals extending one pair per call, and deferring the extend while
// the loop decodes plainly (Observe without Propose) changes only when it runs: the catch-up in
// the next Propose leaves the same cache and drafts.
TEST_P(MtpGoldenTest, DrafterChunkedAndDeferredExtendEqualOnePairAtATime) {
  GoldenMtp g = Load(GetParam());
  const int64_t T = static_cast<int64_t>(g.ids.size()), R = g.model->config().kv_lora_rank;
  ASSERT_GE(T, 8);
  std::vector<int32_t> sequence = g.ids;
  sequence.push_back(static_cast<int32_t>(g.Get("mtp_chain_first_token").as<int64_t>()[0]));
  std::vector<std::unique_ptr<MtpDrafter>> drafters;
  std::vector<std::vector<int32_t>> drafts;
  for (int64_t chunk : {1, 3, 256}) {
    MtpOptions options;
    options.extend_chunk = chunk;
    drafters.push_back(*MtpDrafter::Create(*g.model, 64, options));
    MtpDrafter& d = *drafters.back();
    ASSERT_TRUE(d.Observe(sequence, 0, T, CommittedRows(g, 0, T)).ok());
    EXPECT_EQ(d.committed_pairs(), T);  // the prompt is extended at its Observe
    EXPECT_EQ(d.deferred_pairs(), 0);
    auto draft = d.Propose(sequence, 3, DraftSampling{});
    ASSERT_TRUE(draft.ok()) << draft.status();
    EXPECT_EQ(draft->catch_up_seconds, 0.0);
    drafts.push_back(draft->tokens);
  }
  // Prompt in part, then two plain steps' worth of rows deferred, caught up by Propose.
  MtpOptions options;
  options.extend_chunk = 2;
  drafters.push_back(*MtpDrafter::Create(*g.model, 64, options));
  MtpDrafter& deferred = *drafters.back();
  ASSERT_TRUE(deferred.Observe(sequence, 0, T - 5, CommittedRows(g, 0, T - 5)).ok());
  EXPECT_EQ(deferred.committed_pairs(), T - 5);
  ASSERT_TRUE(deferred.Observe(sequence, T - 5, 2, CommittedRows(g, T - 5, T - 3)).ok());
  ASSERT_TRUE(deferred.Observe(sequence, T - 3, 3, CommittedRows(g, T - 3, T)).ok());
  EXPECT_EQ(deferred.committed_pairs(), T - 5);
  EXPECT_EQ(deferred.deferred_pairs(), 5);
  auto draft = deferred.Propose(sequence, 3, DraftSampling{});
  ASSERT_TRUE(draft.ok()) << draft.status();
  EXPECT_EQ(deferred.committed_pairs(), T);
  EXPECT_EQ(deferred.deferred_pairs(), 0);
  EXPECT_GT(draft->catch_up_seconds, 0.0);
  drafts.push_back(draft->tokens);
  // The whole prompt deferred (DeferPrompt, as a carried adaptive-k controller asks when it expects
  // plain decoding), caught up by the first Propose.
  drafters.push_back(*MtpDrafter::Create(*g.model, 64, options));
  MtpDrafter& lazy = *drafters.back();
  lazy.DeferPrompt();
  ASSERT_TRUE(lazy.Observe(sequence, 0, T - 1, CommittedRows(g, 0, T - 1)).ok());
  ASSERT_TRUE(lazy.Observe(sequence, T - 1, 1, CommittedRows(g, T - 1, T)).ok());
  EXPECT_EQ(lazy.committed_pairs(), 0);
  EXPECT_EQ(lazy.deferred_pairs(), T);
  draft = lazy.Propose(sequence, 3, DraftSampling{});
  ASSERT_TRUE(draft.ok()) << draft.status();
  EXPECT_EQ(lazy.committed_pairs(), T);
  EXPECT_GT(draft->catch_up_seconds, 0.0);
  drafts.push_back(draft->tokens);
  lazy.Reset();  // a new request extends its prompt at the Observe again
  ASSERT_TRUE(lazy.Observe(sequence, 0, T, CommittedRows(g, 0, T)).ok());
  EXPECT_EQ(lazy.committed_pairs(), T);

  for (size_t i = 1; i < drafts.size(); ++i) EXPECT_EQ(drafts[i], drafts[0]) << "drafter " << i;
  for (size_t i = 1; i < drafters.size(); ++i) {
    for (int64_t t = 0; t < T; ++t) {
      const float* a = drafters[0]->host_cache()->layer(0).latent.data<float>() + t * R;
      const float* b = drafters[i]->host_cache()->layer(0).latent.data<float>() + t * R;
      EXPECT_LT(RelativeMaxDiff(a, b, R), 1e-6) << "drafter " << i << " position " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MtpGoldenTest, ::testing::Values("glm_a", "dsv32_b", "glm47_c", "dsv3_d"));

TEST(MtpModuleTest, DeepSeekUsesItsOwnEmbedAndHeadCopies) {
  GoldenMtp g = Load("dsv32_b");
  EXPECT_TRUE(g.model->weights().mtp[0].own_embed);
  EXPECT_TRUE(g.model->weights().mtp[0].own_head);
  EXPECT_NE(g.model->weights().mtp[0].head.data, g.model->weights().lm_head.data);
}

}  // namespace
}  // namespace mtpspec
