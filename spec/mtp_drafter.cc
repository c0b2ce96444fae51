#include "spec/mtp_drafter.h"

#include <algorithm>
#include <chrono>
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

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MtpDrafter>> MtpDrafter::Create(const Model& model, int64_t capacity,
                                                              const MtpOptions& options) {
  if (options.extend_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MTP extend_chunk must be >= 1, got ", options.extend_chunk));
  }
  ASSIGN_OR_RETURN(auto module, MtpModule::Create(model));
  ASSIGN_OR_RETURN(auto cache, module->NewCache(capacity));
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(std::move(module), std::move(cache), options));
}

void MtpDrafter::Reset() {
  cache_->Clear();
  committed_ = 0;
  extend_at_observe_ = true;
  pending_hidden_.clear();
  pending_tokens_.clear();
  last_normed_.clear();
  last_raw_.clear();
  last_topk_.clear();
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
  const int64_t expected = committed_ + static_cast<int64_t>(pending_tokens_.size());
  if (first_position != expected) {
    return absl::InternalError(absl::StrCat("MTP drafter: rows start at ", first_position, ", expected ", expected));
  }
  // The previous draft's slots are speculative: drop them, so the cache holds committed pairs only.
  RETURN_IF_ERROR(cache_->Truncate(std::min(cache_->length(), committed_)));
  // Pair (h_t, x_{t+1}) for each committed row t.
  for (int64_t r = 0; r < rows; ++r) {
    pending_hidden_.insert(pending_hidden_.end(), hidden.data<float>() + r * H, hidden.data<float>() + (r + 1) * H);
    pending_tokens_.push_back(sequence[first_position + r + 1]);
  }
  if (!extend_at_observe_) return absl::OkStatus();  // plain decoding: defer to the next Propose
  extend_at_observe_ = false;  // until the loop proposes again
  return ExtendPending();
}

absl::Status MtpDrafter::ExtendPending() {
  const int64_t H = module_->model().config().hidden_size;
  const int64_t total = static_cast<int64_t>(pending_tokens_.size());
  if (total == 0) return absl::OkStatus();
  MtpOptions chunk_options = options_;
  if (chunk_options.attention.path == AttentionPath::kAuto) {
    chunk_options.attention.gather_max_rows = std::max(chunk_options.attention.gather_max_rows, options_.extend_chunk);
  }
  for (int64_t begin = 0; begin < total; begin += options_.extend_chunk) {
    const int64_t rows = std::min(options_.extend_chunk, total - begin);
    std::vector<int64_t> positions(rows);  // [rows] absolute positions of the pairs
    for (int64_t r = 0; r < rows; ++r) positions[r] = committed_ + r;
    ASSIGN_OR_RETURN(MtpStepOutput out,
                     module_->Extend(*cache_, pending_hidden_.data() + begin * H,
                                     std::span<const int32_t>(pending_tokens_).subspan(begin, rows), positions,
                                     chunk_options));
    committed_ += rows;
    if (begin + rows == total) {  // the newest pair: keep what the next chain starts from
      const float* normed = out.normed.data<float>() + (rows - 1) * H;
      const float* raw = out.raw.data<float>() + (rows - 1) * H;
      last_normed_.assign(normed, normed + H);
      last_raw_.assign(raw, raw + H);
      last_topk_.clear();
      if (out.topk.width > 0) last_topk_.assign(out.topk.row(rows - 1), out.topk.row(rows - 1) + out.topk.width);
    }
  }
  pending_hidden_.clear();
  pending_tokens_.clear();
  return absl::OkStatus();
}

absl::StatusOr<Draft> MtpDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                          const DraftSampling& sampling) {
  Draft draft;
  extend_at_observe_ = true;
  if (k <= 0 || committed_ + static_cast<int64_t>(pending_tokens_.size()) == 0) return draft;
  const int64_t H = module_->model().config().hidden_size;
  const int64_t vocab = module_->model().config().vocab_size;
  // Slots past the committed pairs belong to an earlier chain.
  RETURN_IF_ERROR(cache_->Truncate(std::min(cache_->length(), committed_)));
  if (!pending_tokens_.empty()) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(ExtendPending());
    draft.catch_up_seconds = SecondsSince(start);
  }
  // The newest committed pair (h_{n−1}, x_n) sits at position n − 1 = sequence.size() − 2.
  const int64_t anchor = committed_ - 1;
  if (anchor != static_cast<int64_t>(sequence.size()) - 2) {
    return absl::InternalError(absl::StrCat("MTP drafter: the newest pair is at ", anchor, " but the sequence has ",
                                            sequence.size(), " tokens"));
  }
  if (anchor + k - 1 >= cache_->capacity()) k = cache_->capacity() - anchor;
  if (k <= 0) return draft;

  // Token drafted by step j is a proposal for absolute position anchor + 2 + j.
  const Tensor first_logits = module_->Logits(last_normed_.data(), 1);  // [1, V]
  draft.tokens.push_back(ChooseDraft(first_logits.data<float>(), vocab, sampling, anchor + 2, draft));
  const bool share = options_.index_share == MtpIndexShare::kShared && !last_topk_.empty() &&
                     committed_ > module_->model().config().index_topk;
  TopK shared;
  if (share) {  // the newest pair's selection, reused by every chained step
    shared.width = static_cast<int64_t>(last_topk_.size());
    shared.selected = last_topk_;
  }
  std::vector<float> chained = options_.chain == MtpChain::kNormed ? last_normed_ : last_raw_;  // [H]
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
