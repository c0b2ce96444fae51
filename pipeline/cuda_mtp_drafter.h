// The MTP drafter on the GPU: the MtpDrafter of pipeline/mtp_drafter.h over the CUDA backend of the
// draft chain (mtp/mtp_chain_cuda.h), so the chain's bookkeeping is the same code as on the host.
//
// The hidden states never leave the device: Observe takes the committed rows of the CudaTarget's
// last forward (device to device), so the drafter must be paired with that target. Argmax drafts
// cross to the host as ids only; q-sampled drafts copy their logits row back, because the
// rejection rule needs the draft distribution on the host.
#pragma once

#include <memory>

#include "pipeline/cuda_target.h"
#include "pipeline/mtp_drafter.h"

namespace mtpspec {

// `target` (and its model) must outlive the drafter.
absl::StatusOr<std::unique_ptr<MtpDrafter>> CreateCudaMtpDrafter(CudaTarget& target, int64_t capacity,
                                                                const MtpOptions& options);

}  // namespace mtpspec
