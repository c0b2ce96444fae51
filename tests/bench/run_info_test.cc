// bench/run_info: the process-memory reading that the trade-off report prints beside its costs.
#include "bench/run_info.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace mtpspec::bench {
namespace {

TEST(ProcessMemoryTest, SeesMemoryThisProcessTouches) {
  const nlohmann::json before = ProcessMemory();
  if (!before.contains("rss_mib")) GTEST_SKIP() << "/proc/self/smaps_rollup is not readable here";
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);  // resident now
  const nlohmann::json after = ProcessMemory();
  ASSERT_TRUE(after.contains("rss_mib") && after.contains("anon_huge_mib"));
  EXPECT_GE(after["rss_mib"].get<double>(), before["rss_mib"].get<double>() + 60.0);
  EXPECT_GE(after["anon_huge_mib"].get<double>(), 0.0);
  EXPECT_LE(after["anon_huge_mib"].get<double>(), after["rss_mib"].get<double>());
  volatile char sink = block[kBytes - 1];
  (void)sink;
}

}  // namespace
}  // namespace mtpspec::bench
