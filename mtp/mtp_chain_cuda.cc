#include "mtp/mtp_chain_cuda.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mtpspec::cuda {

absl::StatusOr<std::unique_ptr<CudaMtpBackend>> CudaMtpBackend::Create(CudaModel& model, int64_t capacity) {
  ASSIGN_OR_RETURN(auto module, CudaMtpModule::Create(model));
  ASSIGN_OR_RETURN(auto cache, module->NewCache(capacity));
  return std::unique_ptr<CudaMtpBackend>(new CudaMtpBackend(std::move(module), std::move(cache)));
}

absl::StatusOr<std::span<const float>> CudaMtpBackend::DeviceHead::HostLogits() {
  if (!copied) {
    ASSIGN_OR_RETURN(host, CopyToHost(*ctx, logits_device, vocab, "draft logits"));
    copied = true;
  }
  return std::span<const float>(host);
}

absl::Status CudaMtpBackend::CopyRow(float* dst, const float* src, const char* what) {
  const size_t bytes = static_cast<size_t>(config().hidden_size) * sizeof(float);
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx().stream()),
                  absl::StrCat("cudaMemcpyAsync (", what, ")"));
}

absl::Status CudaMtpBackend::QueueHidden(const float* hidden_device, int64_t rows) {
  const int64_t H = config().hidden_size;
  ASSIGN_OR_RETURN(float* buffer, queued_hidden_.Reserve(ctx(), (queued_rows_ + rows) * H, "MTP queued hidden rows",
                                                         /*keep=*/true));
  RETURN_IF_ERROR(FromCuda(cudaMemcpyAsync(buffer + queued_rows_ * H, hidden_device,
                                           static_cast<size_t>(rows * H) * sizeof(float), cudaMemcpyDeviceToDevice,
                                           ctx().stream()),
                           "cudaMemcpyAsync (MTP queued hidden rows)"));
  queued_rows_ += rows;
  return absl::OkStatus();
}

absl::Status CudaMtpBackend::TruncateCache(int64_t length) {
  return cache_->Truncate(std::min(cache_->length(), length));
}

void CudaMtpBackend::ClearCache() {
  cache_->Clear();
  has_start_ = false;
  start_topk_.width = 0;
}

absl::Status CudaMtpBackend::Extend(int64_t begin, std::span<const int32_t> tokens, int64_t first_position,
                                    const MtpOptions& options, bool keep_start) {
  const int64_t H = config().hidden_size;
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (begin < 0 || begin + rows > queued_rows_) {
    return absl::InternalError("GPU MTP drafter: extend past the queued hidden rows");
  }
  std::vector<int64_t> positions(rows);  // [rows] absolute positions of the pairs
  for (int64_t r = 0; r < rows; ++r) positions[r] = first_position + r;
  ASSIGN_OR_RETURN(DeviceMtpStep step,
                   module_->ExtendDevice(*cache_, queued_hidden_.data() + begin * H, tokens, positions, options));
  if (!keep_start) return absl::OkStatus();
  ASSIGN_OR_RETURN(float* normed, start_normed_.Reserve(ctx(), H, "MTP start state"));
  ASSIGN_OR_RETURN(float* raw, start_raw_.Reserve(ctx(), H, "MTP start state"));
  RETURN_IF_ERROR(CopyRow(normed, step.normed + (rows - 1) * H, "MTP start state"));
  RETURN_IF_ERROR(CopyRow(raw, step.raw + (rows - 1) * H, "MTP start state"));
  const DeviceTopK& topk = module_->topk();
  start_topk_.width = 0;
  if (topk.width > 0 && topk.rows == rows) {
    RETURN_IF_ERROR(start_topk_.Reshape(1, topk.width));
    RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(start_topk_.selected.data(), topk.selected.data() + (rows - 1) * topk.width,
                        static_cast<size_t>(topk.width) * sizeof(int32_t), cudaMemcpyDeviceToDevice, ctx().stream()),
        "cudaMemcpyAsync (MTP start selection)"));
  }
  has_start_ = true;
  return absl::OkStatus();
}

absl::Status CudaMtpBackend::BeginChain() {
  if (!has_start_) return absl::InternalError("GPU MTP drafter: no committed pair to start a chain from");
  const int64_t H = config().hidden_size;
  ASSIGN_OR_RETURN(float* normed, chained_normed_.Reserve(ctx(), H, "MTP chained state"));
  ASSIGN_OR_RETURN(float* raw, chained_raw_.Reserve(ctx(), H, "MTP chained state"));
  RETURN_IF_ERROR(CopyRow(normed, start_normed_.data(), "MTP chained state"));
  return CopyRow(raw, start_raw_.data(), "MTP chained state");
}

absl::StatusOr<MtpHeadRow*> CudaMtpBackend::Head() {
  ASSIGN_OR_RETURN(const float* logits, module_->LogitsDevice(chained_normed_.data(), 1));  // [1, V]
  head_.ctx = &ctx();
  head_.vocab = config().vocab_size;
  head_.logits_device = logits;
  head_.copied = false;
  return &head_;
}

absl::Status CudaMtpBackend::Step(int32_t token, int64_t position, const MtpOptions& options, bool share_selection) {
  const float* input = options.chain == MtpChain::kNormed ? chained_normed_.data() : chained_raw_.data();  // [H]
  ASSIGN_OR_RETURN(DeviceMtpStep step,
                   module_->ExtendDevice(*cache_, input, std::span<const int32_t>(&token, 1),
                                         std::span<const int64_t>(&position, 1), options,
                                         share_selection ? &start_topk_ : nullptr));
  RETURN_IF_ERROR(CopyRow(chained_normed_.data(), step.normed, "MTP chained state"));
  return CopyRow(chained_raw_.data(), step.raw, "MTP chained state");
}

}  // namespace mtpspec::cuda
