#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/linear.h"

namespace mtpspec {

namespace {

// Below this many rows Linear uses its small-row kernel, where a batched call gives bitwise the
// same result as separate ones (kernels/linear.h), so batching changes timing only.
constexpr int64_t kBatchMaxRows = 24;

}  // namespace

void MlpForward(const MlpWeights& w, const float* x, int64_t rows, int64_t hidden, float* out) {
  const int64_t width = w.gate.shape[0];
  std::vector<float> gate(rows * width), up(rows * width);  // [rows, I]
  const LinearJob gate_up[] = {{x, rows, w.gate, gate.data()}, {x, rows, w.up, up.data()}};
  LinearBatch(gate_up);
  SiluMul(gate.data(), up.data(), rows * width);
  Linear(gate.data(), rows, w.down, out);
}

RoutingRule RoutingRuleOf(const ModelConfig& c) {
  RoutingRule rule;
  rule.experts = c.n_routed_experts;
  rule.top_k = c.num_experts_per_tok;
  rule.n_group = c.n_group;
  rule.topk_group = c.topk_group;
  rule.norm_topk_prob = c.norm_topk_prob;
  rule.scaling = static_cast<float>(c.routed_scaling_factor);
  return rule;
}

Routing RouteTokens(const MoeWeights& w, const ModelConfig& c, const float* x, int64_t rows) {
  const RoutingRule rule = RoutingRuleOf(c);
  const int64_t num_experts = rule.experts, k = rule.top_k;
  std::vector<float> logits(rows * num_experts);  // [rows, E]
  Linear(x, rows, w.router, logits.data());
  const float* bias = w.router_bias.data<float>();

  Routing routing;
  routing.per_row = k;
  routing.expert.resize(rows * k);
  routing.weight.resize(rows * k);
  std::vector<float> sigma(num_experts), choice(num_experts), group_score(rule.n_group);  // [E], [E], [G]
  std::vector<int> keep_group(rule.n_group), taken(num_experts);                         // [G], [E]
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < num_experts; ++e) {
      sigma[e] = 1.0f / (1.0f + std::exp(-logits[r * num_experts + e]));
      choice[e] = sigma[e] + bias[e];
    }
    SelectExperts(rule, sigma.data(), choice.data(), group_score.data(), keep_group.data(), taken.data(),
                  routing.expert.data() + r * k, routing.weight.data() + r * k);
  }
  return routing;
}

void MoeForward(const MoeWeights& w, const ModelConfig& c, const float* x, int64_t rows, float* out,
                int64_t* experts_used) {
  const int64_t hidden = c.hidden_size;
  const Routing routing = RouteTokens(w, c, x, rows);
  // Group rows by expert so each expert's weights are streamed once per call.
  std::vector<std::vector<std::pair<int64_t, float>>> users(c.n_routed_experts);  // expert → (row, weight)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < routing.per_row; ++i) {
      users[routing.expert[r * routing.per_row + i]].push_back({r, routing.weight[r * routing.per_row + i]});
    }
  }
  if (experts_used != nullptr) {
    *experts_used = std::count_if(users.begin(), users.end(), [](const auto& u) { return !u.empty(); });
  }
  // Prefill: each expert is a GEMM of its own, balanced over the pool. A row-invariant batch
  // (kernels/linear.h) of many rows takes the decode form below instead.
  if (rows >= kBatchMaxRows && !RowInvariantActive()) {
    if (w.shared.has_value()) {
      MlpForward(*w.shared, x, rows, hidden, out);
    } else {
      std::fill(out, out + rows * hidden, 0.0f);
    }
    std::vector<float> xin, y;
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      const auto& rows_of_e = users[e];
      if (rows_of_e.empty()) continue;
      const int64_t n = static_cast<int64_t>(rows_of_e.size());
      xin.resize(n * hidden);  // [n, H]
      y.resize(n * hidden);    // [n, H]
      for (int64_t i = 0; i < n; ++i) std::copy_n(x + rows_of_e[i].first * hidden, hidden, xin.data() + i * hidden);
      MlpForward(w.experts[e], xin.data(), n, hidden, y.data());
      for (int64_t i = 0; i < n; ++i) {
        Axpy(rows_of_e[i].second, y.data() + i * hidden, out + rows_of_e[i].first * hidden, hidden);
      }
    }
    return;
  }
  // Decode and verify: the shared and every selected expert in two parallel regions (all gate and
  // up projections, then all down projections) instead of three per expert. The shared expert
  // writes `out` and the routed ones are added in expert order, as above, so the result is bitwise
  // the same.
  struct ExpertRun {
    const MlpWeights* weights = nullptr;
    int64_t expert = -1;           // −1: the shared expert
    int64_t n = 0;                 // rows
    const float* x = nullptr;      // [n, H]
    std::vector<float> xin;        // [n, H] the rows that chose a routed expert
    std::vector<float> gate, up;   // [n, I]
    float* y = nullptr;            // [n, H]
    std::vector<float> y_storage;  // [n, H] (routed experts)
  };
  std::vector<ExpertRun> runs;
  runs.reserve(c.n_routed_experts + 1);
  if (w.shared.has_value()) {
    ExpertRun& run = runs.emplace_back();
    run.weights = &*w.shared;
    run.n = rows;
    run.x = x;
    run.y = out;
  } else {
    std::fill(out, out + rows * hidden, 0.0f);
  }
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    if (users[e].empty()) continue;
    ExpertRun& run = runs.emplace_back();
    run.weights = &w.experts[e];
    run.expert = e;
    run.n = static_cast<int64_t>(users[e].size());
    run.xin.resize(run.n * hidden);
    for (int64_t i = 0; i < run.n; ++i) std::copy_n(x + users[e][i].first * hidden, hidden, run.xin.data() + i * hidden);
    run.x = run.xin.data();
    run.y_storage.resize(run.n * hidden);
    run.y = run.y_storage.data();
  }
  std::vector<LinearJob> jobs;
  for (ExpertRun& run : runs) {
    run.gate.resize(run.n * run.weights->gate.shape[0]);
    run.up.resize(run.gate.size());
    jobs.push_back({run.x, run.n, run.weights->gate, run.gate.data()});
    jobs.push_back({run.x, run.n, run.weights->up, run.up.data()});
  }
  LinearBatch(jobs);
  jobs.clear();
  for (ExpertRun& run : runs) {
    SiluMul(run.gate.data(), run.up.data(), static_cast<int64_t>(run.gate.size()));
    jobs.push_back({run.gate.data(), run.n, run.weights->down, run.y});
  }
  LinearBatch(jobs);
  for (const ExpertRun& run : runs) {
    if (run.expert < 0) continue;
    const auto& rows_of_e = users[run.expert];
    for (int64_t i = 0; i < run.n; ++i) {
      Axpy(rows_of_e[i].second, run.y + i * hidden, out + rows_of_e[i].first * hidden, hidden);
    }
  }
}

}  // namespace mtpspec
