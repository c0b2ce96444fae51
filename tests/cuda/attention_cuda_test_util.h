// Small random MLA + indexer layers for the attention GPU tests: bf16 weights on the host (the CPU
// twin computes with exactly the weights the GPU gets), f32 norms, RoPE tables for both sides.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "attention/indexer.h"
#include "attention/mla.h"
#include "attention/rope.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace mtpspec::testing {

inline std::vector<float> RandomValues(int64_t n, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng) * scale;
  return v;
}

// Owns the host tensors behind an MlaWeights.
struct RandomMla {
  MlaDims dims;
  RotaryEmbedding rope;
  MlaWeights weights;
  std::vector<std::unique_ptr<Tensor>> storage;

  TensorView Bf16Matrix(int64_t out, int64_t in, std::mt19937_64& rng) {
    auto t = std::make_unique<Tensor>(Tensor::Zeros(DType::kBF16, {out, in}));
    const std::vector<float> v = RandomValues(out * in, 1.0f / std::sqrt(static_cast<float>(in)), rng);
    uint16_t* dst = t->data<uint16_t>();
    for (int64_t i = 0; i < out * in; ++i) dst[i] = F32ToBf16(v[i]);
    storage.push_back(std::move(t));
    return storage.back()->view();
  }
  static Tensor F32Vector(int64_t n, float center, float spread, std::mt19937_64& rng) {
    Tensor t = Tensor::Zeros(DType::kF32, {n});
    std::uniform_real_distribution<float> u(-spread, spread);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = center + u(rng);
    return t;
  }
};

struct MlaShape {
  int64_t hidden = 64, heads = 4, q_lora = 32, kv_lora = 48, nope = 16, rope = 8, v = 12;
  int64_t index_heads = 4, index_dim = 16, topk = 24;
  RopeStyle mla_style = RopeStyle::kInterleaved;
  RopeStyle index_style = RopeStyle::kHalfSplit;
  bool yarn = false;
};

inline std::unique_ptr<RandomMla> MakeRandomMla(const MlaShape& s, bool full_layer, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto m = std::make_unique<RandomMla>();
  MlaDims& d = m->dims;
  d.hidden = s.hidden;
  d.heads = s.heads;
  d.q_lora = s.q_lora;
  d.kv_lora = s.kv_lora;
  d.nope_dim = s.nope;
  d.rope_dim = s.rope;
  d.v_dim = s.v;
  d.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.nope + s.rope));
  d.rope_style = s.mla_style;
  d.indexer.n_heads = s.index_heads;
  d.indexer.head_dim = s.index_dim;
  d.indexer.rope_dim = s.rope;
  d.indexer.topk = s.topk;
  d.indexer.rope_style = s.index_style;
  RopeConfig rc;
  rc.theta = 10000.0;
  if (s.yarn) {
    rc.type = "yarn";
    rc.factor = 40.0;
    rc.original_max_position_embeddings = 64;
    rc.mscale = 1.0;
    rc.mscale_all_dim = 0.707;
  }
  m->rope = RotaryEmbedding(rc, s.rope);
  MlaWeights& w = m->weights;
  w.q_a_proj = m->Bf16Matrix(s.q_lora, s.hidden, rng);
  w.q_a_norm = RandomMla::F32Vector(s.q_lora, 1.0f, 0.2f, rng);
  w.q_b_proj = m->Bf16Matrix(s.heads * (s.nope + s.rope), s.q_lora, rng);
  w.kv_a_proj = m->Bf16Matrix(s.kv_lora + s.rope, s.hidden, rng);
  w.kv_a_norm = RandomMla::F32Vector(s.kv_lora, 1.0f, 0.2f, rng);
  w.kv_b_proj = m->Bf16Matrix(s.heads * (s.nope + s.v), s.kv_lora, rng);
  w.o_proj = m->Bf16Matrix(s.hidden, s.heads * s.v, rng);
  if (full_layer) {
    IndexerWeights iw;
    iw.wq_b = m->Bf16Matrix(s.index_heads * s.index_dim, s.q_lora, rng);
    iw.wk = m->Bf16Matrix(s.index_dim, s.hidden, rng);
    iw.k_norm_weight = RandomMla::F32Vector(s.index_dim, 1.0f, 0.2f, rng);
    iw.k_norm_bias = RandomMla::F32Vector(s.index_dim, 0.0f, 0.1f, rng);
    iw.weights_proj = m->Bf16Matrix(s.index_heads, s.hidden, rng);
    w.indexer = std::move(iw);
  }
  return m;
}

// Largest |a − b| relative to the root mean square of b (and at least 1e-6).
inline double RelativeMaxError(const std::vector<float>& a, const std::vector<float>& b) {
  double sum_sq = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    sum_sq += static_cast<double>(b[i]) * b[i];
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  const double rms = std::sqrt(sum_sq / std::max<size_t>(b.size(), 1));
  return max_diff / std::max(rms, 1e-6);
}

}  // namespace mtpspec::testing
