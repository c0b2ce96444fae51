#include "model/decoder_layer.h"

#include <vector>

#include "kernels/linear.h"
#include "model/ffn.h"

namespace mtpspec {

LayerContext MakeLayerContext(const ModelConfig& c) {
  LayerContext ctx;
  ctx.config = &c;
  MlaDims& d = ctx.mla;
  d.hidden = c.hidden_size;
  d.heads = c.num_attention_heads;
  d.q_lora = c.q_lora_rank;
  d.kv_lora = c.kv_lora_rank;
  d.nope_dim = c.qk_nope_head_dim;
  d.rope_dim = c.qk_rope_head_dim;
  d.v_dim = c.v_head_dim;
  d.softmax_scale = static_cast<float>(c.softmax_scale());
  d.latent_norm_eps = 1e-6;  // transformers' q_a/kv_a RMSNorm eps (docs/models.md, "Attention: MLA"; vLLM uses rms_norm_eps)
  d.rope_style = c.rope_interleave ? RopeStyle::kInterleaved : RopeStyle::kHalfSplit;
  d.indexer.n_heads = c.index_n_heads;
  d.indexer.head_dim = c.index_head_dim;
  d.indexer.rope_dim = c.qk_rope_head_dim;
  d.indexer.topk = c.index_topk;
  d.indexer.rope_style = c.indexer_rope_interleave ? RopeStyle::kInterleaved : RopeStyle::kHalfSplit;
  ctx.rope = RotaryEmbedding(c.rope, c.qk_rope_head_dim);
  return ctx;
}

absl::Status DecoderLayerForward(const DecoderLayerWeights& w, const LayerContext& ctx, float* hidden, int64_t rows,
                                 const int64_t* positions, LayerKvCache& cache, int64_t capacity,
                                 const AttentionOptions& options, TopK* topk, AttentionPath* path_used,
                                 int64_t* experts_used) {
  MlaSegment segment;
  segment.rows = rows;
  segment.positions = positions;
  segment.cache = &cache;
  segment.capacity = capacity;
  segment.tree = options.tree;
  segment.topk = topk;
  RETURN_IF_ERROR(DecoderLayerForwardSegments(w, ctx, hidden, std::span<MlaSegment>(&segment, 1), options, experts_used));
  if (path_used) *path_used = segment.path_used;
  return absl::OkStatus();
}

absl::Status DecoderLayerForwardSegments(const DecoderLayerWeights& w, const LayerContext& ctx, float* hidden,
                                         std::span<MlaSegment> segments, const AttentionOptions& options,
                                         int64_t* experts_used) {
  const ModelConfig& c = *ctx.config;
  const int64_t H = c.hidden_size;
  int64_t rows = 0;
  for (const MlaSegment& segment : segments) rows += segment.rows;
  ForwardProfile* profile = options.profile;
  std::vector<float> normed(rows * H), delta(rows * H);  // [rows, H]
  {
    ScopedTimer timer(profile, Component::kNorms);
    for (int64_t r = 0; r < rows; ++r) {
      RmsNorm(hidden + r * H, w.input_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
  }
  RETURN_IF_ERROR(MlaForwardSegments(w.attn, ctx.mla, ctx.rope, normed.data(), segments, options, delta.data()));
  {
    ScopedTimer timer(profile, Component::kNorms);
    for (int64_t i = 0; i < rows * H; ++i) hidden[i] += delta[i];
    for (int64_t r = 0; r < rows; ++r) {
      RmsNorm(hidden + r * H, w.post_attention_norm.data<float>(), H, c.rms_norm_eps, normed.data() + r * H);
    }
  }
  ScopedTimer timer(profile, Component::kFeedForward);
  if (experts_used != nullptr) *experts_used = 0;
  if (w.dense_mlp) {
    MlpForward(w.mlp, normed.data(), rows, H, delta.data());
  } else {
    MoeForward(w.moe, c, normed.data(), rows, delta.data(), experts_used);
  }
  for (int64_t i = 0; i < rows * H; ++i) hidden[i] += delta[i];
  return absl::OkStatus();
}

}  // namespace mtpspec
