#include "bench/tradeoff_point.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "bench/acceptance_stats.h"
#include "bench/e2e_speed.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/verify_cost.h"
#include "core/parallel.h"
#include "spec/adaptive_k.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec::bench {
namespace {

// The path Model::Forward picks for a verify of `rows` rows at context n (gather for L ≤ 16 > K).
AttentionPath AutoPath(int64_t n, int64_t rows, int64_t k_top) {
  return n + rows <= k_top ? AttentionPath::kDense : AttentionPath::kGather;
}

struct PathSeries {
  AttentionPath path;
  std::vector<CostSamples> by_rows;     // [max_rows]
  std::vector<int64_t> attended_rows;   // [max_rows] Σ_layers |∪ selections|
  bool Valid(int64_t n, int64_t rows, int64_t k_top) const {
    return path != AttentionPath::kDense || n + rows <= k_top;
  }
};

// Plain, each fixed k and adaptive k, interleaved over `e2e_reps` repetitions. Every drafting
// configuration gets the MtpDrafter exactly as Generate uses it: its prompt extend runs at the
// prefill's Observe, before the steady-state window TimedGenerate measures. Adaptive k runs twice:
// "auto" with a fresh controller per request (each request explores on its own), and
// "auto (carried)" with one controller carried across this context's runs, as a server would keep
// it (GenerateOptions::adaptive_controller; its first run does the learning and is timed too).
absl::StatusOr<std::vector<SpeedResult>> RunEndToEnd(const Model& model, PrefixCachedTarget& target,
                                                     const std::vector<int32_t>& prompt, const PointSettings& s,
                                                     const MtpOptions& mtp_options) {
  ASSIGN_OR_RETURN(auto drafter, MtpDrafter::Create(model, target.capacity(), mtp_options));
  struct Config {
    std::string label;
    int64_t k;
    bool adaptive;
    bool carried = false;  // adaptive with the controller carried across runs
  };
  std::vector<Config> configs = {{"plain", 0, false}};
  for (int64_t k : s.e2e_k) configs.push_back({absl::StrCat("k=", k), k, false});
  const int64_t k_auto = std::max<int64_t>(1, static_cast<int64_t>(s.rates.empty() ? 5 : s.rates.size()));
  if (s.adaptive) {
    configs.push_back({"auto", k_auto, true});
    configs.push_back({kAutoCarriedLabel, k_auto, true, true});
  }
  const auto carried_controller = std::make_shared<AdaptiveK>(k_auto);
  // An A/A control: plain decoding again, interleaved like the others. Its ratio to "plain" is the
  // run-to-run noise that any speedup here must be read against.
  configs.push_back({kPlainControlLabel, 0, false});
  std::vector<SpeedResult> totals(configs.size());
  auto options_for = [&s, &carried_controller](const Config& config, uint64_t seed) {
    GenerateOptions options;
    options.max_new_tokens = s.new_tokens;
    options.k = config.k;
    options.adaptive_k = config.adaptive;
    if (config.carried) options.adaptive_controller = carried_controller;
    options.stop_at_eos = false;
    options.accept.rule = s.rule;
    options.accept.synthetic_rates = s.rates;
    options.accept.sampling.seed = seed;
    options.accept.sampling.temperature = s.e2e_temperature;
    return options;
  };
  // An untimed warm-up run: the first decode after the fill runs cold (without it, a --quick run's
  // A/A control came out 1.2x faster than the plain run it repeats).
  RETURN_IF_ERROR(TimedGenerate(target, nullptr, prompt, options_for(configs.front(), s.seed), "warm-up").status());
  auto run = [&](size_t i, uint64_t seed) {
    Drafter* d = configs[i].k == 0 ? nullptr : drafter.get();
    return TimedGenerate(target, d, prompt, options_for(configs[i], seed), configs[i].label);
  };
  // Each repetition starts one configuration later, so a load that drifts during a repetition
  // does not always fall on the same configurations.
  for (int64_t rep = 0; rep < s.e2e_reps; ++rep) {
    for (size_t j = 0; j < configs.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(rep)) % configs.size();
      ASSIGN_OR_RETURN(SpeedResult r, run(i, s.seed + static_cast<uint64_t>(rep)));
      Accumulate(r, &totals[i]);
    }
  }
  // The paired auto-vs-plain repetitions: plain, both autos and the A/A control, rotated likewise.
  std::vector<size_t> paired;  // config indices
  for (size_t i = 0; i < configs.size(); ++i) {
    if (configs[i].k == 0 || configs[i].adaptive) paired.push_back(i);
  }
  for (int64_t rep = 0; rep < s.g5_reps && paired.size() >= 3; ++rep) {
    for (size_t j = 0; j < paired.size(); ++j) {
      const size_t i = paired[(j + static_cast<size_t>(rep)) % paired.size()];
      ASSIGN_OR_RETURN(SpeedResult r, run(i, s.seed + static_cast<uint64_t>(s.e2e_reps + rep)));
      totals[i].run_tokens_per_second.push_back(r.tokens_per_second);
    }
  }
  return totals;
}

// P(m = j accepted drafts) for j = 0 … k under conditional rates a_1 … a_k.
std::vector<double> AcceptedDistribution(const std::vector<double>& rates, int64_t k) {
  std::vector<double> p(k + 1, 0.0);
  double reach = 1.0;
  for (int64_t j = 0; j < k; ++j) {
    const double a = j < static_cast<int64_t>(rates.size()) ? rates[j] : 0.0;
    p[j] = reach * (1 - a);
    reach *= a;
  }
  p[k] = reach;
  return p;
}

}  // namespace

constexpr char kTimingRule[] =
    "each timed piece follows, untimed, what precedes it in decoding: a plain step before T1; the "
    "previous cycle's verify and draft before Tv(L); a verify of m + 1 rows before the draft's extend of "
    "m + 1 rows and head";

struct PointState {
  const Model* model = nullptr;
  PointSettings s;
  std::vector<int32_t> prompt;
  int64_t n = 0, k_top = 0;
  nlohmann::json out;
  std::unique_ptr<PrefixCachedTarget> target;
  std::unique_ptr<MtpModule> mtp;
  std::unique_ptr<KvCache> mtp_cache;
  MtpOptions mtp_options;
  // [blocks][max_rows] the verify block's tokens: a different random block per repetition, so the
  // median Tv(L) and the bound's routed-expert count average over routings (one fixed block can
  // touch noticeably more or fewer experts than a typical one, and each N would get its own bias).
  std::vector<std::vector<int32_t>> row_blocks;
  int64_t round = 0;  // MeasureRound calls so far: round r uses row_blocks[r % blocks]
  int32_t draft_token = 0;
  std::vector<PathSeries> series;
  CostSamples mtp_step;
  std::vector<CostSamples> mtp_extend;  // [max_rows] the drafter's extend of 1 … max_rows pairs
  CostSamples mtp_head;                 // the head on one row (the first draft)
  // [max_rows] tokens of the untimed work that precedes each timed piece (RunPredecessor): other
  // tokens than the timed block's, so that their top-k selections differ as consecutive steps' do.
  std::vector<int32_t> predecessor_block;

  const float* LastHidden() const {
    return target->prefix_hidden_postnorm().data<float>() + (n - 1) * model->config().hidden_size;
  }
  const PathSeries& Series(AttentionPath p) const {
    for (const PathSeries& ps : series) {
      if (ps.path == p) return ps;
    }
    return series.front();
  }
};

ContextPoint::ContextPoint(std::unique_ptr<PointState> state) : state_(std::move(state)) {}
ContextPoint::~ContextPoint() = default;

absl::StatusOr<std::unique_ptr<ContextPoint>> ContextPoint::Prepare(const Model& model,
                                                                   const std::vector<int32_t>& prompt,
                                                                   const PointSettings& settings) {
  auto st = std::make_unique<PointState>();
  PointState& p = *st;
  p.model = &model;
  p.s = settings;
  p.prompt = prompt;
  const ModelConfig& config = model.config();
  p.n = static_cast<int64_t>(prompt.size());
  p.k_top = config.index_topk;
  const int64_t capacity = p.n + std::max(p.s.max_rows, p.s.new_tokens + kMaxDraftTokens + 2) + 1;
  p.out = {{"context", p.n}, {"index_topk", p.k_top}, {"loadavg_start", LoadAverages()}};

  // Caches: the trunk through the prefix target, the MTP layer for the draft-step timing.
  ASSIGN_OR_RETURN(p.target, PrefixCachedTarget::Create(model, capacity, LongContextAttention()));
  double fill_seconds = 0;
  RETURN_IF_ERROR(p.target->Fill(prompt, p.s.fill_chunk, &fill_seconds));
  p.mtp_options.attention = LongContextAttention();
  ASSIGN_OR_RETURN(p.mtp, MtpModule::Create(model));
  ASSIGN_OR_RETURN(p.mtp_cache, p.mtp->NewCache(capacity));
  const double mtp_fill_start = NowSeconds();
  const float* hidden = p.target->prefix_hidden_postnorm().data<float>();  // [N, H]
  RETURN_IF_ERROR(FillMtpCache(*p.mtp, *p.mtp_cache, hidden, prompt, p.n, p.s.fill_chunk, p.mtp_options));
  p.out["fill_seconds"] = fill_seconds;
  p.out["mtp_fill_seconds"] = NowSeconds() - mtp_fill_start;
  p.out["cache_bytes"] = p.target->cache().BytesPerToken() * capacity;
  std::fprintf(stderr, "tradeoff: N = %lld filled in %.1f s (MTP %.1f s), load %.2f\n", static_cast<long long>(p.n),
               fill_seconds, p.out["mtp_fill_seconds"].get<double>(), LoadAverages()[0]);

  std::mt19937_64 rng(p.s.seed + static_cast<uint64_t>(p.n));
  std::uniform_int_distribution<int32_t> dist(2, static_cast<int32_t>(config.vocab_size - 1));
  p.row_blocks.assign(std::max<int64_t>(1, p.s.reps), std::vector<int32_t>(p.s.max_rows));
  for (std::vector<int32_t>& block : p.row_blocks) {
    for (int32_t& t : block) t = dist(rng);
  }
  p.draft_token = dist(rng);
  p.predecessor_block.resize(p.s.max_rows);
  for (int32_t& t : p.predecessor_block) t = dist(rng);
  for (AttentionPath path : {AttentionPath::kGather, AttentionPath::kMask, AttentionPath::kDense}) {
    p.series.push_back(PathSeries{path, std::vector<CostSamples>(p.s.max_rows), std::vector<int64_t>(p.s.max_rows, 0)});
  }
  // Warm-up, which also captures the selections for the KV byte count (the mean over the blocks).
  const int64_t blocks = static_cast<int64_t>(p.row_blocks.size());
  for (PathSeries& ps : p.series) {
    for (int64_t L = 1; L <= p.s.max_rows; ++L) {
      if (!ps.Valid(p.n, L, p.k_top)) continue;
      int64_t attended = 0;
      for (const std::vector<int32_t>& block : p.row_blocks) {
        CostSamples scratch;
        std::vector<TopK> topk;
        const auto tokens = std::span<const int32_t>(block).first(L);
        RETURN_IF_ERROR(TimedVerify(model, p.target->cache(), tokens, p.n, ps.path, &scratch, &topk));
        attended += ps.path == AttentionPath::kDense ? config.num_hidden_layers * (p.n + L)
                                                     : AttendedRowsUnion(topk, p.n, L);
      }
      ps.attended_rows[L - 1] = (attended + blocks / 2) / blocks;
    }
  }
  p.out["timing"] = kTimingRule;
  CostSamples scratch, scratch_head;
  RETURN_IF_ERROR(TimedMtpStep(*p.mtp, *p.mtp_cache, p.LastHidden(), p.draft_token, p.n, p.mtp_options, &scratch));
  p.mtp_extend.resize(p.s.max_rows);
  for (int64_t rows = 1; rows <= p.s.max_rows; ++rows) {
    RETURN_IF_ERROR(TimedMtpExtend(*p.mtp, *p.mtp_cache, hidden, prompt, p.draft_token, p.n, rows, p.mtp_options,
                                   &scratch, &scratch_head));
  }
  return std::unique_ptr<ContextPoint>(new ContextPoint(std::move(st)));
}

namespace {

// Runs, untimed, what precedes a verify of L rows in decoding, so that each timed piece starts
// from the caches (weights, KV rows, TLB) that decoding leaves it: before a plain step (L = 1), the
// previous plain step; before a verify of L rows, the previous cycle's verify of L rows on the same
// path, then the drafter's extend and head and its L − 2 chained steps. Same position, other tokens.
// Timing every piece after an eviction instead makes T1 a cold step: on a contended host its gather
// at 32K took 11.9 ms against 4.7 ms for L = 2 in the same rounds, and T1 exceeded the plain decode
// step by 2x (19-34 ms against 16-18 ms).
absl::Status RunPredecessor(PointState& p, int64_t L, AttentionPath path) {
  CostSamples scratch, scratch_head;
  const auto tokens = std::span<const int32_t>(p.predecessor_block).first(L);
  RETURN_IF_ERROR(TimedVerify(*p.model, p.target->cache(), tokens, p.n, path, &scratch));
  if (L == 1) return absl::OkStatus();
  const float* hidden = p.target->prefix_hidden_postnorm().data<float>();  // [N, H]
  RETURN_IF_ERROR(TimedMtpExtend(*p.mtp, *p.mtp_cache, hidden, p.prompt, p.draft_token, p.n, 1, p.mtp_options,
                                 &scratch, &scratch_head));
  for (int64_t j = 0; j + 2 < L; ++j) {
    RETURN_IF_ERROR(TimedMtpStep(*p.mtp, *p.mtp_cache, p.LastHidden(), p.draft_token, p.n, p.mtp_options, &scratch));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ContextPoint::MeasureRound() {
  PointState& p = *state_;
  const std::vector<int32_t>& block = p.row_blocks[p.round++ % static_cast<int64_t>(p.row_blocks.size())];
  for (int64_t L = 1; L <= p.s.max_rows; ++L) {
    for (PathSeries& ps : p.series) {
      if (!ps.Valid(p.n, L, p.k_top)) continue;
      const auto tokens = std::span<const int32_t>(block).first(L);
      RETURN_IF_ERROR(RunPredecessor(p, L, L == 1 ? AutoPath(p.n, 1, p.k_top) : ps.path));
      RETURN_IF_ERROR(TimedVerify(*p.model, p.target->cache(), tokens, p.n, ps.path, &ps.by_rows[L - 1]));
    }
  }
  // The extend over the m + 1 committed rows and the head that gives the first draft follow the
  // cycle's verify (timed here after an untimed verify of that many rows on the default path); the
  // chained steps follow them, with the MTP layer and head just read, so the step is timed right
  // after an extend and head.
  const float* hidden = p.target->prefix_hidden_postnorm().data<float>();  // [N, H]
  for (int64_t rows = 1; rows <= p.s.max_rows; ++rows) {
    CostSamples scratch;
    const auto tokens = std::span<const int32_t>(p.predecessor_block).first(rows);
    RETURN_IF_ERROR(TimedVerify(*p.model, p.target->cache(), tokens, p.n, AutoPath(p.n, rows, p.k_top), &scratch));
    RETURN_IF_ERROR(TimedMtpExtend(*p.mtp, *p.mtp_cache, hidden, p.prompt, p.draft_token, p.n, rows, p.mtp_options,
                                   &p.mtp_extend[rows - 1], &p.mtp_head));
  }
  return TimedMtpStep(*p.mtp, *p.mtp_cache, p.LastHidden(), p.draft_token, p.n, p.mtp_options, &p.mtp_step);
}

absl::StatusOr<nlohmann::json> ContextPoint::Finish() {
  PointState& p = *state_;
  const Model& model = *p.model;
  const PointSettings& s = p.s;
  const int64_t n = p.n, k_top = p.k_top;
  nlohmann::json& out = p.out;
  std::vector<int64_t> routed(s.max_rows, 0);  // [max_rows] experts touched, mean over the blocks
  for (const std::vector<int32_t>& block : p.row_blocks) {
    ASSIGN_OR_RETURN(std::vector<int64_t> touched, RoutedExpertsTouched(model, p.target->cache(), block, n));
    for (int64_t L = 0; L < s.max_rows; ++L) routed[L] += touched[L];
  }
  const int64_t blocks = static_cast<int64_t>(p.row_blocks.size());
  for (int64_t& r : routed) r = (r + blocks / 2) / blocks;
  auto bytes_of = [&](const PathSeries& ps, int64_t L) {
    const bool scoring = ps.path != AttentionPath::kDense && n + L > k_top;
    return ComputeVerifyBytes(model, n, L, scoring, ps.attended_rows[L - 1], routed[L - 1]);
  };
  const PathSeries& t1_series = p.Series(AutoPath(n, 1, k_top));
  const double t1 = t1_series.by_rows[0].MedianSeconds();
  const double bw = s.read_bandwidth;
  const double bound1 = bytes_of(t1_series, 1).Total(true) / bw;
  out["t1_seconds"] = t1;
  out["t1_path"] = AttentionPathName(t1_series.path);
  out["t1_bound_seconds"] = bound1;
  out["routed_experts_touched"] = routed;

  nlohmann::json paths = nlohmann::json::object();
  for (const PathSeries& ps : p.series) {
    nlohmann::json list = nlohmann::json::array();
    for (int64_t L = 1; L <= s.max_rows; ++L) {
      if (!ps.Valid(n, L, k_top)) continue;
      const CostSamples& cs = ps.by_rows[L - 1];
      const VerifyBytes b = bytes_of(ps, L);
      const double tv = cs.MedianSeconds();
      // Bytes plus the extra rows' multiply-adds, which do not hide under the weight stream on a CPU
      // (each core either streams or computes): bytes(L) / BW + (L − 1) · MACs per row / MAC rate.
      const bool scoring = ps.path != AttentionPath::kDense && n + L > k_top;
      const double extra_compute =
          s.mac_rate > 0 ? static_cast<double>(L - 1) * VerifyRowMacs(model, n, scoring) / s.mac_rate : 0.0;
      list.push_back({{"rows", L},
                      {"seconds", tv},
                      {"samples", cs.seconds},
                      {"components", ComponentsJson(cs.MedianComponents())},
                      {"attended_rows", ps.attended_rows[L - 1]},
                      {"bytes",
                       {{"dense_weights", b.dense_weights}, {"routed_expected", b.routed_expected},
                        {"routed_actual", b.routed_actual}, {"kv_latent", b.kv_latent}, {"kv_indexer", b.kv_indexer},
                        {"total_actual", b.Total(true)}, {"total_expected", b.Total(false)}}},
                      {"bound_seconds", b.Total(true) / bw},
                      {"r", tv / t1},
                      {"r_bound", b.Total(true) / bw / bound1},
                      {"extra_rows_compute_seconds", extra_compute},
                      {"r_bound_with_compute", (b.Total(true) / bw + extra_compute) / bound1},
                      {"r_bound_expected_routing", b.Total(false) / bytes_of(t1_series, 1).Total(false)}});
    }
    paths[AttentionPathName(ps.path)] = list;
  }
  out["paths"] = paths;
  out["dense_valid_rows"] = std::max<int64_t>(0, std::min(s.max_rows, k_top - n));
  const double c = p.mtp_step.MedianSeconds() / t1;
  out["mtp_step"] = {{"seconds", p.mtp_step.MedianSeconds()},
                     {"samples", p.mtp_step.seconds},
                     {"components", ComponentsJson(p.mtp_step.MedianComponents())},
                     {"c", c}};

  nlohmann::json extend_json = nlohmann::json::array();
  for (int64_t rows = 1; rows <= s.max_rows; ++rows) {
    extend_json.push_back({{"rows", rows}, {"seconds", p.mtp_extend[rows - 1].MedianSeconds()},
                           {"samples", p.mtp_extend[rows - 1].seconds}});
  }
  const double head = p.mtp_head.MedianSeconds();
  out["mtp_extend"] = extend_json;
  out["mtp_head"] = {{"seconds", head}, {"samples", p.mtp_head.seconds}};

  // r_k on the path a verify of k + 1 rows takes by default.
  auto r_k = [&](int64_t k) { return p.Series(AutoPath(n, k + 1, k_top)).by_rows[k].MedianSeconds() / t1; };
  // The draft as MtpDrafter runs it, per cycle and in T1 units: the extend over the m + 1 rows the
  // previous cycle committed (m distributed as the rates say), the head for the first draft, then
  // k − 1 chained steps.
  auto draft_cost = [&](int64_t k) {
    const std::vector<double> accepted = AcceptedDistribution(s.rates, k);
    double extend = 0;
    for (int64_t m = 0; m <= k; ++m) extend += accepted[m] * p.mtp_extend[std::min(m, s.max_rows - 1)].MedianSeconds();
    return (extend + head + static_cast<double>(k - 1) * p.mtp_step.MedianSeconds()) / t1;
  };
  nlohmann::json predicted = nlohmann::json::array();
  const int64_t k_pred = std::min<int64_t>(s.max_rows - 1, static_cast<int64_t>(s.rates.size()));
  for (int64_t k = 1; k <= k_pred; ++k) {
    const double el = ExpectedLength(s.rates, k);
    predicted.push_back({{"k", k},
                         {"expected_length", el},
                         {"r_k", r_k(k)},
                         {"c", c},
                         {"draft_cost", draft_cost(k)},
                         {"speedup", el / (r_k(k) + draft_cost(k))},
                         {"speedup_k_c", el / (r_k(k) + k * c)}});
  }
  out["predicted"] = predicted;
  out["rates"] = s.rates;
  out["rates_source"] = s.rates_source;

  ASSIGN_OR_RETURN(std::vector<SpeedResult> e2e, RunEndToEnd(model, *p.target, p.prompt, s, p.mtp_options));
  nlohmann::json e2e_json = nlohmann::json::array();
  const double plain_tps = e2e.front().tokens_per_second;
  for (const SpeedResult& r : e2e) {
    nlohmann::json j = ToJson(r);
    j["speedup"] = plain_tps > 0 ? r.tokens_per_second / plain_tps : 0.0;
    e2e_json.push_back(std::move(j));
  }
  out["e2e"] = e2e_json;
  out["e2e_acceptance"] = s.rule == AcceptRule::kSynthetic ? "SYNTHETIC" : AcceptRuleName(s.rule);
  out["loadavg_end"] = LoadAverages();
  std::fprintf(stderr, "tradeoff: N = %lld finished, load %.2f\n", static_cast<long long>(n), LoadAverages()[0]);
  nlohmann::json result = std::move(out);
  state_.reset();  // frees the caches
  return result;
}

absl::StatusOr<std::vector<nlohmann::json>> MeasurePoints(const Model& model,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          const PointSettings& settings) {
  std::vector<std::unique_ptr<ContextPoint>> points;
  for (const std::vector<int32_t>& prompt : prompts) {
    ASSIGN_OR_RETURN(auto point, ContextPoint::Prepare(model, prompt, settings));
    points.push_back(std::move(point));
  }
  for (int64_t rep = 0; rep < settings.reps; ++rep) {
    for (auto& point : points) RETURN_IF_ERROR(point->MeasureRound());
  }
  // While every context's caches are alive: how much of the process transparent huge pages back.
  const nlohmann::json memory = ProcessMemory();
  std::vector<nlohmann::json> out;
  for (auto& point : points) {
    ASSIGN_OR_RETURN(nlohmann::json j, point->Finish());
    j["memory_after_cost_rounds"] = memory;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json MergeEndToEnd(const std::vector<nlohmann::json>& points) {
  std::map<std::string, std::pair<double, double>> sums;  // label → (tokens, seconds)
  std::map<std::string, std::pair<double, double>> acc;   // label → (Σ AL·drafts, drafts)
  std::map<std::string, nlohmann::json> runs;              // label → every run's tokens/s, window by window
  std::vector<std::string> order;
  for (const nlohmann::json& p : points) {
    for (const nlohmann::json& r : p["e2e"]) {
      const std::string label = r["label"];
      if (!sums.count(label)) order.push_back(label);
      sums[label].first += r["steady_tokens"].get<double>();
      sums[label].second += r["steady_seconds"].get<double>();
      const double drafts = r["num_drafts"].get<double>();
      acc[label].first += r["mean_acceptance_length"].get<double>() * drafts;
      acc[label].second += drafts;
      if (!runs.count(label)) runs[label] = nlohmann::json::array();
      if (r.contains("run_tokens_per_second")) {
        for (const nlohmann::json& v : r["run_tokens_per_second"]) runs[label].push_back(v);
      }
    }
  }
  nlohmann::json out = nlohmann::json::array();
  const double plain = sums["plain"].second > 0 ? sums["plain"].first / sums["plain"].second : 0.0;
  for (const std::string& label : order) {
    const double tps = sums[label].second > 0 ? sums[label].first / sums[label].second : 0.0;
    out.push_back({{"label", label},
                   {"tokens_per_second", tps},
                   {"speedup", plain > 0 ? tps / plain : 0.0},
                   {"mean_acceptance_length", acc[label].second > 0 ? acc[label].first / acc[label].second : 1.0},
                   {"steady_tokens", sums[label].first},
                   {"steady_seconds", sums[label].second},
                   {"run_tokens_per_second", runs[label]}});
  }
  return out;
}

}  // namespace mtpspec::bench
