#include "bench/batch_costs.h"

#include <memory>
#include <random>
#include <span>
#include <utility>

#include "bench/bench_model.h"
#include "bench/prefix_target.h"
#include "bench/run_info.h"
#include "bench/token_source.h"
#include "bench/verify_cost.h"
#include "kernels/linear.h"
#include "mtp/mtp_chain.h"
#include "mtp/mtp_module.h"

namespace mtpspec::bench {
namespace {

struct Cell {
  int64_t batch = 0, rows_per_sequence = 0;
  std::vector<double> seconds;         // [reps]
  std::vector<double> prefix_seconds;  // [reps] the first prefix_layers trunk layers and the head
  int64_t experts_read = 0, expert_choices = 0;
};

}  // namespace

UnionCosting MakeUnionCosting(const Model& model, int64_t union_experts, double bandwidth) {
  const ModelConfig& c = model.config();
  UnionCosting u;
  u.own_experts = c.n_routed_experts;
  u.experts = union_experts > 0 ? union_experts : c.n_routed_experts;
  u.per_row = c.num_experts_per_tok;
  u.moe_layers = MoeLayerCount(model);
  u.mtp_moe = !model.weights().mtp.empty() && !model.weights().mtp.front().block.dense_mlp;
  u.expert_bytes = static_cast<double>(ExpertBytes(model));
  u.bandwidth = bandwidth;
  return u;
}


// The cost table at context n: T(B, L) for every B and L, interleaved over the repetitions; with
// prefix_layers > 0, also the forward of the same rows through only that many trunk layers and the
// head (so the rest, divided by their count, is one later layer's cost: a full-model projection).
absl::StatusOr<nlohmann::json> MeasureCosts(const Model& model, int64_t n, const std::vector<int64_t>& batches,
                                            int64_t max_rows, int64_t reps, uint64_t seed, double bandwidth,
                                            double mac_rate, const UnionCosting& u, int64_t prefix_layers) {
  const ModelConfig& c = model.config();
  const int64_t b_max = *std::max_element(batches.begin(), batches.end());
  std::vector<std::unique_ptr<KvCache>> caches;  // [b_max]
  for (int64_t s = 0; s < b_max; ++s) {
    ASSIGN_OR_RETURN(auto cache, model.NewCache(n + max_rows + 1));
    FillCacheRandom(*cache, n, seed + static_cast<uint64_t>(s));
    caches.push_back(std::move(cache));
  }
  const std::vector<int32_t> tokens = RandomTokenCorpus(b_max * max_rows, c.vocab_size, seed + 99).ids;
  std::vector<int64_t> positions;  // [max_rows] n … n + max_rows − 1
  for (int64_t r = 0; r < max_rows; ++r) positions.push_back(n + r);
  std::vector<Cell> cells;
  for (int64_t b : batches) {
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      Cell cell;
      cell.batch = b;
      cell.rows_per_sequence = rows;
      cells.push_back(cell);
    }
  }
  for (int64_t rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    for (Cell& cell : cells) {
      std::vector<BatchSequence> sequences;
      for (int64_t s = 0; s < cell.batch; ++s) {
        sequences.push_back({caches[s].get(),
                             std::span<const int32_t>(tokens.data() + s * max_rows, cell.rows_per_sequence),
                             std::span<const int64_t>(positions.data(), cell.rows_per_sequence)});
      }
      // The prefix forward (the first prefix_layers trunk layers and the head) runs before or
      // after the whole one by turns, so a drift of the machine's speed favours neither.
      double prefix_seconds = 0;
      auto run_prefix = [&]() -> absl::Status {
        if (prefix_layers <= 0) return absl::OkStatus();
        ForwardOptions options;
        options.trunk_layers = prefix_layers;
        const double start = NowSeconds();
        RETURN_IF_ERROR(model.ForwardBatch(sequences, options).status());
        prefix_seconds = NowSeconds() - start;
        for (int64_t s = 0; s < cell.batch; ++s) RETURN_IF_ERROR(caches[s]->Truncate(n));
        return absl::OkStatus();
      };
      if (rep % 2 == 1) RETURN_IF_ERROR(run_prefix());
      const double start = NowSeconds();
      ASSIGN_OR_RETURN(BatchForwardOutput out, model.ForwardBatch(sequences));
      const double seconds = NowSeconds() - start;
      for (int64_t s = 0; s < cell.batch; ++s) RETURN_IF_ERROR(caches[s]->Truncate(n));
      if (rep % 2 == 0) RETURN_IF_ERROR(run_prefix());
      if (rep == 0) continue;
      cell.seconds.push_back(seconds);
      if (prefix_layers > 0) cell.prefix_seconds.push_back(prefix_seconds);
      cell.experts_read = cell.expert_choices = 0;
      for (int64_t used : out.experts_used) {
        if (used == 0) continue;
        cell.experts_read += used;
        cell.expert_choices += out.rows * c.num_experts_per_tok;
      }
    }
  }
  const bool scoring = n + 1 > c.index_topk;
  nlohmann::json table = nlohmann::json::array();
  for (const Cell& cell : cells) {
    const int64_t rows = cell.batch * cell.rows_per_sequence;
    const int64_t attended = c.num_hidden_layers * std::min(n + cell.rows_per_sequence, c.index_topk);
    const VerifyBytes weights = ComputeVerifyBytes(model, n, rows, scoring, attended, cell.experts_read);
    const VerifyBytes one = ComputeVerifyBytes(model, n, cell.rows_per_sequence, scoring, attended, -1);
    const double bytes = static_cast<double>(weights.dense_weights + weights.routed_actual) +
                         static_cast<double>(cell.batch) * static_cast<double>(one.kv_latent + one.kv_indexer);
    const double macs = static_cast<double>(rows) * VerifyRowMacs(model, n, scoring);
    const double bound = std::max(bytes / bandwidth, macs / mac_rate);
    const double seconds = Median(cell.seconds);
    table.push_back({{"batch", cell.batch}, {"rows_per_sequence", cell.rows_per_sequence}, {"rows", rows},
                     {"seconds", seconds}, {"samples", cell.seconds}, {"experts_read", cell.experts_read},
                     {"expert_choices", cell.expert_choices}, {"bytes", bytes}, {"macs", macs},
                     {"bytes_seconds", bytes / bandwidth}, {"compute_seconds", macs / mac_rate},
                     {"bound_seconds", bound}, {"measured_over_bound", seconds / bound},
                     {"experts_at_union", static_cast<double>(u.moe_layers) * UnionCosting::Union(u.experts, u.per_row, rows)},
                     {"seconds_at_union",
                      seconds + u.ExtraSeconds(u.moe_layers, rows, static_cast<double>(cell.experts_read))}});
    if (prefix_layers > 0) {
      table.back()["prefix_seconds"] = Median(cell.prefix_seconds);
      table.back()["prefix_samples"] = cell.prefix_seconds;
    }
  }
  return table;
}

// The drafters' costs at context n: one batched MTP draft step D(B) (one chained step and its head for
// each of B chains, in one forward as MtpBatchDrafter runs them) and one batched extend X(B) of
// `accepted + 1` committed rows per chain (as MtpDraftChain::ProposeBatch runs the due extends) for
// every B, and one request's extend x of those rows alone.
absl::StatusOr<nlohmann::json> MeasureDraftCosts(const Model& model, int64_t n, const std::vector<int64_t>& batches,
                                                 double accepted, int64_t reps, uint64_t seed, const UnionCosting& u) {
  const int64_t H = model.config().hidden_size;
  ASSIGN_OR_RETURN(std::unique_ptr<MtpModule> mtp, MtpModule::Create(model));
  const std::vector<int32_t> prompt = RandomTokenCorpus(n, model.config().vocab_size, seed).ids;
  std::vector<float> hidden(n * H);  // [n, H]
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (float& v : hidden) v = unit(rng);
  MtpOptions options;
  options.attention = LongContextAttention();

  // The extend, on one cache filled by the module itself.
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> filled, mtp->NewCache(n + 8));
  RETURN_IF_ERROR(FillMtpCache(*mtp, *filled, hidden.data(), prompt, n, 512, options));
  const int64_t extend_rows = std::max<int64_t>(1, static_cast<int64_t>(std::lround(accepted + 1)));
  CostSamples extend, head;
  for (int64_t rep = 0; rep <= reps; ++rep) {
    RETURN_IF_ERROR(TimedMtpExtend(*mtp, *filled, hidden.data(), prompt, prompt[n - 1], n, extend_rows, options,
                                   &extend, &head));
  }
  extend.seconds.erase(extend.seconds.begin());  // the warm-up

  // D(B): B caches of n − 1 random pairs (the step's cost does not depend on their values).
  const int64_t b_max = *std::max_element(batches.begin(), batches.end());
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int64_t s = 0; s < b_max; ++s) {
    ASSIGN_OR_RETURN(auto cache, mtp->NewCache(n + 8));
    FillCacheRandom(*cache, n - 1, seed + 50 + static_cast<uint64_t>(s));
    caches.push_back(std::move(cache));
  }
  const int64_t position = n - 1;
  std::vector<std::vector<double>> samples(batches.size()), extend_samples(batches.size());
  std::vector<int64_t> extend_positions(extend_rows);  // [extend_rows] from n − 1 on
  for (int64_t r = 0; r < extend_rows; ++r) extend_positions[r] = n - 1 + r;
  for (int64_t rep = 0; rep <= reps; ++rep) {
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      // X(B): every chain's committed rows in one forward.
      std::vector<MtpSegment> extends(batches[bi]);
      for (int64_t s = 0; s < batches[bi]; ++s) {
        extends[s].cache = caches[s].get();
        extends[s].hidden = hidden.data() + s * H;  // [extend_rows, H]
        extends[s].tokens = std::span<const int32_t>(prompt.data() + s, extend_rows);
        extends[s].positions = extend_positions;
      }
      MtpOptions extend_options = options;  // as MtpDraftChain runs an extend chunk
      extend_options.attention = ExtendAttentionOptions(options);
      const double extend_start = NowSeconds();
      {
        const RowInvariantScope row_invariant;
        ASSIGN_OR_RETURN(std::vector<MtpStepOutput> out, mtp->ExtendBatch(extends, extend_options));
      }
      const double extend_seconds = NowSeconds() - extend_start;
      for (int64_t s = 0; s < batches[bi]; ++s) RETURN_IF_ERROR(caches[s]->Truncate(n - 1));
      if (rep > 0) extend_samples[bi].push_back(extend_seconds);

      std::vector<MtpSegment> segments(batches[bi]);
      for (int64_t s = 0; s < batches[bi]; ++s) {
        segments[s].cache = caches[s].get();
        segments[s].hidden = hidden.data() + s * H;
        segments[s].tokens = std::span<const int32_t>(prompt.data() + s, 1);
        segments[s].positions = std::span<const int64_t>(&position, 1);
      }
      const double start = NowSeconds();
      {
        const RowInvariantScope row_invariant;
        ASSIGN_OR_RETURN(std::vector<MtpStepOutput> out, mtp->ExtendBatch(segments, options));
        std::vector<float> normed(batches[bi] * H);  // [B, H]
        for (int64_t s = 0; s < batches[bi]; ++s) std::copy_n(out[s].normed.data<float>(), H, normed.data() + s * H);
        const Tensor logits = mtp->Logits(normed.data(), batches[bi]);  // [B, V]
      }
      const double seconds = NowSeconds() - start;
      for (int64_t s = 0; s < batches[bi]; ++s) RETURN_IF_ERROR(caches[s]->Truncate(n - 1));
      if (rep > 0) samples[bi].push_back(seconds);
    }
  }
  nlohmann::json steps = nlohmann::json::array();
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const double step = Median(samples[bi]), extend_b = Median(extend_samples[bi]);
    steps.push_back({{"batch", batches[bi]}, {"seconds", step}, {"samples", samples[bi]},
                     {"extend_seconds", extend_b}, {"extend_samples", extend_samples[bi]},
                     {"seconds_at_union", step + u.MtpExtraSeconds(batches[bi])},
                     {"extend_seconds_at_union", extend_b + u.MtpExtraSeconds(batches[bi] * extend_rows)}});
  }
  return nlohmann::json{{"draft_steps", steps}, {"extend_seconds", extend.MedianSeconds()},
                        {"extend_rows", extend_rows}};
}

// The cost table (bench/batch_schedule.h) of a MeasureCosts table and its MeasureDraftCosts, with
// their own costs or those at the --union-experts union.
BatchCostTable CostTable(const nlohmann::json& costs, const nlohmann::json& draft, bool at_union) {
  const char* t_key = at_union ? "seconds_at_union" : "seconds";
  BatchCostTable table;
  for (const nlohmann::json& step : draft["draft_steps"]) table.batches.push_back(step["batch"].get<int64_t>());
  std::sort(table.batches.begin(), table.batches.end());
  for (int64_t b : table.batches) {
    std::vector<std::pair<int64_t, double>> by_rows;  // (L, T(B, L))
    for (const nlohmann::json& cell : costs) {
      if (cell["batch"] == b) by_rows.push_back({cell["rows_per_sequence"].get<int64_t>(), cell[t_key].get<double>()});
    }
    std::sort(by_rows.begin(), by_rows.end());
    std::vector<double>& row = table.verify.emplace_back();
    for (const auto& [rows, seconds] : by_rows) row.push_back(seconds);
    for (const nlohmann::json& step : draft["draft_steps"]) {
      if (step["batch"] != b) continue;
      table.draft_step.push_back(step[t_key].get<double>());
      table.extend.push_back(step[at_union ? "extend_seconds_at_union" : "extend_seconds"].get<double>());
    }
  }
  return table;
}

}  // namespace mtpspec::bench
