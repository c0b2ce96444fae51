#include "bench/run_info.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "bench/stream.h"
#include "core/tensor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/parallel.h"

namespace mtpspec::bench {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown";
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

std::vector<double> LoadAverages() {
  std::ifstream in("/proc/loadavg");
  std::vector<double> out(3, 0.0);
  for (double& v : out) {
    if (!(in >> v)) v = 0.0;
  }
  return out;
}

nlohmann::json ProcessMemory() {
  std::ifstream in("/proc/self/smaps_rollup");
  nlohmann::json out = nlohmann::json::object();
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key) {
    if (key == "Rss:" || key == "AnonHugePages:") {
      if (!(in >> kib >> unit)) break;
      out[key == "Rss:" ? "rss_mib" : "anon_huge_mib"] = kib / 1024.0;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return out;
}

nlohmann::json RunInfo(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) absl::StrAppend(&command, i ? " " : "", argv[i]);
  return {{"date_utc", UtcNow()},
          {"cpu_model", CpuModel()},
          {"logical_cpus", std::thread::hardware_concurrency()},
          {"threads", DefaultThreadPool().num_threads()},
          {"loadavg_start", LoadAverages()},
          {"command", command}};
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(piece));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& piece : SplitList(text)) {
    int64_t v;
    if (!absl::SimpleAtoi(piece, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be comma-separated integers, got \"", text, "\""));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (const std::string& piece : SplitList(text)) {
    double v;
    if (!absl::SimpleAtod(piece, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be comma-separated numbers, got \"", text, "\""));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return j;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(values.begin(), values.begin() + mid));
}

int ExitCode(const char* program, const absl::Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "%s: error: %s\n", program, std::string(status.message()).c_str());
  return 1;
}

// Read bandwidth (bytes/s): median of `reps` StreamSum passes over `mib` MiB on the default pool.
nlohmann::json MeasureReadBandwidth(int64_t mib, int reps) {
  const int64_t n = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  Tensor buffer = Tensor::Empty(DType::kF32, {n});
  StreamFill(buffer.data<float>(), n, DefaultThreadPool());
  volatile float sink = StreamSum(buffer.data<float>(), n, DefaultThreadPool());  // warm-up
  std::vector<double> rates;
  for (int i = 0; i < reps; ++i) {
    const double start = NowSeconds();
    sink = sink + StreamSum(buffer.data<float>(), n, DefaultThreadPool());
    rates.push_back(4.0 * static_cast<double>(n) / (NowSeconds() - start));
  }
  return {{"bytes_per_second", Median(rates)}, {"samples", rates}, {"buffer_mib", mib},
          {"threads", DefaultThreadPool().num_threads()}, {"kernel", "StreamSum (bench/stream.h)"}};
}

}  // namespace mtpspec::bench
