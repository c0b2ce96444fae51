// A live batch: requests are submitted while it runs, join free seats, stream their tokens one verify
// step at a time, and leave when they finish, fail or are cancelled. It runs the same phases as
// GenerateBatch (spec/batch_loop.h) on a thread of its own, which sleeps while no request is
// running or waiting.
//
// Exactness: every request's tokens equal those of the same request run alone through Generate with
// the same options, whatever arrives or leaves around it (the phases give each request the bits of
// its own forward; see spec/batch.h).
//
// Admission is bounded: at most B requests run (one per slot) and at most max_waiting wait; a
// request past that is refused at once with the reason. A failure ends only the request it belongs
// to.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/batch.h"
#include "spec/batch_loop.h"

namespace mtpspec {

// What a request hears, on the engine's thread: each verify step's committed tokens (the prefill's
// first token included) with their log-probabilities when its options ask for them, then one last
// event with `done`.
struct EngineEvent {
  std::vector<int32_t> tokens;  // the tokens this step committed (may be empty in the last event)
  std::vector<float> logprobs;  // [tokens] with GenerateOptions::logprobs
  bool done = false;
  // With done: ok when the request finished or was cancelled (result.stop_reason says which), else
  // why it failed; result holds everything it produced, with its statistics.
  absl::Status status;
  GenerateResult result;
};
// Runs on the engine's thread and must return quickly (hand the event to another thread to block).
using EngineCallback = std::function<void(EngineEvent)>;

struct EngineOptions {
  BatchOptions batch;          // the verifier, the batch drafter and the clock (no k schedule)
  // Requests that may wait for a seat beyond those the free seats will take; past that Submit refuses.
  int64_t max_waiting = 64;
};

class BatchEngine {
 public:
  // `slots` (distinct targets and drafters) and the verifier and drafter of `options` must outlive
  // the engine. Starts the engine's thread.
  static absl::StatusOr<std::unique_ptr<BatchEngine>> Create(std::vector<BatchSlot> slots, EngineOptions options);
  // Stops the thread; requests still running or waiting end as cancelled.
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Queues a request and returns its handle. Refused at once: options that cannot run in a batch
  // (InvalidArgument), a full queue (ResourceExhausted: the reason names the limit), or an engine
  // that drains or stops (Unavailable). Errors of the request itself (its prompt, a failed step)
  // arrive in its last event instead.
  absl::StatusOr<int64_t> Submit(BatchRequest request, EngineCallback callback);
  // Ends a request before the next cycle: a waiting one leaves the queue, a running one frees its
  // seat; its callback gets its last event with stop reason "cancelled". False when the handle is
  // unknown or has already ended.
  bool Cancel(int64_t handle);
  // Refuses new requests, lets the running and waiting ones finish until `timeout_seconds` has
  // passed, then cancels the rest. Returns when none is left.
  void Drain(double timeout_seconds);

  // Requests holding a seat (those being prefilled included), and requests waiting for one.
  int64_t running() const;
  int64_t waiting() const;
  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  // The statistics of every cycle so far (the requests that have left, their tokens, the time split).
  BatchStats stats() const;

 private:
  BatchEngine(std::vector<BatchSlot> slots, EngineOptions options);
  void Run();
  // The token observer and the end of requests, from the loop's records.
  class Events;

  struct Waiting {
    int64_t handle;
    BatchRequest request;
  };

  const std::vector<BatchSlot> slots_;
  const EngineOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;   // the loop: work arrived, a cancel, or stop
  std::condition_variable idle_;   // Drain: the last request left
  std::deque<Waiting> waiting_;
  std::map<int64_t, EngineCallback> callbacks_;  // every request not yet ended, by handle
  std::set<int64_t> cancels_;      // running requests to end before the next cycle
  int64_t next_handle_ = 1;
  int64_t seated_ = 0;             // requests holding a seat
  int64_t admitting_ = 0;          // requests taken from the queue whose prefill runs
  bool accepting_ = true;
  bool stop_ = false;
  std::unique_ptr<Events> events_;
  std::unique_ptr<BatchStatsRecorder> stats_;  // guarded by mutex_
  std::unique_ptr<BatchLoop> loop_;            // the engine thread's
  std::thread thread_;
};

}  // namespace mtpspec
