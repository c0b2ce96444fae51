#include "pipeline/mtp_drafter.h"

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
  ASSIGN_OR_RETURN(auto drafter, Create(std::move(backend), options, std::move(hidden), std::move(argmax)));
  drafter->hidden_size_ = H;
  return drafter;
}

const KvCache* MtpDrafter::host_cache() const {
  const auto* host = dynamic_cast<const CpuMtpBackend*>(&chain_->backend());
  return host == nullptr ? nullptr : &host->cache();
}

KvCache* MtpDrafter::mutable_host_cache() {
  auto* host = dynamic_cast<CpuMtpBackend*>(&chain_->backend());
  return host == nullptr ? nullptr : &host->mutable_cache();
}

absl::Status MtpDrafter::Observe(std::span<const int32_t> sequence, int64_t first_position, int64_t rows,
                                 const TargetStep& step) {
  if (prompt_fill_ && first_position == 0 && rows >= 2) return ObserveFilledPrompt(sequence, rows, step);
  ASSIGN_OR_RETURN(const float* hidden, hidden_(step, first_position, rows));
  return chain_->Commit(sequence, first_position, rows, hidden);
}

absl::Status MtpDrafter::ObserveFilledPrompt(std::span<const int32_t> sequence, int64_t rows, const TargetStep& step) {
  KvCache* cache = mutable_host_cache();
  if (cache == nullptr || hidden_size_ == 0) {
    return absl::FailedPreconditionError("MTP drafter: a prompt fill needs the host backend");
  }
  ASSIGN_OR_RETURN(const float* hidden, hidden_(step, 0, rows));  // [rows, H]
  prompt_fill_(*cache, rows - 1);
  RETURN_IF_ERROR(chain_->AssumeCommitted(rows - 1));
  return chain_->Commit(sequence, rows - 1, 1, hidden + (rows - 1) * hidden_size_);
}

MtpDraftPicker MtpDrafter::Picker(const DraftSampling& sampling, std::vector<std::vector<double>>* probs) const {
  // Argmax drafts, or q-samples keyed by (seed, position, kDraft) whose q the rejection rule needs.
  return [this, sampling, probs](MtpHeadRow& head, int64_t position) -> absl::StatusOr<int32_t> {
    if (!sampling.sample) return argmax_(head);
    ASSIGN_OR_RETURN(std::span<const float> logits, head.HostLogits());
    std::vector<double> q;
    SamplingDistribution(logits.data(), static_cast<int64_t>(logits.size()), sampling.sampling, &q);
    const int32_t token = DrawFrom(q, UniformAt(sampling.sampling.seed, static_cast<uint64_t>(position),
                                                static_cast<uint32_t>(RngStream::kDraft)));
    probs->push_back(std::move(q));
    return token;
  };
}

absl::StatusOr<Draft> MtpDrafter::Propose(std::span<const int32_t> sequence, int64_t k,
                                          const DraftSampling& sampling) {
  Draft draft;
  ASSIGN_OR_RETURN(MtpChainDraft chained, chain_->Propose(sequence, k, Picker(sampling, &draft.probs)));
  draft.tokens = std::move(chained.tokens);
  draft.catch_up_seconds = chained.catch_up_seconds;
  return draft;
}

absl::StatusOr<TreeDraft> MtpDrafter::ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                                  const DraftSampling& sampling) {
  MtpChildPicker pick;
  if (sampling.sample) {
    // A node's children drawn from q without replacement: the c-th draw of a depth's n-th node
    // picked so far uses the (seed, position, kDraft + 8·(n + c)) key, from q with the earlier
    // draws removed and renormalised as AcceptTreeByRejection removes them. A chain's node is the
    // 0-th draw, so the chain tree draws what Propose's picker draws.
    pick = [params = sampling.sampling](const float* logits, int64_t vocab, int64_t position, int64_t first_index,
                                        int64_t count) -> absl::StatusOr<MtpChildPick> {
      MtpChildPick picked;
      SamplingDistribution(logits, vocab, params, &picked.distribution);
      std::vector<double> uniforms;  // [count]
      for (int64_t c = 0; c < count; ++c) {
        const uint32_t stream = static_cast<uint32_t>(RngStream::kDraft) + 8 * static_cast<uint32_t>(first_index + c);
        uniforms.push_back(UniformAt(params.seed, static_cast<uint64_t>(position), stream));
      }
      picked.tokens = DrawWithoutReplacement(picked.distribution, uniforms);
      return picked;
    };
  }
  ASSIGN_OR_RETURN(MtpTreeDraft tree, chain_->ProposeTree(sequence, shape, pick));
  TreeDraft draft;
  draft.tokens = std::move(tree.tokens);
  draft.parents = std::move(tree.parents);
  draft.ranks = std::move(tree.ranks);
  draft.probs = std::move(tree.child_distributions);
  draft.catch_up_seconds = tree.catch_up_seconds;
  return draft;
}

MtpBatchDrafter::MtpBatchDrafter() : batch_(std::make_unique<CpuMtpBatch>()) {}
MtpBatchDrafter::~MtpBatchDrafter() = default;

bool MtpBatchDrafter::CanBatch(const Drafter& drafter) const {
  const auto* mtp = dynamic_cast<const MtpDrafter*>(&drafter);
  return mtp != nullptr && batch_->CanJoin(mtp->chain().backend());
}

void MtpBatchDrafter::SetBatched(Drafter& drafter, bool batched) {
  if (auto* mtp = dynamic_cast<MtpDrafter*>(&drafter); mtp != nullptr && CanBatch(*mtp)) {
    mtp->mutable_chain().set_batch_extends(batched);
  }
}

std::vector<absl::StatusOr<Draft>> MtpBatchDrafter::ProposeBatch(std::span<Drafter* const> drafters,
                                                                 std::span<const std::span<const int32_t>> sequences,
                                                                 std::span<const int64_t> ks,
                                                                 std::span<const DraftSampling> samplings) {
  const size_t n = drafters.size();
  std::vector<absl::StatusOr<Draft>> out(n, Draft());
  std::vector<MtpDraftChain*> chains;
  std::vector<MtpDraftPicker> picks;
  std::vector<size_t> members;  // indices of the MTP drafters
  for (size_t i = 0; i < n; ++i) {
    auto* mtp = dynamic_cast<MtpDrafter*>(drafters[i]);
    if (mtp == nullptr || !CanBatch(*mtp)) {
      out[i] = drafters[i]->Propose(sequences[i], ks[i], samplings[i]);
      continue;
    }
    members.push_back(i);
    chains.push_back(&mtp->mutable_chain());
    picks.push_back(mtp->Picker(samplings[i], &out[i]->probs));
  }
  std::vector<std::span<const int32_t>> member_sequences;
  std::vector<int64_t> member_ks;
  for (size_t i : members) {
    member_sequences.push_back(sequences[i]);
    member_ks.push_back(ks[i]);
  }
  std::vector<absl::StatusOr<MtpChainDraft>> chained =
      MtpDraftChain::ProposeBatch(chains, member_sequences, member_ks, picks, *batch_);
  for (size_t m = 0; m < members.size(); ++m) {
    absl::StatusOr<Draft>& draft = out[members[m]];
    if (!chained[m].ok()) {
      draft = chained[m].status();
      continue;
    }
    draft->tokens = std::move(chained[m]->tokens);
    draft->catch_up_seconds = chained[m]->catch_up_seconds;
  }
  return out;
}

}  // namespace mtpspec
