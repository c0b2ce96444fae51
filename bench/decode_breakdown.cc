#include "bench/decode_breakdown.h"

#include <chrono>

#include "kernels/linear.h"
#include "model/decoder_layer.h"
#include "model/ffn.h"

namespace mtpspec::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point* start) {
  const Clock::time_point now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - *start).count();
  *start = now;
  return seconds;
}

void AddMlp(const MlpWeights& w, std::vector<TensorView>& out) {
  out.push_back(w.gate);
  out.push_back(w.up);
  out.push_back(w.down);
}

}  // namespace

absl::Status TimedDecodeStep(const Model& model, KvCache& cache, int32_t token, int64_t position,
                             std::vector<float>& logits, StepTimes* times) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const LayerContext& ctx = model.layer_context();
  const int64_t H = c.hidden_size;
  if (position > cache.length() || position >= cache.capacity()) {
    return absl::InvalidArgumentError("TimedDecodeStep: position outside the cache");
  }
  if (position < cache.length()) RETURN_IF_ERROR(cache.Truncate(position));

  Clock::time_point mark = Clock::now();
  std::vector<float> hidden(H), normed(H), delta(H);  // [1, H]
  model.Embed(w.embed, std::span<const int32_t>(&token, 1), hidden.data());
  TopK topk;
  const AttentionOptions options;
  times->other += SecondsSince(&mark);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const DecoderLayerWeights& layer = w.layers[l];
    RmsNorm(hidden.data(), layer.input_norm.data<float>(), H, c.rms_norm_eps, normed.data());
    times->other += SecondsSince(&mark);
    absl::StatusOr<MlaStepResult> step = MlaForward(layer.attn, ctx.mla, ctx.rope, normed.data(), 1, &position,
                                                    cache.layer(l), cache.capacity(), options, &topk, delta.data());
    if (!step.ok()) return step.status();
    (c.layer_has_indexer[l] ? times->attention_full : times->attention_shared) += SecondsSince(&mark);
    for (int64_t i = 0; i < H; ++i) hidden[i] += delta[i];
    RmsNorm(hidden.data(), layer.post_attention_norm.data<float>(), H, c.rms_norm_eps, normed.data());
    times->other += SecondsSince(&mark);
    if (layer.dense_mlp) {
      MlpForward(layer.mlp, normed.data(), 1, H, delta.data());
      times->dense_mlp += SecondsSince(&mark);
    } else {
      MoeForward(layer.moe, c, normed.data(), 1, delta.data());
      times->moe += SecondsSince(&mark);
    }
    for (int64_t i = 0; i < H; ++i) hidden[i] += delta[i];
  }
  cache.SetLength(position + 1);
  times->other += SecondsSince(&mark);
  RmsNorm(hidden.data(), w.final_norm.data<float>(), H, c.rms_norm_eps, normed.data());
  logits.resize(c.vocab_size);  // [V]
  model.ApplyHead(w.lm_head, normed.data(), 1, logits.data());
  times->head += SecondsSince(&mark);
  return absl::OkStatus();
}

std::vector<TensorView> DecodeStepMatrices(const Model& model, int64_t step) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  std::vector<TensorView> out;
  for (const DecoderLayerWeights& layer : w.layers) {
    const MlaWeights& a = layer.attn;
    out.insert(out.end(), {a.q_a_proj, a.q_b_proj, a.kv_a_proj});
    if (a.indexer.has_value()) out.insert(out.end(), {a.indexer->wk, a.indexer->wq_b, a.indexer->weights_proj});
    out.insert(out.end(), {a.kv_b_proj, a.o_proj});
    if (layer.dense_mlp) {
      AddMlp(layer.mlp, out);
      continue;
    }
    out.push_back(layer.moe.router);
    if (layer.moe.shared.has_value()) AddMlp(*layer.moe.shared, out);
    for (int64_t i = 0; i < c.num_experts_per_tok; ++i) {
      AddMlp(layer.moe.experts[(step * c.num_experts_per_tok + i) % c.n_routed_experts], out);
    }
  }
  out.push_back(w.lm_head);
  return out;
}

}  // namespace mtpspec::bench
