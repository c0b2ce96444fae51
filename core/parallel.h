// A small persistent thread pool for data-parallel loops.
//
// ParallelFor is called per matmul in a decode step, thousands of times a second, so a call must
// cost a few microseconds at most: workers spin briefly on an atomic "job" word after finishing a
// job, and only fall asleep on a condition variable when nothing arrives for a while. The caller
// thread works on the job too, and chunks are claimed dynamically, so a worker that is slow to wake
// costs nothing: the others take its chunk.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtpspec {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread, so ThreadPool(1) starts no worker and runs everything
  // inline. Values below 1 are treated as 1. If the OS refuses to start a thread, the pool runs
  // with the threads it got (see num_threads()).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint contiguous ranges that together cover [0, n), and returns once
  // all calls have finished. Each range holds at least `min_chunk` indices (except when n itself is
  // smaller), so at most min(num_threads, n / min_chunk) ranges are made. Runs fn(0, n) inline
  // when that is one range, when called from inside another ParallelFor (of any pool), or when
  // another thread is already running a job on this pool. `fn` must not throw.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop();
  // Claims and runs chunks of the current job until none are left.
  void RunChunks() noexcept;  // a throwing fn terminates rather than unwinding mid-job
  bool JobAvailable(uint64_t last_job_seen) const;

  std::vector<std::thread> workers_;

  // The current job. Written by the dispatching thread only while no worker is inside the job.
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_size_ = 0;
  int64_t job_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> chunks_done_{0};

  // Id of the open job, or 0 when none is open. Ids increase, so a worker can tell a new job from
  // the one it just finished.
  std::atomic<uint64_t> open_job_{0};
  uint64_t last_job_id_ = 0;
  // Workers that have entered the open job and may still read its fields.
  std::atomic<int> workers_in_job_{0};
  std::mutex dispatch_mutex_;  // one dispatching thread at a time

  // Sleeping: a worker increments `sleepers_` before its final check of open_job_; a dispatcher
  // reads it after publishing a job and only then pays for the notify.
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stopping_{false};
};

// The process-wide pool, created on first use with, in order of precedence, the count given to
// SetDefaultThreadCount, the MTPSPEC_THREADS environment variable, or the hardware concurrency.
ThreadPool& DefaultThreadPool();

// Sets the default pool's thread count. FailedPrecondition once DefaultThreadPool() has been
// created; InvalidArgument unless 1 <= num_threads <= kMaxThreads.
absl::Status SetDefaultThreadCount(int num_threads);

inline constexpr int kMaxThreads = 1024;

// Parses a thread count such as the value of MTPSPEC_THREADS: a decimal integer in [1,
// kMaxThreads].
absl::StatusOr<int> ParseThreadCount(std::string_view text);

}  // namespace mtpspec
