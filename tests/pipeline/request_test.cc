// The request builder (pipeline/request.h): every rule of a request, named in each front end's
// spelling; the capacity a request needs, without overflow; and the pipeline it builds.
#include "pipeline/request.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/weight_check.h"
#include "spec/generator.h"
#include "testing/tiny_configs.h"
#include "tests/util/test_util.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;

std::string Error(const RequestOptions& r, Frontend f) { return std::string(ValidateRequest(r, f).message()); }

TEST(RequestTest, ErrorsNameTheOptionInEachFrontEndsSpelling) {
  struct Case {
    const char* label;
    void (*edit)(RequestOptions&);
    const char* cli;
    const char* python;
  };
  const Case cases[] = {
      {"k too large", [](RequestOptions& r) { r.k = kMaxDraftTokens + 1; }, "--k must be in [0, 15]", "k must be in [0, 15]"},
      {"k negative", [](RequestOptions& r) { r.k = -1; }, "--k must be in", "k must be in"},
      {"auto k zero", [](RequestOptions& r) { r.adaptive_k = true; r.k = 0; }, "--k must be in [1, 15]", "k must be in [1, 15]"},
      {"max new", [](RequestOptions& r) { r.max_new_tokens = -2; }, "--max-new must be >= 0", "max_new_tokens must be >= 0"},
      {"temperature nan", [](RequestOptions& r) { r.accept.sampling.temperature = std::nan(""); }, "--temperature", "temperature"},
      {"top p", [](RequestOptions& r) { r.accept.sampling.top_p = 0; }, "--top-p must be in (0, 1]", "top_p must be in (0, 1]"},
      {"relaxed delta inf", [](RequestOptions& r) { r.accept.relaxed_delta = std::numeric_limits<double>::infinity(); },
       "--relaxed-delta must be a finite number", "relaxed_delta must be a finite number"},
      {"relaxed delta nan", [](RequestOptions& r) { r.accept.relaxed_delta = std::nan(""); }, "--relaxed-delta", "relaxed_delta"},
      {"synthetic without rates", [](RequestOptions& r) { r.accept.rule = AcceptRule::kSynthetic; },
       "--synthetic-rates is needed with --accept synthetic", "synthetic_rates is needed with accept synthetic"},
      {"synthetic rates of the wrong length",
       [](RequestOptions& r) {
         r.accept.rule = AcceptRule::kSynthetic;
         r.accept.synthetic_rates = {0.5, 0.5};
       },
       "--synthetic-rates has 2 rates for k = 3", "synthetic_rates has 2 rates for k = 3"},
      {"rate out of range", [](RequestOptions& r) { r.accept.synthetic_rates = {0.5, 1.5, 0.5}; },
       "--synthetic-rates[1] = 1.5 is outside [0, 1]", "synthetic_rates[1] = 1.5"},
      {"ngram", [](RequestOptions& r) { r.lookup.max_ngram = 0; }, "--ngram must be >= 1", "ngram must be >= 1"},
  };
  for (const Case& c : cases) {
    RequestOptions r;
    c.edit(r);
    EXPECT_THAT(Error(r, Frontend::kCli), HasSubstr(c.cli)) << c.label;
    EXPECT_THAT(Error(r, Frontend::kPython), HasSubstr(c.python)) << c.label;
  }
  RequestOptions ok;
  EXPECT_TRUE(ValidateRequest(ok, Frontend::kCli).ok());
  ok.k = kMaxDraftTokens;
  ok.accept.rule = AcceptRule::kSynthetic;
  ok.accept.synthetic_rates.assign(kMaxDraftTokens, 0.5);
  EXPECT_TRUE(ValidateRequest(ok, Frontend::kPython).ok());
}

TEST(RequestTest, ParsersAreStrict) {
  RequestOptions r;
  ASSERT_TRUE(ParseK("auto", Frontend::kCli, r).ok());
  EXPECT_TRUE(r.adaptive_k);
  EXPECT_EQ(r.k, kDefaultAdaptiveKMax);
  ASSERT_TRUE(ParseK("5", Frontend::kCli, r).ok());
  EXPECT_FALSE(r.adaptive_k);
  EXPECT_EQ(r.k, 5);
  EXPECT_THAT(std::string(ParseK("2.7", Frontend::kCli, r).message()), HasSubstr("--k must be an integer or auto"));
  for (const char* bad : {"yes", "1", "True", ""}) {
    EXPECT_THAT(std::string(ParseBool(bad, "--sample-drafts").status().message()),
                HasSubstr("--sample-drafts must be true or false")) << bad;
  }
  EXPECT_TRUE(*ParseBool("true", "x"));
  EXPECT_FALSE(*ParseBool("false", "x"));
  EXPECT_THAT(std::string(ParseWeightDType("f16", Frontend::kCli).status().message()),
              HasSubstr("--weights must be stored, f32, bf16 or fp8, got \"f16\""));
  EXPECT_THAT(std::string(ParseWeightDType("f16", Frontend::kPython).status().message()), HasSubstr("dtype must be"));
  EXPECT_THAT(std::string(ParseDraftKind("medusa", Frontend::kPython).status().message()),
              HasSubstr("draft must be mtp, lookup, hybrid or none"));
  EXPECT_EQ(OptionName(Frontend::kCli, "mtp_index_share"), "--mtp-index-share");
  EXPECT_EQ(OptionName(Frontend::kPython, "mtp_index_share"), "mtp_index_share");
}

TEST(RequestTest, PointlessCombinationsWarn) {
  RequestOptions r;
  EXPECT_TRUE(RequestWarnings(r, Frontend::kCli).empty());
  r.sample_drafts = true;
  ASSERT_EQ(RequestWarnings(r, Frontend::kCli).size(), 1u);
  EXPECT_THAT(RequestWarnings(r, Frontend::kCli)[0], HasSubstr("--sample-drafts with --accept sampler-equality"));
  r.accept.rule = AcceptRule::kRejection;
  EXPECT_TRUE(RequestWarnings(r, Frontend::kCli).empty());
  r.accept.synthetic_rates = {0.5, 0.5, 0.5};
  ASSERT_EQ(RequestWarnings(r, Frontend::kPython).size(), 1u);
  EXPECT_THAT(RequestWarnings(r, Frontend::kPython)[0], HasSubstr("synthetic_rates is unused"));
  r.accept.synthetic_rates.clear();
  r.device_weights = DeviceWeightFormat::kFp8;  // on the CPU it changes nothing
  ASSERT_EQ(RequestWarnings(r, Frontend::kCli).size(), 1u);
  EXPECT_THAT(RequestWarnings(r, Frontend::kCli)[0], HasSubstr("--device-weights fp8 is unused unless --device is cuda"));
  r.device = Device::kCuda;
  EXPECT_TRUE(RequestWarnings(r, Frontend::kCli).empty());
}

// The synthetic rates' three forms: one at a time, each turned into the conditional rates.
TEST(RequestTest, SyntheticRateFormsResolveToConditionalRates) {
  RequestOptions unconditional;
  unconditional.k = 2;
  unconditional.synthetic_rates_unconditional = {0.8, 0.4};
  ASSERT_TRUE(ResolveSyntheticRates(unconditional, Frontend::kCli).ok());
  ASSERT_EQ(unconditional.accept.synthetic_rates.size(), 2u);
  EXPECT_NEAR(unconditional.accept.synthetic_rates[0], 0.8, 1e-12);
  EXPECT_NEAR(unconditional.accept.synthetic_rates[1], 0.5, 1e-12);
  RequestOptions length;
  length.k = 3;
  length.synthetic_acceptance_length = 2.25;
  ASSERT_TRUE(ResolveSyntheticRates(length, Frontend::kPython).ok());
  EXPECT_EQ(length.accept.synthetic_rates, (std::vector<double>{1.0, 0.25, 0.0}));

  RequestOptions both;
  both.accept.synthetic_rates = {0.5};
  both.synthetic_acceptance_length = 1.5;
  EXPECT_THAT(std::string(ResolveSyntheticRates(both, Frontend::kCli).message()),
              HasSubstr("--synthetic-rates (conditional), --synthetic-rates-unconditional or "
                        "--synthetic-acceptance-length"));
  RequestOptions adaptive;
  ASSERT_TRUE(ParseK("auto", Frontend::kPython, adaptive).ok());
  adaptive.synthetic_acceptance_length = 2.0;
  EXPECT_THAT(std::string(ResolveSyntheticRates(adaptive, Frontend::kPython).message()),
              HasSubstr("synthetic_acceptance_length needs a fixed k"));
  RequestOptions rising;
  rising.synthetic_rates_unconditional = {0.3, 0.6};
  EXPECT_THAT(std::string(ResolveSyntheticRates(rising, Frontend::kCli).message()),
              HasSubstr("--synthetic-rates-unconditional[1] = 0.6 rises"));
}

TEST(RequestTest, DeviceWeightFormatsParseAndRefuseOthers) {
  EXPECT_EQ(*ParseDeviceWeightFormat("bf16"), DeviceWeightFormat::kBf16);
  EXPECT_EQ(*ParseDeviceWeightFormat("fp8"), DeviceWeightFormat::kFp8);
  EXPECT_STREQ(DeviceWeightFormatName(DeviceWeightFormat::kFp8), "fp8");
  const absl::Status refused = ParseDeviceWeightFormat("int4", "--device-weights").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--device-weights: unknown format 'int4'"));
}

class RequestModelTest : public ::testing::Test {
 protected:
  // Each test has its own scratch directory: ctest runs the tests of this fixture in parallel
  // processes, and a shared path let one read a checkpoint another was writing.
  void SetUp() override {
    dir_ = scratch_.File("model");
    RandomCheckpointOptions options;
    ASSERT_TRUE(WriteRandomCheckpoint(dir_, TinyGlmConfig(), options).ok());
    auto model = Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  testing_util::ScopedTempDir scratch_;
  std::string dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(RequestModelTest, RequiredCapacitySaturatesInsteadOfOverflowing) {
  const int64_t limit = model_->config().max_position_embeddings;
  RequestOptions r;
  r.max_new_tokens = 10;
  EXPECT_EQ(RequiredCapacity(*model_, 5, r), std::min<int64_t>(limit, 5 + 10 + kMaxDraftTokens + 1));
  r.max_new_tokens = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(RequiredCapacity(*model_, 5, r), limit);
  r.max_new_tokens = limit - 5;
  EXPECT_EQ(RequiredCapacity(*model_, 5, r), limit);
}

TEST_F(RequestModelTest, BuildsEachDrafterAndRefusesAMissingBackend) {
  for (DraftKind kind : {DraftKind::kNone, DraftKind::kMtp, DraftKind::kLookup, DraftKind::kHybrid}) {
    RequestOptions r;
    r.draft = kind;
    auto p = BuildPipeline(*model_, r, 64, Frontend::kCli);
    ASSERT_TRUE(p.ok()) << DraftKindName(kind) << ": " << p.status();
    ASSERT_NE(p->target, nullptr);
    if (kind == DraftKind::kNone) {
      EXPECT_EQ(p->drafter, nullptr);
    } else {
      ASSERT_NE(p->drafter, nullptr);
      EXPECT_EQ(p->drafter->name(), DraftKindName(kind));
    }
  }
  RequestOptions bad;
  bad.k = 99;
  EXPECT_THAT(std::string(BuildPipeline(*model_, bad, 64, Frontend::kPython).status().message()),
              HasSubstr("k must be in"));
  if (!BuiltWithCuda()) {
    RequestOptions gpu;
    gpu.device = Device::kCuda;
    EXPECT_THAT(std::string(BuildPipeline(*model_, gpu, 64, Frontend::kPython).status().message()),
                HasSubstr("device cuda: this mtpspec was built without the CUDA backend"));
  }
}

// A checkpoint with NaN in a matmul weight loads (only the cheap tensors are checked at load), is
// found by the full scan, and every request on it stops with DataLoss instead of emitting token 0.
TEST_F(RequestModelTest, NanWeightsAreFoundAndStopGeneration) {
  const std::string bad_dir = scratch_.File("nan_model");
  const std::string target = "model.layers.0.self_attn.o_proj.weight";
  {
    std::filesystem::create_directories(bad_dir);
    std::filesystem::copy_file(dir_ + "/config.json", bad_dir + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    auto file = SafetensorsFile::Open(dir_ + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<std::pair<std::string, TensorView>> tensors;
    Tensor poisoned;
    for (const std::string& name : (*file)->names()) {
      TensorView view = *(*file)->Get(name);
      if (name == target) {
        ASSERT_EQ(view.dtype, DType::kF32);
        poisoned = Tensor::Empty(DType::kF32, view.shape_vector());
        std::memcpy(poisoned.data<float>(), view.data, view.nbytes());
        poisoned.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
        poisoned.data<float>()[9] = -std::numeric_limits<float>::infinity();
        view = poisoned.view();
      }
      tensors.push_back({name, view});
    }
    ASSERT_TRUE(WriteSafetensors(bad_dir + "/model.safetensors", tensors).ok());
  }
  auto store = SafetensorsStore::Open(bad_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<NonFiniteTensor> found = FindNonFiniteTensors(**store);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].name, target);
  EXPECT_EQ(found[0].count, 2);
  EXPECT_EQ(found[0].first, 7);
  {
    auto clean = SafetensorsStore::Open(dir_);
    ASSERT_TRUE(clean.ok());
    EXPECT_TRUE(FindNonFiniteTensors(**clean).empty());
  }

  auto model = Model::Load(bad_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  for (DraftKind kind : {DraftKind::kNone, DraftKind::kMtp}) {
    RequestOptions r;
    r.draft = kind;
    r.max_new_tokens = 8;
    auto p = BuildPipeline(**model, r, 64, Frontend::kCli);
    ASSERT_TRUE(p.ok()) << p.status();
    const std::vector<int32_t> prompt = {1, 2, 3, 4};
    auto result = Generate(*p->target, p->drafter.get(), prompt, ToGenerateOptions(r));
    ASSERT_FALSE(result.ok()) << DraftKindName(kind);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("logits are not finite at position 3"));
  }
}

}  // namespace
}  // namespace mtpspec
