// Trade-off benchmark: where does MTP speculative decoding pay on a memory-bound MLA + DSA + MoE
// model? For each context N it measures T1(N), Tv(L, N) per attention path (components, bytes-
// touched bound against the read bandwidth measured in the same run), the draft-step cost c, the
// predicted speedup S(k, N) = E[L] / (r_k + k·c) with E[L] from accept_bench's measured acceptance,
// and the measured end-to-end speedup with those rates imposed (AcceptRule::kSynthetic — SYNTHETIC
// acceptance, labelled so everywhere). A second section runs the trained model at N = 512 with its
// REAL acceptance (sampler-equality, T = 0).
//
//   build/release/bench/tradeoff_bench [--quick] [--accept-json build/results/accept.json] ...
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_model.h"
#include "bench/run_info.h"
#include "bench/stream.h"
#include "bench/token_source.h"
#include "bench/tradeoff_point.h"
#include "bench/verify_cost.h"
#include "core/dtype.h"
#include "kernels/linear.h"
#include "core/parallel.h"
#include "spec/generator.h"
#include "core/cli_args.h"

namespace mtpspec::bench {
namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] = R"(tradeoff_bench: verify cost, draft cost and speedup vs context length.

  --model-dir DIR       bench model (default build/bench_model; written by bench/bench_model.cc if missing)
  --long-dir DIR        where the long-context view of it is made (default <model-dir>_long)
  --contexts LIST       N values (default 512,2048,8192,32768)   --dense-context N (default K-8; 0: off)
  --max-rows L          verify rows 1..L (default 8)   --reps R (default 7, interleaved over all N)   --fill-chunk C (default 512)
  --new-tokens G        tokens per end-to-end run (default 96)   --e2e-reps R (default 1)   --e2e-k LIST (1,2,3,4)
  --g5-reps R           further runs of plain, auto, auto (carried) and plain (A/A) only, for the paired auto-vs-plain check (default 0)
  --accept-json PATH    accept_bench output for E[L] and the synthetic rates (default build/results/accept.json)
  --accept-context N    which context's rates to use (default: the largest in the file)
  --rates LIST          conditional acceptance a_1,a_2,... instead of --accept-json
  --trained-dir DIR     trained model for the REAL-acceptance section (default models/glm-tiny-mtp, else pilot)
  --trained-context N   (default 8 x index_topk)   --trained-windows S (default 4)   --heldout DIR   --skip-trained
  --stream-mib M        read-bandwidth buffer (default 1024)   --threads N   --seed S
  --json PATH --csv PATH   (default build/results/tradeoff.{json,csv})   --quick   --help
)";

// A view of the bench model whose config allows long contexts: config.json rewritten with a larger
// max_position_embeddings (RoPE "default" does not depend on it), weight files symlinked.
absl::Status MakeLongContextView(const std::string& base, const std::string& view, int64_t max_positions,
                                 nlohmann::json* config_out) {
  ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(base + "/config.json"));
  config["max_position_embeddings"] = std::max<int64_t>(config["max_position_embeddings"].get<int64_t>(), max_positions);
  std::error_code ec;
  fs::create_directories(view, ec);
  if (ec) return absl::InternalError(absl::StrCat(view, ": ", ec.message()));
  for (const fs::directory_entry& e : fs::directory_iterator(base)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json") continue;
    const fs::path link = fs::path(view) / name;
    fs::remove(link, ec);
    fs::create_symlink(fs::absolute(e.path()), link, ec);
    if (ec) return absl::InternalError(absl::StrCat(link.string(), ": ", ec.message()));
  }
  *config_out = config;
  return WriteTextFile(view + "/config.json", config.dump(2) + "\n");
}

// Conditional acceptance of the reference cell: normed/post/exact, sampler-equality, T = 0, all
// corpora, the largest k, at `context` (−1: the largest context in the file).
absl::StatusOr<std::vector<double>> RatesFromAcceptJson(const std::string& path, int64_t context,
                                                        std::string* source) {
  ASSIGN_OR_RETURN(nlohmann::json root, ReadJsonFile(path));
  const nlohmann::json* best = nullptr;
  for (const nlohmann::json& cell : root["cells"]) {
    if (cell["variant"] != "normed/post/exact" || cell["rule"] != "sampler-equality" ||
        cell["temperature"].get<double>() != 0.0)
      continue;
    if (cell["corpus"] != "all" && root["corpora"].size() > 1) continue;
    if (context >= 0 && cell["context"].get<int64_t>() != context) continue;
    if (best == nullptr || cell["context"] > (*best)["context"] ||
        (cell["context"] == (*best)["context"] && cell["k"] > (*best)["k"])) {
      best = &cell;
    }
  }
  if (best == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": no normed/post/exact sampler-equality T=0 cell",
                                            context >= 0 ? absl::StrCat(" at context ", context) : ""));
  }
  std::vector<double> rates;
  for (const nlohmann::json& c : (*best)["conditional"]) rates.push_back(c["mean"].is_null() ? 0.0 : c["mean"].get<double>());
  *source = absl::StrCat(path, ": model ", root["model"]["dir"].get<std::string>(), ", context ",
                         (*best)["context"].get<int64_t>(), ", k ", (*best)["k"].get<int64_t>(),
                         ", normed/post/exact, sampler-equality, T=0, windows ", (*best)["windows"].get<int64_t>());
  return rates;
}

std::string CsvRows(const nlohmann::json& point, const std::string& model) {
  std::string csv;
  for (const auto& [path, list] : point["paths"].items()) {
    for (const nlohmann::json& e : list) {
      const nlohmann::json& c = e["components"];
      csv += absl::StrFormat("%s,%d,%s,%d,%.6g,%.6g,%.4f,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", model,
                             point["context"].get<int64_t>(), path, e["rows"].get<int64_t>(), e["seconds"].get<double>(),
                             e["bound_seconds"].get<double>(), e["r"].get<double>(), e["r_bound"].get<double>(),
                             c["indexer"].get<double>(), c["topk"].get<double>(), c["attention"].get<double>(),
                             c["attn_proj"].get<double>(), c["moe_mlp"].get<double>(), c["head"].get<double>(),
                             c["norms"].get<double>(), c["embed"].get<double>());
    }
  }
  return csv;
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1,
                                                {"model-dir", "long-dir", "contexts", "dense-context", "max-rows",
                                                 "reps", "fill-chunk", "new-tokens", "e2e-reps", "g5-reps", "e2e-k",
                                                 "accept-json", "accept-context", "rates", "trained-dir",
                                                 "trained-context", "trained-windows", "heldout", "stream-mib",
                                                 "threads", "seed", "json", "csv"},
                                                {"quick", "help", "skip-trained"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  const bool quick = args.Has("quick");
  const nlohmann::json run_info = RunInfo(argc, argv);
  const double start = NowSeconds();
  PointSettings ps;
  ASSIGN_OR_RETURN(std::vector<int64_t> contexts, ParseIntList("contexts", args.Get("contexts", quick ? "512,2048" : "512,2048,8192,32768")));
  ASSIGN_OR_RETURN(ps.max_rows, args.GetInt("max-rows", quick ? 5 : 8));
  ASSIGN_OR_RETURN(ps.reps, args.GetInt("reps", quick ? 3 : 7));
  ASSIGN_OR_RETURN(ps.fill_chunk, args.GetInt("fill-chunk", 512));
  ASSIGN_OR_RETURN(ps.new_tokens, args.GetInt("new-tokens", quick ? 24 : 96));
  ASSIGN_OR_RETURN(ps.e2e_reps, args.GetInt("e2e-reps", 1));
  ASSIGN_OR_RETURN(ps.g5_reps, args.GetInt("g5-reps", 0));
  ASSIGN_OR_RETURN(ps.e2e_k, ParseIntList("e2e-k", args.Get("e2e-k", "1,2,3,4")));
  ASSIGN_OR_RETURN(ps.seed, args.GetUint64("seed", 7));
  if (ps.max_rows < 2 || ps.reps < 1 || ps.fill_chunk < 1 || ps.new_tokens < 4 || ps.e2e_reps < 1 || ps.g5_reps < 0) {
    return absl::InvalidArgumentError(
        "--max-rows >= 2, --reps >= 1, --fill-chunk >= 1, --new-tokens >= 4, --e2e-reps >= 1, --g5-reps >= 0");
  }
  if (args.Has("rates")) {
    ASSIGN_OR_RETURN(ps.rates, ParseDoubleList("rates", args.Get("rates")));
    ps.rates_source = "--rates";
  } else {
    ASSIGN_OR_RETURN(int64_t ctx, args.GetInt("accept-context", -1));
    ASSIGN_OR_RETURN(ps.rates, RatesFromAcceptJson(args.Get("accept-json", "build/results/accept.json"), ctx,
                                                   &ps.rates_source));
  }
  for (double r : ps.rates) {
    if (!(r >= 0 && r <= 1)) return absl::InvalidArgumentError("acceptance rates must be in [0, 1]");
  }

  // The trained model and its held-out windows load before any measurement, so that a missing file
  // fails in seconds rather than after the bench model's runs (which take most of an hour).
  std::unique_ptr<Model> tmodel;
  std::string dir;
  int64_t tn = 0, windows = 0;
  std::vector<std::vector<int32_t>> tprompts;
  std::vector<std::string> names;
  if (!args.Has("skip-trained")) {
    dir = args.Get("trained-dir", fs::exists("models/glm-tiny-mtp/config.json") ? "models/glm-tiny-mtp"
                                                                                : "build/pilot/out");
    ASSIGN_OR_RETURN(tmodel, Model::Load(dir));
    ASSIGN_OR_RETURN(tn, args.GetInt("trained-context", 8 * tmodel->config().index_topk));
    ASSIGN_OR_RETURN(windows, args.GetInt("trained-windows", quick ? 1 : 4));
    if (windows < 1) return absl::InvalidArgumentError("--trained-windows must be >= 1");
    const std::string heldout = args.Get("heldout", "build/heldout");
    std::mt19937_64 rng(ps.seed);
    for (int64_t w = 0; w < windows; ++w) {
      const std::string file = heldout + (w % 2 == 0 ? "/prose.npy" : "/code.npy");
      ASSIGN_OR_RETURN(TokenCorpus corpus, LoadTokenCorpus(file, tmodel->config().vocab_size));
      ASSIGN_OR_RETURN(std::vector<int32_t> prompt, SampleWindow(corpus, tn, rng));
      tprompts.push_back(std::move(prompt));
      names.push_back(corpus.name);
    }
  }

  // The bench model, and a long-context view of it.
  const std::string base = args.Get("model-dir", DefaultBenchModelDir());
  bool generated = false;
  RETURN_IF_ERROR(EnsureBenchModel(base, &generated));
  int64_t n_max = 0;
  for (int64_t n : contexts) n_max = std::max(n_max, n);
  const int64_t needed = n_max + std::max(ps.max_rows, ps.new_tokens + kMaxDraftTokens + 2) + 2;
  const std::string long_dir = args.Get("long-dir", base + "_long");
  nlohmann::json long_config;
  RETURN_IF_ERROR(MakeLongContextView(base, long_dir, (needed + 1023) / 1024 * 1024, &long_config));
  ASSIGN_OR_RETURN(auto model, Model::Load(long_dir));
  const int64_t k_top = model->config().index_topk;
  ASSIGN_OR_RETURN(int64_t dense_context, args.GetInt("dense-context", quick ? 0 : k_top - ps.max_rows));
  if (dense_context > 0) contexts.insert(contexts.begin(), dense_context);

  nlohmann::json bandwidth_start;
  ASSIGN_OR_RETURN(int64_t stream_mib, args.GetInt("stream-mib", 1024));
  bandwidth_start = MeasureReadBandwidth(stream_mib, 5);
  ps.read_bandwidth = bandwidth_start["bytes_per_second"].get<double>();
  const nlohmann::json mac_rate = MeasureMacRate(5);
  ps.mac_rate = mac_rate["macs_per_second"].get<double>();
  std::fprintf(stderr, "tradeoff: Linear multiply-add rate %.1f GMAC/s (8 rows, cache-resident bf16)\n",
               ps.mac_rate / 1e9);
  std::fprintf(stderr, "tradeoff: read bandwidth %.2f GB/s; rates from %s\n", ps.read_bandwidth / 1e9,
               ps.rates_source.c_str());

  std::string csv = "model,context,path,rows,seconds,bound_seconds,r,r_bound,indexer,topk,attention,attn_proj,"
                    "moe_mlp,head,norms,embed\n";
  nlohmann::json points = nlohmann::json::array();
  ps.rule = AcceptRule::kSynthetic;
  ps.e2e_temperature = 1.0;  // varied tokens, as in real text (the trained model's section uses T = 0)
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : contexts) {
    prompts.push_back(RandomTokenCorpus(n, model->config().vocab_size, ps.seed + static_cast<uint64_t>(n)).ids);
  }
  ASSIGN_OR_RETURN(std::vector<nlohmann::json> measured, MeasurePoints(*model, prompts, ps));
  for (nlohmann::json& point : measured) {
    csv += CsvRows(point, "bench");
    points.push_back(std::move(point));
  }

  nlohmann::json trained = nullptr;
  if (tmodel != nullptr) {
    PointSettings ts = ps;
    ts.rule = AcceptRule::kSamplerEquality;  // REAL acceptance, T = 0
    ts.e2e_temperature = 0.0;
    ts.max_rows = std::min<int64_t>(ps.max_rows, 6);
    // The runs stay near N: on the tiny model the indexer's O(N) scoring is a large part of a step,
    // so runs of 1024 tokens from N = 512 (as before) decoded at a mean context of ~1K while T1 and
    // Tv were timed at 512. Runs of 2 x index_topk tokens (128) take ~0.03 s, so their noise is
    // averaged over many: 24 per window, interleaved.
    ts.new_tokens = std::min<int64_t>(2 * tmodel->config().index_topk,
                                      tmodel->config().max_position_embeddings - tn - kMaxDraftTokens - 2);
    ts.e2e_reps = std::max<int64_t>(ps.e2e_reps, quick ? 6 : 24);
    ts.g5_reps = 0;  // windows x e2e_reps paired runs already
    ASSIGN_OR_RETURN(std::vector<nlohmann::json> tlist, MeasurePoints(*tmodel, tprompts, ts));
    nlohmann::json tpoints = nlohmann::json::array();
    for (size_t w = 0; w < tlist.size(); ++w) {
      tlist[w]["corpus"] = names[w];
      csv += CsvRows(tlist[w], "trained");
      tpoints.push_back(tlist[w]);
    }
    trained = {{"dir", dir}, {"context", tn}, {"windows", windows}, {"acceptance", "REAL sampler-equality T=0"},
               {"new_tokens", ts.new_tokens}, {"e2e_reps", ts.e2e_reps},
               {"points", tpoints}, {"e2e_merged", MergeEndToEnd(tlist)}};
  }

  const nlohmann::json bandwidth_end = MeasureReadBandwidth(stream_mib, 5);
  nlohmann::json root = {
      {"benchmark", "tradeoff_bench"},
      {"run", run_info},
      {"bench_model", {{"dir", base}, {"long_context_view", long_dir}, {"generated_now", generated},
                       {"config", long_config}, {"cache_bytes_per_token", model->NewCache(1).value()->BytesPerToken()}}},
      {"read_bandwidth_start", bandwidth_start},
      {"read_bandwidth_end", bandwidth_end},
      {"mac_rate", mac_rate},
      {"acceptance_source", ps.rates_source},
      {"e2e_bench_model_acceptance", "SYNTHETIC (AcceptRule::kSynthetic with the rates above)"},
      {"settings", {{"contexts", contexts}, {"max_rows", ps.max_rows}, {"reps", ps.reps}, {"new_tokens", ps.new_tokens},
                    {"e2e_reps", ps.e2e_reps}, {"g5_reps", ps.g5_reps}, {"e2e_k", ps.e2e_k}, {"quick", quick}}},
      {"points", points},
      {"trained", trained},
      {"elapsed_seconds", NowSeconds() - start},
      {"loadavg_end", LoadAverages()},
  };
  const std::string json_path = args.Get("json", "build/results/tradeoff.json");
  const std::string csv_path = args.Get("csv", "build/results/tradeoff.csv");
  RETURN_IF_ERROR(WriteTextFile(json_path, root.dump(1) + "\n"));
  RETURN_IF_ERROR(WriteTextFile(csv_path, csv));
  std::fprintf(stderr, "tradeoff: done in %.0f s -> %s, %s\n", NowSeconds() - start, json_path.c_str(),
               csv_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) {
  return mtpspec::bench::ExitCode("tradeoff_bench", mtpspec::bench::Run(argc, argv));
}
