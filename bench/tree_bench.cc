// Tree cost benchmark: what a tree cycle costs on the bench model, against a chain of the same rows.
//
// For each context N (a cache filled to N with random rows; a forward's cost does not depend on
// their values) and L = 1 … --max-rows:
//   * verify: one Model::Forward of L rows as a chain (positions N … N+L−1) and as a tree of the same
//     L rows (the pending token and L − 1 nodes, each node with up to --width children, filled
//     breadth-first, at positions N + depth under its tree mask), both timed against the plain step
//     (L = 1), interleaved over --reps;
//   * drafting: one MTP draft depth over R = 1 … --max-width nodes: the module's step over R rows
//     under a tree mask (each row at the same position, seeing the committed pairs and itself) and the
//     head over those R rows, as MtpDraftChain::ProposeTree runs each depth.
// r(L) = T_verify(L) / T(1) and d(R) = T_depth(R) / T(1) go to the JSON; bench/report/tree_report.py
// prices a tree cycle as r_tree(L) + Σ_depth d(frontier width) with them.
//
// With --e2e-from (a tree report run of the trained model), each N also times real decoding
// (bench/tree_speed.h): plain, and for each L the chain and the trained model's best static tree,
// accepting with SYNTHETIC acceptance at the rates the trained model showed for that shape, so the
// report can set the measured speedup beside the one its cost model predicts.
//
//   build/release/bench/tree_bench [--contexts 512,2048,8192] [--max-rows 16] [--width 4]
//       [--max-width 8] [--reps 7] [--json build/results/tree_costs.json]
//       [--e2e-from build/results/tree.json [--e2e-mode "T = 0.0"] [--e2e-rows 2,...,16]
//        [--new-tokens 96] [--e2e-reps 3] [--e2e-temperature 1]]
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "attention/tree_mask.h"
#include "bench/bench_model.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "bench/tree_speed.h"
#include "bench/verify_cost.h"
#include "core/cli_args.h"
#include "core/parallel.h"
#include "mtp/mtp_module.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(tree_bench: the verify and drafting costs of token trees against chains.

  --model-dir DIR      bench model (default build/bench_model; written if missing)
  --contexts LIST      N values (default 512,2048,8192)   --max-rows L (default 16)   --reps R (default 7)
  --width W            children per node of the measured tree (default 4)
  --max-width R        MTP draft depths of 1 … R nodes (default 8)
  --threads N   --seed S   --json PATH (default build/results/tree_costs.json)   --help
  --e2e-from PATH      a tree report run (bench/report/tree_report.py --json): also time decoding with
                       SYNTHETIC acceptance at its rates, for the chain and its best static tree per L
  --e2e-mode M         its mode to take the rates from (default "T = 0.0")   --e2e-rows LIST (default 2..16)
  --new-tokens G (default 96)   --e2e-reps R (default 3)   --e2e-temperature T (default 1: the target's draws)
)";

// Parents of a tree of `rows` rows (row 0 the root), each row with up to `width` children, filled
// breadth-first: row r's parent is (r − 1) / width. [rows]
std::vector<int32_t> BreadthFirstParents(int64_t rows, int64_t width) {
  std::vector<int32_t> parents = {-1};
  for (int64_t r = 1; r < rows; ++r) parents.push_back(static_cast<int32_t>((r - 1) / width));
  return parents;
}

struct Timed {
  std::vector<double> seconds;  // [reps]
};

// The target's verify costs at context n: chain and tree of each L, interleaved.
absl::StatusOr<nlohmann::json> VerifyCosts(const Model& model, int64_t n, int64_t max_rows, int64_t width,
                                           int64_t reps, uint64_t seed) {
  ASSIGN_OR_RETURN(auto cache, model.NewCache(n + max_rows + 1));
  FillCacheRandom(*cache, n, seed);
  const std::vector<int32_t> tokens = RandomTokenCorpus(max_rows, model.config().vocab_size, seed + 1).ids;  // [L]
  std::vector<Timed> chain(max_rows + 1), tree(max_rows + 1);  // [L] by rows
  std::vector<TreeMask> masks(max_rows + 1);
  std::vector<std::vector<int64_t>> tree_positions(max_rows + 1);  // [L][rows] n + depth
  for (int64_t rows = 1; rows <= max_rows; ++rows) {
    const std::vector<int32_t> parents = BreadthFirstParents(rows, width);
    ASSIGN_OR_RETURN(masks[rows], TreeMaskFromParents(n, parents));
    for (int64_t depth : TreeDepths(parents)) tree_positions[rows].push_back(n + depth);
  }
  std::vector<int64_t> chain_positions;  // [max_rows] n … n + max_rows − 1
  for (int64_t r = 0; r < max_rows; ++r) chain_positions.push_back(n + r);
  for (int64_t rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      for (const bool as_tree : {false, true}) {
        if (as_tree && rows == 1) continue;  // a one-row tree is the plain step
        ForwardOptions options;
        options.attention.tree = as_tree ? &masks[rows] : nullptr;
        const std::span<const int32_t> block(tokens.data(), rows);
        const std::span<const int64_t> positions =
            as_tree ? std::span<const int64_t>(tree_positions[rows])
                    : std::span<const int64_t>(chain_positions.data(), rows);
        const double start = NowSeconds();
        ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(*cache, block, positions, options));  // logits [L, V]
        const double seconds = NowSeconds() - start;
        RETURN_IF_ERROR(cache->Truncate(n));
        if (rep > 0) (as_tree ? tree : chain)[rows].seconds.push_back(seconds);
      }
    }
  }
  const double plain = Median(chain[1].seconds);
  nlohmann::json table = nlohmann::json::array();
  for (int64_t rows = 1; rows <= max_rows; ++rows) {
    const double c = Median(chain[rows].seconds);
    const double t = rows == 1 ? c : Median(tree[rows].seconds);
    table.push_back({{"rows", rows}, {"chain_seconds", c}, {"tree_seconds", t}, {"r_chain", c / plain},
                     {"r_tree", t / plain}, {"chain_samples", chain[rows].seconds},
                     {"tree_samples", rows == 1 ? chain[rows].seconds : tree[rows].seconds}});
  }
  return table;
}

// One MTP draft depth over r nodes at context n: the step over r rows under a tree mask (every row
// at position n − 1, the first draft step's, seeing the n − 1 committed pairs and its own slot) and
// the head over them.
absl::StatusOr<nlohmann::json> DepthCosts(const Model& model, int64_t n, int64_t max_width, int64_t reps,
                                          uint64_t seed) {
  const int64_t H = model.config().hidden_size;
  ASSIGN_OR_RETURN(std::unique_ptr<MtpModule> mtp, MtpModule::Create(model));
  ASSIGN_OR_RETURN(auto cache, mtp->NewCache(n + max_width + 1));
  FillCacheRandom(*cache, n - 1, seed + 50);
  std::vector<float> hidden(max_width * H);  // [max_width, H] the nodes' chained inputs
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (float& v : hidden) v = unit(rng);
  const std::vector<int32_t> tokens = RandomTokenCorpus(max_width, model.config().vocab_size, seed + 2).ids;
  MtpOptions options;
  options.attention = LongContextAttention();
  std::vector<Timed> depth(max_width + 1);
  for (int64_t rep = 0; rep <= reps; ++rep) {
    for (int64_t r = 1; r <= max_width; ++r) {
      TreeMask mask;
      mask.first_slot = n - 1;
      std::vector<int64_t> positions;  // [r]
      for (int64_t i = 0; i < r; ++i) {
        mask.slots.push_back(n - 1 + i);
        mask.sees.push_back(uint64_t{1} << i);
        positions.push_back(n - 1);
      }
      MtpOptions step = options;
      step.attention.tree = &mask;
      const double start = NowSeconds();
      ASSIGN_OR_RETURN(MtpStepOutput out, mtp->Extend(*cache, hidden.data(), std::span<const int32_t>(tokens.data(), r),
                                                      positions, step));
      const Tensor logits = mtp->Logits(out.normed.data<float>(), r);  // [r, V]
      const double seconds = NowSeconds() - start;
      RETURN_IF_ERROR(cache->Truncate(n - 1));
      if (rep > 0) depth[r].seconds.push_back(seconds);
    }
  }
  nlohmann::json table = nlohmann::json::array();
  for (int64_t r = 1; r <= max_width; ++r) {
    table.push_back({{"nodes", r}, {"seconds", Median(depth[r].seconds)}, {"samples", depth[r].seconds}});
  }
  return table;
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args, CliArgs::Parse(argc, argv, 1,
                                                {"model-dir", "contexts", "max-rows", "width", "max-width", "reps",
                                                 "threads", "seed", "json", "e2e-from", "e2e-mode", "e2e-rows",
                                                 "new-tokens", "e2e-reps", "e2e-temperature"},
                                                {"help"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  ASSIGN_OR_RETURN(const std::vector<int64_t> contexts, ParseIntList("contexts", args.Get("contexts", "512,2048,8192")));
  ASSIGN_OR_RETURN(const int64_t max_rows, args.GetInt("max-rows", 16));
  ASSIGN_OR_RETURN(const int64_t width, args.GetInt("width", 4));
  ASSIGN_OR_RETURN(const int64_t max_width, args.GetInt("max-width", 8));
  ASSIGN_OR_RETURN(const int64_t reps, args.GetInt("reps", 7));
  ASSIGN_OR_RETURN(const uint64_t seed, args.GetUint64("seed", 7));
  if (max_rows < 1 || max_rows > TreeMask::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("--max-rows must be in [1, ", TreeMask::kMaxSlots, "], got ", max_rows));
  }
  if (width < 1) return absl::InvalidArgumentError(absl::StrCat("--width must be >= 1, got ", width));
  if (max_width < 1 || max_width > TreeMask::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("--max-width must be in [1, ", TreeMask::kMaxSlots, "], got ", max_width));
  }
  if (reps < 1) return absl::InvalidArgumentError(absl::StrCat("--reps must be >= 1, got ", reps));
  for (int64_t n : contexts) {
    if (n < 2) return absl::InvalidArgumentError(absl::StrCat("--contexts: every N must be >= 2, got ", n));
  }

  nlohmann::json out;
  out["run"] = RunInfo(argc, argv);
  const double start = NowSeconds();
  const std::string dir = args.Get("model-dir", DefaultBenchModelDir());
  RETURN_IF_ERROR(EnsureBenchModel(dir, nullptr));
  ASSIGN_OR_RETURN(auto model, Model::Load(dir));
  const int64_t max_positions = model->config().max_position_embeddings;
  for (int64_t n : contexts) {
    if (n + max_rows > max_positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("--contexts: N = ", n, " plus ", max_rows, " rows exceeds the model's ", max_positions, " positions"));
    }
  }
  std::vector<TreeSpeedConfig> e2e_configs;
  TreeSpeedSettings e2e;
  if (args.Has("e2e-from")) {
    ASSIGN_OR_RETURN(const std::vector<int64_t> e2e_rows,
                     ParseIntList("e2e-rows", args.Get("e2e-rows", "2,3,4,5,6,7,8,9,10,11,12,13,14,15,16")));
    for (int64_t L : e2e_rows) {
      if (L < 2 || L > TreeMask::kMaxSlots) {
        return absl::InvalidArgumentError(absl::StrCat("--e2e-rows: every L must be in [2, ", TreeMask::kMaxSlots, "], got ", L));
      }
    }
    ASSIGN_OR_RETURN(e2e_configs, TreeSpeedConfigsFromReport(args.Get("e2e-from"), args.Get("e2e-mode", "T = 0.0"), e2e_rows));
    ASSIGN_OR_RETURN(e2e.new_tokens, args.GetInt("new-tokens", 96));
    ASSIGN_OR_RETURN(e2e.reps, args.GetInt("e2e-reps", 3));
    ASSIGN_OR_RETURN(e2e.temperature, args.GetDouble("e2e-temperature", 1.0));
    e2e.seed = seed;
    if (e2e.new_tokens < 4) return absl::InvalidArgumentError(absl::StrCat("--new-tokens must be >= 4, got ", e2e.new_tokens));
    if (e2e.reps < 1) return absl::InvalidArgumentError(absl::StrCat("--e2e-reps must be >= 1, got ", e2e.reps));
    if (!(e2e.temperature >= 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("--e2e-temperature must be >= 0, got ", e2e.temperature));
    }
    for (int64_t n : contexts) {
      if (n + e2e.new_tokens + TreeMask::kMaxSlots > max_positions) {
        return absl::InvalidArgumentError(absl::StrCat("--contexts: N = ", n, " plus ", e2e.new_tokens,
                                                       " new tokens exceeds the model's ", max_positions, " positions"));
      }
    }
    out["e2e_source"] = {{"path", args.Get("e2e-from")}, {"mode", args.Get("e2e-mode", "T = 0.0")},
                         {"acceptance", "SYNTHETIC (AcceptTreeSynthetic / the chain rule at the trained model's rates)"}};
  }
  ASSIGN_OR_RETURN(out["model_config"], ReadJsonFile(dir + "/config.json"));
  out["width"] = width;
  nlohmann::json points = nlohmann::json::array();
  for (int64_t n : contexts) {
    ASSIGN_OR_RETURN(nlohmann::json verify, VerifyCosts(*model, n, max_rows, width, reps, seed));
    ASSIGN_OR_RETURN(nlohmann::json depths, DepthCosts(*model, n, max_width, reps, seed));
    const double plain = verify[0]["chain_seconds"].get<double>();
    for (auto& d : depths) d["d"] = d["seconds"].get<double>() / plain;
    std::fprintf(stderr, "tree: N=%lld plain %.2f ms, r_chain(%lld) %.2f, r_tree %.2f, d(1) %.2f, d(%lld) %.2f (%.0f s)\n",
                 static_cast<long long>(n), plain * 1e3, static_cast<long long>(max_rows),
                 verify.back()["r_chain"].get<double>(), verify.back()["r_tree"].get<double>(),
                 depths[0]["d"].get<double>(), static_cast<long long>(max_width), depths.back()["d"].get<double>(),
                 NowSeconds() - start);
    nlohmann::json point = {{"context", n}, {"verify", verify}, {"depth", depths}};
    if (!e2e_configs.empty()) {
      const std::vector<int32_t> prompt = RandomTokenCorpus(n, model->config().vocab_size, seed + static_cast<uint64_t>(n)).ids;
      ASSIGN_OR_RETURN(point["e2e"], MeasureTreeSpeed(*model, prompt, e2e_configs, e2e));
      std::fprintf(stderr, "tree: N=%lld end to end: plain %.1f tok/s, A/A %.3f (%.0f s)\n", static_cast<long long>(n),
                   point["e2e"]["plain_tokens_per_second"].get<double>(), point["e2e"]["plain_control_ratio"].get<double>(),
                   NowSeconds() - start);
    }
    points.push_back(std::move(point));
  }
  out["points"] = points;
  out["elapsed_seconds"] = NowSeconds() - start;
  const std::string json_path = args.Get("json", "build/results/tree_costs.json");
  RETURN_IF_ERROR(WriteTextFile(json_path, out.dump(1) + "\n"));
  std::fprintf(stderr, "tree: wrote %s\n", json_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) { return mtpspec::bench::ExitCode("tree_bench", mtpspec::bench::Run(argc, argv)); }
