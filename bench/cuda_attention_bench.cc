// Gathered sparse MLA decode on the GPU at GLM-5.2 dimensions (bench/README_cuda.md).
//
//   build/<dir>/bench/cuda_attention_bench [--json PATH] [--contexts 8192,32768,131072]
//       [--rows 1,2,3,4,5,6,7,8] [--reps 50] [--warmup 10] [--overlap 0.9] [--storage f32,int8]
//
// For each latent storage, context T and query-row count L it times, with CUDA events (warm-up,
// then the median of --reps):
//   core  — LatentAttention: scores over [latent | rope key] of each row's K = 2048 selected
//           keys, softmax, z = P·latents (the split kernel and its combine), 64 heads;
//   step  — AbsorbQuery + core + UnabsorbOutput (adds the kv_b_proj reads, 29.4 MB bf16).
// Bytes touched count each distinct cache row once (rows of a verify block share most of their
// selection; --overlap is the fraction of row r's keys shared with row 0), plus queries, indices,
// partials (written and read back), z, and for `step` the kv_b_proj weights. GB/s = bytes / time;
// the ratio is against a device-to-device cudaMemcpy measured in the same run (read + write bytes).
// Goals: ratio ≥ 0.7 for L = 1; time(L = 4) ≤ 1.3 × time(L = 1).
// JSON goes to --json, else $OUT/cuda_attention_bench.json, else ./cuda_attention_bench.json.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/mla_cuda_launch.h"
#include "bench/cuda_attention_bench_util.h"
#include "core/cuda_context.h"
#include "core/dtype.h"
#include "kernels/linear_cuda.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"
#include "core/cli_args.h"

namespace mtpspec::cuda::bench {
namespace {

// GLM-5.2 attention (docs/models.md, "Notation and configuration"): 64 heads, latent 512, rope 64, nope 192, v 256, top-k 2048.
constexpr int64_t kHeads = 64, kLatent = 512, kRope = 64, kNope = 192, kValue = 256, kTopK = 2048;
constexpr float kSoftmaxScale = 0.0625f;  // 256^-½

template <typename T>
DeviceArray<T> Upload(const std::vector<T>& host, Context& ctx, const char* what) {
  auto array = DeviceArray<T>::Create(static_cast<int64_t>(host.size()), what);
  Check(array.status(), what);
  Check(array->CopyFromHost(host.data(), static_cast<int64_t>(host.size()), ctx.stream()), what);
  return std::move(*array);
}

std::vector<float> Uniform(int64_t n, float scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Row 0: K distinct keys in [0, limit); row r: the same with a (1 − overlap) fraction replaced by
// other keys. Each row sorted by position, as SelectTopK lists it. Returns [rows, K].
std::vector<int32_t> Selections(int64_t rows, int64_t limit, double overlap, std::mt19937_64& rng,
                                int64_t* distinct) {
  std::uniform_int_distribution<int64_t> pick(0, limit - 1);
  std::vector<uint8_t> in_base(limit, 0), seen(limit, 0);
  std::vector<int32_t> base;
  while (static_cast<int64_t>(base.size()) < kTopK) {
    const int64_t j = pick(rng);
    if (!in_base[j]) {
      in_base[j] = 1;
      base.push_back(static_cast<int32_t>(j));
    }
  }
  std::vector<int32_t> all(rows * kTopK);
  const int64_t replaced = static_cast<int64_t>((1.0 - overlap) * kTopK + 0.5);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> row = base;
    if (r > 0) {
      std::vector<uint8_t> in_row = in_base;
      for (int64_t i = 0; i < replaced; ++i) {
        int64_t j;
        do j = pick(rng);
        while (in_row[j]);
        in_row[row[i]] = 0;
        in_row[j] = 1;
        row[i] = static_cast<int32_t>(j);
      }
    }
    std::sort(row.begin(), row.end());
    std::copy(row.begin(), row.end(), all.begin() + r * kTopK);
    for (int32_t j : row) seen[j] = 1;
  }
  *distinct = std::count(seen.begin(), seen.end(), uint8_t{1});
  return all;
}

int Main(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv, 1, {"json", "contexts", "rows", "reps", "warmup", "overlap", "storage"});
  Check(args.status(), "arguments");
  std::vector<int64_t> contexts = {8192, 32768, 131072};
  std::vector<int64_t> row_counts = {1, 2, 3, 4, 5, 6, 7, 8};
  if (args->Has("contexts")) {
    auto list = args->GetIntList("contexts");
    Check(list.status(), "--contexts");
    contexts = *list;
  }
  if (args->Has("rows")) {
    auto list = args->GetIntList("rows");
    Check(list.status(), "--rows");
    row_counts = *list;
  }
  const int reps = static_cast<int>(args->GetInt("reps", 50).value_or(50));
  const int warmup = static_cast<int>(args->GetInt("warmup", 10).value_or(10));
  const double overlap = args->GetDouble("overlap", 0.9).value_or(0.9);
  const std::string storages = args->Get("storage", "f32,int8");
  const std::string json_path = args->Get("json", DefaultJsonPath("cuda_attention_bench"));
  for (int64_t l : row_counts) {
    if (l < 1 || l > 16) Check(absl::InvalidArgumentError("--rows entries must be in 1..16"), "arguments");
  }
  Check(DeviceStatus(), "GPU");
  auto ctx_or = Context::Create();
  Check(ctx_or.status(), "context");
  Context& ctx = **ctx_or;

  const double copy_gbs = CopyBandwidthGBs(ctx.stream(), size_t{1} << 30, 20);
  std::printf("device: %s; device-to-device copy: %.0f GB/s (read + write)\n", DeviceName().c_str(), copy_gbs);

  std::mt19937_64 rng(42);
  const int64_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  // kv_b_proj [N_h·(d_n + d_v), r_kv] bf16 for the `step` timing.
  Tensor kv_b_host = Tensor::Zeros(DType::kBF16, {kHeads * (kNope + kValue), kLatent});
  {
    const std::vector<float> v = Uniform(kv_b_host.numel(), 0.04f, rng);
    for (int64_t i = 0; i < kv_b_host.numel(); ++i) kv_b_host.data<uint16_t>()[i] = F32ToBf16(v[i]);
  }
  WeightArena arena;
  auto kv_b = arena.UploadMatrix(kv_b_host.view(), "kv_b_proj");
  Check(kv_b.status(), "kv_b upload");
  DeviceArray<float> q = Upload(Uniform(max_rows * kHeads * (kNope + kRope), 0.5f, rng), ctx, "q");
  DeviceArray<float> q_lat = Upload(Uniform(max_rows * kHeads * kLatent, 0.05f, rng), ctx, "q_lat");
  auto z = DeviceArray<float>::Create(max_rows * kHeads * kLatent, "z");
  auto o = DeviceArray<float>::Create(max_rows * kHeads * kValue, "o");
  auto partials = DeviceArray<float>::Create(
      launch::LatentAttentionScratchFloats(max_rows, kHeads, kTopK, kLatent), "partials");
  Check(z.status(), "z");
  Check(o.status(), "o");
  Check(partials.status(), "partials");

  nlohmann::json results = nlohmann::json::array();
  std::printf("\n%-5s %7s %3s %10s %10s %9s %9s %7s %8s %10s %9s\n", "cache", "T", "L", "core_us", "MB", "GB/s",
              "vs_copy", "L/L1", "step_us", "step_GB/s", "vs_copy");
  for (const std::string& storage : {std::string("f32"), std::string("int8")}) {
    if (storages.find(storage) == std::string::npos) continue;
    const bool int8 = storage == "int8";
    for (int64_t context : contexts) {
      // The cache of one layer: latents (f32, or int8 + per-token scale) and rope keys.
      launch::LatentCacheView view;
      view.r_kv = kLatent;
      view.d_r = kRope;
      DeviceArray<float> latent, scale, rope_key;
      DeviceArray<int8_t> latent_i8;
      if (int8) {
        std::vector<int8_t> values(context * kLatent);
        std::uniform_int_distribution<int> u(-127, 127);
        for (int8_t& v : values) v = static_cast<int8_t>(u(rng));
        latent_i8 = Upload(values, ctx, "int8 latents");
        scale = Upload(std::vector<float>(context, 0.01f), ctx, "scales");
        view.latent_i8 = latent_i8.data();
        view.latent_scale = scale.data();
      } else {
        latent = Upload(Uniform(context * kLatent, 1.0f, rng), ctx, "latents");
        view.latent = latent.data();
      }
      rope_key = Upload(Uniform(context * kRope, 1.0f, rng), ctx, "rope keys");
      view.rope_key = rope_key.data();
      const int64_t cache_row_bytes = int8 ? kLatent + 4 + kRope * 4 : (kLatent + kRope) * 4;

      double l1_us = 0.0;
      for (int64_t rows : row_counts) {
        int64_t distinct = 0;
        const std::vector<int32_t> selection = Selections(rows, context - 16, overlap, rng, &distinct);
        DeviceArray<int32_t> keys = Upload(selection, ctx, "selection");
        launch::AttentionQuery query;
        query.q_lat = q_lat.data();
        query.q_rope = q.data() + kNope;
        query.q_rope_row_stride = kHeads * (kNope + kRope);
        query.q_rope_head_stride = kNope + kRope;
        query.rows = rows;
        query.n_heads = kHeads;
        query.first_position = context - rows;
        query.softmax_scale = kSoftmaxScale;
        auto core = [&] {
          CheckCuda(launch::LatentAttention(query, view, keys.data(), kTopK, context, partials->data(), z->data(),
                                            ctx.stream()),
                    "LatentAttention");
        };
        const double core_us = MedianMicros(ctx.stream(), warmup, reps, core);
        const double step_us = MedianMicros(ctx.stream(), warmup, reps, [&] {
          CheckCuda(launch::AbsorbQuery(q.data(), rows, kHeads, kNope, kRope, kValue, kLatent, kv_b->data,
                                        q_lat.data(), ctx.stream()),
                    "AbsorbQuery");
          core();
          CheckCuda(launch::UnabsorbOutput(z->data(), rows, kHeads, kNope, kValue, kLatent, kv_b->data, o->data(),
                                           ctx.stream()),
                    "UnabsorbOutput");
        });
        if (rows == 1) l1_us = core_us;
        const int64_t splits = (kTopK + launch::kAttentionKeysPerSplit - 1) / launch::kAttentionKeysPerSplit;
        const double core_bytes = static_cast<double>(distinct) * cache_row_bytes +    // cache rows
                                  rows * kHeads * (kLatent + kRope) * 4.0 +            // q
                                  rows * kTopK * 4.0 +                                 // indices
                                  2.0 * rows * kHeads * splits * (kLatent + 2) * 4.0 + // partials
                                  rows * kHeads * kLatent * 4.0;                       // z
        const double step_bytes = core_bytes + static_cast<double>(kv_b->bytes()) +
                                  rows * kHeads * (kNope + kLatent + kLatent + kValue) * 4.0;
        const double core_gbs = core_bytes / (core_us * 1e-6) / 1e9;
        const double step_gbs = step_bytes / (step_us * 1e-6) / 1e9;
        const double vs_l1 = l1_us > 0.0 ? core_us / l1_us : 0.0;
        std::printf("%-5s %7lld %3lld %10.1f %10.2f %9.0f %9.2f %7.2f %8.1f %10.0f %9.2f\n", storage.c_str(),
                    static_cast<long long>(context), static_cast<long long>(rows), core_us, core_bytes / 1e6, core_gbs,
                    core_gbs / copy_gbs, vs_l1, step_us, step_gbs, step_gbs / copy_gbs);
        results.push_back({{"storage", storage}, {"context", context}, {"rows", rows}, {"distinct_keys", distinct},
                           {"core_us", core_us}, {"core_bytes", core_bytes}, {"core_gbs", core_gbs},
                           {"core_ratio_to_copy", core_gbs / copy_gbs}, {"core_vs_rows1", vs_l1},
                           {"step_us", step_us}, {"step_bytes", step_bytes}, {"step_gbs", step_gbs},
                           {"step_ratio_to_copy", step_gbs / copy_gbs}});
      }
    }
  }
  nlohmann::json j;
  j["benchmark"] = "cuda_attention_bench";
  j["device"] = DeviceName();
  j["copy_gbs"] = copy_gbs;
  j["dims"] = {{"heads", kHeads}, {"kv_lora_rank", kLatent}, {"rope_dim", kRope}, {"nope_dim", kNope},
               {"v_dim", kValue}, {"topk", kTopK}};
  j["overlap"] = overlap;
  j["reps"] = reps;
  j["warmup"] = warmup;
  j["goals"] = {{"ratio_to_copy_rows1", 0.7}, {"rows4_over_rows1", 1.3}};
  j["results"] = results;
  WriteJson(json_path, j);
  return 0;
}

}  // namespace
}  // namespace mtpspec::cuda::bench

int main(int argc, char** argv) { return mtpspec::cuda::bench::Main(argc, argv); }
