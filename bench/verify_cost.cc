#include "bench/verify_cost.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "bench/bench_model.h"
#include "bench/run_info.h"
#include "core/dtype.h"
#include "core/parallel.h"
#include "kernels/linear.h"
#include "model/decoder_layer.h"
#include "model/ffn.h"

namespace mtpspec::bench {
namespace {

int64_t Bytes(const TensorView& v) { return v.empty() ? 0 : static_cast<int64_t>(v.nbytes()); }

std::vector<int64_t> Positions(int64_t first, int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

}  // namespace

double CostSamples::MedianSeconds() const { return Median(seconds); }

std::array<double, kComponents> CostSamples::MedianComponents() const {
  std::array<double, kComponents> out{};
  for (int c = 0; c < kComponents; ++c) {
    std::vector<double> v;
    for (const auto& s : components) v.push_back(s[c]);
    out[c] = Median(v);
  }
  return out;
}

absl::Status TimedVerify(const Model& model, KvCache& cache, std::span<const int32_t> tokens, int64_t n,
                         AttentionPath path, CostSamples* samples, std::vector<TopK>* topk_out) {
  if (cache.length() < n) return absl::InternalError("TimedVerify: cache shorter than n");
  RETURN_IF_ERROR(cache.Truncate(n));
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const std::vector<int64_t> positions = Positions(n, rows);
  ForwardProfile profile;
  ForwardOptions options;
  options.attention.path = path;
  options.attention.profile = &profile;
  options.capture_topk = topk_out != nullptr;
  const double start = NowSeconds();
  ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(cache, tokens, positions, options));  // logits [L, V]
  const double seconds = NowSeconds() - start;
  RETURN_IF_ERROR(cache.Truncate(n));
  samples->seconds.push_back(seconds);
  samples->components.push_back(profile.seconds);
  if (topk_out != nullptr) *topk_out = std::move(out.topk);
  return absl::OkStatus();
}

int64_t AttendedRowsUnion(const std::vector<TopK>& topk, int64_t n, int64_t rows) {
  int64_t total = 0;
  for (const TopK& t : topk) {
    std::set<int32_t> keys;
    for (int64_t r = 0; r < rows && t.width > 0; ++r) {
      for (int64_t i = 0; i < t.width; ++i) {
        const int32_t j = t.row(r)[i];
        if (j >= 0 && j <= n + r) keys.insert(j);
      }
    }
    total += static_cast<int64_t>(keys.size());
  }
  return total;
}

absl::StatusOr<std::vector<int64_t>> RoutedExpertsTouched(const Model& model, KvCache& cache,
                                                          std::span<const int32_t> tokens, int64_t n) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const LayerContext& ctx = model.layer_context();
  const int64_t H = c.hidden_size, rows = static_cast<int64_t>(tokens.size());
  RETURN_IF_ERROR(cache.Truncate(n));
  const std::vector<int64_t> positions = Positions(n, rows);
  std::vector<float> hidden(rows * H), normed(rows * H), delta(rows * H);  // [L, H]
  model.Embed(w.embed, tokens, hidden.data());
  std::vector<int64_t> touched(rows, 0);
  TopK topk;
  const AttentionOptions options;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DecoderLayerWeights& layer = w.layers[l];
    for (int64_t r = 0; r < rows; ++r) {
      RmsNorm(hidden.data() + r * H, layer.input_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
    absl::StatusOr<MlaStepResult> step = MlaForward(layer.attn, ctx.mla, ctx.rope, normed.data(), rows, positions.data(),
                                                    cache.layer(l), cache.capacity(), options, &topk, delta.data());
    if (!step.ok()) return step.status();
    for (int64_t i = 0; i < rows * H; ++i) hidden[i] += delta[i];
    for (int64_t r = 0; r < rows; ++r) {
      RmsNorm(hidden.data() + r * H, layer.post_attention_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
    if (layer.dense_mlp) {
      MlpForward(layer.mlp, normed.data(), rows, H, delta.data());
    } else {
      const Routing routing = RouteTokens(layer.moe, c, normed.data(), rows);  // expert: [L, k_e]
      std::set<int32_t> seen;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t e = 0; e < routing.per_row; ++e) seen.insert(routing.expert[r * routing.per_row + e]);
        touched[r] += static_cast<int64_t>(seen.size());
      }
      MoeForward(layer.moe, c, normed.data(), rows, delta.data());
    }
    for (int64_t i = 0; i < rows * H; ++i) hidden[i] += delta[i];
  }
  RETURN_IF_ERROR(cache.Truncate(n));  // slots n … were written; the length never moved past n
  return touched;
}

int64_t ExpertBytes(const Model& model) {
  for (const DecoderLayerWeights& layer : model.weights().layers) {
    if (!layer.dense_mlp && !layer.moe.experts.empty()) {
      const MlpWeights& e = layer.moe.experts.front();
      return Bytes(e.gate) + Bytes(e.up) + Bytes(e.down);
    }
  }
  return 0;
}

int64_t MoeLayerCount(const Model& model) {
  int64_t count = 0;
  for (const DecoderLayerWeights& layer : model.weights().layers) count += layer.dense_mlp ? 0 : 1;
  return count;
}

double VerifyBytes::Total(bool actual_routing) const {
  const double routed = actual_routing && routed_actual >= 0 ? static_cast<double>(routed_actual) : routed_expected;
  return static_cast<double>(dense_weights) + routed + static_cast<double>(kv_latent + kv_indexer);
}

VerifyBytes ComputeVerifyBytes(const Model& model, int64_t n, int64_t rows, bool scoring, int64_t attended_rows,
                               int64_t routed_experts_touched) {
  const ModelConfig& c = model.config();
  const int64_t num_keys = n + rows;
  // DecodeStepTraffic counts one row: exactly k_e routed experts per MoE layer, indexer scoring
  // weights when T > K. Take its weights minus those experts as the part L rows read once.
  const DecodeTraffic one = DecodeStepTraffic(model, scoring ? std::max(num_keys, c.index_topk + 1) : num_keys);
  const int64_t expert = ExpertBytes(model), moe_layers = MoeLayerCount(model);
  VerifyBytes b;
  b.dense_weights = one.weight_bytes - moe_layers * c.num_experts_per_tok * expert +
                    (rows - 1) * c.hidden_size * static_cast<int64_t>(DTypeSize(model.weights().embed.dtype));
  const double e = static_cast<double>(c.n_routed_experts), ke = static_cast<double>(c.num_experts_per_tok);
  b.routed_expected = static_cast<double>(moe_layers * expert) * e * (1.0 - std::pow(1.0 - ke / e, rows));
  if (routed_experts_touched >= 0) b.routed_actual = routed_experts_touched * expert;
  const int64_t f32 = static_cast<int64_t>(sizeof(float));
  b.kv_latent = attended_rows * (c.kv_lora_rank + c.qk_rope_head_dim) * f32;
  if (scoring) {
    int64_t full_layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) full_layers += c.layer_has_indexer[l] ? 1 : 0;
    b.kv_indexer = full_layers * num_keys * c.index_head_dim * f32;
  }
  return b;
}

double VerifyRowMacs(const Model& model, int64_t n, bool scoring) {
  const ModelConfig& c = model.config();
  const int64_t num_keys = n + 1;
  const DecodeTraffic one = DecodeStepTraffic(model, scoring ? std::max(num_keys, c.index_topk + 1) : num_keys);
  const double weight_macs = static_cast<double>(one.weight_bytes) /
                             static_cast<double>(DTypeSize(model.weights().lm_head.dtype));
  const double keys = static_cast<double>(std::min(num_keys, c.index_topk));
  const double heads = static_cast<double>(c.num_attention_heads), r_kv = static_cast<double>(c.kv_lora_rank);
  const double attention_per_layer = heads * r_kv * static_cast<double>(c.qk_nope_head_dim + c.v_head_dim) +
                                     keys * heads * (2 * r_kv + static_cast<double>(c.qk_rope_head_dim));
  double indexer = 0;
  if (scoring) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (c.layer_has_indexer[l]) {
        indexer += static_cast<double>(num_keys) * static_cast<double>(c.index_n_heads * c.index_head_dim);
      }
    }
  }
  return weight_macs + static_cast<double>(c.num_hidden_layers) * attention_per_layer + indexer;
}

absl::Status FillMtpCache(const MtpModule& mtp, KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                          int64_t n, int64_t chunk, const MtpOptions& options) {
  const int64_t H = mtp.model().config().hidden_size;
  cache.Clear();
  for (int64_t begin = 0; begin + 1 < n; begin += chunk) {
    const int64_t rows = std::min(chunk, n - 1 - begin);
    const std::vector<int64_t> positions = Positions(begin, rows);
    // Pair t: (h_t, x_{t+1}); logits only for the last row.
    ASSIGN_OR_RETURN(MtpStepOutput out, mtp.Forward(cache, hidden + begin * H, tokens.subspan(begin + 1, rows),
                                                    positions, options, {rows - 1}));
  }
  return absl::OkStatus();
}

absl::Status TimedMtpStep(const MtpModule& mtp, KvCache& cache, const float* hidden_row, int32_t token, int64_t n,
                          const MtpOptions& options, CostSamples* samples) {
  if (cache.length() < n - 1) return absl::InternalError("TimedMtpStep: MTP cache shorter than n - 1");
  RETURN_IF_ERROR(cache.Truncate(n - 1));
  ForwardProfile profile;
  MtpOptions timed = options;
  timed.attention.profile = &profile;
  const int64_t position = n - 1;
  const double start = NowSeconds();
  ASSIGN_OR_RETURN(MtpStepOutput out, mtp.Forward(cache, hidden_row, std::span<const int32_t>(&token, 1),
                                                  std::span<const int64_t>(&position, 1), timed));
  samples->seconds.push_back(NowSeconds() - start);
  samples->components.push_back(profile.seconds);
  return cache.Truncate(n - 1);
}

absl::Status TimedMtpExtend(const MtpModule& mtp, KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                            int32_t token, int64_t n, int64_t rows, const MtpOptions& options, CostSamples* extend,
                            CostSamples* head) {
  if (cache.length() < n - 1) return absl::InternalError("TimedMtpExtend: MTP cache shorter than n - 1");
  const int64_t H = mtp.model().config().hidden_size;
  const int64_t begin = n - rows;
  RETURN_IF_ERROR(cache.Truncate(begin));
  std::vector<int32_t> pair_tokens(tokens.begin() + begin + 1, tokens.begin() + n);  // [rows]
  pair_tokens.push_back(token);
  const std::vector<int64_t> positions = Positions(begin, rows);
  MtpOptions chunk = options;  // as MtpDrafter extends: gather path for the whole chunk
  if (chunk.attention.path == AttentionPath::kAuto) {
    chunk.attention.gather_max_rows = std::max(chunk.attention.gather_max_rows, options.extend_chunk);
  }
  double start = NowSeconds();
  ASSIGN_OR_RETURN(MtpStepOutput out, mtp.Extend(cache, hidden + begin * H, pair_tokens, positions, chunk));
  extend->seconds.push_back(NowSeconds() - start);
  extend->components.push_back({});
  start = NowSeconds();
  const Tensor logits = mtp.Logits(out.normed.data<float>() + (rows - 1) * H, 1);  // [1, V]
  head->seconds.push_back(NowSeconds() - start);
  head->components.push_back({});
  return cache.Truncate(n - 1);
}

nlohmann::json ComponentsJson(const std::array<double, kComponents>& seconds) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kComponents; ++c) j[ComponentName(static_cast<Component>(c))] = seconds[c];
  return j;
}

nlohmann::json MeasureMacRate(int reps) {
  constexpr int64_t kRows = 8, kIn = 1024, kOut = 1024, kCalls = 200;  // weights: 2 MiB of bf16
  Tensor w = Tensor::Empty(DType::kBF16, {kOut, kIn});                   // [out, in]
  uint16_t* wd = w.data<uint16_t>();
  for (int64_t i = 0; i < kOut * kIn; ++i) wd[i] = F32ToBf16(0.001f * static_cast<float>(i % 97 - 48));
  std::vector<float> x(kRows * kIn, 0.5f), y(kRows * kOut);  // [rows, in], [rows, out]
  Linear(x.data(), kRows, w.view(), y.data());                 // warm-up
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const double start = NowSeconds();
    for (int64_t c = 0; c < kCalls; ++c) Linear(x.data(), kRows, w.view(), y.data());
    rates.push_back(static_cast<double>(kCalls * kRows * kIn * kOut) / (NowSeconds() - start));
  }
  return {{"macs_per_second", Median(rates)}, {"samples", rates}, {"threads", DefaultThreadPool().num_threads()},
          {"kernel", "Linear (kernels/linear.h), 8 rows x [1024, 1024] bf16, cache-resident"}};
}

}  // namespace mtpspec::bench
