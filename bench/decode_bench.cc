// Model-core performance benchmark: single-token decode at 1K and 8K context, 256-token prefill
// and whole-prompt prefill (with a per-component breakdown of 4K and 16K prompts)
// on the cached random bench model (bench/bench_model.h), next to a STREAM-style read/copy
// bandwidth measured in the same run on the same thread pool. Decode reports the weight bytes it
// streams per step and what fraction of the measured read bandwidth that amounts to.
//
//   build/release/bench/decode_bench [--model_dir=DIR] [--weights=stored|f32|bf16|fp8] [--activations=f32|bf16|fp8]
//       [--breakdown_prompts=4096,16384] [--benchmark_filter=...]
//   (--model_dir: the bench model there, written if missing or stale; any other checkpoint as it is)
//
// See bench/README.md for the counters and recorded results.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_model.h"
#include "bench/decode_breakdown.h"
#include "bench/stream.h"
#include "benchmark/benchmark.h"
#include "kernels/linear.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "model/model.h"
#include "model/prefill_passes.h"
#include "pipeline/request.h"

namespace mtpspec::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kPrefillChunk = 256;  // tokens per prefill call (also the cache-fill chunk)
constexpr int64_t kMaxContext = 8192;
constexpr int64_t kStreamReadMiB = 1024;  // the buffer whose read bandwidth decode is compared to

// Process-wide state, set up in main() before any benchmark runs.
struct Session {
  std::string model_dir;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> cache;  // capacity kMaxContext + kPrefillChunk: shared by all benchmarks
  std::mt19937 rng{20240601};
  double read_bytes_per_s = 0;  // from BM_StreamRead/1024, or measured on demand
};

Session& GetSession() {
  static Session* session = new Session();
  return *session;
}

double Elapsed(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int32_t> RandomTokens(int64_t n) {
  Session& s = GetSession();
  std::uniform_int_distribution<int32_t> dist(2, static_cast<int32_t>(s.model->config().vocab_size - 1));
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = dist(s.rng);
  return tokens;
}

std::vector<int64_t> Positions(int64_t first, int64_t n) {
  std::vector<int64_t> positions(n);
  for (int64_t i = 0; i < n; ++i) positions[i] = first + i;
  return positions;
}

// A float buffer of `mib` MiB, allocated and first-touched once per size for the whole run.
float* StreamBuffer(int64_t mib, int slot) {
  static std::vector<std::pair<int64_t, Tensor>> buffers;
  for (auto& [key, tensor] : buffers) {
    if (key == mib * 2 + slot) return tensor.data<float>();
  }
  const int64_t n = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  Tensor tensor = Tensor::Empty(DType::kF32, {n});
  StreamFill(tensor.data<float>(), n, DefaultThreadPool());
  buffers.emplace_back(mib * 2 + slot, std::move(tensor));
  return buffers.back().second.data<float>();
}

// Read bandwidth in bytes/s: from BM_StreamRead/1024 when it ran, else measured here (3 passes).
double ReadBandwidth() {
  Session& s = GetSession();
  if (s.read_bytes_per_s > 0) return s.read_bytes_per_s;
  const int64_t n = kStreamReadMiB * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  const float* data = StreamBuffer(kStreamReadMiB, 0);
  StreamSum(data, n, DefaultThreadPool());  // warm-up pass
  const Clock::time_point start = Clock::now();
  constexpr int kPasses = 3;
  for (int i = 0; i < kPasses; ++i) benchmark::DoNotOptimize(StreamSum(data, n, DefaultThreadPool()));
  s.read_bytes_per_s = kPasses * 4.0 * static_cast<double>(n) / Elapsed(start);
  std::fprintf(stderr, "decode_bench: BM_StreamRead/%lld was filtered out; measured read bandwidth %.2f GB/s\n",
               static_cast<long long>(kStreamReadMiB), s.read_bytes_per_s / 1e9);
  return s.read_bytes_per_s;
}

// Extends the shared cache to at least `context` positions with chunked prefill. Fast path: the
// fill asks for the gather attention path on every chunk (O(K) keys per row instead of O(T) on
// the mask path; the paths give the same cache, tests/model assert it) and for one logit row.
absl::Status FillCache(int64_t context) {
  Session& s = GetSession();
  KvCache& cache = *s.cache;
  if (cache.length() >= context) return absl::OkStatus();
  ForwardOptions options;
  options.attention.gather_max_rows = kPrefillChunk;
  const int64_t from = cache.length();
  const Clock::time_point start = Clock::now();
  while (cache.length() < context) {
    const int64_t n = std::min(kPrefillChunk, context - cache.length());
    options.logit_rows = {n - 1};
    const std::vector<int32_t> tokens = RandomTokens(n);
    const std::vector<int64_t> positions = Positions(cache.length(), n);
    absl::StatusOr<ForwardOutput> out = s.model->Forward(cache, tokens, positions, options);
    if (!out.ok()) return out.status();
  }
  const double seconds = Elapsed(start);
  std::fprintf(stderr, "decode_bench: filled cache %lld -> %lld tokens in %.1f s (%.0f tokens/s, not timed)\n",
               static_cast<long long>(from), static_cast<long long>(context), seconds,
               static_cast<double>(context - from) / seconds);
  return absl::OkStatus();
}

void SetBandwidthCounters(benchmark::State& state, double bytes, double seconds) {
  state.counters["GB/s"] = bytes / seconds / 1e9;
}

// ---- STREAM-style bandwidth --------------------------------------------------------------------

void BM_StreamRead(benchmark::State& state) {
  const int64_t mib = state.range(0);
  const int64_t n = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  const float* data = StreamBuffer(mib, 0);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(StreamSum(data, n, DefaultThreadPool()));
  const double seconds = Elapsed(start), bytes = 4.0 * static_cast<double>(n) * state.iterations();
  SetBandwidthCounters(state, bytes, seconds);
  state.counters["threads"] = DefaultThreadPool().num_threads();
  if (mib == kStreamReadMiB) GetSession().read_bytes_per_s = bytes / seconds;
}

void BM_StreamCopy(benchmark::State& state) {
  const int64_t mib = state.range(0);
  const int64_t n = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  const float* src = StreamBuffer(mib, 0);
  float* dst = StreamBuffer(mib, 1);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    StreamCopy(src, dst, n, DefaultThreadPool());
    benchmark::ClobberMemory();
  }
  SetBandwidthCounters(state, 8.0 * static_cast<double>(n) * state.iterations(), Elapsed(start));
  state.counters["threads"] = DefaultThreadPool().num_threads();
}

// ---- Model ---------------------------------------------------------------------------------------

// Prefill of one kPrefillChunk-token chunk at positions [context, context + chunk), with the
// model's automatic attention path and logits for the last row only (what a prompt needs).
void BM_Prefill(benchmark::State& state) {
  Session& s = GetSession();
  const int64_t context = state.range(0);
  if (absl::Status st = FillCache(context); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  ForwardOptions options;
  options.logit_rows = {kPrefillChunk - 1};
  const std::vector<int64_t> positions = Positions(context, kPrefillChunk);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<int32_t> tokens = RandomTokens(kPrefillChunk);
    state.ResumeTiming();
    absl::StatusOr<ForwardOutput> out = s.model->Forward(*s.cache, tokens, positions, options);
    if (!out.ok()) return state.SkipWithError(out.status().ToString().c_str());
    benchmark::DoNotOptimize(out->logits.data<float>());
  }
  const double seconds = Elapsed(start);  // includes the paused token draws (microseconds)
  state.counters["tok/s"] = static_cast<double>(kPrefillChunk * state.iterations()) / seconds;
}

// A whole prompt of n tokens from an empty `cache`, as a long prompt runs: ForwardInPasses
// (model/prefill_passes.h), logits for the last row only, with the forward's component timers when
// `profile` is given. Sets the tok/s counter; false after SkipWithError.
bool TimePromptPrefill(benchmark::State& state, KvCache& cache, int64_t n, ForwardProfile* profile) {
  ForwardOptions options;
  options.logit_rows = {n - 1};
  options.attention.profile = profile;
  const std::vector<int64_t> positions = Positions(0, n);
  const std::vector<int32_t> tokens = RandomTokens(n);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    if (absl::Status st = cache.Truncate(0); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return false;
    }
    absl::StatusOr<ForwardOutput> out = ForwardInPasses(*GetSession().model, cache, tokens, positions, options);
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      return false;
    }
    benchmark::DoNotOptimize(out->logits.data<float>());
  }
  state.counters["tok/s"] = static_cast<double>(n * state.iterations()) / Elapsed(start);
  return true;
}

// A 4096-token prompt on the shared cache. One timed run (a 4096-token prompt at the real dimensions
// takes about a minute). Counter: tokens per second.
void BM_PrefillPrompt(benchmark::State& state) {
  TimePromptPrefill(state, *GetSession().cache, state.range(0), nullptr);
}

// The same with the forward's per-component timers (core/profile.h), on a cache of its own sized to
// the prompt: each component's share of the prompt's time (the indexer scores every key for every
// row, so its share grows with the prompt), and how much of the wall time the timers cover. The
// timers add a few microseconds per layer and pass.
void BM_PrefillPromptBreakdown(benchmark::State& state) {
  const int64_t n = state.range(0);
  absl::StatusOr<std::unique_ptr<KvCache>> cache = GetSession().model->NewCache(n);
  if (!cache.ok()) return state.SkipWithError(cache.status().ToString().c_str());
  ForwardProfile profile;
  const Clock::time_point start = Clock::now();
  if (!TimePromptPrefill(state, **cache, n, &profile)) return;
  state.counters["profiled"] = profile.total() / Elapsed(start);  // the timers' sum over the wall time
  for (int c = 0; c < static_cast<int>(Component::kCount); ++c) {
    const Component component = static_cast<Component>(c);
    state.counters[absl::StrCat(ComponentName(component), "_share")] = profile[component] / profile.total();
  }
}

// One token at position `context`: the cache holds `context` keys before the step (the step
// truncates back to them each iteration, so every step sees the same T = context + 1). Tokens are
// random so every step routes to fresh experts instead of re-reading cached ones.
void BM_Decode(benchmark::State& state) {
  Session& s = GetSession();
  const int64_t context = state.range(0);
  if (absl::Status st = FillCache(context); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  const DecodeTraffic traffic = DecodeStepTraffic(*s.model, context + 1);
  const double read_bw = ReadBandwidth();
  const std::vector<int32_t> tokens = RandomTokens(4096);
  const int64_t position = context;
  size_t next = 0;
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    const int32_t token = tokens[next++ % tokens.size()];
    absl::StatusOr<ForwardOutput> out = s.model->Forward(*s.cache, std::span<const int32_t>(&token, 1),
                                                         std::span<const int64_t>(&position, 1));
    if (!out.ok()) return state.SkipWithError(out.status().ToString().c_str());
    benchmark::DoNotOptimize(out->logits.data<float>());
  }
  const double seconds = Elapsed(start), steps = static_cast<double>(state.iterations());
  const double weight_bytes_per_s = static_cast<double>(traffic.weight_bytes) * steps / seconds;
  state.counters["tok/s"] = steps / seconds;
  state.counters["weight_MB/step"] = static_cast<double>(traffic.weight_bytes) / 1e6;
  state.counters["cache_MB/step"] = static_cast<double>(traffic.cache_bytes) / 1e6;
  state.counters["weight_GB/s"] = weight_bytes_per_s / 1e9;
  state.counters["read_GB/s"] = read_bw / 1e9;
  state.counters["bw_ratio"] = weight_bytes_per_s / read_bw;
}

// The same step assembled from MlaForward / MoeForward / MlpForward with a timer around each part:
// milliseconds per step in each (profiling; the timers add a few microseconds per layer).
void BM_DecodeBreakdown(benchmark::State& state) {
  Session& s = GetSession();
  const int64_t context = state.range(0);
  if (absl::Status st = FillCache(context); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  const std::vector<int32_t> tokens = RandomTokens(4096);
  std::vector<float> logits;
  StepTimes times;
  size_t next = 0;
  for (auto _ : state) {
    absl::Status st = TimedDecodeStep(*s.model, *s.cache, tokens[next++ % tokens.size()], context, logits, &times);
    if (!st.ok()) return state.SkipWithError(st.ToString().c_str());
    benchmark::DoNotOptimize(logits.data());
  }
  const double ms = 1e3 / static_cast<double>(state.iterations());
  state.counters["attn_full_ms"] = times.attention_full * ms;
  state.counters["attn_shared_ms"] = times.attention_shared * ms;
  state.counters["dense_mlp_ms"] = times.dense_mlp * ms;
  state.counters["moe_ms"] = times.moe * ms;
  state.counters["head_ms"] = times.head * ms;
  state.counters["other_ms"] = times.other * ms;
  state.counters["total_ms"] = times.Total() * ms;
}

// Only the bf16 GEMVs of a decode step (the same matrices and bytes, experts rotating), through
// Linear on the default pool: the ceiling of the kernel plus thread-pool dispatch.
void BM_DecodeGemvOnly(benchmark::State& state) {
  Session& s = GetSession();
  const double read_bw = ReadBandwidth();
  int64_t max_dim = 0;
  for (const TensorView& w : DecodeStepMatrices(*s.model, 0)) max_dim = std::max({max_dim, w.shape[0], w.shape[1]});
  const int64_t rows = state.range(0);
  std::vector<float> x(rows * max_dim, 0.01f), y(rows * max_dim);  // [rows, in], [rows, out]
  int64_t step = 0;
  double bytes = 0;
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<TensorView> matrices = DecodeStepMatrices(*s.model, step++);
    state.ResumeTiming();
    for (const TensorView& w : matrices) {
      Linear(x.data(), rows, w, y.data());
      bytes += static_cast<double>(w.nbytes());
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double seconds = Elapsed(start);
  state.counters["weight_MB/step"] = bytes / 1e6 / static_cast<double>(state.iterations());
  state.counters["weight_GB/s"] = bytes / seconds / 1e9;
  state.counters["bw_ratio"] = bytes / seconds / read_bw;
}

// Registration order is run order: bandwidth first (decode's ratio uses it), then the model at
// growing contexts so the shared cache is filled only once (0 → 1K → 8K).
BENCHMARK(BM_StreamRead)->Arg(kStreamReadMiB)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_StreamCopy)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemvOnly)->ArgName("rows")->DenseRange(1, 8)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_Prefill)->ArgName("ctx")->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(4.0);
BENCHMARK(BM_Decode)->ArgName("ctx")->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);
BENCHMARK(BM_DecodeBreakdown)->ArgName("ctx")->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_Prefill)->ArgName("ctx")->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(4.0);
BENCHMARK(BM_Decode)->ArgName("ctx")->Arg(kMaxContext)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);
BENCHMARK(BM_PrefillPrompt)->ArgName("tokens")->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_DecodeBreakdown)->ArgName("ctx")->Arg(kMaxContext)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

// Removes --NAME=VALUE from argv and returns VALUE, or `fallback` (Google Benchmark rejects flags it
// does not know).
std::string TakeFlag(int* argc, char** argv, const std::string& name, std::string fallback) {
  const std::string flag = "--" + name + "=";
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], flag.c_str(), flag.size()) == 0) {
      fallback = argv[i] + flag.size();
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return fallback;
}

int Main(int argc, char** argv) {
  Session& s = GetSession();
  s.model_dir = TakeFlag(&argc, argv, "model_dir", DefaultBenchModelDir());
  const std::string weights = TakeFlag(&argc, argv, "weights", "stored");
  const std::string activations = TakeFlag(&argc, argv, "activations", "f32");
  // BM_PrefillPromptBreakdown runs only when asked for (minutes at the real dimensions).
  const std::string breakdown_prompts = TakeFlag(&argc, argv, "breakdown_prompts", "");
  for (absl::string_view tokens : absl::StrSplit(breakdown_prompts, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(tokens, &n) || n < 1) {
      std::fprintf(stderr, "decode_bench: --breakdown_prompts takes positive token counts, got '%s'\n",
                   std::string(tokens).c_str());
      return 1;
    }
    benchmark::RegisterBenchmark("BM_PrefillPromptBreakdown", BM_PrefillPromptBreakdown)
        ->ArgName("tokens")->Arg(n)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  LoadOptions load;
  if (absl::StatusOr<WeightDType> dtype = ParseWeightDType(weights, Frontend::kCli); dtype.ok()) {
    load.weight_dtype = *dtype;
  } else {
    std::fprintf(stderr, "decode_bench: %s\n", dtype.status().ToString().c_str());
    return 1;
  }
  if (absl::StatusOr<ActivationPrecision> rows = ParseActivationPrecision(activations, "--activations"); rows.ok()) {
    load.activations = *rows;
  } else {
    std::fprintf(stderr, "decode_bench: %s\n", rows.status().ToString().c_str());
    return 1;
  }

  Clock::time_point start = Clock::now();
  bool generated = false;
  // Another checkpoint given by --model_dir (a release's cut, say) runs as it is.
  if (absl::Status st = IsOtherCheckpoint(s.model_dir) ? absl::OkStatus() : EnsureBenchModel(s.model_dir, &generated);
      !st.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  if (generated) std::fprintf(stderr, "decode_bench: wrote %s in %.1f s\n", s.model_dir.c_str(), Elapsed(start));
  start = Clock::now();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(s.model_dir, load);
  if (!model.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  s.model = std::move(*model);
  absl::StatusOr<std::unique_ptr<KvCache>> cache = s.model->NewCache(kMaxContext + kPrefillChunk);
  if (!cache.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", cache.status().ToString().c_str());
    return 1;
  }
  s.cache = std::move(*cache);
  std::fprintf(stderr, "decode_bench: loaded %s in %.1f s\n", s.model_dir.c_str(), Elapsed(start));

  benchmark::AddCustomContext("bench_model", PathForReport(s.model_dir));
  benchmark::AddCustomContext("weights", weights);
  benchmark::AddCustomContext("activations", activations);
  benchmark::AddCustomContext("trunk_weight_GB", absl::StrCat(static_cast<double>(TrunkWeightBytes(*s.model)) / 1e9));
  benchmark::AddCustomContext("pool_threads", absl::StrCat(DefaultThreadPool().num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) { return mtpspec::bench::Main(argc, argv); }
