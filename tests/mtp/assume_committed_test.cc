// MtpDraftChain::AssumeCommitted: a chain whose cache is filled outside it (here: copied from a chain
// that extended the prompt itself) and told so, then given only the prompt's newest pair, drafts
// exactly what the chain that extended every pair drafts, cycle after cycle, bit for bit (the
// prompt is short enough for the per-row tiles, so the newest pair's row is the same alone). And
// the call is refused where it would lie: after a Commit, or for more pairs than the cache holds.
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/indexer.h"
#include "gtest/gtest.h"
#include "kernels/linear.h"
#include "model/model.h"
#include "mtp/mtp_chain_cpu.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"
#include "verify/sampler.h"

namespace mtpspec {
namespace {

using testing_util::TestTokens;

const Model& Load(const std::string& name) { return testing_util::LoadMtpTestModel(name); }

struct Chain {
  std::unique_ptr<MtpDraftChain> chain;
  CpuMtpBackend* backend = nullptr;  // owned by chain
};

Chain NewChain(const Model& model, int64_t capacity) {
  auto backend = CpuMtpBackend::Create(model, capacity);
  EXPECT_TRUE(backend.ok()) << backend.status();
  Chain c;
  c.backend = backend->get();
  auto chain = MtpDraftChain::Create(std::move(*backend), MtpOptions{});
  EXPECT_TRUE(chain.ok()) << chain.status();
  c.chain = std::move(*chain);
  return c;
}

// Copies slots [0, n) of every layer (f32 latents) and sets the length.
void CopySlots(const KvCache& from, KvCache& to, int64_t n) {
  for (int64_t l = 0; l < from.num_layers(); ++l) {
    const LayerKvCache& a = from.layer(l);
    LayerKvCache& b = to.layer(l);
    std::memcpy(b.latent.data<float>(), a.latent.data<float>(), n * a.latent.dim(1) * sizeof(float));
    std::memcpy(b.rope_key.data<float>(), a.rope_key.data<float>(), n * a.rope_key.dim(1) * sizeof(float));
    if (!a.index_key.empty()) {
      // Whole blocks of slots (attention/indexer.h): the slots past n in the last one are never read.
      const int64_t floats = IndexKeyBlocks(n) * a.index_key.dim(1) * kIndexKeyBlock;
      std::memcpy(b.index_key.data<float>(), a.index_key.data<float>(), floats * sizeof(float));
    }
  }
  to.SetLength(n);
}

MtpDraftPicker Recording(std::vector<std::vector<float>>* logits) {
  return [logits](MtpHeadRow& head, int64_t) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::span<const float> row, head.HostLogits());
    logits->emplace_back(row.begin(), row.end());
    return Argmax(row.data(), static_cast<int64_t>(row.size()));
  };
}

class AssumeCommittedTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AssumeCommittedTest, AFilledCacheDraftsAsTheFullExtend) {
  const Model& model = Load(GetParam());
  const int64_t H = model.config().hidden_size, V = model.config().vocab_size;
  const int64_t n = kLinearGemmRows - 4;  // past the golden models' index_topk (8), on the per-row tiles
  const int64_t capacity = n + 64;
  std::vector<int32_t> sequence = TestTokens(n + 1, V, 5);  // the prompt and the pending token
  std::mt19937 rng(3);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> prompt_hidden(n * H);  // [n, H]
  for (float& v : prompt_hidden) v = unit(rng);

  Chain full = NewChain(model, capacity), filled = NewChain(model, capacity);
  ASSERT_TRUE(full.chain->Commit(sequence, 0, n, prompt_hidden.data()).ok());
  CopySlots(full.backend->cache(), filled.backend->mutable_cache(), n - 1);
  ASSERT_TRUE(filled.chain->AssumeCommitted(n - 1).ok());
  ASSERT_TRUE(filled.chain->Commit(sequence, n - 1, 1, prompt_hidden.data() + (n - 1) * H).ok());
  EXPECT_EQ(filled.chain->committed_pairs(), n);

  for (int64_t cycle = 0; cycle < 4; ++cycle) {
    std::vector<std::vector<float>> full_logits, filled_logits;
    auto a = full.chain->Propose(sequence, 3, Recording(&full_logits));
    auto b = filled.chain->Propose(sequence, 3, Recording(&filled_logits));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->tokens, b->tokens) << "cycle " << cycle;
    EXPECT_EQ(full_logits, filled_logits) << "cycle " << cycle << ": head logits differ";
    // Commit the first draft and a fresh token.
    const int64_t first = static_cast<int64_t>(sequence.size()) - 1;
    sequence.push_back(a->tokens[0]);
    sequence.push_back(static_cast<int32_t>((7 * cycle + 2) % V));
    std::vector<float> h(2 * H);  // [2, H]
    for (float& v : h) v = unit(rng);
    ASSERT_TRUE(full.chain->Commit(sequence, first, 2, h.data()).ok());
    ASSERT_TRUE(filled.chain->Commit(sequence, first, 2, h.data()).ok());
  }
}

TEST_P(AssumeCommittedTest, RefusedUnlessFreshAndInsideTheCache) {
  const Model& model = Load(GetParam());
  const int64_t H = model.config().hidden_size;
  Chain c = NewChain(model, 32);
  EXPECT_EQ(c.chain->AssumeCommitted(32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.chain->AssumeCommitted(-1).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> sequence = TestTokens(5, model.config().vocab_size, 1);
  const std::vector<float> h(4 * H, 0.5f);  // [4, H]
  ASSERT_TRUE(c.chain->Commit(sequence, 0, 4, h.data()).ok());
  EXPECT_EQ(c.chain->AssumeCommitted(2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.chain->committed_pairs(), 4) << "a refused call changes nothing";
  c.chain->Reset();
  EXPECT_TRUE(c.chain->AssumeCommitted(2).ok());
}

INSTANTIATE_TEST_SUITE_P(Models, AssumeCommittedTest, ::testing::Values("glm_a", "dsv32_b", "trained"));

}  // namespace
}  // namespace mtpspec
