// Every malformed-file case the reader promises to reject, each with a message that names the file
// and, where one is at fault, the tensor.
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

constexpr char kName[] = "broken.safetensors";

std::string LengthPrefix(uint64_t length) {
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  return prefix;
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string FileBytes(const std::string& header, size_t data_bytes) {
  return LengthPrefix(header.size()) + header + std::string(data_bytes, '\0');
}

absl::Status ParseError(const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromBuffer(kName, bytes);
  return file.ok() ? absl::OkStatus() : file.status();
}

struct BadCase {
  std::string description;
  std::string bytes;
  std::vector<std::string> message_parts;  // besides the file name
};

std::vector<BadCase> BadCases() {
  const auto entry = [](const std::string& body) { return "{\"w\":" + body + "}"; };
  return {
      {"empty file", "", {"truncated"}},
      {"shorter than the length prefix", "\x05\0\0", {"truncated"}},
      {"header length past the end", LengthPrefix(1000) + "{}", {"header length 1000", "past"}},
      {"absurd header length", LengthPrefix(uint64_t{1} << 40) + "{}", {"exceeds"}},
      {"header length near 2^64", LengthPrefix(~uint64_t{0}) + "{}", {"exceeds"}},
      {"header not JSON", FileBytes("{\"w\": [1, 2", 0), {"not valid JSON"}},
      {"header not UTF-8", FileBytes("{\"\xff\": 1}", 0), {"not valid JSON"}},
      {"header not an object", FileBytes("[1, 2]", 0), {"not an object"}},
      {"entry not an object", FileBytes(entry("5"), 0), {"\"w\"", "not an object"}},
      {"missing dtype",
       FileBytes(entry(R"({"shape":[1],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "missing \"dtype\""}},
      {"missing shape",
       FileBytes(entry(R"({"dtype":"F32","data_offsets":[0,4]})"), 4),
       {"\"w\"", "missing \"shape\""}},
      {"missing data_offsets",
       FileBytes(entry(R"({"dtype":"F32","shape":[1]})"), 4),
       {"\"w\"", "missing \"data_offsets\""}},
      {"unknown dtype",
       FileBytes(entry(R"({"dtype":"F4","shape":[1],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "F4"}},
      {"dtype not a string",
       FileBytes(entry(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "dtype"}},
      {"shape not an array",
       FileBytes(entry(R"({"dtype":"F32","shape":3,"data_offsets":[0,4]})"), 4),
       {"\"w\"", "shape"}},
      {"negative dim",
       FileBytes(entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "negative"}},
      {"fractional dim",
       FileBytes(entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "not an integer"}},
      {"string dim",
       FileBytes(entry(R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "not an integer"}},
      {"dim beyond int64",
       FileBytes(entry(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})"),
                 4),
       {"\"w\"", "too large"}},
      {"too many dims",
       FileBytes(entry(R"({"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "5 dimensions"}},
      {"element count overflow",
       FileBytes(entry(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]})"),
                 0),
       {"\"w\"", "overflows"}},
      {"overflow hidden behind a zero dim",
       FileBytes(entry(R"({"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]})"),
                 0),
       {"\"w\"", "overflows"}},
      {"byte count overflow",
       FileBytes(entry(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]})"), 0),
       {"\"w\"", "overflows"}},
      {"data_offsets not a pair",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), 4),
       {"\"w\"", "data_offsets"}},
      {"data_offsets not an array",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":{"a":1}})"), 4),
       {"\"w\"", "data_offsets"}},
      {"negative offset",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 4),
       {"\"w\"", "negative"}},
      {"begin after end",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})"), 4),
       {"\"w\"", "begin > end"}},
      {"end beyond the data section",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), 3),
       {"\"w\"", "beyond"}},
      {"huge end",
       FileBytes(entry(R"({"dtype":"U8","shape":[1],)"
                       R"("data_offsets":[9223372036854775806,9223372036854775807]})"),
                 3),
       {"\"w\"", "beyond"}},
      {"size mismatch",
       FileBytes(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), 4),
       {"\"w\"", "needs 8"}},
      {"overlapping tensors",
       FileBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 12),
       {"\"b\"", "overlap", "\"a\""}},
      {"identical ranges",
       FileBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                 4),
       {"\"b\"", "overlap", "\"a\""}},
      {"gap between tensors",
       FileBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                 12),
       {"\"b\"", "gaps", "\"a\""}},
      {"data not starting at 0",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), 8),
       {"\"w\"", "starts at byte 4"}},
      {"trailing bytes",
       FileBytes(entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), 6),
       {"trailing"}},
      {"metadata not an object", FileBytes(R"({"__metadata__":[1]})", 0), {"__metadata__"}},
      {"metadata value not a string",
       FileBytes(R"({"__metadata__":{"k":1}})", 0),
       {"__metadata__", "\"k\"", "not a string"}},
  };
}

TEST(SafetensorsErrorsTest, RejectsEachMalformedFileWithAClearMessage) {
  for (const BadCase& bad : BadCases()) {
    SCOPED_TRACE(bad.description);
    const absl::Status status = ParseError(bad.bytes);
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find(kName), std::string_view::npos) << status;
    for (const std::string& part : bad.message_parts) {
      EXPECT_NE(status.message().find(part), std::string_view::npos)
          << "expected \"" << part << "\" in: " << status;
    }
  }
}

TEST(SafetensorsErrorsTest, MissingTensorNamesFileAndTensor) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::FromBuffer(kName, FileBytes("{}", 0));
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::Status missing = (*file)->Get("model.embed.weight").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(kName), std::string_view::npos);
  EXPECT_NE(missing.message().find("model.embed.weight"), std::string_view::npos);
}

class SafetensorsOpenTest : public ::testing::TestWithParam<FileMemory> {};

// Both ways of holding a file (mapped, or read into huge pages) report the same problems.
TEST_P(SafetensorsOpenTest, OpenReportsFileProblemsWithThePath) {
  const FileMemory memory = GetParam();
  testing_util::ScopedTempDir dir;
  const absl::Status absent = SafetensorsFile::Open(dir.File("absent.safetensors"), memory).status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(absent.message().find("absent.safetensors"), std::string_view::npos) << absent;

  const absl::Status directory = SafetensorsFile::Open(dir.path(), memory).status();
  EXPECT_FALSE(directory.ok());
  EXPECT_NE(directory.message().find("not a regular file"), std::string_view::npos) << directory;

  for (const std::string& contents : {std::string(), std::string("\x10\0\0", 3)}) {
    testing_util::WriteBytes(dir.File("short.safetensors"), contents);
    const absl::Status truncated = SafetensorsFile::Open(dir.File("short.safetensors"), memory).status();
    EXPECT_NE(truncated.message().find("short.safetensors"), std::string_view::npos) << truncated;
    EXPECT_NE(truncated.message().find("truncated"), std::string_view::npos) << truncated;
  }

  const std::string good =
      FileBytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  testing_util::WriteBytes(dir.File("cut.safetensors"), good.substr(0, good.size() - 3));
  const absl::Status cut = SafetensorsFile::Open(dir.File("cut.safetensors"), memory).status();
  EXPECT_NE(cut.message().find("cut.safetensors"), std::string_view::npos) << cut;
  EXPECT_NE(cut.message().find("\"w\""), std::string_view::npos) << cut;
}

INSTANTIATE_TEST_SUITE_P(Memory, SafetensorsOpenTest, ::testing::Values(FileMemory::kMapped, FileMemory::kHugePages),
                         [](const ::testing::TestParamInfo<FileMemory>& info) {
                           return info.param == FileMemory::kMapped ? std::string("Mapped") : std::string("HugePages");
                         });

TEST(SafetensorsErrorsTest, AcceptsValidEdgeCases) {
  // Zero-sized tensors anywhere in the tiling, 0-d tensors, and an empty header with padding.
  const std::string bytes = FileBytes(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                                      R"("e":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]},)"
                                      R"("z":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}    )",
                                      6);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::FromBuffer(kName, bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Get("a")->ndim, 0);
  EXPECT_EQ((*file)->Get("a")->numel(), 1);
  EXPECT_EQ((*file)->Get("e")->numel(), 0);
  EXPECT_TRUE(SafetensorsFile::FromBuffer(kName, FileBytes("{}", 0)).ok());
}

}  // namespace
}  // namespace mtpspec
