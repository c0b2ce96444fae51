// Acceptance benchmark: real MTP acceptance of a trained checkpoint on held-out text.
//
// For each context length N, S windows of N held-out tokens are drawn (alternating corpora); each
// window is prefilled once and then, for every MTP variant × acceptance rule × temperature × k, the
// model generates G tokens with its own MTP head drafting. Per-position acceptance (unconditional
// and conditional) and the mean acceptance length are pooled over windows with 95% percentile-
// bootstrap intervals (windows resampled). Output: JSON (all cells) and CSV (one row per position).
//
//   build/release/bench/accept_bench [--model DIR] [--heldout build/heldout] [--quick] ...
//   build/release/bench/accept_bench --help
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/acceptance_stats.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "core/parallel.h"
#include "spec/generator.h"
#include "pipeline/mtp_drafter.h"
#include "core/cli_args.h"

namespace mtpspec::bench {
namespace {

constexpr char kUsage[] = R"(accept_bench: MTP acceptance on held-out text, with 95% bootstrap intervals.

  --model DIR           trained checkpoint (default models/glm-tiny-mtp if present, else build/pilot/out)
  --heldout DIR         prose.npy and code.npy from research/train/make_heldout.py (default build/heldout)
  --tokens A.npy,B.npy  token files instead of --heldout (int32/int64, 1-D)
  --random-tokens N     N seeded random ids instead of text (smoke tests)
  --contexts LIST       prompt lengths N (default 32,64,96,128,192,256,384,480)
  --k LIST              draft lengths (default 1,2,3,4,5)
  --windows S           windows per context, alternating corpora (default 16)
  --new-tokens G        tokens generated per window (default 32)
  --chain LIST --hidden LIST --index-share LIST   MTP variants (default normed,raw / post,pre / exact,shared)
  --variant-grid one-at-a-time|full   base variant plus single flips (default), or the full product
  --rules LIST          sampler-equality,rejection (rejection uses sampled drafts)
  --temperatures LIST   default 0,0.7,1 (rejection at T=0 equals sampler-equality: skipped unless --greedy-rejection)
  --bootstrap B         bootstrap resamples (default 1000)   --seed S   --threads N
  --json PATH --csv PATH   outputs (default build/results/accept.{json,csv})
  --quick               CI-sized grid (2 contexts, k 1 and 3, 2 windows, 8 tokens, base variant)
)";

struct Variant {
  MtpChain chain = MtpChain::kNormed;
  MtpHidden hidden = MtpHidden::kPostNorm;
  MtpIndexShare share = MtpIndexShare::kExact;
  std::string Name() const {
    return absl::StrCat(MtpChainName(chain), "/", MtpHiddenName(hidden), "/",
                        MtpIndexShareName(share));
  }
};

struct RuleAt {
  AcceptRule rule;
  double temperature;
};

struct Settings {
  std::string model_dir;
  std::vector<int64_t> contexts, ks;
  int64_t windows = 8, new_tokens = 24, bootstrap = 1000;
  uint64_t seed = 1;
  std::vector<Variant> variants;
  std::vector<RuleAt> rules;
  std::string json_path, csv_path;
};

std::string DefaultModelDir() {
  if (std::filesystem::exists("models/glm-tiny-mtp/config.json")) return "models/glm-tiny-mtp";
  return "build/pilot/out";
}

absl::StatusOr<std::vector<Variant>> ParseVariants(const CliArgs& args, bool quick) {
  std::vector<MtpChain> chains;
  std::vector<MtpHidden> hiddens;
  std::vector<MtpIndexShare> shares;
  for (const std::string& s : SplitList(args.Get("chain", quick ? "normed" : "normed,raw"))) {
    ASSIGN_OR_RETURN(MtpChain c, ParseMtpChain(s));
    chains.push_back(c);
  }
  for (const std::string& s : SplitList(args.Get("hidden", quick ? "post" : "post,pre"))) {
    ASSIGN_OR_RETURN(MtpHidden h, ParseMtpHidden(s));
    hiddens.push_back(h);
  }
  for (const std::string& s : SplitList(args.Get("index-share", quick ? "exact" : "exact,shared"))) {
    ASSIGN_OR_RETURN(MtpIndexShare share, ParseMtpIndexShare(s));
    shares.push_back(share);
  }
  if (chains.empty() || hiddens.empty() || shares.empty()) return absl::InvalidArgumentError("empty variant list");
  std::vector<Variant> out;
  const std::string grid = args.Get("variant-grid", "one-at-a-time");
  if (grid == "full") {
    for (MtpChain c : chains)
      for (MtpHidden h : hiddens)
        for (MtpIndexShare s : shares) out.push_back({c, h, s});
  } else if (grid == "one-at-a-time") {
    const Variant base{chains[0], hiddens[0], shares[0]};
    out.push_back(base);
    for (size_t i = 1; i < chains.size(); ++i) out.push_back({chains[i], base.hidden, base.share});
    for (size_t i = 1; i < hiddens.size(); ++i) out.push_back({base.chain, hiddens[i], base.share});
    for (size_t i = 1; i < shares.size(); ++i) out.push_back({base.chain, base.hidden, shares[i]});
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--variant-grid must be one-at-a-time or full, got \"", grid, "\""));
  }
  return out;
}

absl::StatusOr<Settings> ParseSettings(const CliArgs& args) {
  Settings s;
  const bool quick = args.Has("quick");
  s.model_dir = args.Get("model", DefaultModelDir());
  ASSIGN_OR_RETURN(s.contexts, ParseIntList("contexts", args.Get("contexts", quick ? "32,96" : "32,64,96,128,192,256,384,480")));
  ASSIGN_OR_RETURN(s.ks, ParseIntList("k", args.Get("k", quick ? "1,3" : "1,2,3,4,5")));
  ASSIGN_OR_RETURN(s.windows, args.GetInt("windows", quick ? 2 : 16));
  ASSIGN_OR_RETURN(s.new_tokens, args.GetInt("new-tokens", quick ? 8 : 32));
  ASSIGN_OR_RETURN(s.bootstrap, args.GetInt("bootstrap", quick ? 200 : 1000));
  ASSIGN_OR_RETURN(s.seed, args.GetUint64("seed", 1));
  ASSIGN_OR_RETURN(s.variants, ParseVariants(args, quick));
  ASSIGN_OR_RETURN(std::vector<double> temps, ParseDoubleList("temperatures", args.Get("temperatures", quick ? "0,1" : "0,0.7,1")));
  for (const std::string& name : SplitList(args.Get("rules", "sampler-equality,rejection"))) {
    ASSIGN_OR_RETURN(AcceptRule rule, ParseAcceptRule(name));
    if (!IsLossless(rule)) return absl::InvalidArgumentError("--rules takes sampler-equality and/or rejection");
    for (double t : temps) {
      // At T = 0 rejection with (one-hot) sampled drafts is sampler-equality; skipped unless asked.
      if (rule == AcceptRule::kRejection && t == 0.0 && !args.Has("greedy-rejection")) continue;
      s.rules.push_back({rule, t});
    }
  }
  if (s.windows < 1 || s.new_tokens < 2 || s.bootstrap < 0) {
    return absl::InvalidArgumentError("--windows must be >= 1, --new-tokens >= 2, --bootstrap >= 0");
  }
  for (int64_t k : s.ks) {
    if (k < 1 || k > kMaxDraftTokens) return absl::InvalidArgumentError(absl::StrCat("--k values must be in [1, ", kMaxDraftTokens, "]"));
  }
  s.json_path = args.Get("json", "build/results/accept.json");
  s.csv_path = args.Get("csv", "build/results/accept.csv");
  return s;
}

absl::StatusOr<std::vector<TokenCorpus>> LoadCorpora(const CliArgs& args, int64_t vocab, uint64_t seed) {
  std::vector<TokenCorpus> out;
  if (args.Has("random-tokens")) {
    ASSIGN_OR_RETURN(int64_t n, args.GetInt("random-tokens", 0));
    out.push_back(RandomTokenCorpus(n, vocab, seed));
    return out;
  }
  if (!args.Has("tokens")) {
    return LoadHeldoutCorpora(args.Get("heldout", "build/heldout"), vocab, "--tokens FILE.npy / --random-tokens N");
  }
  for (const std::string& p : SplitList(args.Get("tokens"))) {
    ASSIGN_OR_RETURN(TokenCorpus c, LoadTokenCorpus(p, vocab));
    out.push_back(std::move(c));
  }
  return out;
}

// Cell key: (context, variant index, rule index, k); value: per-corpus window counts.
using CellKey = std::tuple<int64_t, size_t, size_t, int64_t>;
using CellWindows = std::map<std::string, std::vector<WindowCounts>>;

nlohmann::json ModelJson(const Model& model, const std::string& dir) {
  const ModelConfig& c = model.config();
  return {{"dir", dir},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"index_topk", c.index_topk},
          {"max_position_embeddings", c.max_position_embeddings}};
}

std::string CsvRow(const nlohmann::json& cell, int64_t i) {
  auto f = [](const nlohmann::json& v) { return v.is_null() ? std::string() : absl::StrFormat("%.6f", v.get<double>()); };
  const nlohmann::json& u = cell["unconditional"][i];
  const nlohmann::json& c = cell["conditional"][i];
  const nlohmann::json& al = cell["mean_acceptance_length"];
  return absl::StrCat(cell["context"].get<int64_t>(), ",", cell["regime"].get<std::string>(), ",",
                      cell["k"].get<int64_t>(), ",", cell["variant"].get<std::string>(), ",",
                      cell["rule"].get<std::string>(), ",", cell["temperature"].get<double>(), ",",
                      cell["corpus"].get<std::string>(), ",", cell["windows"].get<int64_t>(), ",",
                      cell["cycles"].get<int64_t>(), ",", i + 1, ",", f(u["mean"]), ",", f(u["lo"]), ",", f(u["hi"]),
                      ",", f(c["mean"]), ",", f(c["lo"]), ",", f(c["hi"]), ",", cell["reached_per_pos"][i].get<int64_t>(),
                      ",", f(al["mean"]), ",", f(al["lo"]), ",", f(al["hi"]), "\n");
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(CliArgs args,
                   CliArgs::Parse(argc, argv, 1,
                                  {"model", "heldout", "tokens", "random-tokens", "contexts", "k", "windows",
                                   "new-tokens", "chain", "hidden", "index-share", "variant-grid", "rules",
                                   "temperatures", "bootstrap", "seed", "json", "csv", "threads"},
                                  {"quick", "help", "greedy-rejection"}));
  if (args.Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  if (!args.positional().empty()) return absl::InvalidArgumentError("accept_bench takes no positional arguments");
  RETURN_IF_ERROR(ApplyThreadsOption(args));
  ASSIGN_OR_RETURN(Settings s, ParseSettings(args));
  const nlohmann::json run_info = RunInfo(argc, argv);
  ASSIGN_OR_RETURN(auto model, Model::Load(s.model_dir));
  if (!model->has_mtp()) return absl::FailedPreconditionError(absl::StrCat(s.model_dir, " has no MTP layer"));
  const ModelConfig& config = model->config();
  int64_t k_max = 0, n_max = 0;
  for (int64_t k : s.ks) k_max = std::max(k_max, k);
  for (int64_t n : s.contexts) {
    // Positions 0 … N + G + k: the prompt, the generated tokens and the last verify block.
    if (n < 1 || n + s.new_tokens + k_max + 1 > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--contexts: N = ", n, " with ", s.new_tokens, " generated tokens and k = ", k_max, " needs positions up to ",
          n + s.new_tokens + k_max, ", beyond the model's limit (max_position_embeddings = ",
          config.max_position_embeddings, " in ", s.model_dir, "/config.json)"));
    }
    n_max = std::max(n_max, n);
  }
  ASSIGN_OR_RETURN(std::vector<TokenCorpus> corpora, LoadCorpora(args, config.vocab_size, s.seed));
  const int64_t capacity = n_max + s.new_tokens + kMaxDraftTokens + 2;
  ASSIGN_OR_RETURN(auto target, PrefixCachedTarget::Create(*model, capacity, AttentionOptions{}));
  std::vector<std::unique_ptr<MtpDrafter>> drafters;
  for (const Variant& v : s.variants) {
    MtpOptions options;
    options.chain = v.chain;
    options.hidden = v.hidden;
    options.index_share = v.share;
    ASSIGN_OR_RETURN(auto d, MtpDrafter::Create(*model, capacity, options));
    drafters.push_back(std::move(d));
  }

  std::map<CellKey, CellWindows> cells;
  std::mt19937_64 rng(s.seed);
  const double start = NowSeconds();
  int64_t window_index = 0, generations = 0;
  for (int64_t n : s.contexts) {
    for (int64_t w = 0; w < s.windows; ++w, ++window_index) {
      const TokenCorpus& corpus = corpora[w % corpora.size()];
      ASSIGN_OR_RETURN(std::vector<int32_t> prompt, SampleWindow(corpus, n, rng));
      RETURN_IF_ERROR(target->Fill(prompt, /*chunk=*/n));
      for (size_t v = 0; v < s.variants.size(); ++v) {
        for (size_t r = 0; r < s.rules.size(); ++r) {
          for (int64_t k : s.ks) {
            GenerateOptions options;
            options.max_new_tokens = s.new_tokens;
            options.k = k;
            options.stop_at_eos = false;
            options.accept.rule = s.rules[r].rule;
            options.accept.sampling.temperature = s.rules[r].temperature;
            options.accept.sampling.seed = s.seed * 1000003 + static_cast<uint64_t>(window_index);
            options.sample_drafts = s.rules[r].rule == AcceptRule::kRejection;
            ASSIGN_OR_RETURN(GenerateResult result, Generate(*target, drafters[v].get(), prompt, options));
            cells[{n, v, r, k}][corpus.name].push_back(CountsFromStats(result.stats, k));
            ++generations;
          }
        }
      }
    }
    std::fprintf(stderr, "accept_bench: N = %lld done (%lld generations, %.0f s, load %.2f)\n",
                 static_cast<long long>(n), static_cast<long long>(generations), NowSeconds() - start,
                 LoadAverages()[0]);
  }

  nlohmann::json out_cells = nlohmann::json::array();
  std::string csv =
      "context,regime,k,variant,rule,temperature,corpus,windows,cycles,position,uncond,uncond_lo,uncond_hi,"
      "cond,cond_lo,cond_hi,reached,mean_len,mean_len_lo,mean_len_hi\n";
  for (const auto& [key, by_corpus] : cells) {
    const auto& [n, v, r, k] = key;
    std::map<std::string, std::vector<WindowCounts>> groups = by_corpus;
    if (by_corpus.size() > 1) {
      std::vector<WindowCounts>& all = groups["all"];
      for (const auto& [name, list] : by_corpus) all.insert(all.end(), list.begin(), list.end());
    }
    for (const auto& [name, list] : groups) {
      nlohmann::json cell = ToJson(Summarize(list, k, s.bootstrap, s.seed + static_cast<uint64_t>(k)));
      cell["context"] = n;
      cell["regime"] = n <= config.index_topk ? "dense" : "sparse";
      cell["k"] = k;
      cell["variant"] = s.variants[v].Name();
      cell["chain"] = MtpChainName(s.variants[v].chain);
      cell["hidden"] = MtpHiddenName(s.variants[v].hidden);
      cell["index_share"] = MtpIndexShareName(s.variants[v].share);
      cell["rule"] = AcceptRuleName(s.rules[r].rule);
      cell["temperature"] = s.rules[r].temperature;
      cell["sample_drafts"] = s.rules[r].rule == AcceptRule::kRejection;
      cell["corpus"] = name;
      for (int64_t i = 0; i < k; ++i) csv += CsvRow(cell, i);
      out_cells.push_back(std::move(cell));
    }
  }
  nlohmann::json corpora_json = nlohmann::json::array();
  for (const TokenCorpus& c : corpora) corpora_json.push_back({{"name", c.name}, {"path", c.path}, {"tokens", c.ids.size()}});
  nlohmann::json variants_json = nlohmann::json::array();
  for (const Variant& v : s.variants) variants_json.push_back(v.Name());
  nlohmann::json root = {
      {"benchmark", "accept_bench"},
      {"run", run_info},
      {"model", ModelJson(*model, s.model_dir)},
      {"corpora", corpora_json},
      {"settings",
       {{"contexts", s.contexts}, {"k", s.ks}, {"windows_per_context", s.windows}, {"new_tokens", s.new_tokens},
        {"variants", variants_json}, {"quick", args.Has("quick")}, {"seed", s.seed},
        {"regime_rule", "dense when N <= index_topk (every key selected at the prompt end), else sparse"}}},
      {"ci_method", absl::StrCat("95% percentile bootstrap over windows (", s.bootstrap,
                                 " resamples); point estimates pool counts over windows")},
      {"cells", out_cells},
      {"generations", generations},
      {"elapsed_seconds", NowSeconds() - start},
      {"loadavg_end", LoadAverages()},
  };
  RETURN_IF_ERROR(WriteTextFile(s.json_path, root.dump(1) + "\n"));
  RETURN_IF_ERROR(WriteTextFile(s.csv_path, csv));
  std::fprintf(stderr, "accept_bench: %zu cells, %lld generations in %.1f s -> %s, %s\n", out_cells.size(),
               static_cast<long long>(generations), NowSeconds() - start, s.json_path.c_str(), s.csv_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mtpspec::bench

int main(int argc, char** argv) {
  return mtpspec::bench::ExitCode("accept_bench", mtpspec::bench::Run(argc, argv));
}
