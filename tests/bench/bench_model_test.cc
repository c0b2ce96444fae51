// EnsureBenchModel replaces only an older bench model: a directory holding another checkpoint (a
// config.json without the bench model's marker) or no checkpoint at all is refused and left as it
// was, and IsOtherCheckpoint tells the benchmarks to run such a checkpoint as it is.
#include "bench/bench_model.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtpspec::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mtpspec_bench_model_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Write(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
}

std::string Read(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(BenchModelTest, AnotherCheckpointIsNeverReplaced) {
  const fs::path dir = FreshDir("other");
  Write(dir / "config.json", R"({"model_type": "glm_moe_dsa", "hidden_size": 6144})");
  Write(dir / "model.safetensors", "weights");
  EXPECT_TRUE(IsOtherCheckpoint(dir.string()));
  bool generated = true;
  const absl::Status status = EnsureBenchModel(dir.string(), &generated);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("not a bench model"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir.string()));
  EXPECT_FALSE(generated);
  EXPECT_EQ(Read(dir / "config.json"), R"({"model_type": "glm_moe_dsa", "hidden_size": 6144})");
  EXPECT_EQ(Read(dir / "model.safetensors"), "weights");
  fs::remove_all(dir);
}

TEST(BenchModelTest, ADirectoryWithoutACheckpointIsRefused) {
  const fs::path dir = FreshDir("empty");
  Write(dir / "notes.txt", "keep me");
  EXPECT_FALSE(IsOtherCheckpoint(dir.string()));
  const absl::Status status = EnsureBenchModel(dir.string(), nullptr);
  EXPECT_THAT(std::string(status.message()), HasSubstr("holds no config.json"));
  EXPECT_EQ(Read(dir / "notes.txt"), "keep me");
  fs::remove_all(dir);
}

TEST(BenchModelTest, AnOlderBenchModelIsNotAnotherCheckpoint) {
  const fs::path dir = FreshDir("stale");
  Write(dir / "config.json", "{}");
  Write(dir / "bench_model.json", "{}");  // the marker: EnsureBenchModel may rewrite this one
  EXPECT_FALSE(IsOtherCheckpoint(dir.string()));
  EXPECT_FALSE(IsOtherCheckpoint((dir / "missing").string()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mtpspec::bench
