#include "mtp/mtp_chain.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"

namespace mtpspec {

AttentionOptions ExtendAttentionOptions(const MtpOptions& options) {
  AttentionOptions attention = options.attention;
  if (attention.path == AttentionPath::kAuto) {
    attention.gather_max_rows = std::max(attention.gather_max_rows, options.extend_chunk);
  }
  return attention;
}

absl::StatusOr<std::unique_ptr<MtpDraftChain>> MtpDraftChain::Create(std::unique_ptr<MtpChainBackend> backend,
                                                                     const MtpOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("MTP chain: no backend");
  if (options.extend_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MTP extend_chunk must be >= 1, got ", options.extend_chunk));
  }
  const ModelConfig& config = backend->config();
  MtpOptions resolved = options;
  resolved.chain = ResolveMtpChain(options.chain, config);
  if (!config.has_indexer && options.index_share == MtpIndexShare::kShared) {
    return absl::InvalidArgumentError(absl::StrCat("mtp index share shared: ", config.model_type_name,
                                                   " has no DSA indexer, so there is no selection to share"));
  }
  return std::unique_ptr<MtpDraftChain>(new MtpDraftChain(std::move(backend), resolved));
}

void MtpDraftChain::Reset() {
  backend_->ClearCache();
  backend_->ClearQueue();
  committed_ = 0;
  extend_at_commit_ = true;
  extend_due_ = false;
  queued_tokens_.clear();
}

absl::Status MtpDraftChain::AssumeCommitted(int64_t pairs) {
  if (committed_ != 0 || !queued_tokens_.empty()) {
    return absl::FailedPreconditionError("MTP chain: AssumeCommitted needs a chain fresh from Reset");
  }
  if (pairs < 0 || pairs >= backend_->capacity()) {
    return absl::InvalidArgumentError(absl::StrCat("MTP chain: ", pairs, " assumed pairs do not fit a cache of ",
                                                   backend_->capacity()));
  }
  committed_ = pairs;
  return absl::OkStatus();
}

absl::Status MtpDraftChain::Commit(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                   const float* hidden) {
  if (rows < 0 || first_position + rows > static_cast<int64_t>(sequence.size()) - 1) {
    return absl::InternalError("MTP drafter: committed rows run past the sequence");
  }
  RETURN_IF_ERROR(ExtendDue());  // the previous Commit's extend, where Commit would have run it
  const int64_t expected = committed_ + static_cast<int64_t>(queued_tokens_.size());
  if (first_position != expected) {
    return absl::InternalError(absl::StrCat("MTP drafter: rows start at ", first_position, ", expected ", expected));
  }
  if (rows > 0) {
    RETURN_IF_ERROR(backend_->QueueHidden(hidden, rows));
    // Pair (h_t, x_{t+1}) for each committed row t.
    for (int64_t r = 0; r < rows; ++r) queued_tokens_.push_back(sequence[first_position + r + 1]);
  }
  if (!extend_at_commit_) return absl::OkStatus();  // plain decoding: defer to the next Propose
  extend_at_commit_ = false;  // until the loop proposes again
  // In a batch the extend waits, but not the prompt's, the first: it stays in the prefill.
  if (batch_extends_ && committed_ > 0) {
    extend_due_ = !queued_tokens_.empty();
    return absl::OkStatus();
  }
  return ExtendQueued();
}

MtpOptions MtpDraftChain::ExtendOptions() const {
  MtpOptions chunk_options = options_;
  chunk_options.attention = ExtendAttentionOptions(options_);
  return chunk_options;
}

absl::Status MtpDraftChain::ExtendQueued() {
  extend_due_ = false;
  const int64_t total = static_cast<int64_t>(queued_tokens_.size());
  if (total == 0) return absl::OkStatus();
  // The previous draft's slots are speculative: drop them, so the cache holds committed pairs only.
  RETURN_IF_ERROR(backend_->TruncateCache(committed_));
  const MtpOptions chunk_options = ExtendOptions();
  for (int64_t begin = 0; begin < total; begin += options_.extend_chunk) {
    const int64_t rows = std::min(options_.extend_chunk, total - begin);
    const bool newest = begin + rows == total;
    RETURN_IF_ERROR(backend_->Extend(begin, std::span<const int32_t>(queued_tokens_).subspan(begin, rows),
                                     committed_, chunk_options, /*keep_start=*/newest));
    committed_ += rows;
  }
  backend_->ClearQueue();
  queued_tokens_.clear();
  return absl::OkStatus();
}

absl::Status MtpDraftChain::ExtendDueBatch(std::span<MtpDraftChain* const> chains, MtpBatchBackend& batch,
                                           std::span<double* const> seconds) {
  std::vector<MtpChainBackend*> backends;
  std::vector<std::span<const int32_t>> tokens;
  std::vector<int64_t> first_positions;
  for (MtpDraftChain* chain : chains) {
    const int64_t rows = static_cast<int64_t>(chain->queued_tokens_.size());
    if (!chain->extend_due_ || rows < 1 || rows >= kLinearGemmRows || rows > chain->options_.extend_chunk) {
      return absl::InternalError("MTP batch: a chain's extend is not due as one short chunk");
    }
    // As ExtendQueued: the previous draft's slots go first.
    RETURN_IF_ERROR(chain->backend_->TruncateCache(chain->committed_));
    backends.push_back(chain->backend_.get());
    tokens.push_back(chain->queued_tokens_);
    first_positions.push_back(chain->committed_);
  }
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(batch.Extends(backends, tokens, first_positions, chains.front()->ExtendOptions()));
  const double share = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                       static_cast<double>(chains.size());
  for (size_t i = 0; i < chains.size(); ++i) {
    MtpDraftChain& chain = *chains[i];
    chain.committed_ += static_cast<int64_t>(chain.queued_tokens_.size());
    chain.backend_->ClearQueue();
    chain.queued_tokens_.clear();
    chain.extend_due_ = false;
    *seconds[i] += share;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MtpDraftChain::BeginDraft(std::span<const int32_t> sequence, double* catch_up_seconds) {
  extend_at_commit_ = true;
  if (committed_ + static_cast<int64_t>(queued_tokens_.size()) == 0) return -1;
  if (!queued_tokens_.empty()) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(ExtendQueued());
    *catch_up_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // The newest committed pair (h_{n−1}, x_n) sits at position n − 1 = sequence.size() − 2.
  const int64_t anchor = committed_ - 1;
  if (anchor != static_cast<int64_t>(sequence.size()) - 2) {
    return absl::InternalError(absl::StrCat("MTP drafter: the newest pair is at ", anchor, " but the sequence has ",
                                            sequence.size(), " tokens"));
  }
  // Slots past the committed pairs belong to an earlier chain.
  RETURN_IF_ERROR(backend_->TruncateCache(committed_));
  return anchor;
}

bool MtpDraftChain::ShareSelection() const {
  return options_.index_share == MtpIndexShare::kShared && backend_->start_has_selection() &&
         committed_ > backend_->config().index_topk;
}

absl::StatusOr<MtpChainDraft> MtpDraftChain::Propose(std::span<const int32_t> sequence, int64_t k,
                                                     const MtpDraftPicker& pick) {
  MtpChainDraft draft;
  if (k <= 0) {
    extend_at_commit_ = true;
    return draft;
  }
  ASSIGN_OR_RETURN(const int64_t anchor, BeginDraft(sequence, &draft.catch_up_seconds));
  if (anchor < 0) return draft;
  // Chained step j writes slot anchor + j; the last one must fit the cache.
  k = std::min(k, backend_->capacity() - anchor);
  if (k <= 0) return draft;

  const bool share = ShareSelection();
  RETURN_IF_ERROR(backend_->BeginChain());
  for (int64_t j = 0; j < k; ++j) {
    if (j > 0) RETURN_IF_ERROR(backend_->Step(draft.tokens.back(), anchor + j, options_, share));
    ASSIGN_OR_RETURN(MtpHeadRow * head, backend_->Head());
    ASSIGN_OR_RETURN(const int32_t token, pick(*head, anchor + 2 + j));
    draft.tokens.push_back(token);
  }
  return draft;
}

std::vector<absl::StatusOr<MtpChainDraft>> MtpDraftChain::ProposeBatch(
    std::span<MtpDraftChain* const> chains, std::span<const std::span<const int32_t>> sequences,
    std::span<const int64_t> ks, std::span<const MtpDraftPicker> picks, MtpBatchBackend& batch) {
  const size_t n = chains.size();
  std::vector<absl::StatusOr<MtpChainDraft>> results(n, MtpChainDraft());
  std::vector<int64_t> anchors(n, -1), lengths(n, 0);
  // The chains that draft in the batch: one batched step runs under one set of options, the first
  // joining chain's.
  std::vector<bool> joins(n, false);
  const MtpOptions* first = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const MtpOptions& own = chains[i]->options_;
    const MtpOptions& lead = first == nullptr ? own : *first;
    const bool same = own.chain == lead.chain && own.attention.path == lead.attention.path &&
                      own.attention.form == lead.attention.form &&
                      own.attention.gather_max_rows == lead.attention.gather_max_rows &&
                      own.extend_chunk == lead.extend_chunk;
    joins[i] = ks[i] > 0 && batch.CanJoin(*chains[i]->backend_) && own.index_share == MtpIndexShare::kExact && same;
    if (joins[i] && first == nullptr) first = &own;
  }
  // Their due extends, where two or more are short enough to keep their per-row bits, in one forward.
  std::vector<MtpDraftChain*> due;
  std::vector<double*> due_seconds;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = chains[i]->deferred_pairs();
    if (joins[i] && chains[i]->extend_due_ && rows < kLinearGemmRows && rows <= chains[i]->options_.extend_chunk) {
      due.push_back(chains[i]);
      due_seconds.push_back(&results[i]->catch_up_seconds);
    }
  }
  // On failure the extends stay due, and each chain runs its own below (reporting its own error).
  if (due.size() >= 2) ExtendDueBatch(due, batch, due_seconds).IgnoreError();

  std::vector<size_t> batched;  // chains drafting in the batch
  for (size_t i = 0; i < n; ++i) {
    MtpDraftChain& chain = *chains[i];
    if (!joins[i]) {
      results[i] = chain.Propose(sequences[i], ks[i], picks[i]);
      continue;
    }
    MtpChainDraft& draft = *results[i];
    absl::StatusOr<int64_t> anchor = chain.BeginDraft(sequences[i], &draft.catch_up_seconds);
    if (!anchor.ok()) {
      results[i] = anchor.status();
      continue;
    }
    if (*anchor < 0) continue;
    lengths[i] = std::min(ks[i], chain.backend_->capacity() - *anchor);  // step j writes slot anchor + j
    if (lengths[i] <= 0) continue;
    if (absl::Status begun = chain.backend_->BeginChain(); !begun.ok()) {
      results[i] = begun;
      continue;
    }
    anchors[i] = *anchor;
    batched.push_back(i);
  }
  // Depth by depth over the chains that still draft; a chain whose step fails leaves with its error.
  auto fail = [&](const std::vector<size_t>& members, const absl::Status& status) {
    for (size_t i : members) results[i] = status;
  };
  for (int64_t j = 0; !batched.empty(); ++j) {
    std::vector<size_t> active;
    for (size_t i : batched) {
      if (j < lengths[i] && results[i].ok()) active.push_back(i);
    }
    if (active.empty()) break;
    std::vector<MtpChainBackend*> backends;
    for (size_t i : active) backends.push_back(chains[i]->backend_.get());
    if (j > 0) {
      std::vector<int32_t> tokens;
      std::vector<int64_t> positions;
      for (size_t i : active) {
        tokens.push_back(results[i]->tokens.back());
        positions.push_back(anchors[i] + j);
      }
      if (absl::Status stepped = batch.Steps(backends, tokens, positions, chains[active[0]]->options_); !stepped.ok()) {
        fail(active, stepped);
        break;
      }
    }
    absl::StatusOr<std::vector<MtpHeadRow*>> heads = batch.Heads(backends);
    if (!heads.ok()) {
      fail(active, heads.status());
      break;
    }
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t i = active[a];
      absl::StatusOr<int32_t> token = picks[i](*(*heads)[a], anchors[i] + 2 + j);
      if (!token.ok()) {
        results[i] = token.status();
        continue;
      }
      results[i]->tokens.push_back(*token);
    }
  }
  return results;
}

}  // namespace mtpspec
