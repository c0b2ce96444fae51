// The live batch (spec/batch_engine.h) on real models: many clients submit at once, requests join
// and leave while it runs, and every request's tokens, acceptance and stop reason equal the same
// request run alone through Generate (greedy and sampled, k from 0 to 4, token trees, logprobs);
// its events add up to its result. Admission is bounded and refused at once with the reason; a
// cancel frees a seat or a queue place; a failure ends only its request; the engine sleeps when idle
// and drains on request.
#include "spec/batch_engine.h"

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"
#include "tests/model/model_test_util.h"
#include "tests/mtp/mtp_test_models.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using testing_util::TestTokens;

constexpr int64_t kCapacity = 128;

// B seats, each a target and an MTP drafter, with the batch's verifier and drafter.
struct Seats {
  Seats(const Model& model, int64_t b) : verifier(model) {
    for (int64_t s = 0; s < b; ++s) {
      auto target = ModelTarget::Create(model, kCapacity);
      auto drafter = MtpDrafter::Create(model, kCapacity, MtpOptions{});
      EXPECT_TRUE(target.ok() && drafter.ok());
      targets.push_back(std::move(*target));
      drafters.push_back(std::move(*drafter));
      slots.push_back({targets.back().get(), drafters.back().get()});
    }
  }
  std::unique_ptr<BatchEngine> Engine(int64_t max_waiting) {
    EngineOptions options;
    options.batch.verifier = &verifier;
    options.batch.drafter = &drafter;
    options.max_waiting = max_waiting;
    auto engine = BatchEngine::Create(slots, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }
  std::vector<std::unique_ptr<ModelTarget>> targets;
  std::vector<std::unique_ptr<MtpDrafter>> drafters;
  std::vector<BatchSlot> slots;
  ModelBatchVerifier verifier;
  MtpBatchDrafter drafter;
};

// Request r of a mixed load: prompts on either side of the sparse threshold, k 0 … 4 or a tree,
// greedy or sampled, its own seed and budget, logprobs on some.
BatchRequest Mixed(const Model& model, int64_t r) {
  const int64_t K = testing_util::SparseThreshold(model.config());
  BatchRequest request;
  request.prompt = TestTokens(r % 2 == 0 ? K - 3 + r % 3 : K + 2 + r % 7, model.config().vocab_size, 300 + r);
  GenerateOptions& o = request.options;
  o.k = r % 5;
  if (r % 6 == 5) o.tree.branching = {2, 1};
  o.max_new_tokens = 6 + (r * 7) % 25;
  o.accept.sampling.temperature = r % 3 == 0 ? 0.0 : 0.8;
  o.accept.sampling.seed = 11 + r;
  o.logprobs = r % 4 == 1;
  o.stop_at_eos = false;
  return request;
}

GenerateResult Alone(const Model& model, const BatchRequest& request) {
  auto target = ModelTarget::Create(model, kCapacity);
  auto drafter = MtpDrafter::Create(model, kCapacity, MtpOptions{});
  EXPECT_TRUE(target.ok() && drafter.ok());
  auto result = Generate(**target, drafter->get(), request.prompt, request.options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : GenerateResult{};
}

// One request's events: the tokens and logprobs they carried, and the last one.
struct Heard {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t events = 0;
  EngineEvent last;
};

// A callback that collects the events and fulfils `done` with them at the end.
EngineCallback Collect(std::shared_ptr<Heard> heard, std::shared_ptr<std::promise<void>> done) {
  return [heard, done](EngineEvent event) {
    ++heard->events;
    heard->tokens.insert(heard->tokens.end(), event.tokens.begin(), event.tokens.end());
    heard->logprobs.insert(heard->logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    if (event.done) {
      heard->last = std::move(event);
      done->set_value();
    }
  };
}

class BatchEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchEngineTest, ConcurrentClientsEachGetTheirOwnRequestRunAlone) {
  const Model& model = testing_util::LoadMtpTestModel(GetParam());
  Seats seats(model, 4);
  std::unique_ptr<BatchEngine> engine = seats.Engine(64);
  constexpr int64_t kClients = 8, kPerClient = 5;
  std::vector<std::vector<std::shared_ptr<Heard>>> heard(kClients);
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      // Each client keeps two requests in flight: it submits the next before the last one ends.
      std::vector<std::shared_ptr<std::promise<void>>> pending;
      for (int64_t i = 0; i < kPerClient; ++i) {
        auto h = std::make_shared<Heard>();
        auto done = std::make_shared<std::promise<void>>();
        heard[c].push_back(h);
        pending.push_back(done);
        ASSERT_TRUE(engine->Submit(Mixed(model, c * kPerClient + i), Collect(h, done)).ok());
        if (i >= 1) pending[i - 1]->get_future().wait();
      }
      pending.back()->get_future().wait();
    });
  }
  for (std::thread& t : clients) t.join();
  int64_t tokens = 0;
  for (int64_t c = 0; c < kClients; ++c) {
    for (int64_t i = 0; i < kPerClient; ++i) {
      const int64_t r = c * kPerClient + i;
      const Heard& h = *heard[c][i];
      const std::string where = absl::StrCat(GetParam(), " request ", r);
      ASSERT_TRUE(h.last.status.ok()) << where << ": " << h.last.status;
      const GenerateResult alone = Alone(model, Mixed(model, r));
      EXPECT_EQ(h.last.result.tokens, alone.tokens) << where;
      EXPECT_EQ(h.last.result.stop_reason, alone.stop_reason) << where;
      EXPECT_EQ(h.last.result.stats.accepted_per_pos, alone.stats.accepted_per_pos) << where;
      EXPECT_EQ(h.tokens, h.last.result.tokens) << where << ": the events add up to the result";
      EXPECT_EQ(h.logprobs, h.last.result.logprobs) << where;
      EXPECT_EQ(h.logprobs.empty(), r % 4 != 1) << where;
      EXPECT_GE(h.events, 2) << where << ": one event per verify step, then the end";
      tokens += static_cast<int64_t>(h.tokens.size());
    }
  }
  EXPECT_EQ(engine->running(), 0);
  EXPECT_EQ(engine->waiting(), 0);
  const BatchStats stats = engine->stats();
  EXPECT_EQ(stats.requests, kClients * kPerClient);
  EXPECT_EQ(stats.failed, 0);
  EXPECT_EQ(stats.generated_tokens, tokens);
  EXPECT_GT(stats.mean_batch(), 1.0) << "requests ran side by side";
}

INSTANTIATE_TEST_SUITE_P(Models, BatchEngineTest, ::testing::Values("glm_a", "dsv3_d", "trained"));

// Holds the engine's thread inside a callback until released: what waits behind it stays queued.
// The events go on to `then`, if given.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::atomic<bool> entered{false};
  EngineCallback Blocking(EngineCallback then = nullptr) {
    return [this, then](EngineEvent event) {
      if (!entered.exchange(true)) opened.wait();
      if (then) then(std::move(event));
    };
  }
  void WaitEntered() const {
    while (!entered.load()) std::this_thread::yield();
  }
};

TEST(BatchEngineLimitsTest, AdmissionIsBoundedAndRefusedAtOnce) {
  const Model& model = testing_util::LoadMtpTestModel("glm_a");
  Seats seats(model, 1);
  std::unique_ptr<BatchEngine> engine = seats.Engine(/*max_waiting=*/2);
  Gate gate;
  ASSERT_TRUE(engine->Submit(Mixed(model, 0), gate.Blocking()).ok());
  gate.WaitEntered();  // request 0 holds the seat and the engine's thread
  std::vector<std::shared_ptr<Heard>> heard;
  std::vector<std::shared_ptr<std::promise<void>>> done;
  for (int64_t r = 1; r <= 2; ++r) {
    heard.push_back(std::make_shared<Heard>());
    done.push_back(std::make_shared<std::promise<void>>());
    ASSERT_TRUE(engine->Submit(Mixed(model, r), Collect(heard.back(), done.back())).ok());
  }
  EXPECT_EQ(engine->waiting(), 2);
  auto refused = engine->Submit(Mixed(model, 3), [](EngineEvent) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("the limit is 2"));
  gate.open.set_value();
  for (size_t i = 0; i < done.size(); ++i) {
    done[i]->get_future().wait();
    EXPECT_TRUE(heard[i]->last.status.ok());
    EXPECT_EQ(heard[i]->last.result.tokens, Alone(model, Mixed(model, static_cast<int64_t>(i) + 1)).tokens);
  }
  // No waiting room at all: requests still take the free seats.
  Seats two(model, 2);
  std::unique_ptr<BatchEngine> seated_only = two.Engine(/*max_waiting=*/0);
  std::vector<std::shared_ptr<std::promise<void>>> ends;
  for (int64_t r = 0; r < 2; ++r) {
    ends.push_back(std::make_shared<std::promise<void>>());
    EXPECT_TRUE(seated_only->Submit(Mixed(model, r), Collect(std::make_shared<Heard>(), ends.back())).ok()) << r;
  }
  for (auto& end : ends) end->get_future().wait();
}

TEST(BatchEngineLimitsTest, CancelFreesTheSeatOrTheQueuePlace) {
  const Model& model = testing_util::LoadMtpTestModel("glm_a");
  Seats seats(model, 1);
  std::unique_ptr<BatchEngine> engine = seats.Engine(8);
  Gate gate;
  auto first = engine->Submit(Mixed(model, 0), gate.Blocking());
  ASSERT_TRUE(first.ok());
  gate.WaitEntered();
  // A long request that cancels itself from its first event, and one waiting that is cancelled.
  BatchRequest long_request = Mixed(model, 4);
  long_request.options.max_new_tokens = 100;
  auto self = std::make_shared<Heard>();
  auto self_done = std::make_shared<std::promise<void>>();
  std::atomic<int64_t> self_handle{-1};
  EngineCallback collect = Collect(self, self_done);
  auto submitted = engine->Submit(long_request, [&, collect](EngineEvent event) {
    const bool first_event = self->events == 0;
    collect(std::move(event));
    if (first_event) {
      EXPECT_TRUE(engine->Cancel(self_handle.load()));
    }
  });
  ASSERT_TRUE(submitted.ok());
  self_handle = *submitted;
  auto queued = std::make_shared<Heard>();
  auto queued_done = std::make_shared<std::promise<void>>();
  auto cancelled = engine->Submit(Mixed(model, 5), Collect(queued, queued_done));
  auto after = std::make_shared<Heard>();
  auto after_done = std::make_shared<std::promise<void>>();
  ASSERT_TRUE(cancelled.ok());
  ASSERT_TRUE(engine->Submit(Mixed(model, 6), Collect(after, after_done)).ok());
  EXPECT_TRUE(engine->Cancel(*cancelled));
  EXPECT_FALSE(engine->Cancel(12345));
  gate.open.set_value();

  queued_done->get_future().wait();
  EXPECT_TRUE(queued->last.status.ok());
  EXPECT_EQ(queued->last.result.stop_reason, "cancelled");
  EXPECT_TRUE(queued->tokens.empty());
  self_done->get_future().wait();
  EXPECT_EQ(self->last.result.stop_reason, "cancelled");
  EXPECT_LT(self->last.result.tokens.size(), 100u);
  EXPECT_EQ(self->tokens, self->last.result.tokens);
  after_done->get_future().wait();  // the seat the cancelled request left served the next one
  EXPECT_EQ(after->last.result.tokens, Alone(model, Mixed(model, 6)).tokens);
  EXPECT_FALSE(engine->Cancel(*cancelled)) << "an ended request cannot be cancelled again";
}

TEST(BatchEngineLimitsTest, AFailureEndsOnlyItsRequest) {
  const Model& model = testing_util::LoadMtpTestModel("glm_a");
  Seats seats(model, 2);
  std::unique_ptr<BatchEngine> engine = seats.Engine(8);
  std::vector<std::shared_ptr<Heard>> heard;
  std::vector<std::shared_ptr<std::promise<void>>> done;
  for (int64_t r = 0; r < 4; ++r) {
    BatchRequest request = Mixed(model, r);
    if (r == 1) request.prompt.push_back(static_cast<int32_t>(model.config().vocab_size));  // outside the vocabulary
    if (r == 2) request.options.k = 99;                                                     // refused by the loop
    heard.push_back(std::make_shared<Heard>());
    done.push_back(std::make_shared<std::promise<void>>());
    ASSERT_TRUE(engine->Submit(request, Collect(heard.back(), done.back())).ok());
  }
  for (auto& d : done) d->get_future().wait();
  EXPECT_THAT(std::string(heard[1]->last.status.message()), HasSubstr("vocabulary"));
  EXPECT_THAT(std::string(heard[2]->last.status.message()), HasSubstr("k must be in"));
  for (int64_t r : {0, 3}) {
    ASSERT_TRUE(heard[r]->last.status.ok()) << heard[r]->last.status;
    EXPECT_EQ(heard[r]->last.result.tokens, Alone(model, Mixed(model, r)).tokens);
  }
  EXPECT_EQ(engine->stats().failed, 2);
}

TEST(BatchEngineLimitsTest, SleepsWhenIdleWakesForWorkAndDrains) {
  const Model& model = testing_util::LoadMtpTestModel("glm_a");
  Seats seats(model, 2);
  std::unique_ptr<BatchEngine> engine = seats.Engine(8);
  for (int round = 0; round < 2; ++round) {  // idle between the rounds
    auto heard = std::make_shared<Heard>();
    auto done = std::make_shared<std::promise<void>>();
    ASSERT_TRUE(engine->Submit(Mixed(model, round), Collect(heard, done)).ok());
    done->get_future().wait();
    EXPECT_EQ(heard->last.result.tokens, Alone(model, Mixed(model, round)).tokens);
    EXPECT_EQ(engine->running(), 0);
  }
  // Drain with no time left, while the engine's thread is held in the first request's first event:
  // the running and the waiting requests all end as cancelled, and nothing new is taken.
  Gate gate;
  std::vector<std::shared_ptr<Heard>> heard;
  for (int64_t r = 0; r < 4; ++r) {
    BatchRequest request = Mixed(model, r);
    request.options.max_new_tokens = 90;  // more than one cycle's tokens: still running at the next cancel
    heard.push_back(std::make_shared<Heard>());
    EngineCallback collect = Collect(heard.back(), std::make_shared<std::promise<void>>());
    ASSERT_TRUE(engine->Submit(request, r == 0 ? gate.Blocking(collect) : collect).ok());
    if (r == 0) gate.WaitEntered();
  }
  std::thread drainer([&] { engine->Drain(0.0); });
  while (engine->Submit(Mixed(model, 8), [](EngineEvent) {}).status().code() != absl::StatusCode::kUnavailable) {
    std::this_thread::yield();  // until the drain has closed admission, its cancels queued with it
  }
  gate.open.set_value();
  drainer.join();
  for (const auto& h : heard) {
    EXPECT_TRUE(h->last.done);
    EXPECT_TRUE(h->last.status.ok());
    EXPECT_EQ(h->last.result.stop_reason, "cancelled");
  }
  EXPECT_EQ(engine->running(), 0);
  EXPECT_EQ(engine->waiting(), 0);
  auto late = engine->Submit(Mixed(model, 9), [](EngineEvent) {});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mtpspec
