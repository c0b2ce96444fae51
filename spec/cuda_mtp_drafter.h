// The MTP drafter on the GPU, the twin of spec/mtp_drafter.h (model-spec §7.4).
//
// It keeps the same bookkeeping as MtpDrafter: its cache holds (target hidden, committed token)
// pairs; after each verify the previous draft's slots are dropped and the accepted positions are
// rebuilt from the target's hidden states, whose last row yields the first new draft. The hidden
// states never leave the device: Observe copies the committed rows of the CudaTarget's last
// forward (device to device), so the drafter must be paired with that target. Argmax drafts cross
// to the host as ids only; q-sampled drafts copy their logits row back, because the rejection rule
// needs the draft distribution on the host.
#pragma once

#include <memory>
#include <vector>

#include "mtp/mtp_module_cuda.h"
#include "spec/cuda_target.h"
#include "spec/interfaces.h"

namespace mtpspec {

class CudaMtpDrafter : public Drafter {
 public:
  // `target` (and its model) must outlive the drafter.
  static absl::StatusOr<std::unique_ptr<CudaMtpDrafter>> Create(CudaTarget& target, int64_t capacity,
                                                                const MtpOptions& options);
  std::string name() const override { return "mtp"; }
  absl::Status Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                       const TargetStep& step) override;
  absl::StatusOr<Draft> Propose(std::span<const int32_t> sequence, int64_t k, const DraftSampling& sampling) override;
  void Reset() override;

  const cuda::DeviceKvCache& cache() const { return *cache_; }
  cuda::CudaMtpModule& module() const { return *module_; }
  const MtpOptions& options() const { return options_; }

  // Rows per module call when the committed backlog is long (the prompt): bounds the indexer's
  // [rows, T] score matrix on the device.
  static constexpr int64_t kExtendChunk = 512;

 private:
  CudaMtpDrafter(CudaTarget& target, std::unique_ptr<cuda::CudaMtpModule> module,
                 std::unique_ptr<cuda::DeviceKvCache> cache, const MtpOptions& options)
      : target_(target), module_(std::move(module)), cache_(std::move(cache)), options_(options) {}
  // The draft token from one row of step logits (device [V]) for absolute position `position`.
  absl::StatusOr<int32_t> ChooseDraft(const float* logits_device, const DraftSampling& sampling, int64_t position,
                                      Draft& draft);

  CudaTarget& target_;
  std::unique_ptr<cuda::CudaMtpModule> module_;
  std::unique_ptr<cuda::DeviceKvCache> cache_;
  MtpOptions options_;
  // Committed pairs not yet in the cache: hidden rows (device [n, H]), the tokens that follow them,
  // and the position of the first one.
  cuda::GrowableBuffer<float> pending_hidden_;  // [n, H]
  std::vector<int32_t> pending_tokens_;         // [n]
  int64_t pending_position_ = 0;
  cuda::GrowableBuffer<float> chained_;  // [H] the hidden fed to the next chained step
  cuda::DeviceTopK shared_;              // [1, K] step 1's selection (index_share = kShared)
};

}  // namespace mtpspec
