// The MTP extends of a batch (MtpDraftChain::set_batch_extends and ProposeBatch): chains whose
// extends wait for the batch and run together give, cycle after cycle, the head logits and drafts
// of chains that extend alone at every Commit, bit for bit. Covered: prompts on either side of
// index_topk (dense and gather contexts; the prompt's extend runs at once, in the prefill), commits
// short enough to extend in the batch and backlogs long enough to extend alone, cycles without drafts that leave a backlog (a long one extends alone), chains
// near the end of their cache, and a batched extend that fails (every chain then extends alone,
// with the same bits).
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// CpuMtpBatch, counting its batched extends; with `fail`, every batched extend is refused.
class CountingBatch : public MtpBatchBackend {
 public:
  bool CanJoin(const MtpChainBackend& backend) const override { return inner_.CanJoin(backend); }
  absl::StatusOr<std::vector<MtpHeadRow*>> Heads(std::span<MtpChainBackend* const> backends) override {
    return inner_.Heads(backends);
  }
  absl::Status Steps(std::span<MtpChainBackend* const> backends, std::span<const int32_t> tokens,
                     std::span<const int64_t> positions, const MtpOptions& options) override {
    return inner_.Steps(backends, tokens, positions, options);
  }
  absl::Status Extends(std::span<MtpChainBackend* const> backends, std::span<const std::span<const int32_t>> tokens,
                       std::span<const int64_t> first_positions, const MtpOptions& options) override {
    if (fail) return absl::InternalError("refused for the test");
    ++calls;
    chains += static_cast<int64_t>(backends.size());
    for (std::span<const int32_t> t : tokens) max_rows = std::max<int64_t>(max_rows, static_cast<int64_t>(t.size()));
    return inner_.Extends(backends, tokens, first_positions, options);
  }
  bool fail = false;
  int64_t calls = 0, chains = 0, max_rows = 0;

 private:
  CpuMtpBatch inner_;
};

// Argmax drafts, keeping every head row's logits to compare bit for bit.
MtpDraftPicker Recording(std::vector<std::vector<float>>* logits) {
  return [logits](MtpHeadRow& head, int64_t) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::span<const float> row, head.HostLogits());
    logits->emplace_back(row.begin(), row.end());
    return Argmax(row.data(), static_cast<int64_t>(row.size()));
  };
}

std::unique_ptr<MtpDraftChain> NewChain(const Model& model, int64_t capacity) {
  auto backend = CpuMtpBackend::Create(model, capacity);
  EXPECT_TRUE(backend.ok()) << backend.status();
  auto chain = MtpDraftChain::Create(std::move(*backend), MtpOptions{});
  EXPECT_TRUE(chain.ok()) << chain.status();
  return std::move(*chain);
}

class BatchExtendTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(BatchExtendTest, BatchedExtendsGiveTheDraftsOfEagerOnes) {
  const auto& [name, fail] = GetParam();
  const Model& model = Load(name);
  const int64_t K = testing_util::SparseThreshold(model.config()), V = model.config().vocab_size, H = model.config().hidden_size;
  // Prompts: short (extends in the batch), around and past index_topk, long; chain 4 has a small cache.
  const std::vector<int64_t> prompts = {5, K - 2, K + 7, 3 * K + 1, 12};
  const std::vector<int64_t> capacities = {8 * K + 64, 8 * K + 64, 8 * K + 64, 8 * K + 64, 40};
  const int64_t chains_count = static_cast<int64_t>(prompts.size());
  std::vector<std::unique_ptr<MtpDraftChain>> eager, batched;
  std::vector<std::vector<int32_t>> sequences;
  std::mt19937 rng(17);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  auto hidden_rows = [&](int64_t rows) {
    std::vector<float> h(rows * H);  // [rows, H]
    for (float& v : h) v = unit(rng);
    return h;
  };
  for (int64_t i = 0; i < chains_count; ++i) {
    eager.push_back(NewChain(model, capacities[i]));
    batched.push_back(NewChain(model, capacities[i]));
    batched.back()->set_batch_extends(true);
    sequences.push_back(TestTokens(prompts[i] + 1, V, 70 + i));  // the prompt and the pending token
    const std::vector<float> h = hidden_rows(prompts[i]);
    ASSERT_TRUE(eager[i]->Commit(sequences[i], 0, prompts[i], h.data()).ok());
    ASSERT_TRUE(batched[i]->Commit(sequences[i], 0, prompts[i], h.data()).ok());
    EXPECT_EQ(batched[i]->deferred_pairs(), 0) << "the prompt's extend stays in the prefill";
  }
  CountingBatch batch;
  batch.fail = fail;
  for (int64_t cycle = 0; cycle < 12; ++cycle) {
    // Chain 3 drafts nothing in cycles 1 … 9 (a backlog of more than kLinearGemmRows pairs).
    std::vector<int64_t> ks(chains_count);
    for (int64_t i = 0; i < chains_count; ++i) ks[i] = (cycle + i) % 4;
    if (cycle >= 1 && cycle <= 9) ks[3] = 0;
    // Who drafts, as GenerateBatch asks: the chains with k > 0 together.
    std::vector<MtpDraftChain*> members;
    std::vector<std::span<const int32_t>> views;
    std::vector<int64_t> member_ks;
    std::vector<std::vector<std::vector<float>>> batched_logits(chains_count), eager_logits(chains_count);
    std::vector<MtpDraftPicker> picks;
    std::vector<int64_t> index;
    for (int64_t i = 0; i < chains_count; ++i) {
      if (ks[i] == 0) continue;
      members.push_back(batched[i].get());
      views.push_back(sequences[i]);
      member_ks.push_back(ks[i]);
      picks.push_back(Recording(&batched_logits[i]));
      index.push_back(i);
    }
    std::vector<absl::StatusOr<MtpChainDraft>> drafts =
        MtpDraftChain::ProposeBatch(members, views, member_ks, picks, batch);
    std::map<int64_t, std::vector<int32_t>> drafted;
    for (size_t m = 0; m < index.size(); ++m) {
      const int64_t i = index[m];
      ASSERT_TRUE(drafts[m].ok()) << drafts[m].status();
      auto own = eager[i]->Propose(sequences[i], ks[i], Recording(&eager_logits[i]));
      ASSERT_TRUE(own.ok()) << own.status();
      const std::string where = absl::StrCat(name, " cycle ", cycle, " chain ", i);
      EXPECT_EQ(drafts[m]->tokens, own->tokens) << where;
      EXPECT_EQ(batched_logits[i], eager_logits[i]) << where << ": head logits differ";
      EXPECT_EQ(batched[i]->committed_pairs(), eager[i]->committed_pairs()) << where;
      drafted[i] = drafts[m]->tokens;
    }
    // Each chain commits some of its drafts and a new token (three tokens after a cycle without
    // drafts, so that chain 3's backlog outgrows kLinearGemmRows).
    for (int64_t i = 0; i < chains_count; ++i) {
      const std::vector<int32_t>& d = drafted[i];
      const int64_t accepted = d.empty() ? 0 : (cycle + 2 * i) % (static_cast<int64_t>(d.size()) + 1);
      const int64_t fresh = d.empty() ? 3 : 1;
      const int64_t rows = accepted + fresh;
      const int64_t n = static_cast<int64_t>(sequences[i].size()) - 1;  // the pending token's position
      if (n + rows + 1 >= capacities[i]) continue;                      // this chain's cache is full
      for (int64_t a = 0; a < accepted; ++a) sequences[i].push_back(d[a]);
      for (int64_t f = 0; f < fresh; ++f) sequences[i].push_back(static_cast<int32_t>((31 * cycle + 7 * i + 3 * f + 3) % V));
      const std::vector<float> h = hidden_rows(rows);
      ASSERT_TRUE(eager[i]->Commit(sequences[i], n, rows, h.data()).ok());
      ASSERT_TRUE(batched[i]->Commit(sequences[i], n, rows, h.data()).ok());
    }
  }
  if (fail) {
    EXPECT_EQ(batch.calls, 0);
  } else {
    EXPECT_GT(batch.calls, 5) << "the due extends ran together";
    EXPECT_GE(batch.chains, 2 * batch.calls);
    EXPECT_LT(batch.max_rows, kLinearGemmRows) << "long extends run alone";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BatchExtendTest,
                         ::testing::Combine(::testing::Values("glm_a", "dsv32_b", "trained"), ::testing::Bool()));

}  // namespace
}  // namespace mtpspec
