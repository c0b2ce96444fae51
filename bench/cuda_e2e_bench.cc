// The GPU end to end (bench/README_cuda.md): a truncated GLM-5.2 with random weights at real dimensions,
// decode tokens/s plain against MTP k = 1..3 with synthetic acceptance at the trained model's
// measured rates, and measured ÷ predicted speedup, predicted = E[L] / (r_k + k·c) with
//   r_k = T_verify(k + 1 rows) / T_1,  c = T_draft_step / T_1,  E[L] = 1 + Σ_{i≤k} Π_{j≤i} a_j,
// all measured in the same run at the same context.
//
// The model: GLM-5.2's config (docs/models.md, "Notation and configuration": H 6144, 64 heads, r_q 2048, r_kv 512, d_n 192,
// d_r 64, d_v 256, vocab 154880, dense width 12288, expert width 2048, top-8, indexer 32 × 128 with
// K = 2048) truncated to 4 layers (1 dense + 3 MoE; IndexShare full/full/shared/shared: GLM-5.2
// has 21 full layers of 78, but the one-layer comparison needs a full MoE layer) plus the MTP layer. FEWER EXPERTS than the real 256 (default 32): 256 would
// be ~80 GB of bf16 on a 64 GB disk; a token still reads 8 experts per MoE layer, but a verify block
// of L rows touches E·(1 − (1 − 8/E)^L) distinct experts, fewer than with 256 (22 vs 31 at L = 4),
// so verify is somewhat cheaper than in the full model. The checkpoint is written once into
// --model-dir with WriteRandomCheckpoint (parallel hash values, bf16) and reused when present.
//
// --device-weights fp8 quantises every matrix to FP8 with 128 × 128 block scales at load (as the
// releases store them; WeightDType::kFP8) and keeps them FP8 on the GPU (DeviceWeightFormat::kFp8),
// so a decode step reads about half the bytes of the default bf16.
//
// Usage: cuda_e2e_bench [--model-dir DIR] [--experts 32] [--context 4096] [--new-tokens 64]
//                       [--reps 2] [--rates 0.64,0.68,0.54] [--device-weights bf16|fp8] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/acceptance_stats.h"
#include "bench/e2e_speed.h"
#include "mtp/mtp_module_cuda.h"
#include "nlohmann/json.hpp"
#include "pipeline/cuda_mtp_drafter.h"
#include "pipeline/cuda_target.h"
#include "spec/generator.h"
#include "core/cli_args.h"
#include "model/checkpoint_writer.h"
#include "verify/sampler_cuda.h"

namespace mtpspec {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Conditional acceptance a_1..a_3 of models/glm-tiny-mtp at context 480, k = 5, normed/post/exact,
// sampler-equality, T = 0 (docs/results/acceptance.md, the rates the CPU trade-off
// benchmark used).
const std::vector<double> kTrainedRates = {0.64, 0.68, 0.54};

nlohmann::json TruncatedGlm52Config(int64_t experts) {
  return nlohmann::json{
      {"model_type", "glm_moe_dsa"},
      {"architectures", {"GlmMoeDsaForCausalLM"}},
      {"vocab_size", 154880},
      {"hidden_size", 6144},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 64},
      {"q_lora_rank", 2048},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 192},
      {"qk_rope_head_dim", 64},
      {"v_head_dim", 256},
      {"intermediate_size", 12288},
      {"moe_intermediate_size", 2048},
      {"first_k_dense_replace", 1},
      {"n_routed_experts", experts},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 8},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"rms_norm_eps", 1e-5},
      {"rope_parameters", {{"rope_theta", 8000000}, {"rope_type", "default"}}},
      {"rope_interleave", true},
      {"max_position_embeddings", 1048576},
      {"index_n_heads", 32},
      {"index_head_dim", 128},
      {"index_topk", 2048},
      {"indexer_rope_interleave", true},
      {"indexer_types", {"full", "full", "shared", "shared"}},
      {"index_share_for_mtp_iteration", true},
      {"num_nextn_predict_layers", 1},
      {"tie_word_embeddings", false},
      {"eos_token_id", {154820}},
  };
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t s = seed;
  for (int32_t& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Settings {
  std::string model_dir = "build/cuda_e2e_model";
  int64_t experts = 32;
  int64_t context = 4096;
  int64_t new_tokens = 64;
  int64_t reps = 2;
  int64_t max_k = 3;
  std::vector<double> rates = kTrainedRates;
  DeviceWeightFormat device_weights = DeviceWeightFormat::kBf16;
  std::string json_path;
};

absl::StatusOr<Settings> ParseSettings(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1,
                                                {"model-dir", "experts", "context", "new-tokens", "reps", "rates",
                                                 "device-weights", "json"}));
  Settings s;
  s.model_dir = args.Get("model-dir", s.model_dir);
  ASSIGN_OR_RETURN(s.experts, args.GetInt("experts", s.experts));
  ASSIGN_OR_RETURN(s.context, args.GetInt("context", s.context));
  ASSIGN_OR_RETURN(s.new_tokens, args.GetInt("new-tokens", s.new_tokens));
  ASSIGN_OR_RETURN(s.reps, args.GetInt("reps", s.reps));
  s.json_path = args.Get("json", "");
  ASSIGN_OR_RETURN(s.device_weights, ParseDeviceWeightFormat(args.Get("device-weights", "bf16"), "--device-weights"));
  if (args.Has("rates")) {
    s.rates.clear();
    for (absl::string_view piece : absl::StrSplit(args.Get("rates"), ',')) {
      double v;
      if (!absl::SimpleAtod(piece, &v) || v < 0 || v > 1) {
        return absl::InvalidArgumentError("--rates must be comma-separated numbers in [0, 1]");
      }
      s.rates.push_back(v);
    }
  }
  if (s.experts < 8) return absl::InvalidArgumentError("--experts must be >= 8 (top-8 routing)");
  if (s.context < 1 || s.new_tokens < 4 || s.reps < 1) {
    return absl::InvalidArgumentError("--context >= 1, --new-tokens >= 4 and --reps >= 1 are required");
  }
  s.max_k = static_cast<int64_t>(s.rates.size());
  if (s.max_k < 1 || s.max_k >= cuda::kMaxGemvRows) return absl::InvalidArgumentError("give 1 to 15 --rates");
  return s;
}

// Writes the checkpoint unless DIR/config.json already describes the same model.
absl::Status EnsureCheckpoint(const Settings& s, const nlohmann::json& config) {
  const std::string config_path = s.model_dir + "/config.json";
  if (std::filesystem::exists(config_path) && std::filesystem::exists(s.model_dir + "/model.safetensors")) {
    std::ifstream in(config_path);
    nlohmann::json existing = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (existing == config) return absl::OkStatus();
  }
  RandomCheckpointOptions options;
  options.seed = 52;
  options.dtype = DType::kBF16;
  options.parallel = true;
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(WriteRandomCheckpoint(s.model_dir, config, options));
  std::cerr << "cuda_e2e_bench: wrote " << s.model_dir << " in " << Seconds(start) << " s\n";
  return absl::OkStatus();
}

// The cost model's inputs at the prompt's context, each the median of `reps` timings:
// T_1 (one decode row), T_v(L) for L = 2 … max_k + 1, and the MTP draft step (one chained row
// plus its argmax).
struct Costs {
  double t1 = 0;
  std::vector<double> verify;  // [max_k + 2] by L (0 and 1 unused)
  double draft_step = 0;
};

absl::StatusOr<Costs> MeasureCosts(CudaTarget& target, cuda::CudaMtpModule& mtp, cuda::DeviceKvCache& mtp_cache,
                                   const std::vector<int32_t>& prompt, int64_t max_k, int64_t reps) {
  cuda::CudaModel& model = target.model();
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t V = model.config().vocab_size;
  target.Reset();
  ASSIGN_OR_RETURN(TargetStep prefill, target.Run(prompt, false));
  // The MTP cache over the prompt's pairs (hidden states of the prefill), in chunks.
  const cuda::DeviceForward& last = target.last_forward();
  const int64_t H = model.config().hidden_size;
  MtpOptions mtp_options;
  for (int64_t begin = 0; begin < n - 1; begin += 512) {
    const int64_t rows = std::min<int64_t>(512, n - 1 - begin);
    std::vector<int64_t> positions;
    for (int64_t r = 0; r < rows; ++r) positions.push_back(begin + r);
    RETURN_IF_ERROR(mtp.ExtendDevice(mtp_cache, last.hidden_postnorm + begin * H,
                                     std::span<const int32_t>(prompt.data() + begin + 1, rows), positions, mtp_options)
                        .status());
  }
  Costs costs;
  costs.verify.assign(static_cast<size_t>(max_k + 2), 0.0);
  const std::vector<int32_t> block = RandomIds(max_k + 1, V, 99);
  std::vector<double> t1;
  std::vector<std::vector<double>> tv(static_cast<size_t>(max_k + 2));
  std::vector<double> draft;
  cuda::GrowableBuffer<float> chained;
  ASSIGN_OR_RETURN(float* hidden, chained.Reserve(model.ctx(), H, "bench chained hidden"));
  RETURN_IF_ERROR(cuda::FromCuda(cudaMemcpyAsync(hidden, last.hidden_postnorm + (n - 1) * H, H * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, model.ctx().stream()),
                                 "cudaMemcpyAsync (bench hidden)"));
  for (int64_t rep = 0; rep < reps + 1; ++rep) {  // the first round warms up
    for (int64_t L = 1; L <= max_k + 1; ++L) {
      const Clock::time_point start = Clock::now();
      ASSIGN_OR_RETURN(TargetStep step, target.Run(std::span<const int32_t>(block.data(), L), true));
      const double seconds = Seconds(start);
      RETURN_IF_ERROR(target.Truncate(n));
      if (rep > 0) (L == 1 ? t1 : tv[L]).push_back(seconds);
    }
    const int64_t position = n - 1;
    const int32_t token = block[0];
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(cuda::DeviceMtpStep step,
                     mtp.ForwardDevice(mtp_cache, hidden, std::span<const int32_t>(&token, 1),
                                       std::span<const int64_t>(&position, 1), mtp_options));
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, cuda::ArgmaxCuda(model.ctx(), step.logits, 1, V));
    const double seconds = Seconds(start);
    RETURN_IF_ERROR(mtp_cache.Truncate(n - 1));
    if (rep > 0) draft.push_back(seconds);
  }
  costs.t1 = Median(t1);
  for (int64_t L = 2; L <= max_k + 1; ++L) costs.verify[L] = Median(tv[L]);
  costs.draft_step = Median(draft);
  return costs;
}

absl::Status Run(const Settings& s) {
  RETURN_IF_ERROR(cuda::DeviceStatus());
  const nlohmann::json config = TruncatedGlm52Config(s.experts);
  RETURN_IF_ERROR(EnsureCheckpoint(s, config));
  Clock::time_point start = Clock::now();
  LoadOptions load;
  if (s.device_weights == DeviceWeightFormat::kFp8) load.weight_dtype = WeightDType::kFP8;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> host, Model::Load(s.model_dir, load));
  const int64_t capacity = s.context + s.new_tokens + kMaxDraftTokens + 2;
  cuda::CudaModelOptions model_options;
  model_options.max_positions = capacity;
  model_options.weights = s.device_weights;
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaModel> gpu, cuda::CudaModel::Create(*host, model_options));
  const double load_seconds = Seconds(start);
  ASSIGN_OR_RETURN(std::unique_ptr<CudaTarget> target, CudaTarget::Create(*gpu, capacity));
  ASSIGN_OR_RETURN(std::unique_ptr<MtpDrafter> drafter, CreateCudaMtpDrafter(*target, capacity, MtpOptions{}));
  // The draft step is timed on a module of its own with a separate cache.
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaMtpModule> probe_module, cuda::CudaMtpModule::Create(*gpu));
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceKvCache> probe_cache, probe_module->NewCache(capacity));
  const std::vector<int32_t> prompt = RandomIds(s.context, host->config().vocab_size, 7);

  ASSIGN_OR_RETURN(Costs costs, MeasureCosts(*target, *probe_module, *probe_cache, prompt, s.max_k, s.reps));
  probe_cache.reset();

  // End to end, interleaved: plain, k = 1 … max_k, repeated.
  std::vector<bench::SpeedResult> totals(static_cast<size_t>(s.max_k + 1));
  for (int64_t rep = 0; rep < s.reps; ++rep) {
    for (int64_t k = 0; k <= s.max_k; ++k) {
      GenerateOptions options;
      options.max_new_tokens = s.new_tokens;
      options.k = k;
      options.stop_at_eos = false;
      options.accept.rule = AcceptRule::kSynthetic;
      options.accept.synthetic_rates = s.rates;
      options.accept.sampling.seed = 1000 + static_cast<uint64_t>(rep);
      const std::string label = k == 0 ? "plain" : absl::StrCat("k=", k);
      ASSIGN_OR_RETURN(bench::SpeedResult run, bench::TimedGenerate(*target, k == 0 ? nullptr : drafter.get(),
                                                                    prompt, options, label));
      bench::Accumulate(run, &totals[k]);
    }
  }

  nlohmann::json out;
  out["benchmark"] = "cuda_e2e_bench";
  out["model"] = {{"config", config},
                  {"dir", s.model_dir},
                  {"weight_bytes_on_gpu", gpu->weight_bytes()},
                  {"device_weights", DeviceWeightFormatName(s.device_weights)},
                  {"experts_note", absl::StrCat(s.experts, " routed experts instead of GLM-5.2's 256 (disk)")}};
  out["context"] = s.context;
  out["new_tokens"] = s.new_tokens;
  out["reps"] = s.reps;
  out["load_seconds"] = load_seconds;
  out["rates"] = s.rates;
  out["rates_source"] = "docs/results/acceptance.md: glm-tiny-mtp, N=480, k=5, sampler-equality T=0";
  out["t1_seconds"] = costs.t1;
  out["draft_step_seconds"] = costs.draft_step;
  out["c"] = costs.draft_step / costs.t1;
  const double plain_tps = totals[0].tokens_per_second;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("\ncuda_e2e_bench: truncated GLM-5.2 (4 layers + MTP, %lld experts), context %lld, %.1f GB of %s weights "
              "on the GPU\n",
              static_cast<long long>(s.experts), static_cast<long long>(s.context), gpu->weight_bytes() / 1e9,
              DeviceWeightFormatName(s.device_weights));
  std::printf("T1 %.3f ms, draft step %.3f ms (c = %.3f)\n", costs.t1 * 1e3, costs.draft_step * 1e3,
              costs.draft_step / costs.t1);
  std::printf("%-6s %10s %8s %8s %8s %10s %10s %10s\n", "run", "tok/s", "speedup", "E[L]", "r_k", "predicted",
              "meas/pred", "AL real");
  for (int64_t k = 0; k <= s.max_k; ++k) {
    const bench::SpeedResult& r = totals[k];
    nlohmann::json row = bench::ToJson(r);
    const double speedup = plain_tps > 0 ? r.tokens_per_second / plain_tps : 0.0;
    row["speedup"] = speedup;
    if (k == 0) {
      std::printf("%-6s %10.1f %8.2f\n", r.label.c_str(), r.tokens_per_second, 1.0);
    } else {
      const double expected = bench::ExpectedLength(s.rates, k);
      const double r_k = costs.verify[k + 1] / costs.t1;
      const double predicted = expected / (r_k + static_cast<double>(k) * costs.draft_step / costs.t1);
      const double realised = r.stats.num_drafts > 0 ? r.stats.mean_acceptance_length() : 1.0;
      row["k"] = k;
      row["expected_length"] = expected;
      row["r_k"] = r_k;
      row["verify_seconds_L"] = costs.verify[k + 1];
      row["predicted_speedup"] = predicted;
      row["measured_over_predicted"] = predicted > 0 ? speedup / predicted : 0.0;
      row["predicted_with_realised_length"] = realised / (r_k + static_cast<double>(k) * costs.draft_step / costs.t1);
      std::printf("%-6s %10.1f %8.2f %8.2f %8.3f %10.2f %10.2f %10.2f\n", r.label.c_str(), r.tokens_per_second, speedup,
                  expected, r_k, predicted, predicted > 0 ? speedup / predicted : 0.0, realised);
    }
    rows.push_back(row);
  }
  out["runs"] = rows;
  if (!s.json_path.empty()) {
    std::ofstream file(s.json_path);
    file << out.dump(2) << "\n";
    if (!file) return absl::InternalError(absl::StrCat(s.json_path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec

int main(int argc, char** argv) {
  auto settings = mtpspec::ParseSettings(argc, argv);
  if (!settings.ok()) {
    std::cerr << "cuda_e2e_bench: " << settings.status() << "\n";
    return 2;
  }
  const absl::Status st = mtpspec::Run(*settings);
  if (!st.ok()) {
    std::cerr << "cuda_e2e_bench: " << st << "\n";
    return 1;
  }
  return 0;
}
