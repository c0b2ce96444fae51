// The GPU side of the MTP draft chain (mtp/mtp_chain.h): the CUDA module, its one-layer device
// cache, the queued hidden rows and the chain states, all in device memory. Only token ids cross
// to the host, and a head row's logits when a caller asks for them (q-sampled drafts).
#pragma once

#include <memory>
#include <vector>

#include "mtp/mtp_chain.h"
#include "mtp/mtp_module_cuda.h"

namespace mtpspec::cuda {

class CudaMtpBackend : public MtpChainBackend {
 public:
  // `model` must outlive the backend. Fails when its host model has no MTP layer.
  static absl::StatusOr<std::unique_ptr<CudaMtpBackend>> Create(CudaModel& model, int64_t capacity);

  int64_t capacity() const override { return cache_->capacity(); }
  const ModelConfig& config() const override { return module_->model().config(); }
  absl::Status QueueHidden(const float* hidden_device, int64_t rows) override;
  void ClearQueue() override { queued_rows_ = 0; }
  absl::Status TruncateCache(int64_t length) override;
  void ClearCache() override;
  absl::Status Extend(int64_t begin, std::span<const int32_t> tokens, int64_t first_position,
                      const MtpOptions& options, bool keep_start) override;
  bool start_has_selection() const override { return start_topk_.width > 0; }
  absl::Status BeginChain() override;
  absl::StatusOr<MtpHeadRow*> Head() override;
  absl::Status Step(int32_t token, int64_t position, const MtpOptions& options, bool share_selection) override;

  Context& ctx() const { return module_->ctx(); }
  CudaMtpModule& module() const { return *module_; }
  const DeviceKvCache& cache() const { return *cache_; }

 private:
  class DeviceHead : public MtpHeadRow {
   public:
    const float* logits() const override { return logits_device; }
    absl::StatusOr<std::span<const float>> HostLogits() override;
    Context* ctx = nullptr;
    int64_t vocab = 0;
    const float* logits_device = nullptr;  // DEVICE [V]
    std::vector<float> host;               // [V] once copied
    bool copied = false;
  };

  CudaMtpBackend(std::unique_ptr<CudaMtpModule> module, std::unique_ptr<DeviceKvCache> cache)
      : module_(std::move(module)), cache_(std::move(cache)) {}
  // Copies one [H] row between device buffers on the module's stream.
  absl::Status CopyRow(float* dst, const float* src, const char* what);

  std::unique_ptr<CudaMtpModule> module_;
  std::unique_ptr<DeviceKvCache> cache_;
  GrowableBuffer<float> queued_hidden_;  // [queued, H]
  int64_t queued_rows_ = 0;
  bool has_start_ = false;
  GrowableBuffer<float> start_normed_;    // [H] the newest committed pair's shared_head.norm(g)
  GrowableBuffer<float> start_raw_;       // [H] its g
  DeviceTopK start_topk_;                 // [1, width] its selection (width 0: dense)
  GrowableBuffer<float> chained_normed_;  // [H] the last chained step's outputs
  GrowableBuffer<float> chained_raw_;     // [H]
  DeviceHead head_;
};

}  // namespace mtpspec::cuda
