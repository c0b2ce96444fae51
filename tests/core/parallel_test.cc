#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

// Runs one ParallelFor and checks that the ranges are non-empty, disjoint, cover [0, n) exactly
// once, respect min_chunk, and number at most num_threads.
void ExpectExactCover(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::mutex ranges_mutex;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
    std::lock_guard<std::mutex> lock(ranges_mutex);
    ranges.emplace_back(begin, end);
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(visits[i].load(), 1) << "index " << i << " n=" << n << " min_chunk=" << min_chunk
                                   << " threads=" << pool.num_threads();
  }
  if (n <= 0) {
    EXPECT_TRUE(ranges.empty());
    return;
  }
  EXPECT_LE(static_cast<int>(ranges.size()), pool.num_threads());
  for (const auto& [begin, end] : ranges) {
    EXPECT_LT(begin, end);
    if (ranges.size() > 1) {
      EXPECT_GE(end - begin, min_chunk);
    }
  }
}

TEST(ParallelForTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 63, 64, 65, 1000, 4097, 100003}) {
      for (int64_t min_chunk : {-1, 0, 1, 2, 3, 16, 1000, 1000000}) {
        ExpectExactCover(pool, n, min_chunk);
      }
    }
  }
}

TEST(ParallelForTest, SmallJobsRunInlineOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  pool.ParallelFor(10, 100, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelForTest, NestedCallsRunInline) {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 64, kInner = 50;
  std::vector<std::atomic<int>> visits(kOuter * kInner);
  pool.ParallelFor(kOuter, 1, [&](int64_t outer_begin, int64_t outer_end) {
    for (int64_t o = outer_begin; o < outer_end; ++o) {
      const std::thread::id outer_thread = std::this_thread::get_id();
      pool.ParallelFor(kInner, 1, [&](int64_t begin, int64_t end) {
        EXPECT_EQ(std::this_thread::get_id(), outer_thread);
        for (int64_t i = begin; i < end; ++i) visits[o * kInner + i].fetch_add(1);
      });
    }
  });
  for (const auto& count : visits) ASSERT_EQ(count.load(), 1);
}

TEST(ParallelForTest, ManyBackToBackJobs) {
  // Exercises the job hand-off: workers joining late, spinning and sleeping between jobs.
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  constexpr int kJobs = 20000;
  for (int job = 0; job < kJobs; ++job) {
    pool.ParallelFor(9, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
    if (job % 5000 == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let them sleep
  }
  EXPECT_EQ(total.load(), int64_t{9} * kJobs);
}

TEST(ParallelForTest, ConcurrentCallersFromSeveralThreads) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int job = 0; job < 2000; ++job) {
        pool.ParallelFor(100, 10,
                         [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), int64_t{4} * 2000 * 100);
}

TEST(ParallelForTest, PoolsCanBeCreatedAndDestroyedRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    std::atomic<int64_t> total{0};
    pool.ParallelFor(1000, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
    EXPECT_EQ(total.load(), 1000);
  }
  ThreadPool clamped(0);
  EXPECT_EQ(clamped.num_threads(), 1);
}

TEST(DefaultThreadPoolTest, CountIsSettableOnlyBeforeFirstUse) {
  EXPECT_FALSE(SetDefaultThreadCount(0).ok());
  ASSERT_TRUE(SetDefaultThreadCount(3).ok());
  EXPECT_EQ(DefaultThreadPool().num_threads(), 3);
  EXPECT_EQ(&DefaultThreadPool(), &DefaultThreadPool());
  const absl::Status late = SetDefaultThreadCount(2);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  ExpectExactCover(DefaultThreadPool(), 12345, 7);
}

TEST(DefaultThreadPoolTest, ParsesThreadCounts) {
  EXPECT_EQ(ParseThreadCount("4").value_or(-1), 4);
  EXPECT_EQ(ParseThreadCount(" 2 ").value_or(-1), 2);
  EXPECT_FALSE(ParseThreadCount("0").ok());
  EXPECT_FALSE(ParseThreadCount("-3").ok());
  EXPECT_FALSE(ParseThreadCount("many").ok());
  EXPECT_FALSE(ParseThreadCount("").ok());
  EXPECT_FALSE(ParseThreadCount("100000").ok());
  const absl::StatusOr<int> bad = ParseThreadCount("x1");
  EXPECT_NE(bad.status().message().find("x1"), std::string_view::npos);
}

}  // namespace
}  // namespace mtpspec
