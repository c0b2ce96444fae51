// The speculative loop on the GPU (CudaTarget + CudaMtpDrafter): its output equals plain decoding
// on the GPU token for token — greedy and sampler-equality at T = 0.7 and 1.0, k = 1 … 4, prompts
// that cross index_topk while decoding — and plain GPU decoding equals plain CPU decoding (greedy)
// on the trained model. The oracle of the first property is plain GPU decoding (same sampler, same
// seed); of the second the CPU model.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "pipeline/cuda_mtp_drafter.h"
#include "pipeline/cuda_target.h"
#include "spec/generator.h"
#include "spec/lookup_drafter.h"
#include "pipeline/model_target.h"
#include "tests/cuda/cuda_model_test_util.h"

namespace mtpspec {
namespace {

using cuda::CudaModel;
using testing_util::TestTokens;

struct GpuModel {
  std::unique_ptr<Model> host;
  std::unique_ptr<CudaModel> gpu;
};

// One host + GPU model per name for the whole binary (uploads are the slow part).
GpuModel& Get(const std::string& name) {
  static std::map<std::string, GpuModel>* models = new std::map<std::string, GpuModel>();
  GpuModel& slot = (*models)[name];
  if (!slot.host) {
    slot.host = cuda::LoadBf16(cuda::TestModelDir(name));
    if (slot.host) {
      auto gpu = CudaModel::Create(*slot.host);
      EXPECT_TRUE(gpu.ok()) << gpu.status();
      if (gpu.ok()) slot.gpu = std::move(*gpu);
    }
  }
  return slot;
}

GenerateOptions Options(int64_t k, double temperature, int64_t new_tokens) {
  GenerateOptions o;
  o.max_new_tokens = new_tokens;
  o.k = k;
  o.accept.sampling.temperature = temperature;
  o.accept.sampling.seed = 1234;
  o.stop_at_eos = false;  // longer outputs test more
  return o;
}

struct RunResult {
  std::vector<int32_t> tokens;
  SpecStats stats;
};

RunResult GenerateOnGpu(GpuModel& m, bool with_mtp, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        MtpOptions mtp = {}, LatentStorage storage = LatentStorage::kF32) {
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + options.max_new_tokens + kMaxDraftTokens + 1;
  CudaTargetOptions target_options;
  target_options.storage = storage;
  auto target = CudaTarget::Create(*m.gpu, capacity, target_options);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return {};
  std::unique_ptr<Drafter> drafter;
  if (with_mtp) {
    auto d = CreateCudaMtpDrafter(**target, capacity, mtp);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return {};
    drafter = std::move(*d);
  }
  auto result = Generate(**target, drafter.get(), prompt, options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  return {result->tokens, result->stats};
}

struct Case {
  std::string model;
  double temperature;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " T=" << c.temperature; }

class SpeculativeOnGpu : public ::testing::TestWithParam<Case> {};

// Prompts of K − 3 … K + 5 tokens: the verify blocks cross index_topk (dense to sparse) while
// decoding. Every k from 1 to 4 gives exactly the plain tokens.
TEST_P(SpeculativeOnGpu, MtpOutputEqualsPlainOutput) {
  MTPSPEC_REQUIRE_GPU();
  const Case c = GetParam();
  GpuModel& m = Get(c.model);
  ASSERT_TRUE(m.host && m.gpu);
  const int64_t K = m.host->config().index_topk, V = m.host->config().vocab_size;
  const int64_t new_tokens = 24;
  int64_t accepted = 0;
  for (int64_t len = std::max<int64_t>(1, K - 3); len <= K + 5; len += 4) {
    const std::vector<int32_t> prompt = TestTokens(len, V, 61 + static_cast<uint64_t>(len));
    const RunResult plain = GenerateOnGpu(m, false, prompt, Options(0, c.temperature, new_tokens));
    ASSERT_EQ(static_cast<int64_t>(plain.tokens.size()), new_tokens);
    EXPECT_TRUE(plain.stats.sampled_on_device);  // only ids crossed to the host
    for (int64_t k = 1; k <= 4; ++k) {
      const RunResult spec = GenerateOnGpu(m, true, prompt, Options(k, c.temperature, new_tokens));
      EXPECT_EQ(spec.tokens, plain.tokens) << c.model << " T=" << c.temperature << " prompt " << len << " k=" << k;
      EXPECT_TRUE(spec.stats.sampled_on_device);
      accepted += spec.stats.num_accepted_tokens;
    }
  }
  if (c.temperature == 0.0) {
    EXPECT_GT(accepted, 0) << "greedy MTP drafts were never accepted";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpeculativeOnGpu,
                         ::testing::Values(Case{"golden/glm_a", 0.0}, Case{"golden/glm_a", 0.7},
                                           Case{"golden/glm_a", 1.0}, Case{"golden/dsv32_b", 0.0},
                                           Case{"models/glm-tiny-mtp", 0.0}, Case{"models/glm-tiny-mtp", 0.7},
                                           Case{"models/glm-tiny-mtp", 1.0}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.model.substr(info.param.model.find('/') + 1);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_T" + std::to_string(static_cast<int>(info.param.temperature * 10));
                         });

// The MTP variants (pre-norm hidden, raw chain, shared index selection) change the drafts, never
// the output.
TEST(SpeculativeOnGpuVariants, MtpVariantsKeepTheOutput) {
  MTPSPEC_REQUIRE_GPU();
  GpuModel& m = Get("models/glm-tiny-mtp");
  ASSERT_TRUE(m.host && m.gpu);
  const int64_t K = m.host->config().index_topk, V = m.host->config().vocab_size;
  const std::vector<int32_t> prompt = TestTokens(K + 20, V, 67);
  const GenerateOptions options = Options(3, 0.0, 32);
  const RunResult plain = GenerateOnGpu(m, false, prompt, Options(0, 0.0, 32));
  MtpOptions pre, raw, shared;
  pre.hidden = MtpHidden::kPreNorm;
  raw.chain = MtpChain::kRaw;
  shared.index_share = MtpIndexShare::kShared;
  for (const MtpOptions& variant : {pre, raw, shared}) {
    EXPECT_EQ(GenerateOnGpu(m, true, prompt, options, variant).tokens, plain.tokens)
        << "hidden " << MtpHiddenName(variant.hidden) << ", chain " << MtpChainName(variant.chain);
  }
}

// With the int8 latent cache the output changes (quantisation), but speculative output still equals
// plain output on the same cache type.
TEST(SpeculativeOnGpuVariants, Int8LatentCacheKeepsMtpEqualToPlain) {
  MTPSPEC_REQUIRE_GPU();
  GpuModel& m = Get("models/glm-tiny-mtp");
  ASSERT_TRUE(m.host && m.gpu);
  const int64_t K = m.host->config().index_topk, V = m.host->config().vocab_size;
  const std::vector<int32_t> prompt = TestTokens(K + 4, V, 73);
  for (const double temperature : {0.0, 0.7}) {
    const RunResult plain = GenerateOnGpu(m, false, prompt, Options(0, temperature, 32), {}, LatentStorage::kInt8);
    ASSERT_EQ(plain.tokens.size(), 32u);
    for (const int64_t k : {1, 3}) {
      EXPECT_EQ(GenerateOnGpu(m, true, prompt, Options(k, temperature, 32), {}, LatentStorage::kInt8).tokens,
                plain.tokens)
          << "int8 cache, T=" << temperature << ", k=" << k;
    }
  }
}

// FP8 weights kept FP8 on the device (the trained model with every matrix quantised to FP8 at load,
// CudaModelOptions::weights = kFp8): speculative output equals plain output, greedy and sampled.
TEST(SpeculativeOnGpuVariants, Fp8DeviceWeightsKeepMtpEqualToPlain) {
  MTPSPEC_REQUIRE_GPU();
  LoadOptions load;
  load.weight_dtype = WeightDType::kFP8;
  auto host = Model::Load(cuda::TestModelDir("models/glm-tiny-mtp"), load);
  ASSERT_TRUE(host.ok()) << host.status();
  cuda::CudaModelOptions device;
  device.weights = DeviceWeightFormat::kFp8;
  auto gpu = CudaModel::Create(**host, device);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->layer(0).attn.q_a_proj.is_fp8());
  GpuModel m{std::move(*host), std::move(*gpu)};
  const int64_t K = m.host->config().index_topk, V = m.host->config().vocab_size;
  const std::vector<int32_t> prompt = TestTokens(K + 2, V, 79);
  int64_t accepted = 0;
  for (const double temperature : {0.0, 0.7}) {
    const RunResult plain = GenerateOnGpu(m, false, prompt, Options(0, temperature, 32));
    ASSERT_EQ(plain.tokens.size(), 32u);
    for (const int64_t k : {1, 2, 4}) {
      const RunResult spec = GenerateOnGpu(m, true, prompt, Options(k, temperature, 32));
      EXPECT_EQ(spec.tokens, plain.tokens) << "FP8 device weights, T=" << temperature << ", k=" << k;
      accepted += spec.stats.num_accepted_tokens;
    }
  }
  EXPECT_GT(accepted, 0) << "MTP drafts were never accepted with FP8 weights";
}

// Plain greedy decoding on the GPU and on the CPU (bf16 weights on both) give the same tokens on
// the trained model, whose logits are far from ties. The prompt has ≤ 16 tokens so that the GPU
// prefill, too, keeps fp32 activations (a longer one goes through cuBLAS in bf16).
TEST(SpeculativeOnGpuVariants, GpuPlainGreedyEqualsCpuOnTrainedModel) {
  MTPSPEC_REQUIRE_GPU();
  GpuModel& m = Get("models/glm-tiny-mtp");
  ASSERT_TRUE(m.host && m.gpu);
  const int64_t V = m.host->config().vocab_size;
  const std::vector<int32_t> prompt = TestTokens(12, V, 71);
  const GenerateOptions options = Options(0, 0.0, 40);
  const RunResult gpu = GenerateOnGpu(m, false, prompt, options);
  auto cpu_target = ModelTarget::Create(*m.host, static_cast<int64_t>(prompt.size()) + 41);
  ASSERT_TRUE(cpu_target.ok()) << cpu_target.status();
  auto cpu = Generate(**cpu_target, nullptr, prompt, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(gpu.tokens, cpu->tokens);
  EXPECT_TRUE(gpu.stats.sampled_on_device);
  EXPECT_FALSE(cpu->stats.sampled_on_device);
  // Rejection reads the distributions: the GPU target then sends its logits to the host sampler.
  GenerateOptions rejection = options;
  rejection.accept.rule = AcceptRule::kRejection;
  const RunResult gpu_rejection = GenerateOnGpu(m, false, prompt, rejection);
  EXPECT_EQ(gpu_rejection.tokens, cpu->tokens);  // greedy: rejection = plain argmax
  EXPECT_FALSE(gpu_rejection.stats.sampled_on_device);
}

// The optional device sampling of the Target interface: CudaTarget::SampleLastRun draws, on the
// GPU, exactly the tokens the host sampler draws from the logits Run returned (greedy, T = 0.7 with
// top-k/top-p, T = 1 with min-p), for every row of verify-sized blocks at their positions.
TEST(SpeculativeOnGpuVariants, DeviceSamplingEqualsHostSampler) {
  MTPSPEC_REQUIRE_GPU();
  GpuModel& m = Get("models/glm-tiny-mtp");
  ASSERT_TRUE(m.host && m.gpu);
  const int64_t V = m.host->config().vocab_size;
  auto target = CudaTarget::Create(*m.gpu, 256);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ((*target)->SampleLastRun(SamplingParams{}, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> prompt = TestTokens(40, V, 79);
  ASSERT_TRUE((*target)->Run(prompt, false).ok());
  std::vector<SamplingParams> settings(3);
  settings[1].temperature = 0.7;
  settings[1].top_k = 50;
  settings[1].top_p = 0.9;
  settings[2].temperature = 1.0;
  settings[2].min_p = 0.05;
  int64_t draws = 0;
  for (int64_t block = 0; block < 8; ++block) {
    const int64_t first = (*target)->length();
    const std::vector<int32_t> tokens = TestTokens(1 + block % 5, V, 83 + static_cast<uint64_t>(block));
    auto step = (*target)->Run(tokens, true);
    ASSERT_TRUE(step.ok()) << step.status();
    for (SamplingParams params : settings) {
      params.seed = 100 + static_cast<uint64_t>(block);
      auto device = (*target)->SampleLastRun(params, first + 1);
      ASSERT_TRUE(device.ok()) << device.status();
      ASSERT_EQ(static_cast<int64_t>(device->size()), step->logits.dim(0));
      for (int64_t r = 0; r < step->logits.dim(0); ++r) {
        EXPECT_EQ((*device)[r], SampleToken(step->logits.data<float>() + r * V, V, params, first + 1 + r))
            << "block " << block << " row " << r << " T=" << params.temperature;
        ++draws;
      }
    }
  }
  EXPECT_GT(draws, 50);
}

// The GPU MTP drafter follows the target it was made for; observing rows of another forward is an
// internal error rather than silently wrong drafts.
TEST(SpeculativeOnGpuVariants, DrafterRejectsRowsItDidNotSee) {
  MTPSPEC_REQUIRE_GPU();
  GpuModel& m = Get("golden/glm_a");
  ASSERT_TRUE(m.host && m.gpu);
  auto target = CudaTarget::Create(*m.gpu, 32);
  ASSERT_TRUE(target.ok());
  auto drafter = CreateCudaMtpDrafter(**target, 32, MtpOptions{});
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const std::vector<int32_t> sequence = {3, 4, 5, 6};
  auto step = (*target)->Run(std::span<const int32_t>(sequence.data(), 3), false);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE((*drafter)->Observe(sequence, 0, 3, *step).ok());
  EXPECT_EQ((*drafter)->Observe(sequence, 1, 3, *step).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mtpspec
