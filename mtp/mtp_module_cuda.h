// The MTP module on the GPU, the twin of mtp/mtp_module.h (docs/models.md, "The MTP layer as a drafter").
//
// One step over the pairs (h_t, x_{t+1}) at positions t:
//   e = Emb(x_{t+1});  u = W_eh [enorm(e); hnorm(h_t)]   (embedding first)
//   g = DecoderBlock(u) at RoPE position t, with the module's own one-layer device cache
//   logits(x_{t+2}) = head(shared_head.norm(g))
// Hidden inputs and every output stay on the device; the host-output Forward copies them back for
// tests. The embedding and head are the main model's device copies unless the layer has its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/indexer_cuda.h"
#include "attention/kv_cache_cuda.h"
#include "model/model_cuda.h"
#include "mtp/mtp_module.h"

namespace mtpspec::cuda {

// The result of a device step: pointers into the module's buffers, valid until its next call.
struct DeviceMtpStep {
  int64_t rows = 0;               // L
  int64_t logit_rows = 0;         // R (0 after ExtendDevice)
  const float* logits = nullptr;  // [R, V]
  const float* raw = nullptr;     // [L, H] g, the block output
  const float* normed = nullptr;  // [L, H] shared_head.norm(g)
  AttentionPath path = AttentionPath::kAuto;
};

class CudaMtpModule {
 public:
  // `model` must outlive the module; its host model must have MTP weights.
  static absl::StatusOr<std::unique_ptr<CudaMtpModule>> Create(CudaModel& model, int64_t layer = 0);

  CudaModel& model() const { return model_; }
  Context& ctx() const { return model_.ctx(); }
  // A one-layer device cache (latent, rope key and indexer key).
  absl::StatusOr<std::unique_ptr<DeviceKvCache>> NewCache(int64_t capacity) const;

  // MtpModule::Extend on the device: runs the pairs (hidden[i], tokens[i]) at positions[i]
  // (consecutive, starting at or before the cache length). hidden: DEVICE [rows, H]. With
  // `reuse_topk` (and index_share = kShared) attention reuses that selection (its rows must match).
  absl::StatusOr<DeviceMtpStep> ExtendDevice(DeviceKvCache& cache, const float* hidden_device,
                                             std::span<const int32_t> tokens, std::span<const int64_t> positions,
                                             const MtpOptions& options, const DeviceTopK* reuse_topk = nullptr);
  // ExtendDevice plus the head over `logit_rows` (empty: every row).
  absl::StatusOr<DeviceMtpStep> ForwardDevice(DeviceKvCache& cache, const float* hidden_device,
                                              std::span<const int32_t> tokens, std::span<const int64_t> positions,
                                              const MtpOptions& options, std::vector<int64_t> logit_rows = {},
                                              const DeviceTopK* reuse_topk = nullptr);
  // The head over device rows: normed [rows, H] → logits [rows, V], in the module's buffer (valid
  // until its next call).
  absl::StatusOr<const float*> LogitsDevice(const float* normed_device, int64_t rows);
  // The module indexer's selection of the last call (device), as MtpStepOutput::topk.
  const DeviceTopK& topk() const { return topk_; }

  // ForwardDevice with logits, raw, normed and the selection copied to the host (tests).
  absl::StatusOr<MtpStepOutput> Forward(DeviceKvCache& cache, const float* hidden_device,
                                        std::span<const int32_t> tokens, std::span<const int64_t> positions,
                                        const MtpOptions& options, std::vector<int64_t> logit_rows = {},
                                        const DeviceTopK* reuse_topk = nullptr);

 private:
  CudaMtpModule(CudaModel& model, const MtpLayerWeights& host) : model_(model), host_(host) {}

  CudaModel& model_;
  const MtpLayerWeights& host_;
  const float* enorm_ = nullptr;             // [H]
  const float* hnorm_ = nullptr;             // [H]
  const float* shared_head_norm_ = nullptr;  // [H]
  DeviceMatrix eh_proj_;                     // [H, 2H]
  DeviceMatrix embed_;                       // [V, H]
  DeviceMatrix head_;                        // [V, H]
  DeviceLayerWeights block_;

  GrowableBuffer<int32_t> tokens_;      // [L]
  GrowableBuffer<float> embedded_;      // [L, H]
  GrowableBuffer<float> joined_;        // [L, 2H] [enorm(e) | hnorm(h)]
  GrowableBuffer<float> raw_;           // [L, H]
  GrowableBuffer<float> normed_;        // [L, H]
  GrowableBuffer<float> head_input_;    // [R, H]
  GrowableBuffer<float> logits_;        // [R, V]
  LayerScratch scratch_;
  DeviceTopK topk_;
};

}  // namespace mtpspec::cuda
