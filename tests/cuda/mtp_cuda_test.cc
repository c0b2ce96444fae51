// The MTP module on the GPU (mtp/mtp_module_cuda) against the CPU MtpModule.
//
// Both sides get the same inputs: the CPU target's hidden states (uploaded for the GPU) and the
// same tokens, on bf16 weights; calls have ≤ 16 rows so the GPU keeps fp32 activations.
#include <algorithm>
#include <string>
#include <vector>

#include "mtp/mtp_module.h"
#include "mtp/mtp_module_cuda.h"
#include "tests/cuda/cuda_model_test_util.h"

namespace mtpspec::cuda {
namespace {

using testing_util::Range;
using testing_util::TestTokens;

constexpr int64_t kChunk = 16;
constexpr double kTight = 2e-3;

class MtpGpuVsCpu : public ::testing::TestWithParam<std::string> {};

// Pairs (h_t, x_{t+1}) for a prompt that crosses index_topk, extended in chunks of ≤ 16 rows, then
// three chained steps (normed chain) from the last row: logits, raw and normed outputs agree.
TEST_P(MtpGpuVsCpu, ExtendAndChainedStepsMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  std::unique_ptr<Model> host = LoadBf16(TestModelDir(GetParam()));
  ASSERT_TRUE(host);
  auto gpu_model = CudaModel::Create(*host);
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  auto cpu_mtp = MtpModule::Create(*host);
  ASSERT_TRUE(cpu_mtp.ok()) << cpu_mtp.status();
  auto gpu_mtp = CudaMtpModule::Create(**gpu_model);
  ASSERT_TRUE(gpu_mtp.ok()) << gpu_mtp.status();
  const ModelConfig& c = host->config();
  const int64_t V = c.vocab_size, H = c.hidden_size;
  const int64_t T = std::min<int64_t>(c.index_topk + 20, c.max_position_embeddings - 8);
  const std::vector<int32_t> tokens = TestTokens(T, V, 53);
  auto target_cache = *host->NewCache(T);
  auto target = host->Forward(*target_cache, tokens, Range(0, T));
  ASSERT_TRUE(target.ok()) << target.status();
  const float* hidden = target->hidden_postnorm.data<float>();  // [T, H]

  MtpOptions options;
  auto cpu_cache = *(*cpu_mtp)->NewCache(T + 4);
  auto gpu_cache = *(*gpu_mtp)->NewCache(T + 4);
  Context& ctx = (*gpu_model)->ctx();
  // Slot t holds the pair (h_t, x_{t+1}), t = 0 … T − 2.
  std::vector<float> last_normed;  // [H] the chained input after the extend
  for (int64_t begin = 0; begin < T - 1; begin += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, T - 1 - begin);
    const std::vector<float> h(hidden + begin * H, hidden + (begin + n) * H);  // [n, H]
    const std::vector<int32_t> next(tokens.begin() + begin + 1, tokens.begin() + begin + 1 + n);
    DeviceArray<float> h_device = ToDevice(h, ctx);
    auto cpu = (*cpu_mtp)->Forward(*cpu_cache, h.data(), next, Range(begin, begin + n), options);
    auto gpu = (*gpu_mtp)->Forward(*gpu_cache, h_device.data(), next, Range(begin, begin + n), options);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_LT(RelDiff(gpu->logits.data<float>() + r * V, cpu->logits.data<float>() + r * V, V), kTight)
          << GetParam() << ": MTP logits of slot " << begin + r;
      EXPECT_LT(RelDiff(gpu->raw.data<float>() + r * H, cpu->raw.data<float>() + r * H, H), kTight)
          << GetParam() << ": MTP raw output of slot " << begin + r;
      EXPECT_LT(RelDiff(gpu->normed.data<float>() + r * H, cpu->normed.data<float>() + r * H, H), kTight)
          << GetParam() << ": MTP normed output of slot " << begin + r;
    }
    EXPECT_EQ(gpu->path, cpu->path) << GetParam() << ": attention path of the chunk at " << begin;
    last_normed.assign(cpu->normed.data<float>() + (n - 1) * H, cpu->normed.data<float>() + n * H);
  }
  // Chained steps: the CPU's normed output and argmax draft feed both sides.
  for (int64_t j = 1; j <= 3; ++j) {
    const int64_t position = T - 2 + j;
    const int32_t draft = static_cast<int32_t>(j * 7 % V);
    DeviceArray<float> h_device = ToDevice(last_normed, ctx);
    auto cpu = (*cpu_mtp)->Forward(*cpu_cache, last_normed.data(), Tok(draft), Pos(position), options);
    auto gpu = (*gpu_mtp)->Forward(*gpu_cache, h_device.data(), Tok(draft), Pos(position), options);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_LT(RelDiff(gpu->logits.data<float>(), cpu->logits.data<float>(), V), kTight)
        << GetParam() << ": chained step " << j;
    last_normed.assign(cpu->normed.data<float>(), cpu->normed.data<float>() + H);
  }
}

// Rows of one MTP call are computed as they would be alone: an L-row extend equals, bitwise, the
// same pairs run one at a time (sparse regime, gather path in both).
TEST_P(MtpGpuVsCpu, ExtendRowsEqualSingleRowsBitwise) {
  MTPSPEC_REQUIRE_GPU();
  std::unique_ptr<Model> host = LoadBf16(TestModelDir(GetParam()));
  ASSERT_TRUE(host);
  auto gpu_model = CudaModel::Create(*host);
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  auto gpu_mtp = CudaMtpModule::Create(**gpu_model);
  ASSERT_TRUE(gpu_mtp.ok()) << gpu_mtp.status();
  const ModelConfig& c = host->config();
  const int64_t V = c.vocab_size, H = c.hidden_size;
  const int64_t prefix = c.index_topk + 3, L = 6;
  if (prefix + L > c.max_position_embeddings) GTEST_SKIP() << "model too short for the sparse regime";
  Context& ctx = (*gpu_model)->ctx();
  std::vector<float> h(static_cast<size_t>((prefix + L) * H));  // [prefix + L, H] synthetic hidden states
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  const std::vector<int32_t> tokens = TestTokens(prefix + L, V, 59);
  DeviceArray<float> h_device = ToDevice(h, ctx);
  auto cache = *(*gpu_mtp)->NewCache(prefix + L);
  MtpOptions options;
  ASSERT_TRUE((*gpu_mtp)
                  ->ExtendDevice(*cache, h_device.data(), std::span<const int32_t>(tokens.data(), prefix),
                                 Range(0, prefix), options)
                  .ok());
  std::vector<float> single;  // [L, V]
  for (int64_t r = 0; r < L; ++r) {
    auto out = (*gpu_mtp)->Forward(*cache, h_device.data() + (prefix + r) * H, Tok(tokens[prefix + r]),
                                   Pos(prefix + r), options);
    ASSERT_TRUE(out.ok()) << out.status();
    single.insert(single.end(), out->logits.data<float>(), out->logits.data<float>() + V);
  }
  ASSERT_TRUE(cache->Truncate(prefix).ok());
  auto block = (*gpu_mtp)->Forward(*cache, h_device.data() + prefix * H,
                                   std::span<const int32_t>(tokens.data() + prefix, L), Range(prefix, prefix + L),
                                   options);
  ASSERT_TRUE(block.ok()) << block.status();
  for (int64_t r = 0; r < L; ++r) {
    EXPECT_TRUE(BitEqual(block->logits.data<float>() + r * V, single.data() + r * V, V)) << GetParam() << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MtpGpuVsCpu,
                         ::testing::Values("golden/glm_a", "golden/dsv32_b", "models/glm-tiny-mtp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(info.param.find('/') + 1);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(MtpGpu, ModelWithoutMtpWeightsIsAClearError) {
  MTPSPEC_REQUIRE_GPU();
  testing_util::ScopedTempDir temp;
  RandomCheckpointOptions options;
  options.include_mtp = false;
  nlohmann::json config = TinyGlmConfig();
  ASSERT_TRUE(WriteRandomCheckpoint(temp.File("no_mtp"), config, options).ok());
  LoadOptions load;
  load.weight_dtype = WeightDType::kBF16;
  auto host = Model::Load(temp.File("no_mtp"), load);
  ASSERT_TRUE(host.ok()) << host.status();
  auto gpu_model = CudaModel::Create(**host);
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  auto module = CudaMtpModule::Create(**gpu_model);
  EXPECT_EQ(module.status().code(), absl::StatusCode::kFailedPrecondition) << module.status();
}

}  // namespace
}  // namespace mtpspec::cuda
