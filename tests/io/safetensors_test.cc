// Round trips through WriteSafetensors / SafetensorsFile, and interoperability with the reference
// Python implementation when it is installed.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "io/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using testing_util::ReadBytes;
using testing_util::ScopedTempDir;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kF8E4M3,
                                DType::kI8,  DType::kU8,  DType::kI32,  DType::kI64, DType::kBool};

// A tensor whose bytes are a recognizable function of its index, so mixed-up data shows.
Tensor PatternTensor(DType dtype, const std::vector<int64_t>& shape, uint8_t salt) {
  Tensor tensor = Tensor::Empty(dtype, shape);
  uint8_t* bytes = tensor.data<uint8_t>();
  for (size_t i = 0; i < tensor.view().nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + salt);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < tensor.view().nbytes(); ++i) bytes[i] &= 1;
  }
  return tensor;
}

TEST(SafetensorsTest, RoundTripsEveryDTypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {2, 0, 4}, {1, 2, 3, 5}};
  std::vector<Tensor> owners;
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      owners.push_back(PatternTensor(dtype, shapes[s], static_cast<uint8_t>(owners.size())));
      tensors.emplace_back(absl::StrCat(DTypeName(dtype), ".shape", s), owners.back().view());
    }
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "round trip"}};
  ScopedTempDir dir;
  const std::string path = dir.File("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  for (FileMemory memory : {FileMemory::kMapped, FileMemory::kHugePages}) {
    SCOPED_TRACE(memory == FileMemory::kMapped ? "mapped" : "huge pages");
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path, memory);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->path(), path);
    EXPECT_EQ((*file)->metadata(), metadata);
    ASSERT_EQ((*file)->names().size(), tensors.size());
    EXPECT_TRUE(std::is_sorted((*file)->names().begin(), (*file)->names().end()));
    for (const auto& [name, expected] : tensors) {
      ASSERT_TRUE((*file)->Has(name));
      absl::StatusOr<TensorView> view = (*file)->Get(name);
      ASSERT_TRUE(view.ok()) << view.status();
      EXPECT_EQ(view->dtype, expected.dtype) << name;
      EXPECT_EQ(view->shape_vector(), expected.shape_vector()) << name;
      EXPECT_TRUE(view->is_contiguous());
      EXPECT_NE(view->data, nullptr) << name;
      ASSERT_EQ(view->nbytes(), expected.nbytes()) << name;
      EXPECT_EQ(std::memcmp(view->data, expected.data, expected.nbytes()), 0) << name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(view->data) % DTypeSize(view->dtype), 0u) << name;
    }
    EXPECT_FALSE((*file)->Has("missing"));
  }
}

TEST(SafetensorsTest, WriterIsDeterministicAndPadsTheHeader) {
  Tensor a = PatternTensor(DType::kBF16, {3}, 1);    // [3]
  Tensor b = PatternTensor(DType::kF32, {2, 2}, 2);  // [2, 2]
  Tensor c = PatternTensor(DType::kU8, {5}, 3);      // [5]
  ScopedTempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("x"), {{"a", a.view()}, {"b", b.view()}, {"c", c.view()}},
                               {{"k", "v"}})
                  .ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("y"), {{"c", c.view()}, {"b", b.view()}, {"a", a.view()}},
                               {{"k", "v"}})
                  .ok());
  const std::string bytes = ReadBytes(dir.File("x"));
  EXPECT_EQ(bytes, ReadBytes(dir.File("y")));
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);  // little-endian host
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_size + 6 + 16 + 5);  // no padding between tensors
  const std::string header = bytes.substr(8, header_size);
  EXPECT_EQ(header.front(), '{');
  // Largest elements first: b (f32) at 0, a (bf16) at 16, c (u8) at 22.
  EXPECT_NE(header.find("\"b\":{\"data_offsets\":[0,16]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"a\":{\"data_offsets\":[16,22]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"c\":{\"data_offsets\":[22,27]"), std::string::npos) << header;
  // No temporary files are left next to the output.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path()))
    ++files;
  EXPECT_EQ(files, 2);
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  Tensor t = PatternTensor(DType::kF32, {2, 3}, 0);  // [2, 3]
  ScopedTempDir dir;
  const std::string path = dir.File("bad.safetensors");
  TensorView transposed = t.view();  // [3, 2] view with swapped strides
  std::swap(transposed.shape[0], transposed.shape[1]);
  std::swap(transposed.stride[0], transposed.stride[1]);
  const absl::Status strided = WriteSafetensors(path, {{"w.T", transposed}});
  EXPECT_FALSE(strided.ok());
  EXPECT_NE(strided.message().find("w.T"), std::string_view::npos) << strided;
  EXPECT_NE(strided.message().find(path), std::string_view::npos) << strided;
  const absl::Status duplicate = WriteSafetensors(path, {{"w", t.view()}, {"w", t.view()}});
  EXPECT_NE(duplicate.message().find("twice"), std::string_view::npos) << duplicate;
  EXPECT_FALSE(WriteSafetensors(path, {{"", t.view()}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"__metadata__", t.view()}}).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  const absl::Status no_dir = WriteSafetensors(dir.File("no/such/dir.safetensors"), {});
  EXPECT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.message().find("dir.safetensors"), std::string_view::npos) << no_dir;
}

TEST(SafetensorsTest, FailedWriteKeepsThePreviousFile) {
  Tensor t = PatternTensor(DType::kF32, {4}, 0);  // [4]
  ScopedTempDir dir;
  const std::string path = dir.File("keep.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", t.view()}}).ok());
  const std::string before = ReadBytes(path);
  EXPECT_FALSE(WriteSafetensors(path, {{"w", t.view()}, {"w", t.view()}}).ok());  // a name twice
  EXPECT_EQ(ReadBytes(path), before);
}

// A view with null data is written as zeros (a hole in the file) and reads back as zeros.
TEST(SafetensorsTest, NullDataIsWrittenAsZeros) {
  Tensor t = PatternTensor(DType::kF32, {4}, 0);  // [4]
  ScopedTempDir dir;
  const std::string path = dir.File("holes.safetensors");
  const TensorView zeros = TensorView::Contiguous(DType::kBF16, nullptr, {1024, 1024});  // [1024, 1024], 2 MiB
  ASSERT_TRUE(WriteSafetensors(path, {{"a", t.view()}, {"z", zeros}}).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<TensorView> z = (*file)->Get("z");
  ASSERT_TRUE(z.ok());
  for (int64_t i = 0; i < z->numel(); ++i) ASSERT_EQ(z->as<uint16_t>()[i], 0) << i;
  absl::StatusOr<TensorView> a = (*file)->Get("a");
  ASSERT_TRUE(a.ok());
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(a->as<float>()[i], t.data<float>()[i]);
}

TEST(SafetensorsTest, EmptyFileRoundTrips) {
  ScopedTempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir.File("empty"), {}).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(dir.File("empty"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->names().empty());
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafetensorsTest, CopiesMisalignedTensorsToAlignedMemory) {
  // A foreign writer put a 1-byte tensor first, so the f32 tensor starts at an odd offset.
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  const float values[2] = {1.5f, -2.25f};
  bytes.push_back('\x07');
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::FromBuffer("odd.safetensors", bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<TensorView> b = (*file)->Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % alignof(float), 0u);
  EXPECT_EQ(b->as<float>()[0], 1.5f);
  EXPECT_EQ(b->as<float>()[1], -2.25f);
  EXPECT_EQ((*file)->Get("a")->as<uint8_t>()[0], 7);
}

TEST(SafetensorsTest, ReferencePythonLoadsOurFile) {
  if (!testing_util::PythonCanImport("numpy, safetensors")) {
    ASSERT_FALSE(testing_util::ReferencePythonRequired()) << "MTPSPEC_PYTHON cannot import numpy, safetensors";
    GTEST_SKIP() << "no python safetensors (scripts/test.sh provides it)";
  }
  Tensor f32 = Tensor::Empty(DType::kF32, {2, 3});  // [2, 3]
  std::iota(f32.data<float>(), f32.data<float>() + 6, 0.5f);
  Tensor i64 = Tensor::Empty(DType::kI64, {});  // []
  *i64.data<int64_t>() = -7;
  Tensor u8 = PatternTensor(DType::kU8, {3}, 1);      // [3]
  Tensor empty = Tensor::Empty(DType::kF16, {0, 4});  // [0, 4]
  ScopedTempDir dir;
  const std::string path = dir.File("ours.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(
          path,
          {{"f32", f32.view()}, {"i64", i64.view()}, {"u8", u8.view()}, {"empty", empty.view()}},
          {{"format", "np"}})
          .ok());
  EXPECT_TRUE(testing_util::RunPython(
      "import numpy as np; from safetensors.numpy import load_file; from safetensors import "
      "safe_open;"
      "t = load_file(\"" +
      path +
      "\");"
      "assert (t[\"f32\"] == np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5).all();"
      "assert t[\"i64\"].shape == () and t[\"i64\"] == -7;"
      "assert t[\"u8\"].tolist() == [1, 8, 15]; assert t[\"empty\"].shape == (0, 4);"
      "assert safe_open(\"" +
      path + "\", \"np\").metadata() == {\"format\": \"np\"}"));
}

TEST(SafetensorsTest, ReadsAFileWrittenByReferencePython) {
  if (!testing_util::PythonCanImport("numpy, safetensors")) {
    ASSERT_FALSE(testing_util::ReferencePythonRequired()) << "MTPSPEC_PYTHON cannot import numpy, safetensors";
    GTEST_SKIP() << "no python safetensors (scripts/test.sh provides it)";
  }
  ScopedTempDir dir;
  const std::string path = dir.File("theirs.safetensors");
  ASSERT_TRUE(testing_util::RunPython(
      "import numpy as np; from safetensors.numpy import save_file;"
      "save_file({\"h\": np.arange(5, dtype=np.float16), \"b\": np.array([True, False, True]),"
      "\"d\": np.full((2, 2), 0.25), \"i\": np.arange(3, dtype=np.int32) - 1}, \"" +
      path +
      "\","
      "metadata={\"m\": \"x\"})"));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->names(), (std::vector<std::string>{"b", "d", "h", "i"}));
  EXPECT_EQ((*file)->metadata().at("m"), "x");
  absl::StatusOr<TensorView> h = (*file)->Get("h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->dtype, DType::kF16);
  EXPECT_EQ(F16ToF32(h->as<uint16_t>()[4]), 4.0f);
  EXPECT_EQ((*file)->Get("b")->dtype, DType::kBool);
  EXPECT_EQ((*file)->Get("d")->as<double>()[3], 0.25);
  EXPECT_EQ((*file)->Get("i")->as<int32_t>()[0], -1);
}

}  // namespace
}  // namespace mtpspec
