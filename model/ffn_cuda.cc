#include "model/ffn_cuda.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kernels/norm_cuda.h"
#include "model/ffn_cuda_launch.h"

namespace mtpspec::cuda {
namespace {

absl::Status CheckFloatMatrix(const TensorView& w, int64_t out, int64_t in, const std::string& name) {
  if (w.empty() || w.ndim != 2) return absl::InvalidArgumentError(absl::StrCat(name, ": expected a 2-D weight"));
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": GPU weights must be f32 or bf16 on the host (got ",
                                                   DTypeName(w.dtype), ")"));
  }
  if (w.shape[0] != out || w.shape[1] != in) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": shape [", w.shape[0], ", ", w.shape[1], "], expected [",
                                                   out, ", ", in, "]"));
  }
  return absl::OkStatus();
}

// Appends the rows of a checked f32/bf16 host matrix to `dst` as bf16 bits (round to nearest even).
void AppendBf16Rows(const TensorView& w, std::vector<uint16_t>* dst) {
  const int64_t in = w.shape[1];
  for (int64_t o = 0; o < w.shape[0]; ++o) {
    if (w.dtype == DType::kBF16) {
      const uint16_t* src = w.row<uint16_t>(o);
      dst->insert(dst->end(), src, src + in);
    } else {
      const float* src = w.row<float>(o);
      for (int64_t i = 0; i < in; ++i) dst->push_back(F32ToBf16(src[i]));
    }
  }
}

// True when every value of an f32 matrix survives the round trip through bf16.
bool ExactlyBf16(const TensorView& w) {
  for (int64_t o = 0; o < w.shape[0]; ++o) {
    const float* src = w.row<float>(o);
    for (int64_t i = 0; i < w.shape[1]; ++i) {
      const float back = Bf16ToF32(F32ToBf16(src[i]));
      if (!(back == src[i])) return false;
    }
  }
  return true;
}

absl::Status CheckMoeCall(const DeviceMoeWeights& w, const ModelConfig& c, int64_t rows) {
  if (c.scoring_func != "sigmoid") {
    return absl::UnimplementedError(absl::StrCat("MoeForwardCuda: scoring_func '", c.scoring_func,
                                                 "' is not supported (sigmoid only)"));
  }
  const int64_t num_experts = c.n_routed_experts;
  if (rows < 0 || num_experts < 1 || static_cast<int64_t>(w.experts.size()) != num_experts ||
      w.router.out + (w.router_f32 != nullptr ? num_experts : 0) != num_experts || w.hidden != c.hidden_size ||
      w.router_bias == nullptr || (w.gate_up_table.bf16 == nullptr && w.gate_up_table.fp8 == nullptr) ||
      (w.down_table.bf16 == nullptr && w.down_table.fp8 == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeForwardCuda: weights do not match the config (", num_experts,
                                                   " experts, hidden ", c.hidden_size, ") or rows ", rows,
                                                   " is negative"));
  }
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > num_experts || c.n_group < 1 ||
      num_experts % c.n_group != 0 || c.topk_group < 1 || c.topk_group > c.n_group) {
    return absl::InvalidArgumentError(absl::StrCat("MoeForwardCuda: bad routing config (k ", c.num_experts_per_tok,
                                                   ", n_group ", c.n_group, ", topk_group ", c.topk_group, ")"));
  }
  if (3 * num_experts + 2 * c.n_group > 12 * 1024) {
    return absl::UnimplementedError(absl::StrCat("MoeForwardCuda: ", num_experts,
                                                 " experts exceed the routing kernel's shared memory"));
  }
  if (c.num_experts_per_tok * kMaxGemvRows > 12 * 1024) {
    return absl::UnimplementedError(absl::StrCat("MoeForwardCuda: num_experts_per_tok ", c.num_experts_per_tok,
                                                 " exceeds the planning kernel's shared memory"));
  }
  return absl::OkStatus();
}

// The router's choice on the device: expert [rows, k] and weight [rows, k] in rank order.
struct DeviceRouting {
  StreamBuffer<int32_t> expert;  // [rows, k]
  StreamBuffer<float> weight;    // [rows, k]
};

absl::StatusOr<DeviceRouting> Route(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& c, const float* x,
                                    int64_t rows) {
  const int64_t num_experts = c.n_routed_experts;
  const int64_t k = c.num_experts_per_tok;
  ASSIGN_OR_RETURN(auto logits, StreamBuffer<float>::Create(rows * num_experts, ctx.stream(), "router logits"));
  RETURN_IF_ERROR(FromCuda(launch::MoeRouterLogits(x, rows, w.router_f32 == nullptr ? w.router.data : nullptr,
                                                   w.router_f32, num_experts, c.hidden_size, logits.data(),
                                                   ctx.stream()),
                           "MoeRouterLogits"));
  DeviceRouting routing;
  ASSIGN_OR_RETURN(routing.expert, StreamBuffer<int32_t>::Create(rows * k, ctx.stream(), "routing experts"));
  ASSIGN_OR_RETURN(routing.weight, StreamBuffer<float>::Create(rows * k, ctx.stream(), "routing weights"));
  launch::MoeRouteParams params;
  params.experts = num_experts;
  params.top_k = k;
  params.n_group = c.n_group;
  params.topk_group = c.topk_group;
  params.norm_topk_prob = c.norm_topk_prob;
  params.scaling = static_cast<float>(c.routed_scaling_factor);
  RETURN_IF_ERROR(FromCuda(launch::MoeRoute(logits.data(), w.router_bias, rows, params, routing.expert.data(),
                                            routing.weight.data(), ctx.stream()),
                           "MoeRoute"));
  return routing;
}

// Decode and verify (1..16 rows): plan, grouped gate/up, grouped down, combine; no host round trip.
absl::Status RoutedExpertsSmall(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& c, const float* x,
                                int64_t rows, const DeviceRouting& routing, bool accumulate, float* out) {
  const int64_t k = c.num_experts_per_tok;
  const int64_t hidden = c.hidden_size;
  const int64_t width = w.expert_width;
  const int64_t pairs = rows * k;
  const int64_t max_slots = std::min<int64_t>(c.n_routed_experts, pairs);
  const cudaStream_t stream = ctx.stream();
  ASSIGN_OR_RETURN(auto pair_row, StreamBuffer<int32_t>::Create(pairs, stream, "pair rows"));        // [P]
  ASSIGN_OR_RETURN(auto slot_expert, StreamBuffer<int32_t>::Create(max_slots, stream, "slot experts"));  // [S]
  ASSIGN_OR_RETURN(auto slot_start, StreamBuffer<int32_t>::Create(max_slots, stream, "slot starts"));    // [S]
  ASSIGN_OR_RETURN(auto slot_count, StreamBuffer<int32_t>::Create(max_slots, stream, "slot counts"));    // [S]
  ASSIGN_OR_RETURN(auto num_slots, StreamBuffer<int32_t>::Create(1, stream, "slot total"));              // [1]
  ASSIGN_OR_RETURN(auto combine_index, StreamBuffer<int32_t>::Create(pairs, stream, "combine index"));   // [rows, k]
  ASSIGN_OR_RETURN(auto combine_weight, StreamBuffer<float>::Create(pairs, stream, "combine weight"));   // [rows, k]
  ASSIGN_OR_RETURN(auto act, StreamBuffer<float>::Create(pairs * width, stream, "expert activations"));   // [P, I]
  ASSIGN_OR_RETURN(auto y, StreamBuffer<float>::Create(pairs * hidden, stream, "expert outputs"));        // [P, H]
  RETURN_IF_ERROR(FromCuda(launch::MoePlan(routing.expert.data(), routing.weight.data(), rows, k, pair_row.data(),
                                           slot_expert.data(), slot_start.data(), slot_count.data(), num_slots.data(),
                                           combine_index.data(), combine_weight.data(), stream),
                           "MoePlan"));
  RETURN_IF_ERROR(FromCuda(launch::MoeGroupedGateUp(x, hidden, width, w.gate_up_table, pair_row.data(),
                                                    slot_expert.data(), slot_start.data(), slot_count.data(),
                                                    num_slots.data(), max_slots, act.data(), stream),
                           "MoeGroupedGateUp"));
  RETURN_IF_ERROR(FromCuda(launch::MoeGroupedDown(act.data(), hidden, width, w.down_table, slot_expert.data(),
                                                  slot_start.data(), slot_count.data(), num_slots.data(), max_slots,
                                                  y.data(), stream),
                           "MoeGroupedDown"));
  return FromCuda(launch::MoeCombine(y.data(), combine_index.data(), combine_weight.data(), rows, k, hidden,
                                     accumulate, out, stream),
                  "MoeCombine");
}

// Prefill (> 16 rows): the routing goes to the host, which groups the pairs by expert; each selected
// expert then runs through Linear (cuBLAS above 16 rows) on its gathered rows.
absl::Status RoutedExpertsLarge(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& c, const float* x,
                                int64_t rows, const DeviceRouting& routing, bool accumulate, float* out) {
  const int64_t k = c.num_experts_per_tok;
  const int64_t hidden = c.hidden_size;
  const int64_t width = w.expert_width;
  const int64_t pairs = rows * k;
  const cudaStream_t stream = ctx.stream();
  ASSIGN_OR_RETURN(std::vector<int32_t> expert, CopyToHost(ctx, routing.expert.data(), pairs, "routing experts"));
  ASSIGN_OR_RETURN(std::vector<float> weight, CopyToHost(ctx, routing.weight.data(), pairs, "routing weights"));

  // Pairs in (expert, row) order; a row's experts in ascending order for the combination.
  std::vector<int32_t> order(static_cast<size_t>(pairs));  // [P] pair ids
  for (int64_t p = 0; p < pairs; ++p) order[p] = static_cast<int32_t>(p);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return expert[a] < expert[b]; });
  std::vector<int32_t> pair_row(static_cast<size_t>(pairs));  // [P]
  std::vector<int64_t> rank_of(static_cast<size_t>(pairs));   // [P] pair id → sorted position
  std::vector<int64_t> start(c.n_routed_experts, 0), count(c.n_routed_experts, 0);  // [E]
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t p = order[i];
    const int32_t e = expert[p];
    if (e < 0 || e >= c.n_routed_experts) return absl::InternalError("MoeForwardCuda: routed to an invalid expert");
    pair_row[i] = static_cast<int32_t>(p / k);
    rank_of[p] = i;
    if (count[e]++ == 0) start[e] = i;
  }
  std::vector<int32_t> combine_index(static_cast<size_t>(pairs));  // [rows, k]
  std::vector<float> combine_weight(static_cast<size_t>(pairs));   // [rows, k]
  std::vector<int32_t> row_slots(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) row_slots[j] = static_cast<int32_t>(j);
    std::sort(row_slots.begin(), row_slots.end(),
              [&](int32_t a, int32_t b) { return expert[r * k + a] < expert[r * k + b]; });
    for (int64_t m = 0; m < k; ++m) {
      const int64_t p = r * k + row_slots[m];
      combine_index[r * k + m] = static_cast<int32_t>(rank_of[p]);
      combine_weight[r * k + m] = weight[p];
    }
  }
  ASSIGN_OR_RETURN(auto pair_row_d,
                   UploadToStream(ctx, pair_row.data(), static_cast<int64_t>(pair_row.size()), "pair rows"));
  ASSIGN_OR_RETURN(auto combine_index_d,
                   UploadToStream(ctx, combine_index.data(), static_cast<int64_t>(combine_index.size()), "combine index"));
  ASSIGN_OR_RETURN(auto combine_weight_d,
                   UploadToStream(ctx, combine_weight.data(), static_cast<int64_t>(combine_weight.size()), "combine weight"));
  ASSIGN_OR_RETURN(auto xg, StreamBuffer<float>::Create(pairs * hidden, stream, "gathered rows"));        // [P, H]
  ASSIGN_OR_RETURN(auto gate_up, StreamBuffer<float>::Create(pairs * 2 * width, stream, "gate/up"));     // [P, 2I]
  ASSIGN_OR_RETURN(auto act, StreamBuffer<float>::Create(pairs * width, stream, "expert activations"));   // [P, I]
  ASSIGN_OR_RETURN(auto y, StreamBuffer<float>::Create(pairs * hidden, stream, "expert outputs"));        // [P, H]
  RETURN_IF_ERROR(FromCuda(launch::GatherRows(x, pair_row_d.data(), pairs, hidden, xg.data(), stream), "GatherRows"));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    if (count[e] == 0) continue;
    RETURN_IF_ERROR(Linear(ctx, xg.data() + start[e] * hidden, count[e], w.experts[e].gate_up,
                           gate_up.data() + start[e] * 2 * width));
  }
  RETURN_IF_ERROR(SiluMul(ctx, gate_up.data(), pairs, width, act.data()));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    if (count[e] == 0) continue;
    RETURN_IF_ERROR(Linear(ctx, act.data() + start[e] * width, count[e], w.experts[e].down, y.data() + start[e] * hidden));
  }
  return FromCuda(launch::MoeCombine(y.data(), combine_index_d.data(), combine_weight_d.data(), rows, k, hidden,
                                     accumulate, out, stream),
                  "MoeCombine");
}

}  // namespace

absl::StatusOr<DeviceMlpWeights> UploadMlpWeights(WeightArena& arena, const MlpWeights& stored,
                                                  const std::string& name) {
  if (arena.KeepsFp8(stored.gate) && arena.KeepsFp8(stored.up) && arena.KeepsFp8(stored.down)) {
    // Kept as stored: gate rows then up rows with their own scale grids, and down.
    if (stored.gate.shape[0] != stored.up.shape[0] || stored.down.shape[1] != stored.gate.shape[0] ||
        stored.down.shape[0] != stored.gate.shape[1]) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": gate/up/down shapes [", stored.gate.shape[0], ", ",
                                                     stored.gate.shape[1], "] / [", stored.up.shape[0], ", ",
                                                     stored.up.shape[1], "] / [", stored.down.shape[0], ", ",
                                                     stored.down.shape[1], "] do not form an MLP"));
    }
    ASSIGN_OR_RETURN(const Fp8HostImage gate_up,
                     StackedFp8ImageOf(stored.gate, stored.up, name + ".gate_proj + up_proj"));
    DeviceMlpWeights device;
    ASSIGN_OR_RETURN(device.gate_up, arena.UploadFp8Image(gate_up, name + ".gate_up_proj"));
    ASSIGN_OR_RETURN(device.down, arena.UploadLinearMatrix(stored.down, name + ".down_proj"));
    return device;
  }
  Tensor gate_f32, up_f32, down_f32;  // FP8 matrices, dequantised for the upload
  MlpWeights host;
  host.gate = HostMatrixForUpload(stored.gate, gate_f32);
  host.up = HostMatrixForUpload(stored.up, up_f32);
  host.down = HostMatrixForUpload(stored.down, down_f32);
  if (host.gate.empty() || host.gate.ndim != 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".gate_proj: expected a 2-D weight"));
  }
  const int64_t width = host.gate.shape[0];
  const int64_t hidden = host.gate.shape[1];
  RETURN_IF_ERROR(CheckFloatMatrix(host.gate, width, hidden, name + ".gate_proj"));
  RETURN_IF_ERROR(CheckFloatMatrix(host.up, width, hidden, name + ".up_proj"));
  RETURN_IF_ERROR(CheckFloatMatrix(host.down, hidden, width, name + ".down_proj"));
  std::vector<uint16_t> packed;  // [2I, H] bf16 bits: gate rows, then up rows
  packed.reserve(static_cast<size_t>(2 * width * hidden));
  AppendBf16Rows(host.gate, &packed);
  AppendBf16Rows(host.up, &packed);
  ASSIGN_OR_RETURN(const void* gate_up, arena.UploadBytes(packed.data(), packed.size() * sizeof(uint16_t),
                                                          name + ".gate_up_proj"));
  DeviceMlpWeights device;
  device.gate_up = DeviceMatrix{static_cast<const __nv_bfloat16*>(gate_up), 2 * width, hidden, {}};
  ASSIGN_OR_RETURN(device.down, arena.UploadMatrix(host.down, name + ".down_proj"));
  return device;
}

absl::StatusOr<DeviceMoeWeights> UploadMoeWeights(WeightArena& arena, const MoeWeights& host, const ModelConfig& c,
                                                  const std::string& name) {
  Tensor router_f32;  // an FP8 router, dequantised for the upload
  const TensorView router = HostMatrixForUpload(host.router, router_f32);
  const int64_t num_experts = c.n_routed_experts;
  const int64_t hidden = c.hidden_size;
  const int64_t width = c.moe_intermediate_size;
  if (static_cast<int64_t>(host.experts.size()) != num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", host.experts.size(), " experts, config says ",
                                                   num_experts));
  }
  RETURN_IF_ERROR(CheckFloatMatrix(router, num_experts, hidden, name + ".gate.weight"));
  if (host.router_bias.empty() || host.router_bias.dtype() != DType::kF32 ||
      host.router_bias.numel() != num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".gate.e_score_correction_bias: expected f32 [", num_experts,
                                                   "]"));
  }
  DeviceMoeWeights device;
  device.hidden = hidden;
  device.expert_width = width;
  if (router.dtype == DType::kBF16 || ExactlyBf16(router)) {
    ASSIGN_OR_RETURN(device.router, arena.UploadMatrix(router, name + ".gate.weight"));
  } else {
    std::vector<float> packed;  // [E, H] f32, rows contiguous
    packed.reserve(static_cast<size_t>(num_experts * hidden));
    for (int64_t e = 0; e < num_experts; ++e) {
      const float* src = router.row<float>(e);
      packed.insert(packed.end(), src, src + hidden);
    }
    ASSIGN_OR_RETURN(const void* router, arena.UploadBytes(packed.data(), packed.size() * sizeof(float),
                                                           name + ".gate.weight (f32)"));
    device.router_f32 = static_cast<const float*>(router);
  }
  ASSIGN_OR_RETURN(device.router_bias,
                   arena.UploadF32(host.router_bias.view(), name + ".gate.e_score_correction_bias"));
  std::vector<const __nv_bfloat16*> gate_up_table, down_table;  // [E] device pointers (bf16 experts)
  std::vector<Fp8Weights> gate_up_fp8, down_fp8;                  // [E] (FP8 experts)
  device.experts.reserve(num_experts);
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string expert_name = absl::StrCat(name, ".experts.", e);
    ASSIGN_OR_RETURN(DeviceMlpWeights expert, UploadMlpWeights(arena, host.experts[e], expert_name));
    if (expert.gate_up.in != hidden || expert.down.in != width) {
      return absl::InvalidArgumentError(absl::StrCat(expert_name, ": shape [", expert.down.in, ", ", expert.gate_up.in,
                                                     "] (I, H), config says [", width, ", ", hidden, "]"));
    }
    const bool fp8 = expert.gate_up.is_fp8();  // UploadMlpWeights keeps all three FP8 or none
    if (e > 0 && fp8 != !gate_up_fp8.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(expert_name, ": its matrices are stored in a different format ",
                                                     "from the other experts' (FP8 and not)"));
    }
    if (fp8) {
      gate_up_fp8.push_back(expert.gate_up.fp8);
      down_fp8.push_back(expert.down.fp8);
    } else {
      gate_up_table.push_back(expert.gate_up.data);
      down_table.push_back(expert.down.data);
    }
    device.experts.push_back(expert);
  }
  if (!gate_up_fp8.empty()) {
    ASSIGN_OR_RETURN(const void* gate_up_ptrs, arena.UploadBytes(gate_up_fp8.data(), gate_up_fp8.size() * sizeof(Fp8Weights),
                                                                 name + " expert gate/up table"));
    ASSIGN_OR_RETURN(const void* down_ptrs, arena.UploadBytes(down_fp8.data(), down_fp8.size() * sizeof(Fp8Weights),
                                                              name + " expert down table"));
    device.gate_up_table.fp8 = static_cast<const Fp8Weights*>(gate_up_ptrs);
    device.down_table.fp8 = static_cast<const Fp8Weights*>(down_ptrs);
  } else {
    ASSIGN_OR_RETURN(const void* gate_up_ptrs, arena.UploadBytes(gate_up_table.data(),
                                                                 gate_up_table.size() * sizeof(void*),
                                                                 name + " expert gate/up table"));
    ASSIGN_OR_RETURN(const void* down_ptrs, arena.UploadBytes(down_table.data(), down_table.size() * sizeof(void*),
                                                              name + " expert down table"));
    device.gate_up_table.bf16 = static_cast<const __nv_bfloat16* const*>(gate_up_ptrs);
    device.down_table.bf16 = static_cast<const __nv_bfloat16* const*>(down_ptrs);
  }
  if (host.shared.has_value()) {
    ASSIGN_OR_RETURN(DeviceMlpWeights shared, UploadMlpWeights(arena, *host.shared, name + ".shared_experts"));
    if (shared.gate_up.in != hidden) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".shared_experts: input width ", shared.gate_up.in,
                                                     ", hidden_size ", hidden));
    }
    device.shared = shared;
  }
  return device;
}

absl::Status MlpForwardCuda(Context& ctx, const DeviceMlpWeights& w, const float* x, int64_t rows, int64_t hidden,
                            float* out) {
  const int64_t width = w.down.in;
  if (rows < 0 || w.gate_up.empty() || w.down.empty() || w.gate_up.in != hidden || w.down.out != hidden ||
      w.gate_up.out != 2 * width) {
    return absl::InvalidArgumentError(absl::StrCat("MlpForwardCuda: weights [", w.gate_up.out, ", ", w.gate_up.in,
                                                   "] / [", w.down.out, ", ", w.down.in, "] do not fit hidden ",
                                                   hidden, " (rows ", rows, ")"));
  }
  if (x == out) return absl::InvalidArgumentError("MlpForwardCuda: out must not alias x");
  if (rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto gate_up, StreamBuffer<float>::Create(rows * 2 * width, ctx.stream(), "MLP gate/up"));  // [rows, 2I]
  ASSIGN_OR_RETURN(auto act, StreamBuffer<float>::Create(rows * width, ctx.stream(), "MLP activations"));      // [rows, I]
  RETURN_IF_ERROR(Linear(ctx, x, rows, w.gate_up, gate_up.data()));
  RETURN_IF_ERROR(SiluMul(ctx, gate_up.data(), rows, width, act.data()));
  return Linear(ctx, act.data(), rows, w.down, out);
}

absl::Status MoeForwardCuda(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& c, const float* x,
                            int64_t rows, float* out) {
  RETURN_IF_ERROR(CheckMoeCall(w, c, rows));
  if (x == out) return absl::InvalidArgumentError("MoeForwardCuda: out must not alias x");
  if (rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(DeviceRouting routing, Route(ctx, w, c, x, rows));
  const bool accumulate = w.shared.has_value();
  if (accumulate) RETURN_IF_ERROR(MlpForwardCuda(ctx, *w.shared, x, rows, c.hidden_size, out));
  if (rows <= kMaxGemvRows) return RoutedExpertsSmall(ctx, w, c, x, rows, routing, accumulate, out);
  return RoutedExpertsLarge(ctx, w, c, x, rows, routing, accumulate, out);
}

absl::StatusOr<Routing> RouteTokensCuda(Context& ctx, const DeviceMoeWeights& w, const ModelConfig& c, const float* x,
                                        int64_t rows) {
  RETURN_IF_ERROR(CheckMoeCall(w, c, rows));
  Routing routing;
  routing.per_row = c.num_experts_per_tok;
  if (rows == 0) return routing;
  ASSIGN_OR_RETURN(DeviceRouting device, Route(ctx, w, c, x, rows));
  const int64_t pairs = rows * c.num_experts_per_tok;
  ASSIGN_OR_RETURN(routing.expert, CopyToHost(ctx, device.expert.data(), pairs, "routing experts"));
  ASSIGN_OR_RETURN(routing.weight, CopyToHost(ctx, device.weight.data(), pairs, "routing weights"));
  return routing;
}

}  // namespace mtpspec::cuda
