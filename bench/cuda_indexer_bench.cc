// Lightning-indexer scoring and top-k on the GPU (bench/README_cuda.md), GLM-5.2 indexer shape.
//
//   build/<dir>/bench/cuda_indexer_bench [--json PATH] [--keys 8192,32768,65536,131072]
//       [--rows 1,4,8,16] [--topk 2048] [--heads 32] [--head_dim 128] [--reps 50] [--warmup 10]
//   python3 bench/cuda_indexer_vs_torch.py [--json PATH]     (reads this benchmark's JSON)
//
// For each key count N and query-row count L (rows at positions N − L .. N − 1, so row r sees
// N − L + r + 1 causal keys) it times, with CUDA events (warm-up, median of --reps):
//   score  — IndexerScoreKeys: Σ_h w_h·ReLU(q_h·k_j·d_I^-½) over the index-key cache → [L, N];
//   select — SelectTopKCuda on those scores: radix select + ordered compaction, K per row;
//   total  — both, back to back (the unfused pair as MlaForwardCuda runs it).
// cuda_indexer_vs_torch.py then times torch.topk on a CUDA tensor of the same [L, N] shape with the
// same causal −∞ pattern, for the same K, and prints torch / ours for select and for total
// (goal ≥ 3). JSON: --json, else $OUT/cuda_indexer_bench.json, else ./cuda_indexer_bench.json.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/indexer_cuda.h"
#include "bench/cuda_attention_bench_util.h"
#include "core/cuda_context.h"
#include "nlohmann/json.hpp"
#include "core/cli_args.h"

namespace mtpspec::cuda::bench {
namespace {

std::vector<float> Uniform(int64_t n, float scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

template <typename T>
DeviceArray<T> Upload(const std::vector<T>& host, Context& ctx, const char* what) {
  auto array = DeviceArray<T>::Create(static_cast<int64_t>(host.size()), what);
  Check(array.status(), what);
  Check(array->CopyFromHost(host.data(), static_cast<int64_t>(host.size()), ctx.stream()), what);
  return std::move(*array);
}

std::vector<int64_t> ListFlag(const CliArgs& args, const char* name, std::vector<int64_t> fallback) {
  if (!args.Has(name)) return fallback;
  auto list = args.GetIntList(name);
  Check(list.status(), name);
  return *list;
}

int Main(int argc, char** argv) {
  auto args = CliArgs::Parse(argc, argv, 1, {"json", "keys", "rows", "topk", "heads", "head_dim", "reps", "warmup"});
  Check(args.status(), "arguments");
  const std::vector<int64_t> key_counts = ListFlag(*args, "keys", {8192, 32768, 65536, 131072});
  const std::vector<int64_t> row_counts = ListFlag(*args, "rows", {1, 4, 8, 16});
  const int64_t topk = args->GetInt("topk", 2048).value_or(2048);
  const int64_t heads = args->GetInt("heads", 32).value_or(32);
  const int64_t head_dim = args->GetInt("head_dim", 128).value_or(128);
  const int reps = static_cast<int>(args->GetInt("reps", 50).value_or(50));
  const int warmup = static_cast<int>(args->GetInt("warmup", 10).value_or(10));
  const std::string json_path = args->Get("json", DefaultJsonPath("cuda_indexer_bench"));
  Check(DeviceStatus(), "GPU");
  auto ctx_or = Context::Create();
  Check(ctx_or.status(), "context");
  Context& ctx = **ctx_or;

  std::mt19937_64 rng(7);
  int64_t max_rows = 1, max_keys = 1;
  for (int64_t l : row_counts) max_rows = std::max(max_rows, l);
  for (int64_t n : key_counts) max_keys = std::max(max_keys, n);
  DeviceArray<float> q = Upload(Uniform(max_rows * heads * head_dim, 1.0f, rng), ctx, "q");
  std::vector<float> w_host = Uniform(max_rows * heads, 1.0f, rng);
  for (float& v : w_host) v /= std::sqrt(static_cast<float>(heads));
  DeviceArray<float> w = Upload(w_host, ctx, "head weights");
  DeviceArray<float> keys = Upload(Uniform(max_keys * head_dim, 1.0f, rng), ctx, "index keys");
  auto scores = DeviceArray<float>::Create(max_rows * max_keys, "scores");
  auto workspace = DeviceArray<uint8_t>::Create(
      static_cast<int64_t>(SelectTopKWorkspaceBytes(max_rows, max_keys)), "top-k workspace");
  Check(scores.status(), "scores");
  Check(workspace.status(), "workspace");
  DeviceTopK selection;

  nlohmann::json results = nlohmann::json::array();
  std::printf("device: %s\n\n%8s %3s %6s %10s %10s %10s\n", DeviceName().c_str(), "N", "L", "K", "score_us",
              "select_us", "total_us");
  for (int64_t n : key_counts) {
    for (int64_t rows : row_counts) {
      const int64_t first = n - rows;
      auto score = [&] {
        Check(IndexerScoreKeys(ctx, q.data(), w.data(), rows, heads, head_dim, first, keys.data(), n, scores->data()),
              "IndexerScoreKeys");
      };
      auto select = [&] {
        Check(SelectTopKCuda(ctx, scores->data(), rows, n, topk, first, workspace->data(), &selection),
              "SelectTopKCuda");
      };
      const double score_us = MedianMicros(ctx.stream(), warmup, reps, score);
      const double select_us = MedianMicros(ctx.stream(), warmup, reps, select);
      const double total_us = MedianMicros(ctx.stream(), warmup, reps, [&] {
        score();
        select();
      });
      std::printf("%8lld %3lld %6lld %10.1f %10.1f %10.1f\n", static_cast<long long>(n), static_cast<long long>(rows),
                  static_cast<long long>(topk), score_us, select_us, total_us);
      results.push_back({{"keys", n}, {"rows", rows}, {"topk", topk}, {"first_position", first},
                         {"score_us", score_us}, {"select_us", select_us}, {"total_us", total_us}});
    }
  }
  nlohmann::json j;
  j["benchmark"] = "cuda_indexer_bench";
  j["device"] = DeviceName();
  j["heads"] = heads;
  j["head_dim"] = head_dim;
  j["reps"] = reps;
  j["warmup"] = warmup;
  // The scores' setup, for cuda_indexer_vs_torch.py: row r of an [L, N] f32 tensor has finite
  // scores for keys j ≤ N − L + r and −∞ after; torch.topk(k = min(K, N)) along the last dim.
  j["scores_layout"] = "rows x keys f32, row r finite for j <= keys - rows + r, -inf after";
  j["goal_torch_over_ours"] = 3.0;
  j["results"] = results;
  WriteJson(json_path, j);
  return 0;
}

}  // namespace
}  // namespace mtpspec::cuda::bench

int main(int argc, char** argv) { return mtpspec::cuda::bench::Main(argc, argv); }
