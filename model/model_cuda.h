// The whole model on the GPU, the twin of model/model.h (Model::Forward and DecoderLayerForward).
//
// CudaModel::Create uploads every weight of a loaded host Model as bf16 (the host loader has
// already turned fp8 and f16 into f32/bf16) and builds the RoPE tables; the host Model stays the
// owner of the configuration and must outlive the CudaModel. A forward runs
//   embed → per layer: input norm, MLA (IndexShare selection handed from full to shared layers),
//   residual, post-attention norm, dense MLP or MoE, residual → final norm → head (requested rows)
// entirely on the device. Two variants:
//   * ForwardDevice: results stay on the device (logits [R, V], hidden states [L, H]); the
//     speculative loop uses this and copies only what it must.
//   * Forward: the same, copied into a host ForwardOutput (tests, tools).
//
// Row-count invariance: for L ≤ kMaxGemvRows (16) rows every op computes a row the same way
// whatever L is, so a verify block of k + 1 ≤ 16 rows reproduces plain decoding bit for bit. Above
// 16 rows (prefill chunks) cuBLAS is used and rows may differ in the last bits.
//
// No CPU fallback: an unsupported shape is an error from the op that cannot run it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attention/kv_cache_cuda.h"
#include "attention/mla_cuda.h"
#include "attention/rope_cuda.h"
#include "core/cuda_context.h"
#include "kernels/linear_cuda.h"
#include "model/ffn_cuda.h"
#include "model/model.h"

namespace mtpspec::cuda {

// A device array that grows on demand and keeps its contents only when asked. Growing waits for
// the work queued on the stream (which may still read the old memory) before freeing it.
template <typename T>
class GrowableBuffer {
 public:
  // At least n elements; the contents are undefined unless `keep` (then the first size() old
  // elements are copied over).
  absl::StatusOr<T*> Reserve(Context& ctx, int64_t n, absl::string_view what, bool keep = false) {
    if (n <= array_.size()) return array_.data();
    ASSIGN_OR_RETURN(DeviceArray<T> bigger, DeviceArray<T>::Create(std::max<int64_t>(n, 2 * array_.size()), what));
    if (keep && array_.size() > 0) {
      RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(bigger.data(), array_.data(), array_.bytes(), cudaMemcpyDeviceToDevice,
                                               ctx.stream()),
                               "cudaMemcpyAsync (buffer growth)"));
    }
    RETURN_IF_ERROR(ctx.Synchronize());
    array_ = std::move(bigger);
    return array_.data();
  }
  T* data() const { return array_.data(); }
  int64_t size() const { return array_.size(); }

 private:
  DeviceArray<T> array_;
};

// Copies host token ids into `buffer` (device int32 [rows]) on the context's stream.
absl::StatusOr<const int32_t*> UploadTokens(Context& ctx, std::span<const int32_t> tokens,
                                            GrowableBuffer<int32_t>& buffer);

// out[rows, H] = table[tokens] widened to f32. tokens: device [rows] (validated by the caller).
absl::Status EmbedTokens(Context& ctx, const DeviceMatrix& table, const int32_t* tokens_device, int64_t rows,
                         float* out);

// One decoder layer's weights on the device (the twin of DecoderLayerWeights).
struct DeviceLayerWeights {
  const float* input_norm = nullptr;           // [H]
  const float* post_attention_norm = nullptr;  // [H]
  DeviceMlaWeights attn;
  std::optional<DeviceMlpWeights> mlp;  // dense layers
  std::optional<DeviceMoeWeights> moe;  // MoE layers
};

// Uploads one decoder layer (trunk or MTP block). `name` prefixes errors ("model.layers.3").
absl::StatusOr<DeviceLayerWeights> UploadDecoderLayer(WeightArena& arena, const DecoderLayerWeights& host,
                                                      const ModelConfig& config, const std::string& name);

// The activation buffers of one layer call: the normed input and the branch output, [rows, H] each.
struct LayerScratch {
  GrowableBuffer<float> normed;  // [rows, H]
  GrowableBuffer<float> delta;   // [rows, H]
};

// The twin of DecoderLayerForward: hidden [rows, H] (device) updated in place. `topk` carries the
// selection between full and shared layers. positions: HOST [rows]. `layer` indexes `cache`.
absl::StatusOr<AttentionPath> DecoderLayerForwardCuda(Context& ctx, const DeviceLayerWeights& w,
                                                      const LayerContext& layer_ctx, const DeviceRope& rope,
                                                      float* hidden, int64_t rows, const int64_t* positions,
                                                      DeviceKvCache& cache, int64_t layer,
                                                      const AttentionOptions& options, DeviceTopK* topk,
                                                      LayerScratch& scratch);

struct CudaModelOptions {
  // Positions the RoPE tables cover, hence the largest cache capacity. 0: the model's
  // max_position_embeddings, capped at 2^18 (a table of 2^18 · d_r floats per side).
  int64_t max_positions = 0;
  // How FP8 checkpoint matrices live on the device (core/device.h): bf16 (the default) or FP8 as
  // stored. Embeddings, heads, routers and kv_b_proj are bf16 either way.
  DeviceWeightFormat weights = DeviceWeightFormat::kBf16;
};

// The result of ForwardDevice. Device pointers into the model's buffers, valid until the next
// ForwardDevice or Forward call on the same CudaModel.
struct DeviceForward {
  int64_t rows = 0;                        // L
  int64_t logit_rows = 0;                  // R
  const float* logits = nullptr;           // [R, V] in ForwardOptions::logit_rows order
  const float* hidden_prenorm = nullptr;   // [L, H] last layer output before model.norm
  const float* hidden_postnorm = nullptr;  // [L, H] after model.norm
  std::vector<AttentionPath> paths;        // [num_hidden_layers]
};

class CudaModel {
 public:
  // Uploads `host` (which must outlive the CudaModel). Fails with Unavailable when no usable GPU is
  // present: there is no CPU fallback.
  static absl::StatusOr<std::unique_ptr<CudaModel>> Create(const Model& host, const CudaModelOptions& options = {});

  const Model& host() const { return host_; }
  const ModelConfig& config() const { return host_.config(); }
  Context& ctx() const { return *ctx_; }
  const DeviceRope& rope() const { return rope_; }
  WeightArena& arena() { return arena_; }
  // Bytes of weights on the device.
  size_t weight_bytes() const { return arena_.bytes(); }
  const DeviceMatrix& embed() const { return embed_; }
  const DeviceMatrix& lm_head() const { return lm_head_; }
  int64_t max_positions() const { return rope_.max_positions(); }
  const DeviceLayerWeights& layer(int64_t l) const { return layers_[l]; }

  // A device cache for up to `capacity` positions (≤ max_positions()).
  absl::StatusOr<std::unique_ptr<DeviceKvCache>> NewCache(int64_t capacity,
                                                          LatentStorage storage = LatentStorage::kF32) const;

  // Model::Forward on the device; same argument rules and errors (the cache is unchanged on an
  // argument error). capture_topk is ignored here (see Forward).
  absl::StatusOr<DeviceForward> ForwardDevice(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                              std::span<const int64_t> positions, const ForwardOptions& options = {});
  // The same with every result copied to the host (logits, both hidden states, and with
  // capture_topk each layer's selection).
  absl::StatusOr<ForwardOutput> Forward(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                        std::span<const int64_t> positions, const ForwardOptions& options = {});

  // How a shared matrix is read: by the embedding lookup (bf16 rows) or by Linear only (a head,
  // which stays FP8 when the arena's format keeps FP8).
  enum class SharedUse { kEmbedding, kLinear };
  // Uploads a host matrix unless it is one already uploaded for the same use (tied or bound
  // embeddings and heads).
  absl::StatusOr<DeviceMatrix> UploadShared(const TensorView& host, const std::string& name, SharedUse use);

 private:
  CudaModel(const Model& host, std::unique_ptr<Context> ctx, DeviceWeightFormat weights)
      : host_(host), ctx_(std::move(ctx)), arena_(weights) {}
  absl::StatusOr<DeviceForward> Run(DeviceKvCache& cache, std::span<const int32_t> tokens,
                                    std::span<const int64_t> positions, const ForwardOptions& options,
                                    std::vector<TopK>* captured);

  const Model& host_;
  std::unique_ptr<Context> ctx_;
  WeightArena arena_;
  DeviceRope rope_;
  DeviceMatrix embed_;    // [V, H]
  DeviceMatrix lm_head_;  // [V, H]
  const float* final_norm_ = nullptr;  // [H]
  std::vector<DeviceLayerWeights> layers_;
  struct SharedUpload {
    const void* host_data;
    SharedUse use;
    DeviceMatrix matrix;
  };
  std::vector<SharedUpload> uploaded_;  // host data and use → device copy (shared tensors)

  // Activations of the last forward.
  GrowableBuffer<int32_t> tokens_;     // [L]
  GrowableBuffer<float> hidden_;       // [L, H] the residual stream, then hidden_prenorm
  GrowableBuffer<float> postnorm_;     // [L, H]
  GrowableBuffer<float> head_input_;   // [R, H] the post-norm rows that get logits
  GrowableBuffer<float> logits_;       // [R, V]
  LayerScratch scratch_;
  DeviceTopK topk_;
};

}  // namespace mtpspec::cuda
