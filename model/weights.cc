#include "model/weights.h"

#include <cstring>
#include <map>

#include "kernels/fp8_pairs.h"

namespace mtpspec {
namespace {

void ForEachInBlock(DecoderLayerWeights& block, const std::function<void(TensorView&)>& fn) {
  MlaWeights& attn = block.attn;
  for (TensorView* m : {&attn.q_a_proj, &attn.q_b_proj, &attn.kv_a_proj, &attn.o_proj}) fn(*m);
  if (attn.indexer) {
    for (TensorView* m : {&attn.indexer->wq_b, &attn.indexer->wk, &attn.indexer->weights_proj}) fn(*m);
  }
  auto mlp = [&](MlpWeights& m) {
    fn(m.gate);
    fn(m.up);
    fn(m.down);
  };
  if (block.dense_mlp) {
    mlp(block.mlp);
    return;
  }
  for (MlpWeights& expert : block.moe.experts) mlp(expert);
  if (block.moe.shared) mlp(*block.moe.shared);
}

}  // namespace

void ForEachLinearMatrix(ModelWeights& weights, const std::function<void(TensorView&)>& fn) {
  for (DecoderLayerWeights& layer : weights.layers) ForEachInBlock(layer, fn);
  for (MtpLayerWeights& mtp : weights.mtp) {
    fn(mtp.eh_proj);
    fn(mtp.head);
    ForEachInBlock(mtp.block, fn);
  }
  fn(weights.lm_head);
}

int64_t SetActivations(ModelWeights& weights, ActivationPrecision precision) {
  // A matrix seen twice (an MTP layer's head that is the model's) counts once and shares its flags.
  std::map<const void*, const TensorView*> seen;
  ForEachLinearMatrix(weights, [&](TensorView& m) {
    if (m.empty()) return;
    if (m.dtype == DType::kBF16) {  // bf16 rows only: e4m3 rows are an FP8 GEMM's numerics
      m.activations = precision == ActivationPrecision::kBf16 ? precision : ActivationPrecision::kF32;
      if (m.activations != ActivationPrecision::kF32) seen.emplace(m.data, &m);
      return;
    }
    if (m.dtype != DType::kF8E4M3) return;
    m.activations = precision;
    const auto [first, inserted] = seen.emplace(m.data, &m);
    if (precision == ActivationPrecision::kF32 || m.fp8_line_flags != nullptr) return;
    if (!inserted && first->second->fp8_line_flags != nullptr) {
      m.fp8_line_flags = first->second->fp8_line_flags;
      m.line_flag_stride = first->second->line_flag_stride;
      return;
    }
    const Tensor& flags = weights.owned.emplace_back(Fp8PairLinesToFix(m));
    m.fp8_line_flags = flags.view().as<const uint64_t>();
    m.line_flag_stride = flags.dim(1);
  });
  return static_cast<int64_t>(seen.size());
}

bool SameStoredValues(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.shape_vector() != b.shape_vector() || !a.is_contiguous() || !b.is_contiguous()) {
    return false;
  }
  if (a.data != b.data && std::memcmp(a.data, b.data, a.nbytes()) != 0) return false;
  if ((a.block_scale == nullptr) != (b.block_scale == nullptr)) return false;
  if (a.block_scale == nullptr || a.block_scale == b.block_scale) return true;
  const int64_t block_rows = (a.dim(0) + 127) / 128, block_cols = (a.dim(1) + 127) / 128;
  for (int64_t i = 0; i < block_rows; ++i) {
    if (std::memcmp(a.block_scale + i * a.scale_stride, b.block_scale + i * b.scale_stride,
                    static_cast<size_t>(block_cols) * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace mtpspec
