#include "pipeline/cuda_mtp_drafter.h"

#include "absl/strings/str_cat.h"
#include "mtp/mtp_chain_cuda.h"
#include "verify/sampler_cuda.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<MtpDrafter>> CreateCudaMtpDrafter(CudaTarget& target, int64_t capacity,
                                                                const MtpOptions& options) {
  ASSIGN_OR_RETURN(auto backend, cuda::CudaMtpBackend::Create(target.model(), capacity));
  cuda::Context& ctx = backend->ctx();
  const int64_t vocab = target.model().config().vocab_size;
  const MtpHidden which = options.hidden;
  MtpDrafter::HiddenSource hidden = [&target, which](const TargetStep&, int64_t first_position,
                                                     int64_t rows) -> absl::StatusOr<const float*> {
    const cuda::DeviceForward& last = target.last_forward();
    if (target.last_first_position() != first_position || rows > last.rows) {
      return absl::InternalError(absl::StrCat(
          "GPU MTP drafter: committed rows [", first_position, ", ", first_position + rows,
          ") are not rows of the GPU target's last forward (which started at ", target.last_first_position(),
          " with ", last.rows, " rows); the drafter must observe its own CudaTarget"));
    }
    return which == MtpHidden::kPostNorm ? last.hidden_postnorm : last.hidden_prenorm;
  };
  MtpDrafter::ArgmaxFn argmax = [&ctx, vocab](MtpHeadRow& head) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, cuda::ArgmaxCuda(ctx, head.logits(), 1, vocab));
    if (ids.size() != 1) return absl::InternalError("GPU MTP drafter: ArgmaxCuda returned no id");
    return ids[0];
  };
  return MtpDrafter::Create(std::move(backend), options, std::move(hidden), std::move(argmax));
}

}  // namespace mtpspec
