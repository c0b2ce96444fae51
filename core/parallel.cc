#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mtpspec {
namespace {

// True on pool workers, and on a dispatching thread while its job runs: a ParallelFor issued from
// inside a job then runs inline instead of waiting on workers that are busy with the outer job.
thread_local bool t_inside_parallel_job = false;

// An idle worker first spins on `pause` for kPauseSpinTime, then keeps polling but yields the CPU
// between polls until kPollTimeBeforeSleep, then sleeps. Waking a sleeping worker costs tens of
// microseconds (~60 us measured on a 2-vCPU VM), more than a small matmul, so polling must outlast
// the gaps between the ParallelFor calls of a decode step. Yielding matters when the machine is
// oversubscribed: a worker spinning on the dispatcher's CPU would hold it for a whole time slice.
constexpr std::chrono::microseconds kPauseSpinTime{50};
constexpr std::chrono::microseconds kPollTimeBeforeSleep{2000};
// Spins between clock reads while waiting for a job.
constexpr int kSpinsPerClockCheck = 64;
// The dispatcher waiting for a straggling chunk yields the CPU after this many spins.
constexpr int kSpinIterationsBeforeYield = 1024;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins (then yields) until `done()` holds.
template <typename Predicate>
void SpinUntil(Predicate done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins < kSpinIterationsBeforeYield) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

class InsideJobScope {
 public:
  InsideJobScope() : was_inside_(t_inside_parallel_job) { t_inside_parallel_job = true; }
  ~InsideJobScope() { t_inside_parallel_job = was_inside_; }

 private:
  bool was_inside_;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int wanted = std::clamp(num_threads, 1, kMaxThreads);
  workers_.reserve(wanted - 1);
  for (int i = 1; i < wanted; ++i) {
    try {
      workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error&) {
      break;  // run with the threads we have
    }
  }
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool ThreadPool::JobAvailable(uint64_t last_job_seen) const {
  const uint64_t job = open_job_.load();
  return job != 0 && job != last_job_seen;
}

void ThreadPool::WorkerLoop() {
  t_inside_parallel_job = true;
  uint64_t last_job_seen = 0;
  while (true) {
    const auto idle_since = std::chrono::steady_clock::now();
    bool yielding = false;
    int spins = 0;
    while (!stopping_.load(std::memory_order_relaxed) && !JobAvailable(last_job_seen)) {
      if (!yielding && ++spins % kSpinsPerClockCheck != 0) {
        CpuRelax();
        continue;
      }
      const auto idle_for = std::chrono::steady_clock::now() - idle_since;
      if (idle_for < kPauseSpinTime) continue;
      if (idle_for < kPollTimeBeforeSleep) {
        yielding = true;
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1);  // seq_cst: ordered before the predicate's load of open_job_
      wake_.wait(lock, [&] { return stopping_.load() || JobAvailable(last_job_seen); });
      sleepers_.fetch_sub(1);
      break;
    }
    if (stopping_.load()) return;

    const uint64_t job = open_job_.load();
    if (job == 0 || job == last_job_seen) continue;
    // Register, then re-check that the job is still open. The dispatcher closes the job before it
    // waits for workers_in_job_ to drain, so either it sees us registered and waits, or we see the
    // job closed and leave without touching its fields.
    workers_in_job_.fetch_add(1);
    if (open_job_.load() == job) RunChunks();
    workers_in_job_.fetch_sub(1, std::memory_order_release);
    last_job_seen = job;
  }
}

void ThreadPool::RunChunks() noexcept {
  // Chunk c covers [c * base + min(c, extra), ...): the first `extra` chunks get one more index.
  const int64_t base = job_size_ / job_chunks_;
  const int64_t extra = job_size_ % job_chunks_;
  while (true) {
    const int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= job_chunks_) return;
    const int64_t begin = chunk * base + std::min(chunk, extra);
    const int64_t end = begin + base + (chunk < extra ? 1 : 0);
    (*job_fn_)(begin, end);
    chunks_done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t chunks = std::min<int64_t>(num_threads(), n / min_chunk);
  if (chunks <= 1 || t_inside_parallel_job) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> dispatch(dispatch_mutex_, std::try_to_lock);
  if (!dispatch.owns_lock()) {  // another thread's job is running; don't queue behind it
    fn(0, n);
    return;
  }
  InsideJobScope inside_job;

  // No worker is inside a job here (the previous dispatch waited for them), so the fields are ours.
  job_fn_ = &fn;
  job_size_ = n;
  job_chunks_ = chunks;
  next_chunk_.store(0, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t job = ++last_job_id_;
  open_job_.store(job);  // seq_cst: publishes the fields, ordered before the load of sleepers_
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_.notify_all();
  }

  RunChunks();
  SpinUntil([&] { return chunks_done_.load(std::memory_order_acquire) == chunks; });
  open_job_.store(0);
  SpinUntil([&] { return workers_in_job_.load(std::memory_order_acquire) == 0; });
}

namespace {

std::mutex g_default_pool_mutex;
std::atomic<ThreadPool*> g_default_pool{nullptr};
int g_requested_default_threads = 0;  // 0: not set

int HardwareThreadCount() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
    const int count = CPU_COUNT(&cpus);
    if (count > 0) return std::min(count, kMaxThreads);
  }
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxThreads);
}

int DefaultThreadCount() {
  if (g_requested_default_threads > 0) return g_requested_default_threads;
  if (const char* env = std::getenv("MTPSPEC_THREADS"); env != nullptr) {
    absl::StatusOr<int> parsed = ParseThreadCount(env);
    if (parsed.ok()) return *parsed;
    std::fprintf(stderr, "mtpspec: ignoring MTPSPEC_THREADS: %s\n",
                 std::string(parsed.status().message()).c_str());
  }
  return HardwareThreadCount();
}

}  // namespace

ThreadPool& DefaultThreadPool() {
  if (ThreadPool* pool = g_default_pool.load(std::memory_order_acquire)) return *pool;
  std::lock_guard<std::mutex> lock(g_default_pool_mutex);
  if (g_default_pool.load(std::memory_order_relaxed) == nullptr) {
    // Never destroyed: workers must outlive every static that might still call ParallelFor.
    g_default_pool.store(new ThreadPool(DefaultThreadCount()), std::memory_order_release);
  }
  return *g_default_pool.load(std::memory_order_relaxed);
}

absl::Status SetDefaultThreadCount(int num_threads) {
  if (num_threads < 1 || num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetDefaultThreadCount: num_threads = ", num_threads, " is outside [1, ",
                     kMaxThreads, "]"));
  }
  std::lock_guard<std::mutex> lock(g_default_pool_mutex);
  if (g_default_pool.load(std::memory_order_relaxed) != nullptr) {
    return absl::FailedPreconditionError(
        "SetDefaultThreadCount: the default thread pool is already in use");
  }
  g_requested_default_threads = num_threads;
  return absl::OkStatus();
}

absl::StatusOr<int> ParseThreadCount(std::string_view text) {
  int count = 0;
  const std::string digits(text);
  if (!absl::SimpleAtoi(digits, &count) || count < 1 || count > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread count \"", digits, "\" is not an integer in [1, ", kMaxThreads, "]"));
  }
  return count;
}

}  // namespace mtpspec
