// model/ffn_cuda (dense MLP and MoE on the GPU) against the CPU twins MlpForward, MoeForward and
// RouteTokens on random bf16 weights and on FP8 ones with 128 × 128 block scales (kept FP8 on the
// device, DeviceWeightFormat::kFp8), and the row-count invariance that speculative decoding needs:
// a row computed inside a block of 1..16 rows is bitwise the row computed alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp8_quantise.h"
#include "core/tensor.h"
#include "kernels/linear.h"
#include "model/ffn.h"
#include "model/ffn_cuda.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Host weights that own their storage (the views in MlpWeights / MoeWeights point into it). With
// `fp8`, the MLP and expert matrices are quantised to FP8 with 128 × 128 block scales, as the
// releases store them (routers stay bf16, as in the releases).
class HostWeights {
 public:
  explicit HostWeights(bool fp8 = false) : fp8_(fp8) {}
  // An FP8 [out, in] matrix quantised from N(0, scale²) entries, its block scales attached.
  TensorView Fp8(int64_t out, int64_t in, float scale) {
    Tensor& values = owned_.emplace_back(Tensor::Empty(DType::kF32, {out, in}));
    const std::vector<float> random = RandomVector(out * in, next_seed_++, scale);
    std::copy(random.begin(), random.end(), values.data<float>());
    Fp8Matrix q = QuantiseFp8(values.view(), /*power_of_two_scales=*/false);
    Tensor& codes = owned_.emplace_back(std::move(q.codes));
    Tensor& scales = owned_.emplace_back(std::move(q.scales));
    TensorView v = codes.view();
    v.block_scale = scales.data<float>();
    v.scale_stride = scales.view().shape[1];
    v.fp8_nan_free = true;  // quantised from finite values
    return v;
  }
  TensorView Matrix(int64_t out, int64_t in, float scale) { return fp8_ ? Fp8(out, in, scale) : Bf16(out, in, scale); }
  // A bf16 [out, in] matrix with N(0, scale²) entries.
  TensorView Bf16(int64_t out, int64_t in, float scale) {
    Tensor& t = owned_.emplace_back(Tensor::Empty(DType::kBF16, {out, in}));
    const std::vector<float> values = RandomVector(out * in, next_seed_++, scale);
    uint16_t* bits = t.data<uint16_t>();
    for (size_t i = 0; i < values.size(); ++i) bits[i] = F32ToBf16(values[i]);
    return t.view();
  }
  MlpWeights Mlp(int64_t hidden, int64_t width) {
    MlpWeights w;
    w.gate = Matrix(width, hidden, 1.0f / std::sqrt(static_cast<float>(hidden)));
    w.up = Matrix(width, hidden, 1.0f / std::sqrt(static_cast<float>(hidden)));
    w.down = Matrix(hidden, width, 1.0f / std::sqrt(static_cast<float>(width)));
    return w;
  }
  MoeWeights Moe(const ModelConfig& c, bool shared) {
    MoeWeights w;
    w.router = Bf16(c.n_routed_experts, c.hidden_size, 1.0f / std::sqrt(static_cast<float>(c.hidden_size)));
    w.router_bias = Tensor::Empty(DType::kF32, {c.n_routed_experts});
    const std::vector<float> bias = RandomVector(c.n_routed_experts, next_seed_++, 0.1f);
    std::copy(bias.begin(), bias.end(), w.router_bias.data<float>());
    for (int64_t e = 0; e < c.n_routed_experts; ++e) w.experts.push_back(Mlp(c.hidden_size, c.moe_intermediate_size));
    if (shared) w.shared = Mlp(c.hidden_size, c.moe_intermediate_size);
    return w;
  }

 private:
  bool fp8_;
  std::deque<Tensor> owned_;
  uint32_t next_seed_ = 1000;
};

// The weight formats every MoE/MLP test runs: bf16 weights, and FP8 weights kept FP8 on the device.
constexpr DeviceWeightFormat kFormats[] = {DeviceWeightFormat::kBf16, DeviceWeightFormat::kFp8};

// The upload kept FP8 experts FP8 (and bf16 ones bf16).
void ExpectExpertFormat(const DeviceMoeWeights& dw, DeviceWeightFormat format) {
  const bool fp8 = format == DeviceWeightFormat::kFp8;
  EXPECT_EQ(dw.gate_up_table.fp8 != nullptr, fp8);
  EXPECT_EQ(dw.down_table.fp8 != nullptr, fp8);
  EXPECT_EQ(dw.gate_up_table.bf16 != nullptr, !fp8);
  for (const DeviceMlpWeights& e : dw.experts) {
    EXPECT_EQ(e.gate_up.is_fp8(), fp8);
    EXPECT_EQ(e.down.is_fp8(), fp8);
  }
}

struct MoeCase {
  const char* name;
  int64_t hidden, width, experts, top_k, n_group, topk_group;
  bool norm_topk_prob;
  double scaling;
  bool shared;
};

ModelConfig ConfigOf(const MoeCase& m) {
  ModelConfig c;
  c.hidden_size = m.hidden;
  c.moe_intermediate_size = m.width;
  c.n_routed_experts = m.experts;
  c.num_experts_per_tok = m.top_k;
  c.n_group = m.n_group;
  c.topk_group = m.topk_group;
  c.norm_topk_prob = m.norm_topk_prob;
  c.routed_scaling_factor = m.scaling;
  c.n_shared_experts = m.shared ? 1 : 0;
  return c;
}

// Hidden sizes cover the 16-byte weight loads (multiples of 8) and the scalar path (100), tile tails
// (200, 100) and a whole number of tiles (256); n_group > 1 exercises group-limited routing.
const MoeCase kCases[] = {
    {"flat_shared", 256, 96, 16, 4, 1, 1, true, 2.5, true},
    {"grouped_no_shared", 200, 64, 32, 6, 4, 2, false, 1.0, false},
    {"grouped_shared_scalar_loads", 100, 40, 8, 2, 2, 1, true, 1.5, true},
};

// How far a row's routing is from a tie, on the CPU: the gaps between consecutive chosen biased
// scores and to the first rejected one, and between the last kept and first dropped group. Rows closer than this
// to a tie could route differently under another fp32 summation order, so the tests avoid them.
double RoutingMargin(const MoeWeights& w, const ModelConfig& c, const float* x) {
  const int64_t num_experts = c.n_routed_experts;
  std::vector<float> logits(num_experts);  // [E]
  Linear(x, 1, w.router, logits.data());
  std::vector<double> choice(num_experts);  // [E]
  for (int64_t e = 0; e < num_experts; ++e) {
    choice[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))) + w.router_bias.data<float>()[e];
  }
  double margin = std::numeric_limits<double>::infinity();
  if (c.n_group > 1) {
    const int64_t group_size = num_experts / c.n_group;
    std::vector<double> group_score(c.n_group);
    for (int64_t g = 0; g < c.n_group; ++g) {
      std::vector<double> s(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
      std::sort(s.rbegin(), s.rend());
      group_score[g] = s[0] + s[1];
    }
    std::vector<double> sorted = group_score;
    std::sort(sorted.rbegin(), sorted.rend());
    if (c.topk_group < c.n_group) margin = std::min(margin, sorted[c.topk_group - 1] - sorted[c.topk_group]);
    for (int64_t e = 0; e < num_experts; ++e) {
      if (group_score[e / group_size] < sorted[c.topk_group - 1]) choice[e] = -1e9;
    }
  }
  std::vector<double> sorted = choice;
  std::sort(sorted.rbegin(), sorted.rend());
  // Gaps inside the chosen k (their rank order is compared) and to the first one left out.
  for (int64_t i = 0; i < c.num_experts_per_tok && i + 1 < num_experts; ++i) {
    margin = std::min(margin, sorted[i] - sorted[i + 1]);
  }
  return margin;
}

// `rows` random input rows whose routing is at least 1e-4 away from any tie.
std::vector<float> WellSeparatedRows(const MoeWeights& w, const ModelConfig& c, int64_t rows, uint32_t seed) {
  std::vector<float> x;  // [rows, H]
  uint32_t next = seed;
  while (static_cast<int64_t>(x.size()) < rows * c.hidden_size) {
    const std::vector<float> candidate = RandomVector(c.hidden_size, next++);
    if (RoutingMargin(w, c, candidate.data()) >= 1e-4) x.insert(x.end(), candidate.begin(), candidate.end());
  }
  return x;
}

double Rms(const std::vector<float>& v) {
  double sum = 0;
  for (float f : v) sum += static_cast<double>(f) * f;
  return std::sqrt(sum / std::max<size_t>(v.size(), 1));
}

// |gpu − cpu| ≤ tolerance · rms(cpu) element by element.
void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, double tolerance, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  const double scale = Rms(cpu);
  ASSERT_GT(scale, 0.0);
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
  EXPECT_LE(worst, tolerance * scale) << what << ": max |gpu − cpu| " << worst << ", rms " << scale;
}

std::vector<float> RunMoe(Context& ctx, const DeviceMoeWeights& dw, const ModelConfig& c, const float* dx,
                          int64_t rows) {
  auto dy = DeviceArray<float>::Create(rows * c.hidden_size, "moe out");
  EXPECT_TRUE(dy.ok());
  const absl::Status st = MoeForwardCuda(ctx, dw, c, dx, rows, dy->data());
  EXPECT_TRUE(st.ok()) << st;
  return ToHost(*dy, ctx);
}

TEST(MoeCuda, RoutingMatchesCpuRouteTokens) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const MoeCase& m : kCases) {
    SCOPED_TRACE(m.name);
    const ModelConfig c = ConfigOf(m);
    HostWeights host;
    const MoeWeights w = host.Moe(c, m.shared);
    WeightArena arena;
    auto dw = UploadMoeWeights(arena, w, c, "moe");
    ASSERT_TRUE(dw.ok()) << dw.status();
    const int64_t rows = 40;
    const std::vector<float> x = WellSeparatedRows(w, c, rows, 7);
    DeviceArray<float> dx = ToDevice(x, **ctx);
    const Routing cpu = RouteTokens(w, c, x.data(), rows);
    auto gpu = RouteTokensCuda(**ctx, *dw, c, dx.data(), rows);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->per_row, cpu.per_row);
    // Rank order (ties excluded by construction) and weights up to fp32 rounding of σ.
    EXPECT_EQ(gpu->expert, cpu.expert);
    ASSERT_EQ(gpu->weight.size(), cpu.weight.size());
    for (size_t i = 0; i < cpu.weight.size(); ++i) EXPECT_NEAR(gpu->weight[i], cpu.weight[i], 1e-5 * m.scaling) << i;
  }
}

// Every case and weight format at each row count of `row_counts`: the GPU MoE within `tolerance`
// (ExpectClose) of the CPU MoeForward on the same weights (bf16, or FP8 read in place by both) and
// well-separated inputs (seeded from `seed_base`).
void ExpectMoeMatchesCpu(std::initializer_list<int64_t> row_counts, uint32_t seed_base, double tolerance,
                         const char* what) {
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const DeviceWeightFormat format : kFormats)
  for (const MoeCase& m : kCases) {
    SCOPED_TRACE(std::string(m.name) + ", weights " + DeviceWeightFormatName(format));
    const ModelConfig c = ConfigOf(m);
    HostWeights host(format == DeviceWeightFormat::kFp8);
    const MoeWeights w = host.Moe(c, m.shared);
    WeightArena arena(format);
    auto dw = UploadMoeWeights(arena, w, c, "moe");
    ASSERT_TRUE(dw.ok()) << dw.status();
    ExpectExpertFormat(*dw, format);
    for (const int64_t rows : row_counts) {
      SCOPED_TRACE(rows);
      const std::vector<float> x = WellSeparatedRows(w, c, rows, seed_base + static_cast<uint32_t>(rows));
      DeviceArray<float> dx = ToDevice(x, **ctx);
      std::vector<float> cpu(rows * c.hidden_size);
      MoeForward(w, c, x.data(), rows, cpu.data());
      ExpectClose(RunMoe(**ctx, *dw, c, dx.data(), rows), cpu, tolerance, what);
    }
  }
}

TEST(MoeCuda, SmallRowsMatchCpuMoeForward) {
  MTPSPEC_REQUIRE_GPU();
  // Same weight values (bf16, or FP8 times its scale in f32 on both sides), f32 activations: only
  // the summation order and expf differ.
  ExpectMoeMatchesCpu({1, 3, 16}, 100, 1e-4, "MoE, small rows");
}

TEST(MoeCuda, BlockRowsAreBitwiseTheRowsComputedAlone) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const DeviceWeightFormat format : kFormats)
  for (const MoeCase& m : kCases) {
    SCOPED_TRACE(std::string(m.name) + ", weights " + DeviceWeightFormatName(format));
    const ModelConfig c = ConfigOf(m);
    HostWeights host(format == DeviceWeightFormat::kFp8);
    const MoeWeights w = host.Moe(c, m.shared);
    WeightArena arena(format);
    auto dw = UploadMoeWeights(arena, w, c, "moe");
    ASSERT_TRUE(dw.ok()) << dw.status();
    ExpectExpertFormat(*dw, format);
    const int64_t hidden = c.hidden_size;
    // Any rows will do here (ties route identically in both calls): plain random input.
    const std::vector<float> x = RandomVector(kMaxGemvRows * hidden, 31);  // [16, H]
    DeviceArray<float> dx = ToDevice(x, **ctx);
    std::vector<std::vector<float>> alone(kMaxGemvRows);  // each [H]
    for (int64_t r = 0; r < kMaxGemvRows; ++r) alone[r] = RunMoe(**ctx, *dw, c, dx.data() + r * hidden, 1);
    for (int64_t rows = 2; rows <= kMaxGemvRows; ++rows) {
      const std::vector<float> block = RunMoe(**ctx, *dw, c, dx.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(std::memcmp(block.data() + r * hidden, alone[r].data(), hidden * sizeof(float)), 0)
            << "row " << r << " of a " << rows << "-row block differs from the row alone";
      }
    }
  }
}

TEST(MoeCuda, PrefillRowsMatchCpuMoeForward) {
  MTPSPEC_REQUIRE_GPU();
  // Above 16 rows cuBLAS multiplies x rounded to bf16: a looser bound.
  ExpectMoeMatchesCpu({17, 40, 97}, 500, 2e-2, "MoE, prefill rows");
}

TEST(MoeCuda, RejectsUnsupportedScoring) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ModelConfig c = ConfigOf(kCases[0]);
  HostWeights host;
  const MoeWeights w = host.Moe(c, true);
  WeightArena arena;
  auto dw = UploadMoeWeights(arena, w, c, "moe");
  ASSERT_TRUE(dw.ok()) << dw.status();
  c.scoring_func = "softmax";
  DeviceArray<float> dx = ToDevice(RandomVector(c.hidden_size, 3), **ctx);
  auto dy = DeviceArray<float>::Create(c.hidden_size, "out");
  ASSERT_TRUE(dy.ok());
  EXPECT_EQ(MoeForwardCuda(**ctx, *dw, c, dx.data(), 1, dy->data()).code(), absl::StatusCode::kUnimplemented);
}

TEST(MlpCuda, MatchesCpuAndBlockRowsAreBitwiseTheRowsAlone) {
  MTPSPEC_REQUIRE_GPU();
  auto ctx = Context::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  for (const DeviceWeightFormat format : kFormats)
  for (const auto& [hidden, width] : {std::pair<int64_t, int64_t>{256, 160}, {100, 72}, {384, 256}}) {
    SCOPED_TRACE(std::to_string(hidden) + ", weights " + DeviceWeightFormatName(format));
    HostWeights host(format == DeviceWeightFormat::kFp8);
    const MlpWeights w = host.Mlp(hidden, width);
    WeightArena arena(format);
    auto dw = UploadMlpWeights(arena, w, "mlp");
    ASSERT_TRUE(dw.ok()) << dw.status();
    ASSERT_EQ(dw->gate_up.out, 2 * width);
    EXPECT_EQ(dw->gate_up.is_fp8(), format == DeviceWeightFormat::kFp8);
    EXPECT_EQ(dw->down.is_fp8(), format == DeviceWeightFormat::kFp8);
    const int64_t max_rows = 40;
    const std::vector<float> x = RandomVector(max_rows * hidden, 77);  // [40, H]
    DeviceArray<float> dx = ToDevice(x, **ctx);
    auto run = [&](const float* x_rows, int64_t rows) {
      auto dy = DeviceArray<float>::Create(rows * hidden, "mlp out");
      EXPECT_TRUE(dy.ok());
      const absl::Status st = MlpForwardCuda(**ctx, *dw, x_rows, rows, hidden, dy->data());
      EXPECT_TRUE(st.ok()) << st;
      return ToHost(*dy, **ctx);
    };
    for (const int64_t rows : {1, 5, 16, 40}) {
      std::vector<float> cpu(rows * hidden);
      MlpForward(w, x.data(), rows, hidden, cpu.data());
      ExpectClose(run(dx.data(), rows), cpu, rows <= kMaxGemvRows ? 1e-4 : 2e-2, "MLP");
    }
    std::vector<std::vector<float>> alone(kMaxGemvRows);
    for (int64_t r = 0; r < kMaxGemvRows; ++r) alone[r] = run(dx.data() + r * hidden, 1);
    for (int64_t rows = 2; rows <= kMaxGemvRows; ++rows) {
      const std::vector<float> block = run(dx.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(std::memcmp(block.data() + r * hidden, alone[r].data(), hidden * sizeof(float)), 0)
            << "row " << r << " of " << rows;
      }
    }
  }
}

}  // namespace
}  // namespace mtpspec::cuda
