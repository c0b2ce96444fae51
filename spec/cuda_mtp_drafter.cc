#include "spec/cuda_mtp_drafter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "verify/sampler.h"
#include "verify/sampler_cuda.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<CudaMtpDrafter>> CudaMtpDrafter::Create(CudaTarget& target, int64_t capacity,
                                                                      const MtpOptions& options) {
  ASSIGN_OR_RETURN(auto module, cuda::CudaMtpModule::Create(target.model()));
  ASSIGN_OR_RETURN(auto cache, module->NewCache(capacity));
  return std::unique_ptr<CudaMtpDrafter>(new CudaMtpDrafter(target, std::move(module), std::move(cache), options));
}

void CudaMtpDrafter::Reset() {
  cache_->Clear();
  pending_tokens_.clear();
  pending_position_ = 0;
}

absl::Status CudaMtpDrafter::Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                     const TargetStep& step) {
  const int64_t H = target_.model().config().hidden_size;
  const cuda::DeviceForward& last = target_.last_forward();
  if (target_.last_first_position() != first_position || rows > last.rows) {
    return absl::InternalError(absl::StrCat("GPU MTP drafter: committed rows [", first_position, ", ",
                                            first_position + rows, ") are not rows of the GPU target's last forward ",
                                            "(which started at ", target_.last_first_position(), " with ", last.rows,
                                            " rows); the drafter must observe its own CudaTarget"));
  }
  if (first_position + rows > static_cast<int64_t>(sequence.size()) - 1) {
    return absl::InternalError("GPU MTP drafter: committed rows run past the sequence");
  }
  const int64_t pending = static_cast<int64_t>(pending_tokens_.size());
  if (pending == 0) pending_position_ = first_position;
  if (pending_position_ + pending != first_position) {
    return absl::InternalError(absl::StrCat("GPU MTP drafter: rows start at ", first_position, ", expected ",
                                            pending_position_ + pending));
  }
  if (rows <= 0) return absl::OkStatus();
  // Pair (h_t, x_{t+1}) for each committed row t; the hidden rows are copied on the device.
  cuda::Context& ctx = module_->ctx();
  const float* hidden = options_.hidden == MtpHidden::kPostNorm ? last.hidden_postnorm : last.hidden_prenorm;
  ASSIGN_OR_RETURN(float* buffer, pending_hidden_.Reserve(ctx, (pending + rows) * H, "MTP pending hidden rows",
                                                          /*keep=*/true));
  RETURN_IF_ERROR(cuda::FromCuda(cudaMemcpyAsync(buffer + pending * H, hidden, static_cast<size_t>(rows * H) * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, ctx.stream()),
                                 "cudaMemcpyAsync (MTP pending hidden rows)"));
  for (int64_t r = 0; r < rows; ++r) pending_tokens_.push_back(sequence[first_position + r + 1]);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> CudaMtpDrafter::ChooseDraft(const float* logits_device, const DraftSampling& sampling,
                                                    int64_t position, Draft& draft) {
  cuda::Context& ctx = module_->ctx();
  const int64_t vocab = target_.model().config().vocab_size;
  if (!sampling.sample) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, cuda::ArgmaxCuda(ctx, logits_device, 1, vocab));
    if (ids.size() != 1) return absl::InternalError("GPU MTP drafter: ArgmaxCuda returned no id");
    return ids[0];
  }
  // A q-sampled draft: the rejection rule needs q on the host, so the row crosses (as MtpDrafter).
  ASSIGN_OR_RETURN(std::vector<float> logits, cuda::CopyToHost(ctx, logits_device, vocab, "draft logits"));  // [V]
  std::vector<double> q;
  SamplingDistribution(logits.data(), vocab, sampling.sampling, &q);
  const int32_t token = DrawFrom(q, UniformAt(sampling.sampling.seed, static_cast<uint64_t>(position),
                                              static_cast<uint32_t>(RngStream::kDraft)));
  draft.probs.push_back(std::move(q));
  return token;
}

absl::StatusOr<Draft> CudaMtpDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                              const DraftSampling& sampling) {
  Draft draft;
  if (k <= 0 || pending_tokens_.empty()) return draft;
  const int64_t H = target_.model().config().hidden_size;
  const int64_t rows = static_cast<int64_t>(pending_tokens_.size());
  // The last committed pair sits at position sequence.size() − 2; chained steps follow it.
  const int64_t anchor = pending_position_ + rows - 1;
  if (anchor + k - 1 >= cache_->capacity()) k = cache_->capacity() - anchor;
  if (k <= 0) return draft;
  cuda::Context& ctx = module_->ctx();

  // Drop the previous draft's speculative slots, then extend by the committed pairs: all but the
  // last chunk without the head, the last chunk with logits for its last row.
  RETURN_IF_ERROR(cache_->Truncate(std::min(cache_->length(), pending_position_)));
  cuda::DeviceMtpStep step;
  for (int64_t begin = 0; begin < rows; begin += kExtendChunk) {
    const int64_t n = std::min(kExtendChunk, rows - begin);
    std::vector<int64_t> positions;
    for (int64_t r = 0; r < n; ++r) positions.push_back(pending_position_ + begin + r);
    const float* hidden = pending_hidden_.data() + begin * H;
    const std::span<const int32_t> tokens(pending_tokens_.data() + begin, static_cast<size_t>(n));
    if (begin + n < rows) {
      ASSIGN_OR_RETURN(step, module_->ExtendDevice(*cache_, hidden, tokens, positions, options_));
    } else {
      ASSIGN_OR_RETURN(step, module_->ForwardDevice(*cache_, hidden, tokens, positions, options_, {n - 1}));
    }
  }
  const int64_t last_row = step.rows - 1;  // the anchor's row in the last chunk
  pending_tokens_.clear();
  pending_position_ = anchor + 1;

  // Token drafted by step j is a proposal for absolute position anchor + 1 + j.
  ASSIGN_OR_RETURN(int32_t token, ChooseDraft(step.logits, sampling, anchor + 2, draft));
  draft.tokens.push_back(token);
  const cuda::DeviceTopK& step_topk = module_->topk();
  const bool share = options_.index_share == MtpIndexShare::kShared && step_topk.width > 0 &&
                     cache_->length() > target_.model().config().index_topk;
  if (share) {  // step 1's selection for its last row, reused by every chained step
    RETURN_IF_ERROR(shared_.Reshape(1, step_topk.width));
    RETURN_IF_ERROR(cuda::FromCuda(
        cudaMemcpyAsync(shared_.selected.data(), step_topk.selected.data() + last_row * step_topk.width,
                        static_cast<size_t>(step_topk.width) * sizeof(int32_t), cudaMemcpyDeviceToDevice, ctx.stream()),
        "cudaMemcpyAsync (MTP shared selection)"));
  }
  ASSIGN_OR_RETURN(float* chained, chained_.Reserve(ctx, H, "MTP chained hidden"));  // [H]
  auto keep_chained = [&](const cuda::DeviceMtpStep& s, int64_t row) -> absl::Status {
    const float* src = (options_.chain == MtpChain::kNormed ? s.normed : s.raw) + row * H;
    return cuda::FromCuda(cudaMemcpyAsync(chained, src, static_cast<size_t>(H) * sizeof(float),
                                          cudaMemcpyDeviceToDevice, ctx.stream()),
                          "cudaMemcpyAsync (MTP chained hidden)");
  };
  RETURN_IF_ERROR(keep_chained(step, last_row));
  for (int64_t j = 1; j < k; ++j) {
    const int64_t position = anchor + j;
    const int32_t previous = draft.tokens.back();
    ASSIGN_OR_RETURN(cuda::DeviceMtpStep next,
                     module_->ForwardDevice(*cache_, chained, std::span<const int32_t>(&previous, 1),
                                            std::span<const int64_t>(&position, 1), options_, {},
                                            share ? &shared_ : nullptr));
    ASSIGN_OR_RETURN(token, ChooseDraft(next.logits, sampling, anchor + 2 + j, draft));
    draft.tokens.push_back(token);
    RETURN_IF_ERROR(keep_chained(next, 0));
  }
  return draft;
}

}  // namespace mtpspec
