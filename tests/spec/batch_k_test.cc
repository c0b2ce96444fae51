// The batch's draft-length controller (spec/batch_k.h): its verify-cost line and acceptance
// estimates, the choices they imply (all-out drafting when extra rows are free and drafts are
// accepted, none when rows cost in proportion and drafts fail, more drafts for the request that is
// accepted more), its probes, and GenerateBatch driving k = auto requests with it (output still
// equal to plain decoding).
#include <chrono>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/batch.h"
#include "spec/batch_k.h"
#include "tests/spec/fake_models.h"

namespace mtpspec {
namespace {

using spec_testing::FakeTarget;
using spec_testing::OracleLogits;
using spec_testing::OracleToken;
using spec_testing::OracleWithMistakes;
using spec_testing::ScriptedDrafter;

// Teaches the controller: `cycles` forwards at each row count, seconds = fixed + per_row · rows.
void Teach(BatchDraftController& c, int64_t batch, double fixed, double per_row, std::vector<int64_t> rows) {
  for (int64_t r : rows) {
    for (int i = 0; i < 3; ++i) c.RecordCycle(r, fixed + per_row * static_cast<double>(r), 1, 1e-4, batch, 1e-5);
  }
}

TEST(BatchDraftControllerTest, TheVerifyLineInterpolatesTheMeasuredRowCounts) {
  BatchDraftController c(4);
  c.RecordCycle(4, 1.0, 0, 0, 0, 0);
  EXPECT_DOUBLE_EQ(c.VerifySeconds(8, 4), 2.0) << "one row count: extra rows at its per-row cost";
  c.RecordCycle(8, 1.2, 1, 0.01, 4, 0.001);
  EXPECT_NEAR(c.VerifySeconds(6, 4), 1.1, 1e-12);
  EXPECT_NEAR(c.VerifySeconds(12, 4), 1.4, 1e-12) << "extrapolated along the line";
}

// A row count is priced at the median of its last five forwards: one preempted forward does not move
// it, and the price follows a context that grows.
TEST(BatchDraftControllerTest, OnePreemptedForwardDoesNotMoveTheVerifyPrice) {
  BatchDraftController c(4);
  for (int i = 0; i < 4; ++i) c.RecordCycle(4, 1.0, 0, 0, 0, 0);
  c.RecordCycle(4, 25.0, 0, 0, 0, 0);  // the machine was busy elsewhere
  EXPECT_DOUBLE_EQ(c.VerifySeconds(4, 4), 1.0);
  for (int i = 0; i < 3; ++i) c.RecordCycle(4, 2.0, 0, 0, 0, 0);  // the context grew
  EXPECT_DOUBLE_EQ(c.VerifySeconds(4, 4), 2.0);
  c.RecordCycle(8, 3.0, 1, 0.01, 4, 0.001);
  c.RecordCycle(8, 40.0, 1, 0.01, 4, 0.001);
  c.RecordCycle(8, 3.0, 1, 0.01, 4, 0.001);
  EXPECT_DOUBLE_EQ(c.VerifySeconds(8, 4), 3.0);
  EXPECT_DOUBLE_EQ(c.VerifySeconds(12, 4), 4.0);  // the line through (4, 2) and (8, 3)
}

TEST(BatchDraftControllerTest, AcceptanceStartsFromThePoolAndThenFollowsTheRequest) {
  BatchDraftController c(3);
  EXPECT_DOUBLE_EQ(c.Acceptance(7, 1), BatchDraftController::kPriorAcceptance);
  for (int i = 0; i < 40; ++i) c.RecordAcceptance(1, 3, 3);  // request 1: everything accepted
  EXPECT_GT(c.Acceptance(1, 1), 0.9);
  EXPECT_GT(c.Acceptance(9, 1), 0.8) << "a new request starts from the pooled rate";
  for (int i = 0; i < 200; ++i) c.RecordAcceptance(2, 3, 0);  // request 2: nothing accepted
  EXPECT_LT(c.Acceptance(2, 1), 0.05);
}

TEST(BatchDraftControllerTest, FreeRowsAndAcceptedDraftsDraftAllOut) {
  BatchDraftController c(4);
  Teach(c, 4, 0.01, 0.0, {4, 8, 12});  // a memory-bound forward: extra rows cost nothing
  for (int64_t r = 0; r < 4; ++r) {
    for (int i = 0; i < 30; ++i) c.RecordAcceptance(r, 4, 4);
  }
  bool probe = true;
  const std::vector<int64_t> ids = {0, 1, 2, 3}, caps = {4, 4, 4, 2};
  EXPECT_EQ(c.Choose(ids, caps, 0, &probe), (std::vector<int64_t>{4, 4, 4, 2}));
  EXPECT_FALSE(probe);
}

TEST(BatchDraftControllerTest, RowsThatCostInProportionAndRejectedDraftsDecodePlainly) {
  BatchDraftController c(4);
  Teach(c, 4, 0.0, 0.01, {4, 8, 12});  // every row costs as much as a plain one
  for (int64_t r = 0; r < 4; ++r) {
    for (int i = 0; i < 30; ++i) c.RecordAcceptance(r, 2, 0);
  }
  bool probe = true;
  const std::vector<int64_t> ids = {0, 1, 2, 3}, caps = {4, 4, 4, 4};
  EXPECT_EQ(c.Choose(ids, caps, 0, &probe), (std::vector<int64_t>(4, 0)));
}

TEST(BatchDraftControllerTest, TheRequestThatIsAcceptedMoreDraftsMore) {
  BatchDraftController c(4);
  Teach(c, 2, 0.01, 0.002, {2, 4, 6, 8});  // a row costs a tenth of the fixed part
  for (int i = 0; i < 60; ++i) {
    c.RecordAcceptance(0, 4, 4);  // request 0: always accepted
    c.RecordAcceptance(1, 4, i % 4 == 0 ? 1 : 0);  // request 1: rarely
  }
  bool probe = true;
  const std::vector<int64_t> ids = {0, 1}, caps = {4, 4};
  const std::vector<int64_t> k = c.Choose(ids, caps, 0, &probe);
  EXPECT_GT(k[0], k[1]);
  EXPECT_GE(k[0], 2);
}

TEST(BatchDraftControllerTest, UntaughtItDecodesPlainlyAndProbesOneDraftDeeper) {
  BatchDraftController c(4);
  const std::vector<int64_t> ids = {0, 1, 2}, caps = {4, 4, 1};
  for (int64_t cycle = 1; cycle < BatchDraftController::kFirstGap; ++cycle) {
    bool probe = true;
    EXPECT_EQ(c.Choose(ids, caps, 0, &probe), (std::vector<int64_t>(3, 0))) << cycle;
    EXPECT_FALSE(probe);
    c.RecordCycle(3, 0.01, 0, 0, 0, 0);
  }
  bool probe = false;
  EXPECT_EQ(c.Choose(ids, caps, 0, &probe), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_TRUE(probe);
  // With a flat verify and accepted drafts measured, the next choice drafts.
  c.RecordCycle(6, 0.0101, 1, 0.0001, 3, 0.00001);
  for (int64_t r = 0; r < 3; ++r) {
    for (int i = 0; i < 20; ++i) c.RecordAcceptance(r, 1, 1);
  }
  const std::vector<int64_t> next = c.Choose(ids, caps, 0, &probe);
  EXPECT_FALSE(probe);
  EXPECT_GT(next[0], 0);
}

// A batch verifier over fakes whose forward costs `fixed` seconds whatever its rows (a memory-bound
// batched forward, where extra verify rows come nearly free).
class FlatCostVerifier : public BatchVerifier {
 public:
  explicit FlatCostVerifier(double fixed) : fixed_(fixed) {}
  bool CanBatch(const Target&) const override { return true; }
  absl::StatusOr<BatchVerification> VerifyBatch(std::span<Target* const> targets,
                                                std::span<const std::vector<int32_t>> blocks) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(fixed_);
    while (std::chrono::steady_clock::now() < until) {
    }
    BatchVerification out;
    for (size_t i = 0; i < targets.size(); ++i) {
      auto step = targets[i]->Run(blocks[i], /*all_logits=*/true);
      if (!step.ok()) return step.status();
      out.steps.push_back(std::move(*step));
      out.rows += static_cast<int64_t>(blocks[i].size());
    }
    return out;
  }

 private:
  double fixed_;
};

TEST(BatchDraftControllerTest, GenerateBatchDraftsForAutoRequestsWhenRowsAreFreeAndStaysLossless) {
  constexpr int64_t kVocab = 16, kCapacity = 512;
  std::vector<std::unique_ptr<FakeTarget>> targets;
  std::vector<std::unique_ptr<ScriptedDrafter>> drafters;
  std::vector<BatchSlot> slots;
  for (int i = 0; i < 3; ++i) {
    targets.push_back(std::make_unique<FakeTarget>(kVocab, kCapacity, OracleLogits(kVocab, 6.0f)));
    drafters.push_back(std::make_unique<ScriptedDrafter>(OracleWithMistakes({50, 90}, kVocab)));
    slots.push_back({targets.back().get(), drafters.back().get()});
  }
  std::vector<BatchRequest> requests(3);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t p = 0; p < 4 + r; ++p) requests[r].prompt.push_back(OracleToken(p, kVocab));
    requests[r].options.k = 4;
    requests[r].options.adaptive_k = true;
    requests[r].options.max_new_tokens = 150;
    requests[r].options.stop_at_eos = false;
  }
  FlatCostVerifier verifier(0.005);
  BatchOptions options;
  options.verifier = &verifier;
  auto result = GenerateBatch(slots, requests, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (int64_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(result->requests[r].status.ok()) << result->requests[r].status;
    const SpecStats& s = result->requests[r].result.stats;
    int64_t drafting = 0;
    for (size_t k = 1; k < s.k_decisions.size(); ++k) drafting += s.k_decisions[k];
    EXPECT_GT(drafting, s.k_decisions[0]) << "request " << r << ": free rows and accepted drafts should pay";
    EXPECT_GT(s.num_accepted_tokens, 0);
    int64_t probes = 0;
    for (int64_t n : s.probe_decisions) probes += n;
    EXPECT_GT(probes, 0) << "the controller probed";
    FakeTarget plain_target(kVocab, kCapacity, OracleLogits(kVocab, 6.0f));
    GenerateOptions plain = requests[r].options;
    plain.adaptive_k = false;
    plain.k = 0;
    auto alone = Generate(plain_target, nullptr, requests[r].prompt, plain);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(result->requests[r].result.tokens, alone->tokens);
  }
}

}  // namespace
}  // namespace mtpspec
