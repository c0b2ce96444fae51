// Checkpoint directories: single file, sharded with an index, and the ways an index can be wrong.
#include <filesystem>

#include <sys/stat.h>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using testing_util::ScopedTempDir;
using testing_util::WriteBytes;

class SafetensorsStoreTest : public ::testing::Test {
 protected:
  SafetensorsStoreTest() {
    for (int i = 0; i < 4; ++i) {
      values_[i] = Tensor::Empty(DType::kF32, {2});  // [2]
      values_[i].data<float>()[0] = static_cast<float>(i);
      values_[i].data<float>()[1] = static_cast<float>(-i);
    }
  }

  // Writes a shard holding the named tensors (values_[k] for the k-th name).
  void WriteShard(const std::string& file, const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, TensorView>> tensors;
    for (size_t k = 0; k < names.size(); ++k) tensors.emplace_back(names[k], values_[k].view());
    ASSERT_TRUE(WriteSafetensors(dir_.File(file), tensors).ok());
  }
  void WriteIndex(const std::string& weight_map_json) {
    WriteBytes(dir_.File("model.safetensors.index.json"),
               R"({"metadata": {"total_size": 32}, "weight_map": )" + weight_map_json + "}");
  }
  absl::Status OpenError() {
    absl::StatusOr<std::unique_ptr<SafetensorsStore>> store = SafetensorsStore::Open(dir_.path());
    return store.ok() ? absl::OkStatus() : store.status();
  }
  static bool Contains(const absl::Status& status, const std::string& part) {
    return status.message().find(part) != absl::string_view::npos;
  }

  ScopedTempDir dir_;
  Tensor values_[4];
};

TEST_F(SafetensorsStoreTest, OpensASingleFileCheckpoint) {
  WriteShard("model.safetensors", {"embed", "head"});
  absl::StatusOr<std::unique_ptr<SafetensorsStore>> store = SafetensorsStore::Open(dir_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"embed", "head"}));
  EXPECT_EQ((*store)->Get("head")->as<float>()[0], 1.0f);
  EXPECT_EQ((*store)->FileOf("embed"), dir_.File("model.safetensors"));
  EXPECT_EQ((*store)->FileOf("nope"), "");
}

TEST_F(SafetensorsStoreTest, OpensAShardedCheckpoint) {
  WriteShard("model-00001-of-00002.safetensors", {"layers.0.w", "layers.0.b"});
  WriteShard("model-00002-of-00002.safetensors", {"layers.1.w", "extra"});
  WriteIndex(R"({"layers.0.w": "model-00001-of-00002.safetensors",
                 "layers.0.b": "model-00001-of-00002.safetensors",
                 "layers.1.w": "model-00002-of-00002.safetensors"})");
  absl::StatusOr<std::unique_ptr<SafetensorsStore>> store = SafetensorsStore::Open(dir_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->names(),
            (std::vector<std::string>{"extra", "layers.0.b", "layers.0.w", "layers.1.w"}));
  EXPECT_EQ((*store)->files().size(), 2u);
  absl::StatusOr<TensorView> w1 = (*store)->Get("layers.1.w");
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ(w1->as<float>()[1], -0.0f);
  EXPECT_EQ((*store)->Get("layers.0.b")->as<float>()[0], 1.0f);
  EXPECT_EQ((*store)->FileOf("layers.1.w"), dir_.File("model-00002-of-00002.safetensors"));
  EXPECT_TRUE((*store)->Has("extra"));  // in a shard but not in the index: still served

  const absl::Status missing = (*store)->Get("layers.2.w").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing, "layers.2.w"));
  EXPECT_TRUE(Contains(missing, dir_.path()));
}

TEST_F(SafetensorsStoreTest, MissingDirectoryOrFilesNameTheDirectory) {
  const absl::Status empty_dir = OpenError();
  EXPECT_EQ(empty_dir.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(empty_dir, dir_.path()));
  EXPECT_TRUE(Contains(empty_dir, "model.safetensors"));

  const std::string absent = dir_.File("no_such_checkpoint");
  const absl::Status no_dir = SafetensorsStore::Open(absent).status();
  EXPECT_EQ(no_dir.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_dir, absent));
}

TEST_F(SafetensorsStoreTest, IndexNamingAMissingShard) {
  WriteIndex(R"({"w": "model-00001-of-00001.safetensors"})");
  const absl::Status status = OpenError();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(status, "model-00001-of-00001.safetensors")) << status;
  EXPECT_TRUE(Contains(status, "index.json")) << status;
}

TEST_F(SafetensorsStoreTest, TensorNotInItsIndexedShard) {
  WriteShard("a.safetensors", {"w"});
  WriteShard("b.safetensors", {"v"});
  WriteIndex(R"({"w": "b.safetensors", "v": "b.safetensors"})");
  const absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, "\"w\"")) << status;
  EXPECT_TRUE(Contains(status, "b.safetensors")) << status;
}

TEST_F(SafetensorsStoreTest, TensorStoredInTwoShards) {
  WriteShard("a.safetensors", {"w", "x"});
  WriteShard("b.safetensors", {"w"});
  WriteIndex(R"({"w": "a.safetensors", "x": "a.safetensors", "y": "b.safetensors"})");
  const absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, "\"w\"")) << status;
  EXPECT_TRUE(Contains(status, "a.safetensors")) << status;
  EXPECT_TRUE(Contains(status, "b.safetensors")) << status;
}

TEST_F(SafetensorsStoreTest, MalformedIndexes) {
  WriteShard("a.safetensors", {"w"});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"weight_map\": ", "not valid JSON"},
      {"[]", "weight_map"},
      {"{\"metadata\": {}}", "weight_map"},
      {R"({"weight_map": ["a.safetensors"]})", "weight_map"},
      {R"({"weight_map": {"w": 3}})", "\"w\""},
      {R"({"weight_map": {"w": "../a.safetensors"}})", "\"w\""},
      {R"({"weight_map": {"w": "/etc/passwd"}})", "\"w\""},
      {R"({"weight_map": {"w": ""}})", "\"w\""},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    WriteBytes(dir_.File("model.safetensors.index.json"), text);
    const absl::Status status = OpenError();
    EXPECT_FALSE(status.ok());
    EXPECT_TRUE(Contains(status, "model.safetensors.index.json")) << status;
    EXPECT_TRUE(Contains(status, expected)) << status;
  }
}

TEST_F(SafetensorsStoreTest, CorruptShardNamesShardAndIndex) {
  WriteBytes(dir_.File("a.safetensors"), "garbage!");
  WriteIndex(R"({"w": "a.safetensors"})");
  const absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, dir_.File("a.safetensors"))) << status;
  EXPECT_TRUE(Contains(status, "index.json")) << status;
}

// A weights file that is there but is not a file says so, instead of the directory seeming empty.
TEST_F(SafetensorsStoreTest, WeightsPathThatIsNotAFileIsNamed) {
  std::filesystem::create_directory(dir_.File("model.safetensors"));
  absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, "model.safetensors: not a regular file")) << status;
  EXPECT_FALSE(Contains(status, "contains neither")) << status;
  std::filesystem::remove(dir_.File("model.safetensors"));

  std::filesystem::create_directory(dir_.File("model.safetensors.index.json"));
  status = OpenError();
  EXPECT_TRUE(Contains(status, "model.safetensors.index.json: is a directory")) << status;
  std::filesystem::remove(dir_.File("model.safetensors.index.json"));

  // A FIFO is refused without waiting for a writer.
  ASSERT_EQ(::mkfifo(dir_.File("model.safetensors").c_str(), 0600), 0);
  status = OpenError();
  EXPECT_TRUE(Contains(status, "model.safetensors: not a regular file")) << status;
  std::filesystem::remove(dir_.File("model.safetensors"));

  std::filesystem::create_symlink(dir_.File("loop"), dir_.File("model.safetensors"));
  std::filesystem::create_symlink(dir_.File("model.safetensors"), dir_.File("loop"));
  status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, "model.safetensors")) << status;
  EXPECT_FALSE(Contains(status, "contains neither")) << status;
}

TEST(ParseShardIndexTest, ReturnsTheWeightMap) {
  auto map = ParseShardIndex(R"({"metadata": {"total_size": 8}, "weight_map": {"a": "s1.safetensors",
                                 "b": "sub/s2.safetensors"}})",
                             "index.json");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->size(), 2u);
  EXPECT_EQ(map->at("b"), "sub/s2.safetensors");
  EXPECT_FALSE(ParseShardIndex(R"({"weight_map": {"a": "x/../../s1"}})", "index.json").ok());
}

}  // namespace
}  // namespace mtpspec
