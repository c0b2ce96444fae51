// Batch benchmark: what MTP speculative decoding buys per batch size B, on the bench model or on
// any checkpoint (--model: e.g. a real-dimension cut written by `mtpspec make-checkpoint`).
//
// Costs, for each context N (bench/batch_costs.h): the batched verify forwards T(B, L) of B sequences
// of L = 1 … k_max + 1 rows against their bytes-plus-compute bound, with the routed-expert union they
// read, and the batched MTP draft step D(B) and extend X(B), as MtpBatchDrafter runs them. A checkpoint
// cut to fewer experts than its release also gets each cost at the release's expert union.
//
// Cost model (the drafters and their extends run together, as GenerateBatch runs them):
//   tokens/s(B, k) = B · AL(k) / (T(B, k + 1) + k · D(B) + X(B)),  k ≥ 1;   B / T(B, 1) for k = 0
//   AL(k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j  from the conditional acceptance rates a_j (--rates).
// That is the steady state. A run of G = --new-tokens per request also ends in cycles with fewer
// requests and shorter drafts (each request stops at its own G-th token); the prediction for such a
// run prices the cycles of simulated runs, and each end-to-end run is also priced over the cycles it
// went through, from its cycle log (bench/batch_schedule.h).
//
// End to end, at --e2e-contexts: GenerateBatch with B requests in B slots (prefix-replaying targets
// over random caches, real MTP drafters drafting together, one batched verify forward per cycle) and SYNTHETIC
// acceptance at the same rates; decode tokens/s (the prefill excluded) for each B and k, and the
// measured speedup over plain batched decoding against the predicted one.
//
//   build/release/bench/batch_bench [--contexts 512,4096] [--batches 1,2,4,8,16] [--max-k 4] [--reps 5]
//       [--rates a1,a2,..] [--e2e-contexts 512] [--new-tokens 24] [--e2e-reps 1] [--json build/results/batch.json]
// The end-to-end runs add k = auto (up to --max-k), chosen per cycle by the batch's draft-length
// controller (spec/batch_k.h).
//
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/batch_costs.h"
#include "bench/batch_schedule.h"
#include "bench/bench_model.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "bench/verify_cost.h"
#include "core/cli_args.h"
#include "core/parallel.h"
#include "spec/batch.h"
#include "pipeline/model_target.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(batch_bench: batched verify costs and the speedup of MTP per batch size.

  --model-dir DIR      bench model (default build/bench_model; written if missing)
  --model DIR          any checkpoint instead, loaded as stored (FP8 stays FP8)
  --union-experts E    also cost every forward at the expert union of E routed experts (default: the release's
                       for a cut checkpoint, else the model's own)
  --prefix-layers P    also time each cost-table forward through only the first P trunk layers and the head
  --contexts LIST      N values for the cost table (default 512,4096)
  --batches LIST       batch sizes B (default 1,2,4,8,16)   --max-k K (default 4)   --reps R (default 5)
  --rates LIST         conditional acceptance a_1,a_2,... (default: the trained head's, as the trade-off report uses)
  --e2e-contexts LIST  N values for end-to-end runs (default 512; "" skips them)   --new-tokens G (default 24)
  --e2e-reps R         end-to-end repetitions, each running every k in turn (default 1)
  --e2e-cost-reps R    samples of each cost measured again before each repetition (median; default 1)
  --stream-mib M (default 512)   --threads N   --seed S   --json PATH (default build/results/batch.json)   --help
)";

// The trained head's conditional acceptance by position (docs/results/tradeoff.md's --rates).
constexpr char kTrainedRates[] = "0.7142857142857143,0.5434782608695652,0.589041095890411,0.5365853658536586,0.5238095238095238";

// AL(k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} a_j (a_j beyond the list: the last one).
double AcceptanceLength(const std::vector<double>& rates, int64_t k) {
  double al = 1.0, reach = 1.0;
  for (int64_t i = 0; i < k; ++i) {
    reach *= rates[std::min<size_t>(i, rates.size() - 1)];
    al += reach;
  }
  return al;
}

// Simulated runs behind each "…_for_run" prediction (their mean seconds; the spread of the mean is
// well under 1%).
constexpr int64_t kSimulatedRuns = 2000;

// The cost model's tokens/s and speedup over plain batched decoding for every B in `batches` and
// k = 0 … max_k, from cost tables (CostTable) holding those B:
//  - the steady state, every cycle B requests at k: tokens/s(B, k) = B · AL(k) / (T(B, k + 1) + k · D(B)
//    + X(B)), plain B / T(B, 1) ("speedup");
//  - a run of `new_tokens` per request ("speedup_for_run"): the mean seconds of simulated runs, each
//    cycle priced as it runs (ExpectedBatchRun: requests finish apart, the last drafts are capped);
// both from the table of the model's own costs and from that at the --union-experts union ("…_at_union").
nlohmann::json Predict(const BatchCostTable& own, const BatchCostTable& at_union, const std::vector<int64_t>& batches,
                       const std::vector<double>& rates, int64_t max_k, int64_t new_tokens, uint64_t seed) {
  nlohmann::json predicted = nlohmann::json::array();
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    for (int64_t k = 0; k <= max_k; ++k) predicted.push_back({{"batch", batches[bi]}, {"k", k}});
  }
  for (const BatchCostTable* table : {&own, &at_union}) {
    const std::string suffix = table == &at_union ? "_at_union" : "";
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int64_t b = batches[bi];
      const double plain_cycle = PriceCycle(*table, SteadyCycle(b, 0));
      double plain_run = 0;
      for (int64_t k = 0; k <= max_k; ++k) {
        nlohmann::json& p = predicted[bi * (max_k + 1) + k];
        const double tps = static_cast<double>(b) * AcceptanceLength(rates, k) / PriceCycle(*table, SteadyCycle(b, k));
        p["tokens_per_second" + suffix] = tps;
        p["speedup" + suffix] = tps * plain_cycle / static_cast<double>(b);
        const SimulatedRuns run = ExpectedBatchRun(*table, b, new_tokens, k, rates, kSimulatedRuns, seed + 17 * k);
        if (k == 0) plain_run = run.seconds;
        p["tokens_per_second_for_run" + suffix] = static_cast<double>(b * (new_tokens - 1)) / run.seconds;
        p["speedup_for_run" + suffix] = plain_run / run.seconds;
        if (suffix.empty()) p["cycles_for_run"] = run.cycles;
      }
    }
  }
  return predicted;
}

// GenerateBatch with B requests in B slots at context n: for each B, `reps` repetitions, each running
// plain decoding and every k in turn (so the k interleave and a slow minute of the machine falls on
// all of them); tokens/s of a k is its decoded tokens over its decode seconds summed over the
// repetitions, and its statistics are those of its first repetition. Each repetition first measures
// the costs again for B and the batch sizes below it (T, D, X, the median of cost_reps samples each)
// and records the speedups they predict: the steady state ("paired_predicted_speedup"), a run of
// this length ("paired_run_predicted_speedup") and the cycles each run went through, priced from its
// log ("paired_cycles_predicted_speedup"). So each repetition's measured speedups can be set against
// predictions made in the same minute: this machine's memory reads at about 35 or 60 GB/s by turns,
// which moves a memory-bound plain step more than a verify of several rows.
absl::StatusOr<nlohmann::json> RunEndToEnd(const Model& model, int64_t n, const std::vector<int64_t>& batches,
                                           int64_t max_k, int64_t new_tokens, const std::vector<double>& rates,
                                           int64_t reps, int64_t cost_reps, uint64_t seed, double bandwidth,
                                           double mac_rate, const UnionCosting& u) {
  const int64_t b_max = *std::max_element(batches.begin(), batches.end());
  const int64_t capacity = n + new_tokens + kMaxDraftTokens + 2;
  std::vector<std::unique_ptr<PrefixCachedTarget>> targets;
  std::vector<std::unique_ptr<MtpDrafter>> drafters;
  std::vector<std::vector<int32_t>> prompts;
  MtpOptions mtp_options;
  mtp_options.attention = LongContextAttention();
  for (int64_t s = 0; s < b_max; ++s) {
    prompts.push_back(RandomTokenCorpus(n, model.config().vocab_size, seed + 1000 + static_cast<uint64_t>(s)).ids);
    ASSIGN_OR_RETURN(auto target, PrefixCachedTarget::Create(model, capacity, AttentionOptions{}));
    RETURN_IF_ERROR(target->FillRandom(prompts.back(), seed + static_cast<uint64_t>(s)));
    targets.push_back(std::move(target));
    ASSIGN_OR_RETURN(auto drafter, MtpDrafter::Create(model, capacity, mtp_options));
    FillPromptRandomly(*drafter, seed + 500 + static_cast<uint64_t>(s));  // as the target's prompt: random rows
    drafters.push_back(std::move(drafter));
  }
  ModelBatchVerifier verifier(model);
  MtpBatchDrafter batch_drafter;
  nlohmann::json runs = nlohmann::json::array();
  for (int64_t b : batches) {
    std::vector<BatchSlot> slots;
    for (int64_t s = 0; s < b; ++s) slots.push_back({targets[s].get(), drafters[s].get()});
    std::vector<nlohmann::json> cells(max_k + 2);  // [k]: the first repetition's run, then the sums
    // [k][rep] the speedup this repetition's costs predict: in the steady state, for a run of this
    // length (simulated), and for the cycles the run went through (its cycle log, priced).
    std::vector<std::vector<double>> paired(max_k + 2), paired_run(max_k + 2), paired_cycles(max_k + 2);
    // The batch sizes up to B, whose costs price the cycles that requests finishing apart leave smaller.
    std::vector<int64_t> up_to_b;
    for (int64_t other : batches) {
      if (other <= b) up_to_b.push_back(other);
    }
    for (int64_t rep = 0; rep < reps; ++rep) {
      ASSIGN_OR_RETURN(const nlohmann::json costs,
                       MeasureCosts(model, n, up_to_b, max_k + 1, cost_reps, seed, bandwidth, mac_rate, u));
      ASSIGN_OR_RETURN(const nlohmann::json draft,
                       MeasureDraftCosts(model, n, up_to_b, AcceptanceLength(rates, max_k) - 1, cost_reps, seed, u));
      const BatchCostTable table = CostTable(costs, draft, /*at_union=*/false);
      const nlohmann::json predicted =
          Predict(table, CostTable(costs, draft, /*at_union=*/true), {b}, rates, max_k, new_tokens, seed);
      for (int64_t k = 0; k <= max_k; ++k) {
        paired[k].push_back(predicted[k]["speedup"].get<double>());
        paired_run[k].push_back(predicted[k]["speedup_for_run"].get<double>());
      }
      double plain_priced = 0;  // this repetition's plain run, priced over its cycles
      for (int64_t k = 0; k <= max_k + 1; ++k) {  // k = max_k + 1: k = auto up to max_k (the batch's controller)
        const bool automatic = k == max_k + 1;
        std::vector<BatchRequest> requests;
        for (int64_t s = 0; s < b; ++s) {
          BatchRequest& r = requests.emplace_back();
          r.prompt = prompts[s];
          r.options.max_new_tokens = new_tokens;
          r.options.k = automatic ? max_k : k;
          r.options.adaptive_k = automatic;
          r.options.stop_at_eos = false;
          r.options.accept.rule = AcceptRule::kSynthetic;
          r.options.accept.synthetic_rates = rates;
          r.options.accept.sampling.temperature = 1.0;  // varied tokens, as in real text
          // Each repetition draws its own acceptance (the synthetic draws follow the seed and the
          // position), so the repetitions average over them as the run-length prediction does.
          r.options.accept.sampling.seed = seed + static_cast<uint64_t>(s) + 7919 * static_cast<uint64_t>(rep);
        }
        BatchOptions options;
        options.verifier = &verifier;
        options.drafter = &batch_drafter;
        ASSIGN_OR_RETURN(BatchResult result, GenerateBatch(slots, requests, options));
        for (const BatchRequestResult& r : result.requests) RETURN_IF_ERROR(r.status);
        const BatchStats& st = result.stats;
        const double decode_seconds = st.total_seconds - st.prefill_seconds;
        const double priced = PriceCycles(table, st.cycle_log);
        if (k == 0) plain_priced = priced;
        if (!automatic) paired_cycles[k].push_back(plain_priced / priced);
        const int64_t decoded = st.generated_tokens - b;  // the prefill draws each request's first token
        int64_t drafted = 0, accepted = 0, with_drafts = 0;
        for (const BatchRequestResult& r : result.requests) {
          drafted += r.result.stats.num_draft_tokens;
          accepted += r.result.stats.num_accepted_tokens;
          with_drafts += r.result.stats.num_drafts;
        }
        double latency = 0;
        for (const BatchRequestResult& r : result.requests) latency += r.latency_seconds - r.queued_seconds;
        int64_t k_used = 0, cycles = 0;  // the mean k the requests drafted (k = auto)
        for (const BatchRequestResult& r : result.requests) {
          const std::vector<int64_t>& decisions = r.result.stats.k_decisions;
          for (size_t j = 0; j < decisions.size(); ++j) {
            k_used += static_cast<int64_t>(j) * decisions[j];
            cycles += decisions[j];
          }
        }
        const double latency_mean = latency / b;
        nlohmann::json& c = cells[k];
        if (rep == 0) {
          c = {{"batch", b}, {"k", automatic ? nlohmann::json("auto") : nlohmann::json(k)},
               {"mean_k", cycles > 0 ? static_cast<double>(k_used) / cycles : 0.0},
               {"decoded", 0}, {"decode_seconds", 0.0}, {"run_tokens_per_second", nlohmann::json::array()},
               {"run_request_seconds", nlohmann::json::array()},
               {"acceptance_length", with_drafts > 0 ? 1.0 + static_cast<double>(accepted) / with_drafts : 1.0},
               {"drafted", drafted}, {"stats", st.ToJson()}};
        }
        c["decoded"] = c["decoded"].get<int64_t>() + decoded;
        c["decode_seconds"] = c["decode_seconds"].get<double>() + decode_seconds;
        c["run_tokens_per_second"].push_back(decoded / decode_seconds);
        c["run_request_seconds"].push_back(latency_mean);
        std::fprintf(stderr, "batch: e2e N=%lld B=%lld k=%s rep %lld: %.1f tokens/s\n", static_cast<long long>(n),
                     static_cast<long long>(b), automatic ? "auto" : std::to_string(k).c_str(),
                     static_cast<long long>(rep), decoded / decode_seconds);
      }
    }
    for (int64_t k = 0; k <= max_k; ++k) {
      cells[k]["paired_predicted_speedup"] = paired[k];
      cells[k]["paired_run_predicted_speedup"] = paired_run[k];
      cells[k]["paired_cycles_predicted_speedup"] = paired_cycles[k];
    }
    for (nlohmann::json& c : cells) {
      c["decode_tokens_per_second"] = c["decoded"].get<int64_t>() / c["decode_seconds"].get<double>();
      double latency_sum = 0;
      for (const auto& v : c["run_request_seconds"]) latency_sum += v.get<double>();
      c["mean_request_seconds"] = latency_sum / static_cast<double>(c["run_request_seconds"].size());
      runs.push_back(c);
    }
  }
  return runs;
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1,
                                                {"model-dir", "model", "union-experts", "prefix-layers", "contexts", "batches", "max-k", "reps", "rates",
                                                 "e2e-contexts", "new-tokens", "e2e-reps", "e2e-cost-reps", "stream-mib", "threads", "seed", "json"},
                                                {"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  nlohmann::json out;
  out["run"] = RunInfo(argc, argv);
  const double start = NowSeconds();
  ASSIGN_OR_RETURN(const std::vector<int64_t> contexts, ParseIntList("contexts", args.Get("contexts", "512,4096")));
  ASSIGN_OR_RETURN(const std::vector<int64_t> batches, ParseIntList("batches", args.Get("batches", "1,2,4,8,16")));
  ASSIGN_OR_RETURN(const int64_t max_k, args.GetInt("max-k", 4));
  ASSIGN_OR_RETURN(const int64_t reps, args.GetInt("reps", 5));
  ASSIGN_OR_RETURN(const int64_t new_tokens, args.GetInt("new-tokens", 24));
  ASSIGN_OR_RETURN(const int64_t e2e_reps, args.GetInt("e2e-reps", 1));
  ASSIGN_OR_RETURN(const int64_t e2e_cost_reps, args.GetInt("e2e-cost-reps", 1));
  ASSIGN_OR_RETURN(const uint64_t seed, args.GetUint64("seed", 7));
  ASSIGN_OR_RETURN(const std::vector<double> rates, ParseDoubleList("rates", args.Get("rates", kTrainedRates)));
  std::vector<int64_t> e2e_contexts;
  if (!args.Get("e2e-contexts", "512").empty()) {
    ASSIGN_OR_RETURN(e2e_contexts, ParseIntList("e2e-contexts", args.Get("e2e-contexts", "512")));
  }
  if (batches.empty() || max_k < 0 || max_k > kMaxDraftTokens || reps < 1 || e2e_reps < 1 || e2e_cost_reps < 1 || new_tokens < 2 ||
      rates.empty()) {
    return absl::InvalidArgumentError(
        "--batches non-empty, --max-k in [0, 15], --reps, --e2e-reps, --e2e-cost-reps >= 1, --new-tokens >= 2, --rates");
  }
  for (int64_t b : batches) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("--batches: every B must be >= 1, got ", b));
  }
  for (double r : rates) {
    if (!(r >= 0 && r <= 1)) return absl::InvalidArgumentError("--rates must be in [0, 1]");
  }

  if (args.Has("model") && args.Has("model-dir")) {
    return absl::InvalidArgumentError("--model and --model-dir: give one (--model-dir is the bench model's)");
  }
  const bool bench_model = !args.Has("model");
  const std::string dir = bench_model ? args.Get("model-dir", DefaultBenchModelDir()) : args.Get("model");
  if (bench_model) RETURN_IF_ERROR(EnsureBenchModel(dir, nullptr));
  ASSIGN_OR_RETURN(auto model, Model::Load(dir));
  ASSIGN_OR_RETURN(out["model_config"], ReadJsonFile(dir + "/config.json"));
  // A checkpoint cut from a release (`mtpspec make-checkpoint`) records the release's expert count.
  int64_t release_experts = model->config().n_routed_experts;
  const nlohmann::json cut = out["model_config"].value("mtpspec_cut_from", nlohmann::json::object());
  if (cut.contains("n_routed_experts") && cut["n_routed_experts"].is_number_integer()) {
    release_experts = cut["n_routed_experts"].get<int64_t>();
  }
  ASSIGN_OR_RETURN(const int64_t union_experts, args.GetInt("union-experts", release_experts));
  ASSIGN_OR_RETURN(const int64_t prefix_layers, args.GetInt("prefix-layers", 0));
  if (prefix_layers < 0 || prefix_layers >= model->config().num_hidden_layers) {
    return absl::InvalidArgumentError(absl::StrCat("--prefix-layers must be in [0, ", model->config().num_hidden_layers,
                                                   "), the model's trunk layers; got ", prefix_layers));
  }
  if (union_experts < std::max<int64_t>(1, model->config().num_experts_per_tok)) {
    return absl::InvalidArgumentError(absl::StrCat("--union-experts must be at least the experts per token (",
                                                   model->config().num_experts_per_tok, "), got ", union_experts));
  }
  ASSIGN_OR_RETURN(const int64_t stream_mib, args.GetInt("stream-mib", 512));
  const nlohmann::json bandwidth = MeasureReadBandwidth(stream_mib, 5);
  const nlohmann::json mac_rate = MeasureMacRate(5);
  const double bw = bandwidth["bytes_per_second"].get<double>(), macs = mac_rate["macs_per_second"].get<double>();
  std::fprintf(stderr, "batch: read bandwidth %.2f GB/s, %.1f GMAC/s\n", bw / 1e9, macs / 1e9);
  out["read_bandwidth"] = bandwidth;
  out["mac_rate"] = mac_rate;
  out["rates"] = rates;
  out["new_tokens"] = new_tokens;
  nlohmann::json al = nlohmann::json::array();
  for (int64_t k = 0; k <= max_k; ++k) al.push_back(AcceptanceLength(rates, k));
  out["acceptance_length"] = al;
  const UnionCosting u = MakeUnionCosting(*model, union_experts, bw);
  out["model"] = {{"bench_model", bench_model},
                  {"name", std::filesystem::path(dir).lexically_normal().filename().string()},
                  {"weight_bytes", model->weights().weight_bytes},
                  {"expert_bytes", u.expert_bytes},
                  {"moe_layers", u.moe_layers},
                  {"mtp_moe", u.mtp_moe},
                  {"union_experts", u.experts},
                  {"prefix_layers", prefix_layers}};

  nlohmann::json points = nlohmann::json::array();
  for (int64_t n : contexts) {
    ASSIGN_OR_RETURN(nlohmann::json costs, MeasureCosts(*model, n, batches, max_k + 1, reps, seed, bw, macs, u, prefix_layers));
    ASSIGN_OR_RETURN(nlohmann::json draft,
                     MeasureDraftCosts(*model, n, batches, al.back().get<double>() - 1, reps, seed, u));
    const nlohmann::json predicted = Predict(CostTable(costs, draft, /*at_union=*/false),
                                             CostTable(costs, draft, /*at_union=*/true), batches, rates, max_k,
                                             new_tokens, seed);
    nlohmann::json point = {{"context", n}, {"costs", costs}, {"draft", draft}, {"predicted", predicted}};
    if (std::find(e2e_contexts.begin(), e2e_contexts.end(), n) != e2e_contexts.end()) {
      ASSIGN_OR_RETURN(point["e2e"], RunEndToEnd(*model, n, batches, max_k, new_tokens, rates, e2e_reps, e2e_cost_reps, seed, bw, macs, u));
    }
    std::fprintf(stderr, "batch: N=%lld done (%.0f s so far)\n", static_cast<long long>(n), NowSeconds() - start);
    points.push_back(std::move(point));
  }
  out["points"] = points;
  out["e2e_acceptance"] = "SYNTHETIC";
  out["elapsed_seconds"] = NowSeconds() - start;
  const std::string json_path = args.Get("json", "build/results/batch.json");
  RETURN_IF_ERROR(WriteTextFile(json_path, out.dump(1) + "\n"));
  std::fprintf(stderr, "batch: wrote %s\n", json_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) { return mtpspec::bench::ExitCode("batch_bench", mtpspec::bench::Run(argc, argv)); }
