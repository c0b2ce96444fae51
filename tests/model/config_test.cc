// Config parsing: both model types, defaults, the IndexShare priority rule and bad input.
#include "model/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/file_util.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

json Glm52() { return ReadJson(std::string(MTPSPEC_TESTDATA_DIR) + "/glm-5.2-fp8.json"); }

std::vector<int64_t> FullLayers(const ModelConfig& c) {
  std::vector<int64_t> full;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.layer_has_indexer[l]) full.push_back(l);
  }
  return full;
}

// Hand-written from the GLM-5.2 release: full layers 0, 1, 2, 6, 10, …, 74 (21 layers).
std::vector<int64_t> Glm52FullLayers() {
  std::vector<int64_t> full = {0, 1, 2};
  for (int64_t l = 6; l <= 74; l += 4) full.push_back(l);
  return full;
}

TEST(ConfigTest, Glm52ShippedIndexerTypes) {
  auto c = ParseModelConfig(Glm52(), "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index_schedule_source, "indexer_types");
  EXPECT_EQ(FullLayers(*c), Glm52FullLayers());
  EXPECT_EQ(FullLayers(*c).size(), 21u);
  EXPECT_EQ(c->IndexDonor(3), 2);
  EXPECT_EQ(c->IndexDonor(5), 2);
  EXPECT_EQ(c->IndexDonor(6), 6);
  EXPECT_EQ(c->IndexDonor(77), 74);
}

TEST(ConfigTest, Glm52ScheduleFromFreqAndOffsetEqualsShippedList) {
  json j = Glm52();
  j.erase("indexer_types");
  auto c = ParseModelConfig(j, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index_schedule_source, "index_topk_freq=4, index_skip_topk_offset=3");
  EXPECT_EQ(FullLayers(*c), Glm52FullLayers());
}

// Regression guard: an offset of 2 (a hard-coded default seen in one port) gives 0, 1, 5, 9, …
TEST(ConfigTest, DefaultOffsetIsTwo) {
  json j = Glm52();
  j.erase("indexer_types");
  j.erase("index_skip_topk_offset");
  auto c = ParseModelConfig(j, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  const auto full = FullLayers(*c);
  ASSERT_GE(full.size(), 4u);
  EXPECT_EQ(std::vector<int64_t>(full.begin(), full.begin() + 4), (std::vector<int64_t>{0, 1, 5, 9}));
}

TEST(ConfigTest, IndexerTypesWinOverPatternAndPatternOverFormula) {
  json j = Glm52();
  j["num_hidden_layers"] = 4;
  j["mlp_layer_types"] = {"dense", "sparse", "sparse", "sparse"};
  j["indexer_types"] = {"full", "shared", "full", "shared"};
  j["index_topk_pattern"] = "FFFS";
  auto c = ParseModelConfig(j, "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(FullLayers(*c), (std::vector<int64_t>{0, 2}));
  j.erase("indexer_types");
  c = ParseModelConfig(j, "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(FullLayers(*c), (std::vector<int64_t>{0, 1, 2}));
  // A pattern shorter than the layer count leaves the remaining layers full.
  j["index_topk_pattern"] = "FS";
  c = ParseModelConfig(j, "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(FullLayers(*c), (std::vector<int64_t>{0, 2, 3}));
}

TEST(ConfigTest, Glm52Fields) {
  auto c = ParseModelConfig(Glm52(), "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, ModelType::kGlmMoeDsa);
  EXPECT_DOUBLE_EQ(c->rope.theta, 8e6);  // an integer in JSON
  EXPECT_TRUE(c->indexer_rope_interleave);
  EXPECT_TRUE(c->rope_interleave);
  EXPECT_TRUE(c->index_share_for_mtp_iteration);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.0625);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  int dense = 0;
  for (bool d : c->layer_is_dense) dense += d;
  EXPECT_EQ(dense, 3);
}

// transformers' GlmMoeDsaConfig writes no indexer_rope_interleave and its indexer is interleaved;
// DeepSeek-V3.2's indexer is half-split. An explicit key wins either way.
TEST(ConfigTest, IndexerRopeDefaultsPerModelType) {
  json glm = Glm52();
  auto c = ParseModelConfig(glm, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->indexer_rope_source, "config");
  glm.erase("indexer_rope_interleave");
  c = ParseModelConfig(glm, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->indexer_rope_interleave);
  EXPECT_EQ(c->indexer_rope_source, "glm_moe_dsa default (the config has no indexer_rope_interleave)");
  glm["indexer_rope_interleave"] = false;
  c = ParseModelConfig(glm, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->indexer_rope_interleave);
}

// quantization_config as the releases write it, and everything else refused with the field named.
TEST(ConfigTest, QuantizationConfigOfTheReleases) {
  json glm = Glm52();
  glm["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}},
                                {"modules_to_not_convert",
                                 {"model.embed_tokens", "lm_head", "model.layers.0.self_attn.indexers_proj",
                                  "model.layers.5.mlp.gate"}}};
  auto c = ParseModelConfig(glm, "glm52");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->quantization.fp8);
  EXPECT_TRUE(ModuleIsNotConverted(*c, "lm_head.weight"));
  EXPECT_TRUE(ModuleIsNotConverted(*c, "model.layers.0.self_attn.indexer.weights_proj.weight"));  // the alias
  EXPECT_TRUE(ModuleIsNotConverted(*c, "model.layers.5.mlp.gate.weight"));
  EXPECT_FALSE(ModuleIsNotConverted(*c, "model.layers.5.mlp.gate_proj.weight"));  // a prefix, not a module
  EXPECT_FALSE(ModuleIsNotConverted(*c, "model.layers.0.self_attn.indexer.wk.weight"));
  json dsv = glm;
  dsv["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}};
  c = ParseModelConfig(dsv, "dsv32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.scale_fmt, "ue8m0");
  const std::pair<json, std::string> bad[] = {
      {{{"quant_method", "awq"}}, "\"quant_method\" is \"awq\""},
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}}, "\"fmt\" is \"e5m2\""},
      {{{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}, "only [128, 128] blocks"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "static"}}, "\"activation_scheme\" is \"static\""},
      {{{"quant_method", "fp8"}, {"scale_fmt", "e8m0fnu"}}, "\"scale_fmt\" is \"e8m0fnu\""},
      {{{"quant_method", "fp8"}, {"modules_to_not_convert", "lm_head"}}, "must be a list of module names"},
      {json::array({1}), "quantization_config must be an object"},
  };
  for (const auto& [q, message] : bad) {
    json j = Glm52();
    j["quantization_config"] = q;
    auto r = ParseModelConfig(j, "glm52");
    ASSERT_FALSE(r.ok()) << q.dump();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(message)) << q.dump();
  }
}

json DeepSeekV32() {
  // The published DeepSeek-V3.2 config, schedule-relevant and dimension fields.
  return json{{"model_type", "deepseek_v32"},
              {"vocab_size", 129280},
              {"hidden_size", 7168},
              {"num_hidden_layers", 61},
              {"num_attention_heads", 128},
              {"num_key_value_heads", 128},
              {"q_lora_rank", 1536},
              {"kv_lora_rank", 512},
              {"qk_nope_head_dim", 128},
              {"qk_rope_head_dim", 64},
              {"v_head_dim", 128},
              {"intermediate_size", 18432},
              {"moe_intermediate_size", 2048},
              {"first_k_dense_replace", 3},
              {"n_routed_experts", 256},
              {"n_shared_experts", 1},
              {"num_experts_per_tok", 8},
              {"n_group", 8},
              {"topk_group", 4},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000},
              {"rope_scaling",
               {{"type", "yarn"},
                {"factor", 40},
                {"original_max_position_embeddings", 4096},
                {"beta_fast", 32},
                {"beta_slow", 1},
                {"mscale", 1.0},
                {"mscale_all_dim", 1.0}}},
              {"max_position_embeddings", 163840},
              {"index_n_heads", 64},
              {"index_head_dim", 128},
              {"index_topk", 2048},
              {"num_nextn_predict_layers", 1},
              {"eos_token_id", 1}};
}

TEST(ConfigTest, DeepSeekV32Defaults) {
  auto c = ParseModelConfig(DeepSeekV32(), "dsv32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, ModelType::kDeepseekV32);
  EXPECT_FALSE(c->indexer_rope_interleave);  // absent → half-split
  EXPECT_EQ(c->indexer_rope_source, "deepseek_v32 default (the config has no indexer_rope_interleave)");
  EXPECT_TRUE(c->rope_interleave);
  EXPECT_EQ(FullLayers(*c).size(), 61u);
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_NEAR(c->softmax_scale(), 0.13523378, 1e-7);
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1}));
}

TEST(ConfigTest, NestedRopeParametersWinOverTopLevel) {
  json j = DeepSeekV32();
  j["rope_parameters"] = {{"rope_theta", 50000}, {"rope_type", "default"}};
  auto c = ParseModelConfig(j, "dsv32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope.theta, 50000);
  EXPECT_EQ(c->rope.type, "default");
}

TEST(ConfigTest, IntegralFloatsAreAcceptedForIntegerFields) {
  json j = DeepSeekV32();
  j["index_topk"] = 2048.0;
  auto c = ParseModelConfig(j, "dsv32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index_topk, 2048);
}

struct BadCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string expected;  // substring of the error
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, GivesAClearError) {
  json j = Glm52();
  GetParam().mutate(j);
  auto c = ParseModelConfig(j, "/models/x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().expected));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/models/x/config.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    ::testing::Values(
        BadCase{"MissingHidden", [](json& j) { j.erase("hidden_size"); }, "\"hidden_size\" is required"},
        BadCase{"NullQLora", [](json& j) { j["q_lora_rank"] = nullptr; }, "q_lora_rank"},
        BadCase{"StringLayers", [](json& j) { j["num_hidden_layers"] = "78"; }, "\"num_hidden_layers\" must be an integer"},
        BadCase{"FractionalHeads", [](json& j) { j["num_attention_heads"] = 6.5; }, "num_attention_heads"},
        BadCase{"NegativeVocab", [](json& j) { j["vocab_size"] = -1; }, "\"vocab_size\" must be > 0"},
        BadCase{"UnknownType", [](json& j) { j["model_type"] = "llama"; }, "\"llama\" is not supported"},
        BadCase{"OddRope", [](json& j) { j["qk_rope_head_dim"] = 63; }, "qk_rope_head_dim"},
        BadCase{"TooManyExperts", [](json& j) { j["num_experts_per_tok"] = 300; }, "num_experts_per_tok"},
        BadCase{"GroupsDoNotDivide", [](json& j) { j["n_group"] = 3; }, "n_group"},
        BadCase{"KvHeadsDiffer", [](json& j) { j["num_key_value_heads"] = 8; }, "num_key_value_heads"},
        BadCase{"ShortIndexerTypes", [](json& j) { j["indexer_types"] = {"full"}; }, "indexer_types"},
        BadCase{"BadIndexerType", [](json& j) { j["indexer_types"][5] = "half"; }, "entry 5"},
        BadCase{"SharedFirstLayer", [](json& j) { j["indexer_types"][0] = "shared"; }, "layer 0 shared"},
        BadCase{"MissingTheta", [](json& j) { j["rope_parameters"].erase("rope_theta"); }, "rope_theta"},
        BadCase{"UnknownRopeType", [](json& j) { j["rope_parameters"]["rope_type"] = "llama3"; }, "llama3"},
        BadCase{"EosOutsideVocab", [](json& j) { j["eos_token_id"] = {200000}; }, "eos_token_id"},
        BadCase{"IndexHeadSmallerThanRope", [](json& j) { j["index_head_dim"] = 32; }, "index_head_dim"},
        BadCase{"SoftmaxRouter", [](json& j) { j["scoring_func"] = "softmax"; }, "scoring_func"},
        BadCase{"ZeroNormEps", [](json& j) { j["rms_norm_eps"] = 0.0; }, "rms_norm_eps"},
        BadCase{"HugeNormEps", [](json& j) { j["rms_norm_eps"] = 5.0; }, "rms_norm_eps"},
        BadCase{"NegativeRoutedScale", [](json& j) { j["routed_scaling_factor"] = -2.5; }, "routed_scaling_factor"},
        BadCase{"HugeRoutedScale", [](json& j) { j["routed_scaling_factor"] = 1e9; }, "routed_scaling_factor"},
        BadCase{"LayersBeyondInt64", [](json& j) { j["num_hidden_layers"] = 10000000000000000000ull; },
                "\"num_hidden_layers\" = 10000000000000000000 is too large"},
        BadCase{"LayersAsHugeFloat", [](json& j) { j["num_hidden_layers"] = 1e19; }, "num_hidden_layers"},
        BadCase{"EosBeyondInt64", [](json& j) { j["eos_token_id"] = {1, 18446744073709551615ull}; }, "eos_token_id"},
        BadCase{"ThetaOfOne", [](json& j) { j["rope_parameters"]["rope_theta"] = 1.0; }, "rope_theta"}),
    [](const auto& info) { return info.param.name; });

TEST(ConfigTest, TextThatIsNotJsonNamesTheFile) {
  auto c = ParseModelConfigText("{\"model_type\": ", "/tmp/broken/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/tmp/broken/config.json"));
}

TEST(ConfigTest, DirectoryOrOversizedFileIsAClearError) {
  testing_util::ScopedTempDir dir;
  const auto directory = LoadModelConfig(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("is a directory"));

  // The bound is checked before anything is read: a sparse file of one byte past it suffices.
  const std::string big = dir.File("config.json");
  testing_util::WriteBytes(big, "{}");
  ASSERT_EQ(::truncate(big.c_str(), kMaxJsonFileBytes + 1), 0);
  const auto oversized = LoadModelConfig(big);
  ASSERT_FALSE(oversized.ok());
  EXPECT_THAT(std::string(oversized.status().message()), HasSubstr("more than the"));
  EXPECT_THAT(std::string(oversized.status().message()), HasSubstr(big));

  // A FIFO would block a reader forever: refused before it is opened.
  const std::string fifo = dir.File("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto from_fifo = LoadModelConfig(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_THAT(std::string(from_fifo.status().message()), HasSubstr("not a regular file"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  auto c = LoadModelConfig("/nonexistent/dir/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}


// The types without a DSA indexer, from their releases' published configs (model/release_configs/).
namespace indexerless {

json Release(const std::string& name) { return ReadJson(std::string(MTPSPEC_TESTDATA_DIR) + "/" + name + ".json"); }

void ExpectNoIndexer(const ModelConfig& c) {
  EXPECT_FALSE(c.has_indexer);
  EXPECT_EQ(c.index_topk, kNoIndexerTopK);
  EXPECT_EQ(c.index_n_heads, 0);
  EXPECT_EQ(c.index_head_dim, 0);
  EXPECT_TRUE(FullLayers(c).empty());
  EXPECT_EQ(c.IndexDonor(0), -1);
}

TEST(ConfigTest, Glm47FlashReleaseParsesWithoutAnIndexer) {
  auto c = ParseModelConfig(Release("glm-4.7-flash"), "glm-4.7-flash");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, ModelType::kGlm4MoeLite);
  ExpectNoIndexer(*c);
  EXPECT_EQ(c->num_hidden_layers, 47);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  for (int64_t l = 0; l < c->num_hidden_layers; ++l) EXPECT_EQ(c->layer_is_dense[l], l == 0) << "layer " << l;
  EXPECT_EQ(c->scoring_func, "sigmoid");  // absent from the release; sigmoid is meant
  EXPECT_TRUE(c->rope_interleave);        // absent from the release; interleaved is meant
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.0625);  // 256^-1/2, no YaRN
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 1.8);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_FALSE(c->quantization.fp8);
  EXPECT_TRUE(c->mtp_chain_raw);
  EXPECT_THAT(c->mtp_chain_source, HasSubstr("glm4_moe_lite_mtp"));
}

TEST(ConfigTest, DeepSeekV3ReleaseParsesWithoutAnIndexer) {
  auto c = ParseModelConfig(Release("deepseek-v3"), "deepseek-v3");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, ModelType::kDeepseekV3);
  ExpectNoIndexer(*c);
  EXPECT_EQ(c->rope.type, "yarn");
  EXPECT_NEAR(c->softmax_scale(), 0.13523378, 1e-7);  // as DeepSeek-V3.2: the same YaRN
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_EQ(c->first_k_dense_replace, 3);
  EXPECT_TRUE(c->quantization.fp8);
  EXPECT_EQ(c->quantization.scale_fmt, "");  // V3 and R1 write no scale_fmt
  EXPECT_TRUE(c->mtp_chain_raw);
}

// Each type's defaults fill exactly what its release states, so a config without the keys parses to
// the same model.
TEST(ConfigTest, IndexerlessDefaultsEqualTheReleasedValues) {
  for (const char* name : {"glm-4.7-flash", "deepseek-v3"}) {
    const json full = Release(name);
    json bare = full;
    for (const char* key : {"first_k_dense_replace", "routed_scaling_factor", "rms_norm_eps", "scoring_func",
                            "rope_interleave", "moe_layer_freq", "partial_rotary_factor", "n_shared_experts",
                            "norm_topk_prob", "topk_method", "tie_word_embeddings", "attention_bias"}) {
      bare.erase(key);
    }
    auto a = ParseModelConfig(full, name);
    auto b = ParseModelConfig(bare, name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(a->layer_is_dense, b->layer_is_dense) << name;
    EXPECT_DOUBLE_EQ(a->routed_scaling_factor, b->routed_scaling_factor) << name;
    EXPECT_DOUBLE_EQ(a->rms_norm_eps, b->rms_norm_eps) << name;
    EXPECT_EQ(a->scoring_func, b->scoring_func) << name;
    EXPECT_EQ(a->rope_interleave, b->rope_interleave) << name;
    EXPECT_EQ(a->n_shared_experts, b->n_shared_experts) << name;
    EXPECT_EQ(a->norm_topk_prob, b->norm_topk_prob) << name;
  }
}

// The types with an indexer keep the normed chain by default.
TEST(ConfigTest, ChainDefaultPerType) {
  auto glm = ParseModelConfig(Glm52(), "glm");
  auto dsv32 = ParseModelConfig(Release("deepseek-v3.2"), "dsv32");
  ASSERT_TRUE(glm.ok() && dsv32.ok());
  EXPECT_FALSE(glm->mtp_chain_raw);
  EXPECT_FALSE(dsv32->mtp_chain_raw);
  EXPECT_TRUE(glm->has_indexer);
  EXPECT_EQ(glm->index_topk, 2048);
}

TEST(ConfigTest, IndexerKeysOnATypeWithoutAnIndexerAreErrors) {
  for (const char* key : {"index_topk", "index_n_heads", "index_head_dim", "indexer_types", "index_topk_freq",
                          "indexer_rope_interleave", "index_share_for_mtp_iteration"}) {
    json j = Release("glm-4.7-flash");
    j[key] = key == std::string("indexer_types") ? json::array({"full"}) : json(1);
    auto c = ParseModelConfig(j, "/m/config.json");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(absl::StrCat("\"", key, "\"")));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("glm4_moe_lite does not have"));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("/m/config.json"));
  }
}

TEST(ConfigTest, PartialRotaryFactorOtherThanOneIsAnError) {
  json top = Release("glm-4.7-flash");
  top["partial_rotary_factor"] = 0.5;
  auto a = ParseModelConfig(top, "/m/config.json");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("\"partial_rotary_factor\" = 0.5 is not supported"));
  json nested = Release("deepseek-v3");
  nested["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000}, {"partial_rotary_factor", 0.25}};
  auto b = ParseModelConfig(nested, "/m/config.json");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("rope_parameters"));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("partial_rotary_factor"));
  json glm = Glm52();
  glm["partial_rotary_factor"] = 1.0;
  EXPECT_TRUE(ParseModelConfig(glm, "glm").ok());
}

TEST(ConfigTest, UnknownTypeListsEveryType) {
  json j = Glm52();
  j["model_type"] = "deepseek_v2";
  auto c = ParseModelConfig(j, "x");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("supported: glm_moe_dsa, deepseek_v32, glm4_moe_lite, deepseek_v3"));
}

}  // namespace indexerless

}  // namespace
}  // namespace mtpspec
