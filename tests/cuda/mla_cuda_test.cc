// MlaForwardCuda against MlaForward (the CPU specification) on small random layers with bf16
// weights: a decode/verify/rollback sequence over a full and an IndexShare layer (f32 and int8
// latent caches, both RoPE pairings), the paths against each other on the GPU, exact row-count
// invariance of the gather path for L = 1..16, and the unsupported cases that must be errors.
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attention/kv_cache.h"
#include "attention/kv_cache_cuda.h"
#include "attention/mla.h"
#include "attention/mla_cuda.h"
#include "gtest/gtest.h"
#include "tests/cuda/attention_cuda_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mtpspec::cuda {
namespace {

constexpr int64_t kCapacity = 512;

struct Harness {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<testing::RandomMla> full, shared;  // layer 0 (indexer) and layer 1 (IndexShare)
  WeightArena arena;
  DeviceMlaWeights full_w, shared_w;
  DeviceRope rope;
  std::unique_ptr<DeviceKvCache> gpu_cache;
  std::unique_ptr<KvCache> cpu_cache;
  TopK cpu_topk;
  DeviceTopK gpu_topk;
  std::mt19937_64 rng{99};

  // Runs `rows` new tokens at first.. on `layer` on both sides. Returns {gpu out, cpu out}.
  struct Outputs {
    std::vector<float> gpu, cpu;
    AttentionPath gpu_path, cpu_path;
  };
  Outputs Run(int64_t layer, const std::vector<float>& x, int64_t rows, int64_t first,
              const AttentionOptions& options) {
    const testing::RandomMla& m = layer == 0 ? *full : *shared;
    const int64_t hidden = m.dims.hidden;
    std::vector<int64_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = first + r;
    Outputs o;
    o.cpu.resize(rows * hidden);
    auto cpu = MlaForward(m.weights, m.dims, m.rope, x.data(), rows, positions.data(), cpu_cache->layer(layer),
                          kCapacity, options, &cpu_topk, o.cpu.data());
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    o.cpu_path = cpu.ok() ? cpu->path_used : AttentionPath::kAuto;
    DeviceArray<float> d_x = ToDevice(x, *ctx);
    auto d_out = DeviceArray<float>::Create(rows * hidden, "out");
    EXPECT_TRUE(d_out.ok());
    auto gpu = MlaForwardCuda(*ctx, layer == 0 ? full_w : shared_w, m.dims, rope, d_x.data(), rows, positions.data(),
                              *gpu_cache, layer, options, &gpu_topk, d_out->data());
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    o.gpu_path = gpu.ok() ? *gpu : AttentionPath::kAuto;
    o.gpu = ToHost(*d_out, *ctx);
    return o;
  }

  std::vector<float> RandomX(int64_t rows) { return testing::RandomValues(rows * full->dims.hidden, 1.0f, rng); }

  std::vector<int32_t> GpuSelection() {
    std::vector<int32_t> host(gpu_topk.rows * gpu_topk.width);
    EXPECT_TRUE(gpu_topk.selected.CopyToHost(host.data(), static_cast<int64_t>(host.size()), ctx->stream()).ok());
    return host;
  }
};

std::unique_ptr<Harness> MakeHarness(LatentStorage storage, const testing::MlaShape& shape) {
  auto h = std::make_unique<Harness>();
  auto ctx = Context::Create();
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  if (!ctx.ok()) return nullptr;
  h->ctx = std::move(*ctx);
  h->full = testing::MakeRandomMla(shape, /*full_layer=*/true, 1);
  h->shared = testing::MakeRandomMla(shape, /*full_layer=*/false, 2);
  auto fw = UploadMlaWeights(h->arena, h->full->weights, "model.layers.0.self_attn.");
  auto sw = UploadMlaWeights(h->arena, h->shared->weights, "model.layers.1.self_attn.");
  EXPECT_TRUE(fw.ok() && sw.ok());
  h->full_w = std::move(*fw);
  h->shared_w = std::move(*sw);
  auto rope = DeviceRope::Create(h->full->rope, kCapacity);
  EXPECT_TRUE(rope.ok()) << rope.status();
  h->rope = std::move(*rope);
  KvCacheShape cache_shape;
  cache_shape.latent_storage = storage;
  cache_shape.kv_lora_rank = shape.kv_lora;
  cache_shape.rope_dim = shape.rope;
  cache_shape.index_head_dim = shape.index_dim;
  cache_shape.has_indexer = {true, false};
  auto cache = DeviceKvCache::Create(cache_shape, kCapacity);
  EXPECT_TRUE(cache.ok()) << cache.status();
  h->gpu_cache = std::move(*cache);
  h->cpu_cache = std::make_unique<KvCache>(cache_shape, kCapacity);
  return h;
}

// One step on the full layer, then the shared layer with the selection it made (IndexShare).
void StepBoth(Harness& h, int64_t rows, int64_t first, AttentionPath path, AttentionPath expected_path,
              double tolerance) {
  AttentionOptions options;
  options.path = path;
  const std::vector<float> x = h.RandomX(rows);
  const auto full = h.Run(0, x, rows, first, options);
  EXPECT_EQ(full.gpu_path, expected_path);
  EXPECT_EQ(full.cpu_path, expected_path);
  EXPECT_LT(testing::RelativeMaxError(full.gpu, full.cpu), tolerance) << "full layer, rows " << rows << " at " << first;
  if (expected_path != AttentionPath::kDense) {
    // The selections: identical lists unless two scores are closer than the rounding difference.
    EXPECT_EQ(h.GpuSelection(), h.cpu_topk.selected) << "selection, rows " << rows << " at " << first;
  }
  const auto shared = h.Run(1, x, rows, first, options);
  EXPECT_LT(testing::RelativeMaxError(shared.gpu, shared.cpu), tolerance)
      << "shared layer, rows " << rows << " at " << first;
}

void RunSequence(LatentStorage storage, const testing::MlaShape& shape, double tolerance) {
  auto h = MakeHarness(storage, shape);
  ASSERT_NE(h, nullptr);
  const int64_t k = shape.topk;  // 24
  StepBoth(*h, 16, 0, AttentionPath::kAuto, AttentionPath::kDense, tolerance);    // T = 16 ≤ K
  StepBoth(*h, 4, 16, AttentionPath::kAuto, AttentionPath::kDense, tolerance);    // T = 20 ≤ K
  // T = 28 > K, but rows 0..3 have 21..24 causal keys: their selection is 0..23 with future keys
  // that the gather path must re-mask.
  StepBoth(*h, 8, 20, AttentionPath::kAuto, AttentionPath::kGather, tolerance);
  StepBoth(*h, 12, 28, AttentionPath::kAuto, AttentionPath::kGather, tolerance);  // T = 40 > K
  StepBoth(*h, 1, 40, AttentionPath::kAuto, AttentionPath::kGather, tolerance);   // decode
  StepBoth(*h, 1, 41, AttentionPath::kAuto, AttentionPath::kGather, tolerance);
  StepBoth(*h, 4, 42, AttentionPath::kAuto, AttentionPath::kGather, tolerance);   // verify k = 3
  // Rollback: two of the four accepted; the next block overwrites slots 44..
  h->gpu_cache->SetLength(46);
  h->cpu_cache->SetLength(46);
  ASSERT_TRUE(h->gpu_cache->Truncate(44).ok());
  ASSERT_TRUE(h->cpu_cache->Truncate(44).ok());
  StepBoth(*h, 4, 44, AttentionPath::kAuto, AttentionPath::kGather, tolerance);
  StepBoth(*h, 12, 48, AttentionPath::kMask, AttentionPath::kMask, tolerance);    // forced mask, L = 12
  StepBoth(*h, 3, 60, AttentionPath::kMask, AttentionPath::kMask, tolerance);
  EXPECT_GT(60, k);
}

TEST(MlaCuda, SequenceMatchesCpuF32Cache) {
  MTPSPEC_REQUIRE_GPU();
  RunSequence(LatentStorage::kF32, testing::MlaShape{}, 2e-3);
}

TEST(MlaCuda, SequenceMatchesCpuInt8Cache) {
  MTPSPEC_REQUIRE_GPU();
  RunSequence(LatentStorage::kInt8, testing::MlaShape{}, 5e-3);
}

TEST(MlaCuda, SequenceMatchesCpuGlmRopeOddHeads) {
  MTPSPEC_REQUIRE_GPU();
  testing::MlaShape shape;
  shape.heads = 6;  // head groups of 2
  shape.index_style = RopeStyle::kInterleaved;  // GLM-5.x indexer pairing
  shape.yarn = true;
  RunSequence(LatentStorage::kF32, shape, 2e-3);
}

// A prefill chunk above 16 rows: cuBLAS projections with bf16-rounded inputs, so only a loose
// comparison (and no selection comparison) is meaningful.
TEST(MlaCuda, LongMaskChunkCloseToCpu) {
  MTPSPEC_REQUIRE_GPU();
  auto h = MakeHarness(LatentStorage::kF32, testing::MlaShape{});
  ASSERT_NE(h, nullptr);
  AttentionOptions options;
  const std::vector<float> x = h->RandomX(40);
  const auto out = h->Run(0, x, 40, 0, options);
  EXPECT_EQ(out.gpu_path, AttentionPath::kMask);
  EXPECT_LT(testing::RelativeMaxError(out.gpu, out.cpu), 5e-2);
}

// Fills positions [0, n) of both layers in chunks of ≤ 16 rows.
void Prefill(Harness& h, int64_t n) {
  AttentionOptions options;
  for (int64_t first = 0; first < n; first += 16) {
    const int64_t rows = std::min<int64_t>(16, n - first);
    const std::vector<float> x = h.RandomX(rows);
    h.Run(0, x, rows, first, options);
    h.Run(1, x, rows, first, options);
  }
}

TEST(MlaCuda, PathsAgreeOnGpu) {
  MTPSPEC_REQUIRE_GPU();
  auto h = MakeHarness(LatentStorage::kF32, testing::MlaShape{});
  ASSERT_NE(h, nullptr);
  // T ≤ K: dense, mask and gather over all causal keys.
  {
    const std::vector<float> x = h->RandomX(12);
    std::vector<std::vector<float>> outs;
    for (AttentionPath path : {AttentionPath::kDense, AttentionPath::kMask, AttentionPath::kGather}) {
      AttentionOptions options;
      options.path = path;
      outs.push_back(h->Run(0, x, 12, 0, options).gpu);
    }
    EXPECT_LT(testing::RelativeMaxError(outs[1], outs[0]), 1e-5);
    EXPECT_LT(testing::RelativeMaxError(outs[2], outs[0]), 1e-5);
  }
  Prefill(*h, 50);
  // T > K: gather against mask on the same selection.
  for (int64_t rows : {1, 4, 16}) {
    const std::vector<float> x = h->RandomX(rows);
    AttentionOptions gather, mask;
    gather.path = AttentionPath::kGather;
    mask.path = AttentionPath::kMask;
    const auto a = h->Run(0, x, rows, 50, gather);
    const auto b = h->Run(0, x, rows, 50, mask);
    EXPECT_LT(testing::RelativeMaxError(a.gpu, b.gpu), 1e-5) << "rows " << rows;
  }
}

// first = 14 < K = 24: blocks of 11+ rows have T > K while their first rows have fewer than K
// causal keys (re-masked future entries); first = 60: every row has more than K.
void CheckRowCountInvariance(LatentStorage storage, int64_t first, const testing::MlaShape& shape = {}) {
  auto h = MakeHarness(storage, shape);
  ASSERT_NE(h, nullptr);
  Prefill(*h, first);
  AttentionOptions options;
  options.path = AttentionPath::kGather;
  const int64_t hidden = h->full->dims.hidden;
  for (int64_t rows = 1; rows <= 16; ++rows) {
    const std::vector<float> x = h->RandomX(rows);
    for (int64_t layer : {0, 1}) {
      if (layer == 1) {
        // The shared layer reuses the full layer's selection for the same rows.
        h->Run(0, x, rows, first, options);
      }
      const auto block = h->Run(layer, x, rows, first, options);
      const std::vector<int32_t> block_sel = h->GpuSelection();
      const int64_t width = h->gpu_topk.width;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> x_row(x.begin() + r * hidden, x.begin() + (r + 1) * hidden);
        if (layer == 1) {
          h->Run(0, x_row, 1, first + r, options);  // the donor's selection for this row alone
        }
        const auto single = h->Run(layer, x_row, 1, first + r, options);
        EXPECT_EQ(0, std::memcmp(single.gpu.data(), block.gpu.data() + r * hidden, hidden * sizeof(float)))
            << "layer " << layer << ", row " << r << " of " << rows;
        if (layer == 0) {
          const std::vector<int32_t> sel = h->GpuSelection();
          EXPECT_TRUE(std::equal(sel.begin(), sel.end(), block_sel.begin() + r * width))
              << "selection of row " << r << " of " << rows;
        }
      }
    }
  }
}

TEST(MlaCuda, GatherRowCountInvariantF32) {
  MTPSPEC_REQUIRE_GPU();
  CheckRowCountInvariance(LatentStorage::kF32, 14);
  CheckRowCountInvariance(LatentStorage::kF32, 60);
}

TEST(MlaCuda, GatherRowCountInvariantInt8) {
  MTPSPEC_REQUIRE_GPU();
  CheckRowCountInvariance(LatentStorage::kInt8, 14);
  CheckRowCountInvariance(LatentStorage::kInt8, 60);
}

// K = 160 and T up to 445: lists wider than one split (launch::kAttentionKeysPerSplit = 128), so
// the split-softmax combine is exercised on every path (dense T ≤ 160, gather 160, mask T).
testing::MlaShape SeveralSplitsShape() {
  testing::MlaShape shape;
  shape.topk = 160;
  return shape;
}

TEST(MlaCuda, SeveralSplitsMatchCpu) {
  MTPSPEC_REQUIRE_GPU();
  const testing::MlaShape shape = SeveralSplitsShape();
  auto h = MakeHarness(LatentStorage::kF32, shape);
  ASSERT_NE(h, nullptr);
  for (int64_t first = 0; first < 400; first += 16) {
    const AttentionPath expected = first + 16 <= shape.topk ? AttentionPath::kDense : AttentionPath::kGather;
    StepBoth(*h, 16, first, AttentionPath::kAuto, expected, 2e-3);
  }
  StepBoth(*h, 1, 400, AttentionPath::kAuto, AttentionPath::kGather, 2e-3);
  StepBoth(*h, 4, 401, AttentionPath::kAuto, AttentionPath::kGather, 2e-3);
  StepBoth(*h, 8, 405, AttentionPath::kMask, AttentionPath::kMask, 2e-3);
  // Gather (2 splits) against mask (4 splits) on the GPU, same selection.
  const std::vector<float> x = h->RandomX(3);
  AttentionOptions gather, mask;
  gather.path = AttentionPath::kGather;
  mask.path = AttentionPath::kMask;
  const auto a = h->Run(0, x, 3, 413, gather);
  const auto b = h->Run(0, x, 3, 413, mask);
  EXPECT_LT(testing::RelativeMaxError(a.gpu, b.gpu), 1e-5);
}

TEST(MlaCuda, SeveralSplitsRowCountInvariant) {
  MTPSPEC_REQUIRE_GPU();
  CheckRowCountInvariance(LatentStorage::kF32, 150, SeveralSplitsShape());  // rows with < K causal keys
  CheckRowCountInvariance(LatentStorage::kInt8, 420, SeveralSplitsShape());
}

TEST(MlaCuda, UnsupportedCasesAreErrors) {
  MTPSPEC_REQUIRE_GPU();
  auto h = MakeHarness(LatentStorage::kF32, testing::MlaShape{});
  ASSERT_NE(h, nullptr);
  const testing::RandomMla& m = *h->full;
  const std::vector<float> x = h->RandomX(2);
  DeviceArray<float> d_x = ToDevice(x, *h->ctx);
  auto out = DeviceArray<float>::Create(2 * m.dims.hidden, "out");
  ASSERT_TRUE(out.ok());
  auto call = [&](int64_t first, const AttentionOptions& options, int64_t layer, DeviceTopK* topk) {
    const int64_t positions[2] = {first, first + 1};
    return MlaForwardCuda(*h->ctx, layer == 0 ? h->full_w : h->shared_w, m.dims, h->rope, d_x.data(), 2, positions,
                          *h->gpu_cache, layer, options, topk, out->data())
        .status();
  };
  AttentionOptions naive;
  naive.form = AttentionForm::kNaive;
  EXPECT_EQ(call(0, naive, 0, &h->gpu_topk).code(), absl::StatusCode::kUnimplemented);
  AttentionOptions dense;
  dense.path = AttentionPath::kDense;
  EXPECT_FALSE(call(40, dense, 0, &h->gpu_topk).ok());                       // T > K
  EXPECT_FALSE(call(kCapacity - 1, AttentionOptions{}, 0, &h->gpu_topk).ok());  // past the capacity
  DeviceTopK empty;
  EXPECT_FALSE(call(40, AttentionOptions{}, 1, &empty).ok());                // shared layer without a donor
  const int64_t gaps[2] = {3, 5};
  EXPECT_FALSE(MlaForwardCuda(*h->ctx, h->full_w, m.dims, h->rope, d_x.data(), 2, gaps, *h->gpu_cache, 0,
                              AttentionOptions{}, &h->gpu_topk, out->data())
                   .ok());
}

}  // namespace
}  // namespace mtpspec::cuda
