// The model types without a DSA indexer (glm4_moe_lite, deepseek_v3) against an exact identity: a
// DSA checkpoint whose indexer tensors are left out and whose config names the indexerless type is
// the same model as long as the DSA model selects every key (T <= index_topk), so both must give the
// same logits bit for bit, trunk and MTP layer. Past index_topk the indexerless model stays on the
// dense path, where a chunked prefill must agree with the one-shot one.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/model.h"
#include "mtp/mtp_module.h"
#include "testing/tiny_configs.h"
#include "tests/model/model_test_util.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using testing_util::Range;
using testing_util::ScopedTempDir;

// Writes a random TinyGlmConfig checkpoint to `dsa_dir` and the same weights without the indexer, as
// a `type` model, to `plain_dir`.
void WritePair(const std::string& dsa_dir, const std::string& plain_dir, const std::string& type) {
  RandomCheckpointOptions options;
  options.seed = 7;
  ASSERT_TRUE(WriteRandomCheckpoint(dsa_dir, TinyGlmConfig(), options).ok());
  auto file = SafetensorsFile::Open(dsa_dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::pair<std::string, TensorView>> kept;
  for (const std::string& name : (*file)->names()) {
    if (absl::StrContains(name, ".indexer.")) continue;
    auto view = (*file)->Get(name);
    ASSERT_TRUE(view.ok());
    kept.emplace_back(name, *view);
  }
  nlohmann::json config = TinyGlmConfig();
  config["model_type"] = type;
  for (const char* key : {"index_n_heads", "index_head_dim", "index_topk", "indexer_rope_interleave", "indexer_types"}) {
    config.erase(key);
  }
  std::filesystem::create_directories(plain_dir);
  testing_util::WriteBytes(plain_dir + "/config.json", config.dump());
  ASSERT_TRUE(WriteSafetensors(plain_dir + "/model.safetensors", kept).ok());
}

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % 128));
  return ids;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)) == 0;
}

class IndexerlessModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IndexerlessModelTest, EqualsTheDsaModelWhileEveryKeyIsSelected) {
  ScopedTempDir tmp;
  WritePair(tmp.File("dsa"), tmp.File("plain"), GetParam());
  auto dsa = Model::Load(tmp.File("dsa"));
  auto plain = Model::Load(tmp.File("plain"));
  ASSERT_TRUE(dsa.ok()) << dsa.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE((*plain)->config().has_indexer);
  const int64_t K = (*dsa)->config().index_topk;  // 8: a prompt of K tokens is dense in both
  const std::vector<int32_t> ids = Prompt(K);
  auto dsa_cache = *(*dsa)->NewCache(K + 4);
  auto plain_cache = *(*plain)->NewCache(K + 4);
  auto a = (*dsa)->Forward(*dsa_cache, ids, Range(0, K));
  auto b = (*plain)->Forward(*plain_cache, ids, Range(0, K));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SameBits(a->logits, b->logits));
  EXPECT_TRUE(SameBits(a->hidden_postnorm, b->hidden_postnorm));

  // The MTP layer, without its indexer, over the same pairs.
  auto dsa_mtp = MtpModule::Create(**dsa);
  auto plain_mtp = MtpModule::Create(**plain);
  ASSERT_TRUE(dsa_mtp.ok() && plain_mtp.ok());
  auto dsa_mtp_cache = *(*dsa_mtp)->NewCache(K);
  auto plain_mtp_cache = *(*plain_mtp)->NewCache(K);
  EXPECT_EQ(plain_mtp_cache->BytesPerToken() + 4 * (*dsa)->config().index_head_dim, dsa_mtp_cache->BytesPerToken());
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  MtpOptions options;
  auto ma = (*dsa_mtp)->Forward(*dsa_mtp_cache, a->hidden_postnorm.data<float>(), next, Range(0, K - 1), options);
  auto mb = (*plain_mtp)->Forward(*plain_mtp_cache, b->hidden_postnorm.data<float>(), next, Range(0, K - 1), options);
  ASSERT_TRUE(ma.ok() && mb.ok()) << ma.status() << mb.status();
  EXPECT_TRUE(SameBits(ma->logits, mb->logits));
}

TEST_P(IndexerlessModelTest, StaysDensePastIndexTopkAndChunksAgree) {
  ScopedTempDir tmp;
  WritePair(tmp.File("dsa"), tmp.File("plain"), GetParam());
  auto plain = Model::Load(tmp.File("plain"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  const int64_t T = 40;  // five times the DSA model's index_topk
  const std::vector<int32_t> ids = Prompt(T);
  auto whole_cache = *(*plain)->NewCache(T);
  auto whole = (*plain)->Forward(*whole_cache, ids, Range(0, T));
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (AttentionPath path : whole->paths) EXPECT_EQ(path, AttentionPath::kDense);
  // The same rows as a prefill of 23 and one of 17 after it, then the last row again as a decode step.
  auto chunk_cache = *(*plain)->NewCache(T);
  const std::vector<int32_t> first(ids.begin(), ids.begin() + 23), second(ids.begin() + 23, ids.end());
  ASSERT_TRUE((*plain)->Forward(*chunk_cache, first, Range(0, 23)).ok());
  auto tail = (*plain)->Forward(*chunk_cache, second, Range(23, T));
  ASSERT_TRUE(tail.ok()) << tail.status();
  for (AttentionPath path : tail->paths) EXPECT_EQ(path, AttentionPath::kDense);
  const int64_t V = (*plain)->config().vocab_size;
  EXPECT_LT(testing_util::RelativeMaxDiff(tail->logits.data<float>(), whole->logits.data<float>() + 23 * V, 17 * V),
            1e-5);
  ASSERT_TRUE(chunk_cache->Truncate(T - 1).ok());
  auto step = (*plain)->Forward(*chunk_cache, std::vector<int32_t>{ids.back()}, std::vector<int64_t>{T - 1});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->paths[0], AttentionPath::kDense);
  EXPECT_LT(testing_util::RelativeMaxDiff(step->logits.data<float>(), whole->logits.data<float>() + (T - 1) * V, V),
            1e-5);
}

TEST_P(IndexerlessModelTest, IndexerOptionsAreRefusedByName) {
  ScopedTempDir tmp;
  WritePair(tmp.File("dsa"), tmp.File("plain"), GetParam());
  LoadOptions options;
  options.index_keys = IndexKeyStorage::kBf16;
  auto model = Model::Load(tmp.File("plain"), options);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()), HasSubstr("index keys bf16"));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(GetParam() + " model, which has no DSA indexer"));
  // A checkpoint that still holds indexer tensors is not this type: the loader names the extra tensor.
  nlohmann::json config = TinyGlmConfig();
  config["model_type"] = GetParam();
  for (const char* key : {"index_n_heads", "index_head_dim", "index_topk", "indexer_rope_interleave", "indexer_types"}) {
    config.erase(key);
  }
  testing_util::WriteBytes(tmp.File("dsa") + "/config.json", config.dump());
  auto mixed = Model::Load(tmp.File("dsa"));
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr(".indexer."));
}

INSTANTIATE_TEST_SUITE_P(Types, IndexerlessModelTest, ::testing::Values("glm4_moe_lite", "deepseek_v3"));

}  // namespace
}  // namespace mtpspec
