// Checkpoints in the releases' format at their real dimensions (model/release_checkpoint.h),
// checked against what is published about the releases: a cut GLM-5.2 and DeepSeek-V3.2 load, keep
// the real IndexShare and dense/MoE schedule of their first layers, store F8_E4M3 with scales exactly
// where the releases quantise, and the full configs count the published parameters (GLM-5.2 744B
// with a 9.95B MTP layer, DeepSeek-V3.2 671B plus its indexers) and cache bytes per token (95,232
// and 85,888 in bf16). The weights are zeros written as holes, so this costs no disk.
#include "model/release_checkpoint.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/tensor_table.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using testing_util::ScopedTempDir;

struct ReleaseCase {
  Release release;
  int64_t experts;
  int64_t trunk_billions;       // published total without the MTP layer
  double mtp_billions;          // published MTP layer (without shared embedding and head)
  int64_t bf16_cache_per_token; // published latent + rope key + indexer key bytes per token
};

class ReleaseCheckpointTest : public ::testing::TestWithParam<ReleaseCase> {};

TEST_P(ReleaseCheckpointTest, CutCheckpointLoadsWithTheReleasesLayout) {
  const ReleaseCase& rc = GetParam();
  ScopedTempDir tmp;
  const std::string dir = tmp.File("cut");
  ReleaseCheckpointOptions options;
  options.release = rc.release;
  options.layers = 4;
  options.experts = rc.experts;
  options.zeros = true;
  options.shard_bytes = int64_t{1} << 30;
  ASSERT_TRUE(WriteReleaseCheckpoint(dir, options).ok());
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model-00001-of-0000" + std::to_string(
      std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) - 2) +
      ".safetensors"));

  LoadOptions load;
  load.file_memory = FileMemory::kMapped;
  auto model = Model::Load(dir, load);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& cut = (*model)->config();
  auto full = ParseModelConfig(ReleaseConfig(rc.release), "release");
  ASSERT_TRUE(full.ok()) << full.status();
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(cut.layer_is_dense[l], full->layer_is_dense[l]) << "layer " << l;
    EXPECT_EQ(cut.layer_has_indexer[l], full->layer_has_indexer[l]) << "layer " << l;
  }
  EXPECT_EQ(cut.n_routed_experts, rc.experts);
  EXPECT_TRUE((*model)->has_mtp());
  EXPECT_EQ((*model)->weights().parameter_count, CountConfigParameters(cut).trunk);
  // DeepSeek ships the MTP layer's own embedding and head copies; the loader counts what it finds.
  const int64_t copies = rc.release == Release::kDeepSeekV32 ? 2 * cut.vocab_size * cut.hidden_size : 0;
  EXPECT_EQ((*model)->weights().mtp_parameter_count, CountConfigParameters(cut).mtp + copies);
  EXPECT_GT((*model)->load_report().fp8_tensors_in_place, 50);

  // The releases' dtypes, tensor by tensor.
  auto store = SafetensorsStore::Open(dir, FileMemory::kMapped);
  ASSERT_TRUE(store.ok()) << store.status();
  int64_t fp8 = 0, scaled = 0;
  for (const std::string& name : (*store)->names()) {
    auto view = (*store)->Get(name);
    ASSERT_TRUE(view.ok());
    if (view->dtype == DType::kF8E4M3) {
      ++fp8;
      scaled += (*store)->Has(ScaleNameOf(name));
      EXPECT_FALSE(ModuleIsNotConverted(cut, name)) << name;
    }
  }
  EXPECT_EQ(fp8, scaled) << "every FP8 weight has its scales";
  for (const std::string& bf16 : {std::string("model.embed_tokens.weight"), std::string("lm_head.weight"),
                                  std::string("model.layers.3.mlp.gate.weight"),
                                  std::string("model.layers.0.self_attn.indexer.weights_proj.weight"),
                                  std::string("model.layers.4.eh_proj.weight")}) {
    auto view = (*store)->Get(bf16);
    ASSERT_TRUE(view.ok()) << bf16;
    EXPECT_EQ(view->dtype, DType::kBF16) << bf16;
  }
  auto expert = (*store)->Get("model.layers.3.mlp.experts.0.down_proj.weight");
  ASSERT_TRUE(expert.ok());
  EXPECT_EQ(expert->dtype, DType::kF8E4M3);
  EXPECT_EQ((*model)->weights().mtp[0].own_embed, rc.release == Release::kDeepSeekV32);

  // The full release, counted from its config.
  const ParameterCount p = CountConfigParameters(*full);
  EXPECT_NEAR(p.trunk / 1e9, rc.trunk_billions, 0.005 * rc.trunk_billions);
  EXPECT_NEAR(p.mtp / 1e9, rc.mtp_billions, 0.02 * rc.mtp_billions);
  KvCache probe(CacheShapeFor(*full), 1);
  EXPECT_EQ(probe.Bf16BytesPerToken(), rc.bf16_cache_per_token);
  // What the cut checkpoint's config says it was cut from.
  const nlohmann::json config = nlohmann::json::parse(testing_util::ReadBytes(dir + "/config.json"));
  EXPECT_EQ(UncutConfig(config), ReleaseConfig(rc.release));
}

INSTANTIATE_TEST_SUITE_P(Releases, ReleaseCheckpointTest,
                         ::testing::Values(ReleaseCase{Release::kGlm52, 8, 744, 9.95, 95232},
                                           ReleaseCase{Release::kDeepSeekV32, 16, 671, 11.5, 85888}),
                         [](const auto& info) { return info.param.release == Release::kGlm52 ? "glm52" : "dsv32"; });

TEST(ReleaseCheckpointTest, BadCutsAreErrors) {
  EXPECT_THAT(std::string(CutConfig(Release::kGlm52, 79, 0).status().message()), HasSubstr("layers must be in [1, 78]"));
  EXPECT_THAT(std::string(CutConfig(Release::kDeepSeekV32, 2, 12).status().message()),
              HasSubstr("experts must be a multiple of n_group = 8"));
  EXPECT_THAT(std::string(ParseRelease("glm-4").status().message()), HasSubstr("glm-5.2, deepseek-v3.2, glm-4.7-flash or deepseek-v3"));
  auto cut = CutConfig(Release::kGlm52, 2, 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ((*cut)["num_experts_per_tok"], 4);
  // The MTP layer's unconverted modules follow it to its new index.
  bool mtp_router = false;
  for (const auto& m : (*cut)["quantization_config"]["modules_to_not_convert"]) mtp_router |= m == "model.layers.2.mlp.gate";
  EXPECT_TRUE(mtp_router);
}

// The releases without an indexer: GLM-4.7-Flash (bf16, as released) and DeepSeek-V3 (FP8). A cut
// loads with no indexer tensor anywhere, the MTP layer ships its own embed and head copies, and the
// full config counts the published totals exactly: GLM-4.7-Flash 31,221,488,576 parameters with the
// MTP layer and its copies (its model page), DeepSeek-V3 684,531,386,000 counting the FP8 block
// scales as the hub does (the "685B" of its model page: 671B main model and 14B MTP module).
struct IndexerlessCase {
  Release release;
  int64_t layers;
  int64_t experts;
  int64_t published_total;
  int64_t trunk_billions;
};

class IndexerlessReleaseTest : public ::testing::TestWithParam<IndexerlessCase> {};

TEST_P(IndexerlessReleaseTest, CutCheckpointLoadsAndTheFullConfigCountsThePublishedTotal) {
  const IndexerlessCase& rc = GetParam();
  const bool fp8 = ReleaseIsFp8(rc.release);
  ScopedTempDir tmp;
  const std::string dir = tmp.File("cut");
  ReleaseCheckpointOptions options;
  options.release = rc.release;
  options.layers = rc.layers;
  options.experts = rc.experts;
  options.zeros = true;
  ASSERT_TRUE(WriteReleaseCheckpoint(dir, options).ok());
  LoadOptions load;
  load.file_memory = FileMemory::kMapped;
  auto model = Model::Load(dir, load);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& cut = (*model)->config();
  EXPECT_FALSE(cut.has_indexer);
  ASSERT_TRUE((*model)->has_mtp());
  EXPECT_TRUE((*model)->weights().mtp[0].own_embed);
  EXPECT_TRUE((*model)->weights().mtp[0].own_head);
  const ParameterCount cut_count = CountConfigParameters(cut);
  EXPECT_EQ((*model)->weights().mtp_parameter_count, cut_count.mtp + cut_count.mtp_copies);
  EXPECT_EQ(cut_count.mtp_copies, 2 * cut.vocab_size * cut.hidden_size);

  auto store = SafetensorsStore::Open(dir, FileMemory::kMapped);
  ASSERT_TRUE(store.ok()) << store.status();
  int64_t fp8_tensors = 0;
  for (const std::string& name : (*store)->names()) {
    EXPECT_EQ(name.find(".indexer."), std::string::npos) << name;
    auto view = (*store)->Get(name);
    ASSERT_TRUE(view.ok());
    fp8_tensors += view->dtype == DType::kF8E4M3;
  }
  const std::string mtp = absl::StrCat("model.layers.", rc.layers, ".");
  for (const std::string& name : {mtp + "embed_tokens.weight", mtp + "shared_head.head.weight", mtp + "eh_proj.weight",
                                  std::string("lm_head.weight"), mtp + "mlp.gate.weight"}) {
    auto view = (*store)->Get(name);
    ASSERT_TRUE(view.ok()) << name;
    EXPECT_EQ(view->dtype, DType::kBF16) << name;
  }
  auto expert = (*store)->Get(mtp + "mlp.experts.0.down_proj.weight");
  ASSERT_TRUE(expert.ok());
  EXPECT_EQ(expert->dtype, fp8 ? DType::kF8E4M3 : DType::kBF16);
  if (fp8) {
    EXPECT_GT(fp8_tensors, 50);
  } else {
    EXPECT_EQ(fp8_tensors, 0);
  }

  auto full = ParseModelConfig(ReleaseConfig(rc.release), "release");
  ASSERT_TRUE(full.ok()) << full.status();
  const ParameterCount p = CountConfigParameters(*full);
  const int64_t total = p.trunk + p.mtp + p.mtp_copies + (fp8 ? CountFp8BlockScales(*full) : 0);
  EXPECT_EQ(total, rc.published_total);
  EXPECT_NEAR(p.trunk / 1e9, rc.trunk_billions, 0.005 * rc.trunk_billions);
}

INSTANTIATE_TEST_SUITE_P(
    Releases, IndexerlessReleaseTest,
    ::testing::Values(IndexerlessCase{Release::kGlm47Flash, 3, 4, 31221488576, 30},
                      IndexerlessCase{Release::kDeepSeekV3, 4, 16, 684531386000, 671}),
    [](const auto& info) { return info.param.release == Release::kGlm47Flash ? "glm47flash" : "dsv3"; });

}  // namespace
}  // namespace mtpspec
