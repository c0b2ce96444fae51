#include "spec/mtp_drafter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/philox.h"

namespace mtpspec {
namespace {

// Draws the draft token from step logits: argmax, or a q-sample keyed by (seed, position, kDraft).
int32_t ChooseDraft(const float* logits, int64_t vocab, const DraftSampling& sampling, int64_t position,
                    Draft& draft) {
  if (!sampling.sample) return Argmax(logits, vocab);
  std::vector<double> q;
  SamplingDistribution(logits, vocab, sampling.sampling, &q);
  const int32_t token = DrawFrom(q, UniformAt(sampling.sampling.seed, static_cast<uint64_t>(position),
                                              static_cast<uint32_t>(RngStream::kDraft)));
  draft.probs.push_back(std::move(q));
  return token;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(const Model& model, int64_t capacity,
                                                              const MtpOptions& options) {
  ASSIGN_OR_RETURN(auto module, MtpModule::Create(model));
  ASSIGN_OR_RETURN(auto cache, module->NewCache(capacity));
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(std::move(module), std::move(cache), options));
}

void MtpDrafter::Reset() {
  cache_->Clear();
  pending_hidden_.clear();
  pending_tokens_.clear();
  pending_position_ = 0;
}

absl::Status MtpDrafter::Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                 const TargetStep& step) {
  const int64_t H = module_->model().config().hidden_size;
  const Tensor& hidden = options_.hidden == MtpHidden::kPostNorm ? step.hidden_postnorm : step.hidden_prenorm;
  if (hidden.empty() || hidden.dim(0) < rows || hidden.dim(1) != H) {
    return absl::InternalError("MTP drafter: the target step carries no hidden states for the committed rows");
  }
  if (first_position + rows > static_cast<int64_t>(sequence.size()) - 1) {
    return absl::InternalError("MTP drafter: committed rows run past the sequence");
  }
  if (pending_tokens_.empty()) pending_position_ = first_position;
  if (pending_position_ + static_cast<int64_t>(pending_tokens_.size()) != first_position) {
    return absl::InternalError(absl::StrCat("MTP drafter: rows start at ", first_position, ", expected ",
                                            pending_position_ + static_cast<int64_t>(pending_tokens_.size())));
  }
  // Pair (h_t, x_{t+1}) for each committed row t.
  for (int64_t r = 0; r < rows; ++r) {
    pending_hidden_.insert(pending_hidden_.end(), hidden.data<float>() + r * H, hidden.data<float>() + (r + 1) * H);
    pending_tokens_.push_back(sequence[first_position + r + 1]);
  }
  return absl::OkStatus();
}

absl::StatusOr<Draft> MtpDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                          const DraftSampling& sampling) {
  Draft draft;
  if (k <= 0 || pending_tokens_.empty()) return draft;
  const int64_t H = module_->model().config().hidden_size;
  const int64_t vocab = module_->model().config().vocab_size;
  const int64_t rows = static_cast<int64_t>(pending_tokens_.size());
  // The last committed pair sits at position sequence.size() − 2; chained steps follow it.
  const int64_t anchor = pending_position_ + rows - 1;
  if (anchor + k - 1 >= cache_->capacity()) k = cache_->capacity() - anchor;
  if (k <= 0) return draft;

  // Drop the previous draft's speculative slots, then extend by the committed pairs.
  RETURN_IF_ERROR(cache_->Truncate(std::min(cache_->length(), pending_position_)));
  std::vector<int64_t> positions;
  for (int64_t r = 0; r < rows; ++r) positions.push_back(pending_position_ + r);
  ASSIGN_OR_RETURN(MtpStepOutput step, module_->Forward(*cache_, pending_hidden_.data(), pending_tokens_, positions,
                                                        options_, {rows - 1}));
  pending_hidden_.clear();
  pending_tokens_.clear();
  pending_position_ = anchor + 1;

  // Token drafted by step j is a proposal for absolute position anchor + 1 + j.
  draft.tokens.push_back(ChooseDraft(step.logits.data<float>(), vocab, sampling, anchor + 2, draft));
  const bool share = options_.index_share == MtpIndexShare::kShared && step.topk.width > 0 &&
                     cache_->length() > module_->model().config().index_topk;
  TopK shared;
  if (share) {  // step 1's selection for its last row, reused by every chained step
    shared.width = step.topk.width;
    shared.selected.assign(step.topk.row(rows - 1), step.topk.row(rows - 1) + step.topk.width);
  }
  std::vector<float> chained(H);
  const Tensor& first = options_.chain == MtpChain::kNormed ? step.normed : step.raw;
  std::memcpy(chained.data(), first.data<float>() + (rows - 1) * H, H * sizeof(float));
  for (int64_t j = 1; j < k; ++j) {
    const int64_t position = anchor + j;
    const int32_t token = draft.tokens.back();
    ASSIGN_OR_RETURN(MtpStepOutput next,
                     module_->Forward(*cache_, chained.data(), std::span<const int32_t>(&token, 1),
                                      std::span<const int64_t>(&position, 1), options_, {}, share ? &shared : nullptr));
    draft.tokens.push_back(ChooseDraft(next.logits.data<float>(), vocab, sampling, anchor + 2 + j, draft));
    const Tensor& out = options_.chain == MtpChain::kNormed ? next.normed : next.raw;
    std::memcpy(chained.data(), out.data<float>(), H * sizeof(float));
  }
  return draft;
}

}  // namespace mtpspec
