#include "spec/mtp_drafter.h"

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "mtp/mtp_chain_cpu.h"
#include "verify/sampler.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(std::unique_ptr<MtpChainBackend> backend,
                                                              const MtpOptions& options, HiddenSource hidden,
                                                              ArgmaxFn argmax) {
  ASSIGN_OR_RETURN(auto chain, MtpDraftChain::Create(std::move(backend), options));
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(std::move(chain), std::move(hidden), std::move(argmax)));
}

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(const Model& model, int64_t capacity,
                                                              const MtpOptions& options) {
  const int64_t H = model.config().hidden_size;
  const MtpHidden which = options.hidden;
  HiddenSource hidden = [H, which](const TargetStep& step, int64_t, int64_t rows) -> absl::StatusOr<const float*> {
    const Tensor& h = which == MtpHidden::kPostNorm ? step.hidden_postnorm : step.hidden_prenorm;  // [L, H]
    if (h.empty() || h.dim(0) < rows || h.dim(1) != H) {
      return absl::InternalError("MTP drafter: the target step carries no hidden states for the committed rows");
    }
    return h.data<float>();
  };
  ArgmaxFn argmax = [](MtpHeadRow& head) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::span<const float> logits, head.HostLogits());
    return Argmax(logits.data(), static_cast<int64_t>(logits.size()));
  };
  ASSIGN_OR_RETURN(auto backend, CpuMtpBackend::Create(model, capacity));
  return Create(std::move(backend), options, std::move(hidden), std::move(argmax));
}

const KvCache* MtpDrafter::host_cache() const {
  const auto* host = dynamic_cast<const CpuMtpBackend*>(&chain_->backend());
  return host == nullptr ? nullptr : &host->cache();
}

absl::Status MtpDrafter::Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                 const TargetStep& step) {
  ASSIGN_OR_RETURN(const float* hidden, hidden_(step, first_position, rows));
  return chain_->Commit(sequence, first_position, rows, hidden);
}

absl::StatusOr<Draft> MtpDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                          const DraftSampling& sampling) {
  Draft draft;
  // Argmax drafts, or q-samples keyed by (seed, position, kDraft) whose q the rejection rule needs.
  const MtpDraftPicker pick = [&](MtpHeadRow& head, int64_t position) -> absl::StatusOr<int32_t> {
    if (!sampling.sample) return argmax_(head);
    ASSIGN_OR_RETURN(std::span<const float> logits, head.HostLogits());
    std::vector<double> q;
    SamplingDistribution(logits.data(), static_cast<int64_t>(logits.size()), sampling.sampling, &q);
    const int32_t token = DrawFrom(q, UniformAt(sampling.sampling.seed, static_cast<uint64_t>(position),
                                                static_cast<uint32_t>(RngStream::kDraft)));
    draft.probs.push_back(std::move(q));
    return token;
  };
  ASSIGN_OR_RETURN(MtpChainDraft chained, chain_->Propose(sequence, k, pick));
  draft.tokens = std::move(chained.tokens);
  draft.catch_up_seconds = chained.catch_up_seconds;
  return draft;
}

absl::StatusOr<TreeDraft> MtpDrafter::ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape) {
  ASSIGN_OR_RETURN(MtpTreeDraft tree, chain_->ProposeTree(sequence, shape));
  TreeDraft draft;
  draft.tokens = std::move(tree.tokens);
  draft.parents = std::move(tree.parents);
  draft.ranks = std::move(tree.ranks);
  draft.catch_up_seconds = tree.catch_up_seconds;
  return draft;
}

}  // namespace mtpspec
