#include "mtp/mtp_module_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/norm_cuda.h"

namespace mtpspec::cuda {
namespace {

// Copies [rows, H] contiguous rows into columns [column, column + H) of dst [rows, 2H].
absl::Status CopyIntoHalf(Context& ctx, const float* src, int64_t rows, int64_t H, float* dst, int64_t column) {
  const size_t row_bytes = static_cast<size_t>(H) * sizeof(float);
  return FromCuda(cudaMemcpy2DAsync(dst + column, 2 * row_bytes, src, row_bytes, row_bytes, static_cast<size_t>(rows),
                                    cudaMemcpyDeviceToDevice, ctx.stream()),
                  "cudaMemcpy2DAsync (MTP concat)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaMtpModule>> CudaMtpModule::Create(CudaModel& model, int64_t layer) {
  const Model& host = model.host();
  // The host module's checks and messages (no MTP weights, bad layer index).
  ASSIGN_OR_RETURN(std::unique_ptr<MtpModule> host_module, MtpModule::Create(host, layer));
  const MtpLayerWeights& w = host.weights().mtp[layer];
  std::unique_ptr<CudaMtpModule> module(new CudaMtpModule(model, w));
  const ModelConfig& c = host.config();
  const std::string name = absl::StrCat("model.layers.", c.num_hidden_layers + layer);
  WeightArena& arena = model.arena();
  ASSIGN_OR_RETURN(module->enorm_, arena.UploadF32(w.enorm.view(), name + ".enorm.weight"));
  ASSIGN_OR_RETURN(module->hnorm_, arena.UploadF32(w.hnorm.view(), name + ".hnorm.weight"));
  ASSIGN_OR_RETURN(module->shared_head_norm_,
                   arena.UploadF32(w.shared_head_norm.view(), name + ".shared_head.norm.weight"));
  ASSIGN_OR_RETURN(module->eh_proj_, arena.UploadLinearMatrix(w.eh_proj, name + ".eh_proj.weight"));
  // Bound to the main embedding / head when the layer has no copy of its own (same host data).
  ASSIGN_OR_RETURN(module->embed_,
                   model.UploadShared(w.embed, name + ".embed_tokens.weight", CudaModel::SharedUse::kEmbedding));
  ASSIGN_OR_RETURN(module->head_,
                   model.UploadShared(w.head, name + ".shared_head.head.weight", CudaModel::SharedUse::kLinear));
  ASSIGN_OR_RETURN(module->block_, UploadDecoderLayer(arena, w.block, c, name));
  return module;
}

absl::StatusOr<std::unique_ptr<DeviceKvCache>> CudaMtpModule::NewCache(int64_t capacity) const {
  const ModelConfig& c = model_.config();
  if (capacity <= 0 || capacity > model_.max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat("MTP GPU cache capacity ", capacity, " is outside [1, ",
                                                   model_.max_positions(), "]"));
  }
  KvCacheShape shape;
  shape.kv_lora_rank = c.kv_lora_rank;
  shape.rope_dim = c.qk_rope_head_dim;
  shape.index_head_dim = c.index_head_dim;
  shape.has_indexer = {c.has_indexer};
  return DeviceKvCache::Create(shape, capacity);
}

absl::StatusOr<DeviceMtpStep> CudaMtpModule::ExtendDevice(DeviceKvCache& cache, const float* hidden_device,
                                                          std::span<const int32_t> tokens,
                                                          std::span<const int64_t> positions,
                                                          const MtpOptions& options, const DeviceTopK* reuse_topk) {
  const ModelConfig& c = model_.config();
  const int64_t rows = static_cast<int64_t>(tokens.size()), H = c.hidden_size;
  if (options.attention.tree != nullptr) return absl::UnimplementedError("MTP forward on CUDA: tree drafting is CPU only");
  RETURN_IF_ERROR(CheckMtpForwardArguments(model_.host(), tokens, positions, cache.length(), cache.capacity()));
  if (cache.num_layers() != 1) return absl::InvalidArgumentError("MTP forward: the cache is not a one-layer MTP cache");
  Context& ctx = model_.ctx();

  // u = W_eh [enorm(Emb(x)); hnorm(h)]  [rows, H]
  ASSIGN_OR_RETURN(const int32_t* tokens_device, UploadTokens(ctx, tokens, tokens_));            // [L]
  ASSIGN_OR_RETURN(float* embedded, embedded_.Reserve(ctx, rows * H, "MTP embedded tokens"));    // [L, H]
  ASSIGN_OR_RETURN(float* joined, joined_.Reserve(ctx, rows * 2 * H, "MTP joined input"));      // [L, 2H]
  ASSIGN_OR_RETURN(float* raw, raw_.Reserve(ctx, rows * H, "MTP block output"));                 // [L, H]
  ASSIGN_OR_RETURN(float* normed, normed_.Reserve(ctx, rows * H, "MTP normed output"));         // [L, H]
  RETURN_IF_ERROR(EmbedTokens(ctx, embed_, tokens_device, rows, embedded));
  RETURN_IF_ERROR(RmsNorm(ctx, embedded, enorm_, rows, H, c.rms_norm_eps, embedded));  // enorm(e), in place
  RETURN_IF_ERROR(CopyIntoHalf(ctx, embedded, rows, H, joined, 0));
  RETURN_IF_ERROR(RmsNorm(ctx, hidden_device, hnorm_, rows, H, c.rms_norm_eps, normed));  // hnorm(h), scratch
  RETURN_IF_ERROR(CopyIntoHalf(ctx, normed, rows, H, joined, H));
  RETURN_IF_ERROR(Linear(ctx, joined, rows, eh_proj_, raw));

  AttentionOptions attention = options.attention;
  if (reuse_topk != nullptr && options.index_share == MtpIndexShare::kShared) {
    if (reuse_topk != &topk_) {
      RETURN_IF_ERROR(topk_.Reshape(reuse_topk->rows, reuse_topk->width));
      const size_t bytes = static_cast<size_t>(reuse_topk->rows * reuse_topk->width) * sizeof(int32_t);
      if (bytes > 0) {
        RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(topk_.selected.data(), reuse_topk->selected.data(), bytes,
                                                 cudaMemcpyDeviceToDevice, ctx.stream()),
                                 "cudaMemcpyAsync (MTP shared selection)"));
      }
    }
    attention.reuse_topk = true;
  }
  DeviceMtpStep out;
  out.rows = rows;
  ASSIGN_OR_RETURN(out.path, DecoderLayerForwardCuda(ctx, block_, model_.host().layer_context(), model_.rope(), raw,
                                                     rows, positions.data(), cache, 0, attention, &topk_, scratch_));
  cache.SetLength(positions[rows - 1] + 1);
  RETURN_IF_ERROR(RmsNorm(ctx, raw, shared_head_norm_, rows, H, c.rms_norm_eps, normed));
  out.raw = raw;
  out.normed = normed;
  return out;
}

absl::StatusOr<DeviceMtpStep> CudaMtpModule::ForwardDevice(DeviceKvCache& cache, const float* hidden_device,
                                                           std::span<const int32_t> tokens,
                                                           std::span<const int64_t> positions,
                                                           const MtpOptions& options, std::vector<int64_t> logit_rows,
                                                           const DeviceTopK* reuse_topk) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  for (int64_t row : logit_rows) {
    if (row < 0 || row >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("MTP forward: logit row ", row, " is outside [0, ", rows, ")"));
    }
  }
  ASSIGN_OR_RETURN(DeviceMtpStep out, ExtendDevice(cache, hidden_device, tokens, positions, options, reuse_topk));
  const int64_t H = model_.config().hidden_size;
  Context& ctx = model_.ctx();
  if (logit_rows.empty()) {
    for (int64_t r = 0; r < rows; ++r) logit_rows.push_back(r);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  ASSIGN_OR_RETURN(float* head_input, head_input_.Reserve(ctx, R * H, "MTP head input"));  // [R, H]
  for (int64_t i = 0; i < R; ++i) {
    RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(head_input + i * H, out.normed + logit_rows[i] * H,
                                             static_cast<size_t>(H) * sizeof(float), cudaMemcpyDeviceToDevice,
                                             ctx.stream()),
                             "cudaMemcpyAsync (MTP head rows)"));
  }
  ASSIGN_OR_RETURN(out.logits, LogitsDevice(head_input, R));
  out.logit_rows = R;
  return out;
}

absl::StatusOr<const float*> CudaMtpModule::LogitsDevice(const float* normed_device, int64_t rows) {
  Context& ctx = model_.ctx();
  ASSIGN_OR_RETURN(float* logits, logits_.Reserve(ctx, rows * model_.config().vocab_size, "MTP logits"));  // [R, V]
  RETURN_IF_ERROR(Linear(ctx, normed_device, rows, head_, logits));
  return logits;
}

absl::StatusOr<MtpStepOutput> CudaMtpModule::Forward(DeviceKvCache& cache, const float* hidden_device,
                                                     std::span<const int32_t> tokens,
                                                     std::span<const int64_t> positions, const MtpOptions& options,
                                                     std::vector<int64_t> logit_rows, const DeviceTopK* reuse_topk) {
  ASSIGN_OR_RETURN(DeviceMtpStep step, ForwardDevice(cache, hidden_device, tokens, positions, options,
                                                     std::move(logit_rows), reuse_topk));
  const int64_t H = model_.config().hidden_size;
  Context& ctx = model_.ctx();
  MtpStepOutput out;
  ASSIGN_OR_RETURN(out.logits,
                   CopyToHostTensor(ctx, step.logits, step.logit_rows, model_.config().vocab_size, "MTP logits"));
  ASSIGN_OR_RETURN(out.raw, CopyToHostTensor(ctx, step.raw, step.rows, H, "MTP raw hidden"));
  ASSIGN_OR_RETURN(out.normed, CopyToHostTensor(ctx, step.normed, step.rows, H, "MTP normed hidden"));
  out.topk.width = topk_.width;
  out.topk.selected.resize(static_cast<size_t>(topk_.rows * topk_.width));
  if (!out.topk.selected.empty()) {
    RETURN_IF_ERROR(topk_.selected.CopyToHost(out.topk.selected.data(), topk_.rows * topk_.width, ctx.stream()));
  }
  out.path = step.path;
  return out;
}

}  // namespace mtpspec::cuda
