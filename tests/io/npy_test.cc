#include "io/npy.h"

#include <cstring>
#include <numeric>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using testing_util::ReadBytes;
using testing_util::ScopedTempDir;
using testing_util::WriteBytes;

TEST(NpyTest, HeaderFollowsFormatVersion1) {
  Tensor logits = Tensor::Empty(DType::kF32, {2, 3});  // [2, 3]
  std::iota(logits.data<float>(), logits.data<float>() + 6, 0.0f);
  ScopedTempDir dir;
  ASSERT_TRUE(WriteNpy(dir.File("a.npy"), logits.view()).ok());
  const std::string bytes = ReadBytes(dir.File("a.npy"));
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_size = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_size) % 64, 0u);
  const std::string header = bytes.substr(10, header_size);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_size + 6 * sizeof(float));
  float last;
  std::memcpy(&last, bytes.data() + bytes.size() - 4, 4);
  EXPECT_EQ(last, 5.0f);
}

TEST(NpyTest, RoundTripsShapesAndDTypes) {
  ScopedTempDir dir;
  for (DType dtype : {DType::kF32, DType::kI32, DType::kI64}) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{}, {0}, {5}, {3, 0}, {2, 3}, {2, 1, 3, 2}}) {
      Tensor original = Tensor::Empty(dtype, shape);
      uint8_t* bytes = original.data<uint8_t>();
      for (size_t i = 0; i < original.view().nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 13);
      const std::string path = dir.File("t.npy");
      ASSERT_TRUE(WriteNpy(path, original.view()).ok());
      absl::StatusOr<Tensor> loaded = ReadNpy(path);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(loaded->dtype(), dtype);
      EXPECT_EQ(loaded->view().shape_vector(), shape);
      EXPECT_EQ(std::memcmp(loaded->data<uint8_t>(), bytes, original.view().nbytes()), 0);
    }
  }
}

TEST(NpyTest, NumpyLoadsOurFilesAndWeLoadNumpys) {
  if (!testing_util::PythonCanImport("numpy")) {
    ASSERT_FALSE(testing_util::ReferencePythonRequired()) << "MTPSPEC_PYTHON cannot import numpy";
    GTEST_SKIP() << "python3 with numpy not available (scripts/test.sh provides it)";
  }
  ScopedTempDir dir;
  Tensor logits = Tensor::Empty(DType::kF32, {2, 3});  // [2, 3]
  std::iota(logits.data<float>(), logits.data<float>() + 6, -1.5f);
  Tensor ids = Tensor::Empty(DType::kI64, {4});  // [4]
  std::iota(ids.data<int64_t>(), ids.data<int64_t>() + 4, int64_t{1} << 40);
  ASSERT_TRUE(WriteNpy(dir.File("logits.npy"), logits.view()).ok());
  ASSERT_TRUE(WriteNpy(dir.File("ids.npy"), ids.view()).ok());
  EXPECT_TRUE(testing_util::RunPython(
      "import numpy as np; a = np.load(\"" + dir.File("logits.npy") +
      "\");"
      "assert a.dtype == np.float32 and a.shape == (2, 3);"
      "assert (a == np.arange(6, dtype=np.float32).reshape(2, 3) - 1.5).all();"
      "b = np.load(\"" +
      dir.File("ids.npy") +
      "\");"
      "assert b.dtype == np.int64 and (b == np.arange(4) + 2**40).all();"
      "np.save(\"" +
      dir.File("theirs.npy") +
      "\", np.arange(24, dtype=np.float32).reshape(2, 3, 4));"
      "np.save(\"" +
      dir.File("scalar.npy") + "\", np.int64(-9))"));
  absl::StatusOr<Tensor> theirs = ReadNpy(dir.File("theirs.npy"));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->view().shape_vector(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(theirs->data<float>()[23], 23.0f);
  absl::StatusOr<Tensor> scalar = ReadNpy(dir.File("scalar.npy"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->view().ndim, 0);
  EXPECT_EQ(scalar->data<int64_t>()[0], -9);
}

std::string NpyBytes(const std::string& header, size_t data_bytes, char major = 1) {
  std::string bytes("\x93NUMPY", 6);
  bytes += major;
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + std::string(data_bytes, '\0');
}

TEST(NpyTest, RejectsMalformedFilesNamingThePath) {
  const std::string f32_2x2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n";
  ASSERT_TRUE(ParseNpy("ok.npy", NpyBytes(f32_2x2, 16)).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "magic"},
      {"NUMPY!!!!!!!!!!", "magic"},
      {NpyBytes(f32_2x2, 16, 9), "version"},
      {NpyBytes(f32_2x2, 15), "data bytes"},
      {NpyBytes(f32_2x2, 17), "data bytes"},
      {NpyBytes(f32_2x2, 0).substr(0, 30), "past the end"},
      {NpyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16), "'>f4'"},
      {NpyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", 8), "'<f2'"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16), "Fortran"},
      {NpyBytes("{'descr': '<f4', 'shape': (2, 2), }", 16), "malformed"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }", 16), "malformed"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2 2), }", 16), "malformed"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1), }", 4), "dims"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4),
       "malformed"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }",
                0),
       "overflows"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", 16),
       "unexpected key"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 2), }", 16), "malformed"},
  };
  for (const auto& [bytes, expected] : cases) {
    SCOPED_TRACE(expected);
    absl::StatusOr<Tensor> parsed = ParseNpy("bad.npy", bytes);
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find("bad.npy"), std::string_view::npos) << parsed.status();
    EXPECT_NE(parsed.status().message().find(expected), std::string_view::npos) << parsed.status();
  }
  ScopedTempDir dir;
  const absl::Status absent = ReadNpy(dir.File("absent.npy")).status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(absent.message().find("absent.npy"), std::string_view::npos);
}

TEST(NpyTest, WriterRejectsUnsupportedViews) {
  ScopedTempDir dir;
  Tensor bf16 = Tensor::Empty(DType::kBF16, {2});  // [2]
  const absl::Status status = WriteNpy(dir.File("x.npy"), bf16.view());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("x.npy"), std::string_view::npos);
  EXPECT_NE(status.message().find("BF16"), std::string_view::npos);
}

}  // namespace
}  // namespace mtpspec
