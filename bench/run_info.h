// What every benchmark report records about the run: when, on what machine, under what load, with
// which command line. Small helpers for lists in flags and for writing result files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mtpspec::bench {

// {"date_utc", "cpu_model", "logical_cpus", "threads", "loadavg_start", "command"}.
nlohmann::json RunInfo(int argc, char** argv);

// The 1-, 5- and 15-minute load averages from /proc/loadavg (zeros when unreadable).
std::vector<double> LoadAverages();

// This process's resident memory and how much of it transparent huge pages back, in MiB, from
// /proc/self/smaps_rollup: {"rss_mib", "anon_huge_mib"} (an empty object when unreadable). The
// gather path reads scattered cache rows, which cost a page walk each on 4 KiB pages.
nlohmann::json ProcessMemory();

// Parses "1,2,3" (integers) or "0,0.7,1" (doubles); errors name the flag.
absl::StatusOr<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text);
absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag, const std::string& text);
std::vector<std::string> SplitList(const std::string& text);

// Writes `text` to `path`, creating the parent directory. Errors name the path.
absl::Status WriteTextFile(const std::string& path, const std::string& text);
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// Seconds on the steady clock since an arbitrary origin.
double NowSeconds();

// Median of a non-empty sample (copies).
double Median(std::vector<double> values);

// Read bandwidth (bytes/s): median of `reps` StreamSum passes over `mib` MiB on the default pool,
// with the samples, buffer size and thread count.
nlohmann::json MeasureReadBandwidth(int64_t mib, int reps);

// A benchmark main's exit code: 0, or 1 after printing "PROGRAM: error: MESSAGE" to stderr.
int ExitCode(const char* program, const absl::Status& status);

}  // namespace mtpspec::bench
