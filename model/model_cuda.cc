#include "model/model_cuda.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/norm_cuda.h"
#include "model/model_cuda_launch.h"

namespace mtpspec::cuda {
namespace {

// The argument rules of Model::Forward, with its messages.
absl::Status CheckForwardArgs(const Model& host, const DeviceKvCache& cache, std::span<const int32_t> tokens,
                              std::span<const int64_t> positions, const ForwardOptions& options) {
  if (options.trunk_layers != -1) {
    return absl::UnimplementedError("Forward on CUDA: trunk_layers (a truncated forward) is CPU only");
  }
  if (options.attention.tree != nullptr) {
    return absl::UnimplementedError("Forward on CUDA: a token tree verify is CPU only");
  }
  return host.CheckForwardArguments(cache.num_layers(), cache.length(), cache.capacity(), tokens, positions, options);
}

// The host twin of a device selection.
absl::StatusOr<TopK> ToHostTopK(Context& ctx, const DeviceTopK& device) {
  TopK host;
  host.width = device.width;
  host.selected.resize(static_cast<size_t>(device.rows * device.width));
  if (!host.selected.empty()) {
    RETURN_IF_ERROR(device.selected.CopyToHost(host.selected.data(), device.rows * device.width, ctx.stream()));
  }
  return host;
}

}  // namespace

absl::StatusOr<const int32_t*> UploadTokens(Context& ctx, std::span<const int32_t> tokens,
                                            GrowableBuffer<int32_t>& buffer) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  ASSIGN_OR_RETURN(int32_t* device, buffer.Reserve(ctx, rows, "token ids"));
  // From pageable memory the copy is staged before cudaMemcpyAsync returns, so `tokens` may go.
  RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(device, tokens.data(), static_cast<size_t>(rows) * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, ctx.stream()),
                           "cudaMemcpyAsync (token ids)"));
  return device;
}

absl::Status EmbedTokens(Context& ctx, const DeviceMatrix& table, const int32_t* tokens_device, int64_t rows,
                         float* out) {
  if (table.empty()) return absl::InvalidArgumentError("EmbedTokens: no embedding table on the device");
  return FromCuda(launch::EmbedRowsBf16(table.data, table.out, table.in, tokens_device, rows, out, ctx.stream()),
                  "EmbedRowsBf16");
}

absl::StatusOr<DeviceLayerWeights> UploadDecoderLayer(WeightArena& arena, const DecoderLayerWeights& host,
                                                      const ModelConfig& config, const std::string& name) {
  DeviceLayerWeights w;
  ASSIGN_OR_RETURN(w.input_norm, arena.UploadF32(host.input_norm.view(), name + ".input_layernorm.weight"));
  ASSIGN_OR_RETURN(w.post_attention_norm,
                   arena.UploadF32(host.post_attention_norm.view(), name + ".post_attention_layernorm.weight"));
  ASSIGN_OR_RETURN(w.attn, UploadMlaWeights(arena, host.attn, name + ".self_attn"));
  if (host.dense_mlp) {
    ASSIGN_OR_RETURN(DeviceMlpWeights mlp, UploadMlpWeights(arena, host.mlp, name + ".mlp"));
    w.mlp.emplace(std::move(mlp));
  } else {
    ASSIGN_OR_RETURN(DeviceMoeWeights moe, UploadMoeWeights(arena, host.moe, config, name + ".mlp"));
    w.moe.emplace(std::move(moe));
  }
  return w;
}

absl::StatusOr<AttentionPath> DecoderLayerForwardCuda(Context& ctx, const DeviceLayerWeights& w,
                                                      const LayerContext& layer_ctx, const DeviceRope& rope,
                                                      float* hidden, int64_t rows, const int64_t* positions,
                                                      DeviceKvCache& cache, int64_t layer,
                                                      const AttentionOptions& options, DeviceTopK* topk,
                                                      LayerScratch& scratch) {
  const ModelConfig& c = *layer_ctx.config;
  const int64_t H = c.hidden_size;
  ASSIGN_OR_RETURN(float* normed, scratch.normed.Reserve(ctx, rows * H, "layer normed input"));  // [rows, H]
  ASSIGN_OR_RETURN(float* delta, scratch.delta.Reserve(ctx, rows * H, "layer branch output"));   // [rows, H]
  // h += Attn(RMSNorm(h))
  RETURN_IF_ERROR(RmsNorm(ctx, hidden, w.input_norm, rows, H, c.rms_norm_eps, normed));
  ASSIGN_OR_RETURN(AttentionPath path, MlaForwardCuda(ctx, w.attn, layer_ctx.mla, rope, normed, rows, positions,
                                                      cache, layer, options, topk, delta));
  RETURN_IF_ERROR(AddInPlace(ctx, delta, rows * H, hidden));
  // h += FFN(RMSNorm(h))
  RETURN_IF_ERROR(RmsNorm(ctx, hidden, w.post_attention_norm, rows, H, c.rms_norm_eps, normed));
  if (w.mlp.has_value()) {
    RETURN_IF_ERROR(MlpForwardCuda(ctx, *w.mlp, normed, rows, H, delta));
  } else if (w.moe.has_value()) {
    RETURN_IF_ERROR(MoeForwardCuda(ctx, *w.moe, c, normed, rows, delta));
  } else {
    return absl::InternalError("DecoderLayerForwardCuda: the layer has no feed-forward weights");
  }
  RETURN_IF_ERROR(AddInPlace(ctx, delta, rows * H, hidden));
  return path;
}

absl::StatusOr<DeviceMatrix> CudaModel::UploadShared(const TensorView& host, const std::string& name,
                                                     SharedUse use) {
  // A head becomes bf16 like an embedding unless it stays FP8: then one upload serves both.
  if (!arena_.KeepsFp8(host)) use = SharedUse::kEmbedding;
  for (const SharedUpload& done : uploaded_) {
    if (done.host_data == host.data && done.use == use) return done.matrix;
  }
  ASSIGN_OR_RETURN(DeviceMatrix matrix, use == SharedUse::kLinear ? arena_.UploadLinearMatrix(host, name)
                                                                  : arena_.UploadMatrix(host, name));
  uploaded_.push_back({host.data, use, matrix});
  return matrix;
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const Model& host, const CudaModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::Create());
  std::unique_ptr<CudaModel> model(new CudaModel(host, std::move(ctx), options.weights));
  const ModelConfig& c = host.config();
  const ModelWeights& w = host.weights();
  int64_t max_positions = options.max_positions;
  if (max_positions <= 0) max_positions = std::min<int64_t>(c.max_position_embeddings, int64_t{1} << 18);
  if (max_positions > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("CudaModelOptions::max_positions = ", max_positions,
                                                   " exceeds max_position_embeddings = ", c.max_position_embeddings));
  }
  ASSIGN_OR_RETURN(model->rope_, DeviceRope::Create(host.layer_context().rope, max_positions));
  ASSIGN_OR_RETURN(model->embed_, model->UploadShared(w.embed, "model.embed_tokens.weight", SharedUse::kEmbedding));
  ASSIGN_OR_RETURN(model->lm_head_, model->UploadShared(w.lm_head, "lm_head.weight", SharedUse::kLinear));
  ASSIGN_OR_RETURN(model->final_norm_, model->arena_.UploadF32(w.final_norm.view(), "model.norm.weight"));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(DeviceLayerWeights layer,
                     UploadDecoderLayer(model->arena_, w.layers[l], c, absl::StrCat("model.layers.", l)));
    model->layers_.push_back(std::move(layer));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<DeviceKvCache>> CudaModel::NewCache(int64_t capacity, LatentStorage storage) const {
  if (capacity <= 0 || capacity > max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU cache capacity ", capacity, " is outside [1, ",
                                                   max_positions(), "] (the RoPE tables' positions; see ",
                                                   "CudaModelOptions::max_positions)"));
  }
  return DeviceKvCache::Create(host_.CacheShape(storage), capacity);
}

absl::StatusOr<DeviceForward> CudaModel::Run(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                             std::span<const int64_t> positions, const ForwardOptions& options,
                                             std::vector<TopK>* captured) {
  RETURN_IF_ERROR(CheckForwardArgs(host_, cache, tokens, positions, options));
  const ModelConfig& c = config();
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const int64_t H = c.hidden_size, V = c.vocab_size;
  Context& ctx = *ctx_;

  ASSIGN_OR_RETURN(const int32_t* tokens_device, UploadTokens(ctx, tokens, tokens_));  // [L]
  ASSIGN_OR_RETURN(float* hidden, hidden_.Reserve(ctx, rows * H, "hidden states"));   // [L, H]
  RETURN_IF_ERROR(EmbedTokens(ctx, embed_, tokens_device, rows, hidden));

  DeviceForward out;
  out.rows = rows;
  out.paths.resize(c.num_hidden_layers);
  if (captured != nullptr) captured->resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    ASSIGN_OR_RETURN(out.paths[l], DecoderLayerForwardCuda(ctx, layers_[l], host_.layer_context(), rope_, hidden,
                                                           rows, positions.data(), cache, l, options.attention,
                                                           &topk_, scratch_));
    if (captured != nullptr) {
      ASSIGN_OR_RETURN((*captured)[l], ToHostTopK(ctx, topk_));
    }
  }
  cache.SetLength(positions[rows - 1] + 1);

  ASSIGN_OR_RETURN(float* post, postnorm_.Reserve(ctx, rows * H, "post-norm hidden states"));  // [L, H]
  RETURN_IF_ERROR(RmsNorm(ctx, hidden, final_norm_, rows, H, c.rms_norm_eps, post));

  // The head sees the requested rows only, gathered in logit_rows order.
  std::vector<int64_t> logit_rows = options.logit_rows;
  if (logit_rows.empty()) {
    for (int64_t r = 0; r < rows; ++r) logit_rows.push_back(r);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  ASSIGN_OR_RETURN(float* head_input, head_input_.Reserve(ctx, R * H, "head input rows"));  // [R, H]
  for (int64_t i = 0; i < R;) {
    // Runs of consecutive rows are copied at once (all rows, or the last row, in one copy).
    int64_t run = 1;
    while (i + run < R && logit_rows[i + run] == logit_rows[i] + run) ++run;
    RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(head_input + i * H, post + logit_rows[i] * H,
                                             static_cast<size_t>(run * H) * sizeof(float), cudaMemcpyDeviceToDevice,
                                             ctx.stream()),
                             "cudaMemcpyAsync (head rows)"));
    i += run;
  }
  ASSIGN_OR_RETURN(float* logits, logits_.Reserve(ctx, R * V, "logits"));  // [R, V]
  RETURN_IF_ERROR(Linear(ctx, head_input, R, lm_head_, logits));

  out.logit_rows = R;
  out.logits = logits;
  out.hidden_prenorm = hidden;
  out.hidden_postnorm = post;
  return out;
}

absl::StatusOr<DeviceForward> CudaModel::ForwardDevice(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                                       std::span<const int64_t> positions,
                                                       const ForwardOptions& options) {
  return Run(cache, tokens, positions, options, nullptr);
}

absl::StatusOr<ForwardOutput> CudaModel::Forward(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                                 std::span<const int64_t> positions, const ForwardOptions& options) {
  ForwardOutput out;
  ASSIGN_OR_RETURN(DeviceForward device,
                   Run(cache, tokens, positions, options, options.capture_topk ? &out.topk : nullptr));
  const int64_t H = config().hidden_size;
  ASSIGN_OR_RETURN(out.logits,
                   CopyToHostTensor(*ctx_, device.logits, device.logit_rows, config().vocab_size, "logits"));
  ASSIGN_OR_RETURN(out.hidden_prenorm,
                   CopyToHostTensor(*ctx_, device.hidden_prenorm, device.rows, H, "pre-norm hidden"));
  ASSIGN_OR_RETURN(out.hidden_postnorm,
                   CopyToHostTensor(*ctx_, device.hidden_postnorm, device.rows, H, "post-norm hidden"));
  out.paths = std::move(device.paths);
  return out;
}

}  // namespace mtpspec::cuda
