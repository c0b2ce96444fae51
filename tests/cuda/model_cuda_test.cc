// The whole model on the GPU (model/model_cuda) against the CPU model, the specification.
//
// The CPU side loads the same checkpoint with bf16 matrices, so both compute on identical weight
// values. Prefills run in chunks of ≤ 16 rows where a tight comparison is wanted: there every GPU
// op keeps fp32 activations (our GEMV and attention kernels), so the two sides differ only in
// summation order. A one-shot prefill of more rows goes through cuBLAS with bf16 activations and
// is compared statistically (a rounding difference can flip an indexer or router choice, which
// changes a whole row; see tests/model/golden_test.cc for the same effect in transformers).
//
// Oracle-free invariants checked bit for bit: a verify block of L ≤ 16 rows gives each row exactly
// the logits of decoding it alone, and a truncated cache continues exactly as a fresh one. FP8
// weights kept FP8 on the device are compared with the CPU on the same FP8 matrices.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "tests/cuda/cuda_model_test_util.h"

namespace mtpspec::cuda {
namespace {

using testing_util::Range;
using testing_util::TestTokens;

constexpr int64_t kChunk = 16;  // rows per chunk where the GPU keeps fp32 activations
constexpr double kTight = 2e-3;  // fp32 activations, bf16 weights on both sides

struct Pair {
  std::unique_ptr<Model> host;
  std::unique_ptr<CudaModel> gpu;
};

Pair LoadPair(const std::string& dir) {
  Pair p;
  p.host = LoadBf16(dir);
  if (!p.host) return p;
  auto gpu = CudaModel::Create(*p.host);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (gpu.ok()) p.gpu = std::move(*gpu);
  return p;
}

// Runs `tokens` from position `start` in chunks of ≤ kChunk rows on both sides, comparing every
// row's logits and post-norm hidden state.
void ChunkedForwardBoth(Pair& p, KvCache& cpu_cache, DeviceKvCache& gpu_cache, const std::vector<int32_t>& tokens,
                        int64_t start, const std::string& what) {
  const int64_t V = p.host->config().vocab_size, H = p.host->config().hidden_size;
  for (int64_t begin = 0; begin < static_cast<int64_t>(tokens.size()); begin += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, static_cast<int64_t>(tokens.size()) - begin);
    const std::vector<int32_t> chunk(tokens.begin() + begin, tokens.begin() + begin + n);
    const std::vector<int64_t> positions = Range(start + begin, start + begin + n);
    auto cpu = p.host->Forward(cpu_cache, chunk, positions);
    auto gpu = p.gpu->Forward(gpu_cache, chunk, positions);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_LT(RelDiff(gpu->logits.data<float>() + r * V, cpu->logits.data<float>() + r * V, V), kTight)
          << what << ": logits of position " << start + begin + r;
      EXPECT_LT(RelDiff(gpu->hidden_postnorm.data<float>() + r * H, cpu->hidden_postnorm.data<float>() + r * H, H),
                kTight)
          << what << ": hidden of position " << start + begin + r;
    }
    for (size_t l = 0; l < cpu->paths.size(); ++l) {
      EXPECT_EQ(gpu->paths[l], cpu->paths[l]) << what << ": attention path of layer " << l;
    }
  }
}

// A prompt of index_topk + 40 tokens (dense, then sparse attention), then a verify-sized block of 8
// rows after it, chunked on both sides and compared (ChunkedForwardBoth).
void PrefillAndBlockMatchCpu(Pair& p, uint64_t seed, const std::string& what) {
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size;
  const int64_t prompt_len = c.index_topk + 40;
  const std::vector<int32_t> prompt = TestTokens(prompt_len, V, seed);
  auto cpu_cache = *p.host->NewCache(prompt_len + 16);
  auto gpu_cache = *p.gpu->NewCache(prompt_len + 16);
  ChunkedForwardBoth(p, *cpu_cache, *gpu_cache, prompt, 0, what + " prefill");
  const std::vector<int32_t> block = TestTokens(8, V, seed + 4);
  ChunkedForwardBoth(p, *cpu_cache, *gpu_cache, block, prompt_len, what + " block");
}

class GpuVsCpu : public ::testing::TestWithParam<std::string> {};

// Prefill past index_topk (dense, then the sparse regime), then 40 greedy steps on each side: the
// logits agree to the tight tolerance at every step and the greedy tokens are identical. If the
// tokens part, it must be at a near-tie of the CPU logits (then the rest is not comparable).
TEST_P(GpuVsCpu, ChunkedPrefillThenGreedyDecodeMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(TestModelDir(GetParam()));
  ASSERT_TRUE(p.host && p.gpu);
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size;
  const int64_t prompt_len = std::min<int64_t>(c.index_topk + 24, c.max_position_embeddings - 48);
  ASSERT_GT(prompt_len, c.index_topk) << "the prompt must cross index_topk";
  const int64_t steps = 40;
  const std::vector<int32_t> prompt = TestTokens(prompt_len, V, 17);
  auto cpu_cache = *p.host->NewCache(prompt_len + steps + 1);
  auto gpu_cache = *p.gpu->NewCache(prompt_len + steps + 1);
  ChunkedForwardBoth(p, *cpu_cache, *gpu_cache, prompt, 0, GetParam() + " prefill");

  // Greedy continuation from the last prompt row, one token per step.
  auto last = p.host->Forward(*cpu_cache, Tok(prompt.back()), Pos(prompt_len - 1));  // re-run the last row on the CPU
  auto last_gpu = p.gpu->Forward(*gpu_cache, Tok(prompt.back()), Pos(prompt_len - 1));
  ASSERT_TRUE(last.ok() && last_gpu.ok());
  int32_t cpu_token = ArgmaxRow(last->logits.data<float>(), V);
  int32_t gpu_token = ArgmaxRow(last_gpu->logits.data<float>(), V);
  double margin = TopTwoMargin(last->logits.data<float>(), V);
  for (int64_t s = 0; s < steps; ++s) {
    if (cpu_token != gpu_token) {
      EXPECT_LT(margin, 10 * kTight) << GetParam() << ": greedy tokens part at step " << s << " (cpu " << cpu_token
                                     << ", gpu " << gpu_token << ") without a near-tie";
      GTEST_LOG_(INFO) << GetParam() << ": greedy tokens part at a near-tie at step " << s << " (margin " << margin
                       << ")";
      return;
    }
    const int64_t position = prompt_len + s;
    auto cpu = p.host->Forward(*cpu_cache, Tok(cpu_token), Pos(position));
    auto gpu = p.gpu->Forward(*gpu_cache, Tok(gpu_token), Pos(position));
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_LT(RelDiff(gpu->logits.data<float>(), cpu->logits.data<float>(), V), kTight)
        << GetParam() << ": decode step " << s;
    cpu_token = ArgmaxRow(cpu->logits.data<float>(), V);
    gpu_token = ArgmaxRow(gpu->logits.data<float>(), V);
    margin = TopTwoMargin(cpu->logits.data<float>(), V);
  }
}

// A one-shot prefill of more than 16 rows (cuBLAS, bf16 activations; the mask path once T > K):
// the median row within 5% of the logit scale and the greedy argmax agreeing on ≥ 75% of rows.
TEST_P(GpuVsCpu, OneShotPrefillWithinBf16Tolerance) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(TestModelDir(GetParam()));
  ASSERT_TRUE(p.host && p.gpu);
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size;
  const int64_t T = std::min<int64_t>(c.index_topk + 40, c.max_position_embeddings);
  const std::vector<int32_t> prompt = TestTokens(T, V, 5);
  auto cpu_cache = *p.host->NewCache(T);
  auto gpu_cache = *p.gpu->NewCache(T);
  auto cpu = p.host->Forward(*cpu_cache, prompt, Range(0, T));
  auto gpu = p.gpu->Forward(*gpu_cache, prompt, Range(0, T));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<double> row_errors;
  int64_t agree = 0;
  for (int64_t r = 0; r < T; ++r) {
    const float* a = gpu->logits.data<float>() + r * V;
    const float* b = cpu->logits.data<float>() + r * V;
    row_errors.push_back(RelDiff(a, b, V));
    agree += ArgmaxRow(a, V) == ArgmaxRow(b, V);
  }
  std::sort(row_errors.begin(), row_errors.end());
  EXPECT_LT(row_errors[T / 2], 0.05) << GetParam();
  EXPECT_GE(4 * agree, 3 * T) << GetParam() << ": greedy argmax agrees on " << agree << " of " << T << " rows";
  EXPECT_EQ(gpu_cache->length(), T);
}

// Bit-identity, the property speculative decoding needs: after the same prefix, a verify block of
// L rows gives row r exactly (bitwise) the logits and hidden state of decoding the same tokens one
// at a time. Checked where the block and the single steps take the same attention path: the dense
// regime (every row has ≤ K keys) and the sparse one (T > K from the first row on, gather path). A
// block that crosses K attends densely-selected rows through the gather path instead; those rows
// agree to rounding, not bitwise (the speculative tests cover the crossing at the token level).
TEST_P(GpuVsCpu, VerifyBlockRowsEqualSingleRowDecodeBitwise) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(TestModelDir(GetParam()));
  ASSERT_TRUE(p.host && p.gpu);
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size, H = c.hidden_size, K = c.index_topk;
  struct Regime {
    const char* name;
    int64_t prefix;
    int64_t max_rows;
  };
  const int64_t dense_prefix = std::max<int64_t>(1, K / 2 - 8);
  const Regime regimes[] = {{"dense", dense_prefix, std::min(kMaxGemvRows, K - dense_prefix)},
                            {"sparse", K + 9, kMaxGemvRows}};
  for (const Regime& regime : regimes) {
    const int64_t prefix = regime.prefix, max_rows = regime.max_rows;
    if (max_rows < 2 || prefix + max_rows > c.max_position_embeddings) continue;
    const std::vector<int32_t> prompt = TestTokens(prefix, V, 23);
    auto cache = *p.gpu->NewCache(prefix + max_rows);
    ASSERT_TRUE(p.gpu->Forward(*cache, prompt, Range(0, prefix)).ok());
    const std::vector<int32_t> block_tokens = TestTokens(max_rows, V, 29);
    // The reference: each token decoded alone.
    std::vector<float> single_logits, single_hidden;  // [max_rows, V], [max_rows, H]
    for (int64_t r = 0; r < max_rows; ++r) {
      auto out = p.gpu->Forward(*cache, Tok(block_tokens[r]), Pos(prefix + r));
      ASSERT_TRUE(out.ok()) << out.status();
      single_logits.insert(single_logits.end(), out->logits.data<float>(), out->logits.data<float>() + V);
      single_hidden.insert(single_hidden.end(), out->hidden_postnorm.data<float>(),
                           out->hidden_postnorm.data<float>() + H);
    }
    std::vector<int64_t> sizes;
    for (const int64_t L : {2, 3, 5, 8, 16}) {
      if (L < max_rows) sizes.push_back(L);
    }
    sizes.push_back(max_rows);
    for (const int64_t L : sizes) {
      ASSERT_TRUE(cache->Truncate(prefix).ok());
      const std::vector<int32_t> block(block_tokens.begin(), block_tokens.begin() + L);
      auto out = p.gpu->Forward(*cache, block, Range(prefix, prefix + L));
      ASSERT_TRUE(out.ok()) << out.status();
      for (int64_t r = 0; r < L; ++r) {
        EXPECT_TRUE(BitEqual(out->logits.data<float>() + r * V, single_logits.data() + r * V, V))
            << GetParam() << " (" << regime.name << "): row " << r << " of a " << L << "-row block";
        EXPECT_TRUE(BitEqual(out->hidden_postnorm.data<float>() + r * H, single_hidden.data() + r * H, H))
            << GetParam() << " (" << regime.name << "): hidden row " << r << " of a " << L << "-row block";
      }
    }
  }
}

// Rollback: decode a few tokens, truncate, decode others; the logits equal (bitwise) those of a
// fresh cache that saw the same prefix and the same new tokens.
TEST_P(GpuVsCpu, TruncatedCacheContinuesLikeAFreshOne) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(TestModelDir(GetParam()));
  ASSERT_TRUE(p.host && p.gpu);
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size;
  const int64_t prefix = std::min<int64_t>(c.index_topk + 5, c.max_position_embeddings - 8);
  const std::vector<int32_t> prompt = TestTokens(prefix, V, 31);
  const std::vector<int32_t> discarded = TestTokens(4, V, 37), kept = TestTokens(3, V, 41);
  auto rolled = *p.gpu->NewCache(prefix + 8);
  auto fresh = *p.gpu->NewCache(prefix + 8);
  ASSERT_TRUE(p.gpu->Forward(*rolled, prompt, Range(0, prefix)).ok());
  ASSERT_TRUE(p.gpu->Forward(*rolled, discarded, Range(prefix, prefix + 4)).ok());
  ASSERT_TRUE(rolled->Truncate(prefix).ok());
  EXPECT_EQ(rolled->length(), prefix);
  EXPECT_FALSE(rolled->Truncate(prefix + 1).ok()) << "truncating beyond the length must fail";
  ASSERT_TRUE(p.gpu->Forward(*fresh, prompt, Range(0, prefix)).ok());
  for (int64_t s = 0; s < 3; ++s) {
    auto a = p.gpu->Forward(*rolled, Tok(kept[s]), Pos(prefix + s));
    ASSERT_TRUE(a.ok()) << a.status();
    std::vector<float> rolled_logits(a->logits.data<float>(), a->logits.data<float>() + V);
    auto b = p.gpu->Forward(*fresh, Tok(kept[s]), Pos(prefix + s));
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(BitEqual(rolled_logits.data(), b->logits.data<float>(), V)) << GetParam() << ": step " << s;
  }
}

// Arguments are checked as the CPU model checks them, with errors naming the culprit.
TEST_P(GpuVsCpu, BadArgumentsAreErrorsNamingTheCulprit) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(TestModelDir(GetParam()));
  ASSERT_TRUE(p.host && p.gpu);
  auto cache = *p.gpu->NewCache(16);
  const int32_t vocab = static_cast<int32_t>(p.host->config().vocab_size);
  auto bad_token = p.gpu->Forward(*cache, Tok(vocab), Pos(0));
  EXPECT_EQ(bad_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_token.status().message().find("token id"), absl::string_view::npos) << bad_token.status();
  auto gap = p.gpu->Forward(*cache, Tok(1), Pos(3));
  EXPECT_NE(gap.status().message().find("gap"), absl::string_view::npos) << gap.status();
  auto beyond = p.gpu->Forward(*cache, std::vector<int32_t>{1, 2}, std::vector<int64_t>{15, 16});
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cache->length(), 0) << "a rejected call must leave the cache alone";
  EXPECT_FALSE(p.gpu->NewCache(p.gpu->max_positions() + 1).ok());
}

INSTANTIATE_TEST_SUITE_P(Models, GpuVsCpu,
                         ::testing::Values("golden/glm_a", "golden/dsv32_b", "golden/glm_a_bf16",
                                           "models/glm-tiny-mtp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(info.param.find('/') + 1);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Random larger shapes (every dimension bigger than the fixtures', 16 experts, IndexShare with
// shared layers after full ones): chunked prefill past K and a short greedy decode against the CPU.
TEST(GpuVsCpuLarger, RandomLargerShapesMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  Pair p = LoadPair(LargerModelDir());
  ASSERT_TRUE(p.host && p.gpu);
  PrefillAndBlockMatchCpu(p, 43, "larger");
  EXPECT_GT(p.gpu->weight_bytes(), size_t{0});
}

// FP8 weights kept FP8 on the device (CudaModelOptions::weights = kFp8) against the CPU on the same
// FP8 matrices: the host loads the larger checkpoint with every matrix quantised to FP8
// (WeightDType::kFP8; the router and kv_b_proj stay bf16 there and on the device), so both sides
// multiply the same weight values and differ in summation order only. Then a verify block's rows
// equal single-row decodes bit for bit, as with bf16 weights.
TEST(GpuVsCpuLarger, Fp8WeightsStayFp8AndMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  LoadOptions options;
  options.weight_dtype = WeightDType::kFP8;
  auto host = Model::Load(LargerModelDir(), options);
  ASSERT_TRUE(host.ok()) << host.status();
  CudaModelOptions fp8_options;
  fp8_options.weights = DeviceWeightFormat::kFp8;
  auto fp8 = CudaModel::Create(**host, fp8_options);
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  auto widened = CudaModel::Create(**host);  // the same FP8 host matrices widened to bf16
  ASSERT_TRUE(widened.ok()) << widened.status();
  const DeviceLayerWeights& layer0 = (*fp8)->layer(0);
  EXPECT_TRUE(layer0.attn.q_a_proj.is_fp8());
  EXPECT_TRUE(layer0.attn.o_proj.is_fp8());
  EXPECT_FALSE(layer0.attn.kv_b_proj.is_fp8());
  EXPECT_TRUE((*fp8)->lm_head().is_fp8());
  EXPECT_FALSE((*fp8)->embed().is_fp8());
  EXPECT_FALSE((*widened)->layer(0).attn.q_a_proj.is_fp8());
  // About one byte per weight instead of two (embeddings, routers and kv_b_proj stay bf16).
  EXPECT_LT(static_cast<double>((*fp8)->weight_bytes()), 0.65 * static_cast<double>((*widened)->weight_bytes()));

  Pair p{std::move(*host), std::move(*fp8)};
  PrefillAndBlockMatchCpu(p, 53, "FP8");

  // Verify blocks after a sparse-regime prefix: each row bitwise its single-row decode.
  const ModelConfig& c = p.host->config();
  const int64_t V = c.vocab_size, H = c.hidden_size;
  const int64_t prompt_len = c.index_topk + 40;
  const std::vector<int32_t> block = TestTokens(8, V, 59);
  auto gpu_cache = *p.gpu->NewCache(prompt_len + 16);
  ASSERT_TRUE(p.gpu->Forward(*gpu_cache, TestTokens(prompt_len, V, 61), Range(0, prompt_len)).ok());
  std::vector<float> single_logits, single_hidden;  // [8, V], [8, H]
  for (int64_t r = 0; r < 8; ++r) {
    auto out = p.gpu->Forward(*gpu_cache, Tok(block[r]), Pos(prompt_len + r));
    ASSERT_TRUE(out.ok()) << out.status();
    single_logits.insert(single_logits.end(), out->logits.data<float>(), out->logits.data<float>() + V);
    single_hidden.insert(single_hidden.end(), out->hidden_postnorm.data<float>(),
                         out->hidden_postnorm.data<float>() + H);
  }
  for (const int64_t L : {2, 5, 8}) {
    ASSERT_TRUE(gpu_cache->Truncate(prompt_len).ok());
    const std::vector<int32_t> rows(block.begin(), block.begin() + L);
    auto out = p.gpu->Forward(*gpu_cache, rows, Range(prompt_len, prompt_len + L));
    ASSERT_TRUE(out.ok()) << out.status();
    for (int64_t r = 0; r < L; ++r) {
      EXPECT_TRUE(BitEqual(out->logits.data<float>() + r * V, single_logits.data() + r * V, V))
          << "FP8: row " << r << " of a " << L << "-row block";
      EXPECT_TRUE(BitEqual(out->hidden_postnorm.data<float>() + r * H, single_hidden.data() + r * H, H))
          << "FP8: hidden row " << r << " of a " << L << "-row block";
    }
  }
}

}  // namespace
}  // namespace mtpspec::cuda
