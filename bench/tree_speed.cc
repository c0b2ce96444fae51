#include "bench/tree_speed.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/e2e_speed.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "core/limits.h"
#include "core/status.h"
#include "spec/generator.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec::bench {
namespace {

// A results entry's [depth][rank] table, checked.
absl::StatusOr<std::vector<std::vector<double>>> RatesOf(const nlohmann::json& result, const std::string& path) {
  const std::string where = absl::StrCat(path, ": ", result.value("mode", "?"), " ", result.value("shape", "?"));
  if (!result.contains("synthetic_tree_rates") || !result["synthetic_tree_rates"].is_array() ||
      result["synthetic_tree_rates"].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has no synthetic_tree_rates (rerun bench/report/tree_report.py to record them)"));
  }
  std::vector<std::vector<double>> table;
  for (const nlohmann::json& row : result["synthetic_tree_rates"]) {
    if (!row.is_array() || row.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": an empty rate row"));
    std::vector<double>& out = table.emplace_back();
    for (const nlohmann::json& v : row) {
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 1.0)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": a rate outside [0, 1]: ", v.dump()));
      }
      out.push_back(v.get<double>());
    }
  }
  return table;
}

}  // namespace

absl::StatusOr<std::vector<TreeSpeedConfig>> TreeSpeedConfigsFromReport(const std::string& path, const std::string& mode,
                                                                        const std::vector<int64_t>& rows) {
  ASSIGN_OR_RETURN(const nlohmann::json root, ReadJsonFile(path));
  if (!root.contains("results") || !root["results"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no \"results\" list (not a tree report run)"));
  }
  std::vector<TreeSpeedConfig> configs;
  for (int64_t L : rows) {
    const nlohmann::json* chain = nullptr;
    const nlohmann::json* best = nullptr;
    for (const nlohmann::json& r : root["results"]) {
      if (r.value("mode", "") != mode || r.value("rows", int64_t{0}) != L) continue;
      const std::string kind = r.value("kind", "");
      if (kind == "chain") chain = &r;
      if (kind == "static" && (best == nullptr || r.value("mean_acceptance_length", 0.0) >
                                                      best->value("mean_acceptance_length", 0.0))) {
        best = &r;
      }
    }
    if (chain == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no chain of L = ", L, " rows in mode \"", mode, "\""));
    }
    for (const nlohmann::json* r : {chain, best}) {
      if (r == nullptr) continue;  // L = 2: the one-node tree is the chain
      TreeSpeedConfig c;
      c.kind = (*r)["kind"].get<std::string>();
      c.shape = (*r)["shape"].get<std::string>();
      c.rows = L;
      c.source_acceptance_length = r->value("mean_acceptance_length", 0.0);
      ASSIGN_OR_RETURN(c.rates, RatesOf(*r, path));
      if (c.kind == "chain") {
        c.k = L - 1;
      } else {
        ASSIGN_OR_RETURN(c.tree.branching, ParseTreeBranching(c.shape, absl::StrCat(path, ": shape")));
        if (c.tree.nodes() != L - 1) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": tree ", c.shape, " has ", c.tree.nodes(),
                                                         " nodes, not L - 1 = ", L - 1));
        }
      }
      configs.push_back(std::move(c));
    }
  }
  return configs;
}

absl::StatusOr<nlohmann::json> MeasureTreeSpeed(const Model& model, const std::vector<int32_t>& prompt,
                                                const std::vector<TreeSpeedConfig>& configs,
                                                const TreeSpeedSettings& s) {
  ASSIGN_OR_RETURN(auto target, PrefixCachedTarget::Create(model, static_cast<int64_t>(prompt.size()) + s.new_tokens + kMaxVerifyRows,
                                                           LongContextAttention()));
  double fill_seconds = 0;
  RETURN_IF_ERROR(target->Fill(prompt, s.fill_chunk, &fill_seconds));
  MtpOptions mtp_options;
  mtp_options.attention = LongContextAttention();
  ASSIGN_OR_RETURN(auto drafter, MtpDrafter::Create(model, target->capacity(), mtp_options));

  // Run list: plain, each configuration, and plain again (the A/A control).
  struct Run {
    std::string label;
    const TreeSpeedConfig* config = nullptr;  // null: plain decoding
  };
  std::vector<Run> runs = {{"plain", nullptr}};
  for (const TreeSpeedConfig& c : configs) runs.push_back({absl::StrCat(c.kind, " ", c.shape), &c});
  runs.push_back({"plain (A/A)", nullptr});
  auto options_for = [&s](const TreeSpeedConfig* c, uint64_t seed) {
    GenerateOptions o;
    o.max_new_tokens = s.new_tokens;
    o.stop_at_eos = false;
    o.accept.sampling.temperature = s.temperature;
    o.accept.sampling.seed = seed;
    if (c == nullptr) return o;
    o.accept.rule = AcceptRule::kSynthetic;
    if (c->kind == "chain") {
      o.k = c->k;
      for (const std::vector<double>& row : c->rates) o.accept.synthetic_rates.push_back(row[0]);
    } else {
      o.tree = c->tree;
      o.accept.synthetic_tree_rates = c->rates;
    }
    return o;
  };
  // An untimed warm-up, then the repetitions, each starting one run later so that a drifting load
  // does not always fall on the same configurations.
  RETURN_IF_ERROR(TimedGenerate(*target, nullptr, prompt, options_for(nullptr, s.seed), "warm-up").status());
  std::vector<SpeedResult> totals(runs.size());
  for (int64_t rep = 0; rep < s.reps; ++rep) {
    for (size_t j = 0; j < runs.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(rep)) % runs.size();
      Drafter* d = runs[i].config == nullptr ? nullptr : drafter.get();
      ASSIGN_OR_RETURN(SpeedResult r, TimedGenerate(*target, d, prompt, options_for(runs[i].config, s.seed + rep),
                                                    runs[i].label));
      Accumulate(r, &totals[i]);
    }
  }
  const double plain = totals.front().tokens_per_second;
  nlohmann::json out = {{"context", static_cast<int64_t>(prompt.size())},
                        {"fill_seconds", fill_seconds},
                        {"plain_tokens_per_second", plain},
                        {"plain_control_ratio", totals.back().tokens_per_second / plain}};
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 1; i + 1 < runs.size(); ++i) {
    const TreeSpeedConfig& c = *runs[i].config;
    const SpeedResult& r = totals[i];
    nlohmann::json entry = ToJson(r);
    entry["kind"] = c.kind;
    entry["shape"] = c.shape;
    entry["rows"] = c.rows;
    entry["speedup"] = r.tokens_per_second / plain;
    entry["source_acceptance_length"] = c.source_acceptance_length;
    // Depths drafted per cycle with drafts (a tree cut short by the token budget drafts fewer).
    int64_t depths = 0;
    for (int64_t v : r.stats.drafted_per_pos) depths += v;
    entry["mean_depth"] = r.stats.num_drafts > 0 ? static_cast<double>(depths) / r.stats.num_drafts : 0.0;
    list.push_back(std::move(entry));
  }
  out["configs"] = std::move(list);
  return out;
}

}  // namespace mtpspec::bench
