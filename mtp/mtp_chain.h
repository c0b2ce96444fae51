// The MTP draft chain, written once for every device (docs/models.md, "The MTP layer as a drafter").
//
// The chain's cache holds (target hidden, committed token) pairs only: slot t holds the pair
// (h_t, x_{t+1}). When the target commits rows (the prompt at prefill, then each cycle's accepted
// rows plus one), Commit queues their pairs; the queued pairs are run through the MTP layer ("draft
// extend") in chunks of at most MtpOptions::extend_chunk rows, which drops the previous draft's
// speculative slots first. The newest pair's output is where the next chain starts:
//   draft 1 = pick(head(start.normed))                       proposes position anchor + 2
//   step j  = MTP(chained state, draft j) at position anchor + j, j = 1 … k − 1
//   draft j + 1 = pick(head(step j's normed output))         proposes position anchor + 2 + j
// where anchor = the newest committed pair's position, and the chained state is step j − 1's
// normed output (MtpChain::kNormed) or raw block output (kRaw). With index_share = kShared and a
// cache longer than index_topk, every chained step reuses the start's indexer selection.
//
// Extends are eager while the loop drafts, and deferred while it decodes plainly (no Propose since
// the last Commit) or when the prompt is deferred (DeferPrompt): Propose then catches up first and
// reports that time. In a batch (set_batch_extends) an extend that Commit would run, but the
// prompt's, is only marked due: it runs at the chain's next Commit, Propose or ProposeTree exactly as Commit would have run
// it, or, with the due extends of other chains, as one batched forward in ProposeBatch. The
// device-specific work sits behind MtpChainBackend (mtp/mtp_chain_cpu.h on
// the host, mtp/mtp_chain_cuda.h on a GPU); the bookkeeping here is the same for both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/tree_mask.h"
#include "core/draft_tree.h"
#include "mtp/mtp_module.h"

namespace mtpspec {

// The head's logits for one draft position, handed to the caller that picks the draft token.
class MtpHeadRow {
 public:
  virtual ~MtpHeadRow() = default;
  // [V] in the backend's memory (host for the CPU, device for CUDA); valid until the next step.
  virtual const float* logits() const = 0;
  // The same logits on the host: [V] (a copy for a device backend).
  virtual absl::StatusOr<std::span<const float>> HostLogits() = 0;
};

// Picks the token of a draft from the head's logits; `position` is the absolute position the draft
// is proposed for. An error stops the chain with it.
using MtpDraftPicker = std::function<absl::StatusOr<int32_t>(MtpHeadRow& head, int64_t position)>;

// What a device provides to the chain. The backend owns the module cache, the queued hidden rows,
// the start state (the newest pair's normed and raw outputs and its indexer selection) and the
// chained state.
class MtpChainBackend {
 public:
  virtual ~MtpChainBackend() = default;
  virtual int64_t capacity() const = 0;  // positions of the module cache
  virtual const ModelConfig& config() const = 0;
  // Appends `rows` hidden rows ([rows, H], in the backend's memory: host for the CPU, device for
  // CUDA) to the queue of pairs awaiting an extend.
  virtual absl::Status QueueHidden(const float* hidden, int64_t rows) = 0;
  virtual void ClearQueue() = 0;
  virtual absl::Status TruncateCache(int64_t length) = 0;
  virtual void ClearCache() = 0;
  // Runs the queued pairs [begin, begin + tokens.size()) with `tokens` at consecutive positions
  // from `first_position`, under `options`. With `keep_start`, the last row's outputs become the
  // chain's start state.
  virtual absl::Status Extend(int64_t begin, std::span<const int32_t> tokens, int64_t first_position,
                              const MtpOptions& options, bool keep_start) = 0;
  // Whether the start state carries an indexer selection (false while the cache is dense).
  virtual bool start_has_selection() const = 0;
  // The chained state := the start state.
  virtual absl::Status BeginChain() = 0;
  // The head over the chained state's normed row.
  virtual absl::StatusOr<MtpHeadRow*> Head() = 0;
  // One chained step: runs (chained input, token) at `position`; its outputs become the chained
  // state. With `share_selection`, attention reuses the start state's selection.
  virtual absl::Status Step(int32_t token, int64_t position, const MtpOptions& options, bool share_selection) = 0;

  // Tree drafting (MtpDraftChain::ProposeTree), optional: a backend without it answers
  // Unimplemented. The tree's node states: state 0 is the start state, and each TreeStep appends
  // one state per row.
  virtual absl::Status BeginTree() { return absl::UnimplementedError("tree drafting is not available on this device"); }
  // The head over the normed outputs of `states`: [rows, V] on the host.
  virtual absl::StatusOr<Tensor> TreeHeads(std::span<const int64_t> states) {
    return absl::UnimplementedError("tree drafting is not available on this device");
  }
  // One depth of a tree: row r runs (the chained input of state parent_states[r], tokens[r]) at
  // RoPE position positions[r], writing the module cache as `mask` says (attention/tree_mask.h).
  // With `share_selection`, every row reuses the start state's indexer selection.
  virtual absl::Status TreeStep(std::span<const int64_t> parent_states, std::span<const int32_t> tokens,
                                std::span<const int64_t> positions, const TreeMask& mask, const MtpOptions& options,
                                bool share_selection) {
    return absl::UnimplementedError("tree drafting is not available on this device");
  }
};

// The chained steps of several chains in one forward (MtpDraftChain::ProposeBatch), optional. A
// device's implementation batches the backends it can (CanJoin): every chain's drafts must equal
// the drafts it would make alone.
class MtpBatchBackend {
 public:
  virtual ~MtpBatchBackend() = default;
  virtual bool CanJoin(const MtpChainBackend& backend) const = 0;
  // The head over each backend's chained state: one head row per backend, valid until its next step.
  virtual absl::StatusOr<std::vector<MtpHeadRow*>> Heads(std::span<MtpChainBackend* const> backends) = 0;
  // One chained step per backend (Step's arguments, one each), without a shared selection.
  virtual absl::Status Steps(std::span<MtpChainBackend* const> backends, std::span<const int32_t> tokens,
                             std::span<const int64_t> positions, const MtpOptions& options) = 0;
  // One Extend(0, tokens[i], first_positions[i], options, /*keep_start=*/true) per backend, all in
  // one forward; each backend's cache and start state end as its own Extend leaves them. Every
  // backend's tokens must be fewer than kLinearGemmRows (the rows an Extend alone keeps on the
  // per-row tiles).
  virtual absl::Status Extends(std::span<MtpChainBackend* const> backends,
                               std::span<const std::span<const int32_t>> tokens,
                               std::span<const int64_t> first_positions, const MtpOptions& options) = 0;
};

struct MtpChainDraft {
  std::vector<int32_t> tokens;  // [k'] k' ≤ k
  double catch_up_seconds = 0;  // of this Propose, spent extending deferred pairs
};

// Picks a tree node's children from its head's logits (`logits`: [vocab], host memory): up to
// `count` distinct tokens, in the order the acceptance tries them. `position` is the position they
// propose, `first_index` the number of nodes of that depth picked before (a key for sampled picks).
struct MtpChildPick {
  std::vector<int32_t> tokens;        // [≤ count]
  std::vector<double> distribution;   // [vocab] the draft distribution they were drawn from, without
                                      // replacement; empty for deterministic picks
};
using MtpChildPicker = std::function<absl::StatusOr<MtpChildPick>(const float* logits, int64_t vocab, int64_t position,
                                                                  int64_t first_index, int64_t count)>;

// A draft tree (core/draft_tree.h) in breadth-first order: every node after its parent, the nodes of
// one depth together.
struct MtpTreeDraft {
  std::vector<int32_t> tokens;   // [nodes]
  std::vector<int32_t> parents;  // [nodes] the parent's verify row: 0 = the pending token, i + 1 = node i
  std::vector<int64_t> ranks;    // [nodes] rank among its parent's candidates (0 = the head's top token)
  std::vector<double> probs;     // [nodes] its probability under the parent's head (softmax at T = 1)
  // [1 + nodes] per verify row (0 = the pending token), the distribution its children were drawn
  // from (MtpChildPick::distribution); empty when the children are the head's top tokens.
  std::vector<std::vector<double>> child_distributions;
  double catch_up_seconds = 0;   // of this ProposeTree, spent extending deferred pairs
};

class MtpDraftChain {
 public:
  static absl::StatusOr<std::unique_ptr<MtpDraftChain>> Create(std::unique_ptr<MtpChainBackend> backend,
                                                               const MtpOptions& options);

  void Reset();
  // The next Commit's rows (the prompt) wait for the next Propose.
  void DeferPrompt() { extend_at_commit_ = false; }
  // The target committed positions first_position … first_position + rows − 1 of `sequence`, whose
  // hidden rows are `hidden` ([rows, H], in the backend's memory). Queues their pairs (h_t, x_{t+1})
  // and extends now unless the extend is deferred.
  absl::Status Commit(std::span<const int32_t> sequence, int64_t first_position, int64_t rows, const float* hidden);
  // Up to k drafts continuing `sequence`, whose last token is the newest sample: fewer when the
  // cache's capacity runs out, none before the first Commit.
  absl::StatusOr<MtpChainDraft> Propose(std::span<const int32_t> sequence, int64_t k, const MtpDraftPicker& pick);
  // In a batch, extends wait for the next step of the chain (see the top of this file); off, Commit
  // runs them at once. Turning it off leaves a due extend due until the next step.
  void set_batch_extends(bool on) { batch_extends_ = on; }
  // Propose for several chains at once: the due extends of the chains that join the batch (short
  // enough to keep their per-row bits) run as one MtpBatchBackend::Extends, with each chain's share
  // of its time in its catch_up_seconds; then each chain catches up and begins as its own Propose does,
  // then every draft depth runs the heads of all chains still drafting as one batch and their
  // chained steps as one (MtpBatchBackend), so each chain's drafts equal its own Propose's. Chains
  // the batch cannot join (another device, a shared indexer selection) draft alone. results[i]
  // answers chains[i].
  static std::vector<absl::StatusOr<MtpChainDraft>> ProposeBatch(std::span<MtpDraftChain* const> chains,
                                                                 std::span<const std::span<const int32_t>> sequences,
                                                                 std::span<const int64_t> ks,
                                                                 std::span<const MtpDraftPicker> picks,
                                                                 MtpBatchBackend& batch);
  // A draft tree continuing `sequence` (mtp/mtp_tree.cc). Each node's children are the head's top
  // tokens over that node's state; each depth is one module forward over all of its nodes that get
  // children, under a tree mask, so a node's state equals the chain step of its path. A static tree
  // takes its branching; a dynamic one expands, depth by depth, the shape's expand_width newest nodes
  // of highest cumulative probability, then keeps the max_nodes best nodes overall. The chain
  // 1,1,…,1 of k drafts gives Propose's k argmax drafts. Smaller when the cache runs out; empty
  // before the first Commit. With `pick`, a static tree's children are what it picks (sampled
  // drafts); a dynamic tree grows by the head's own probabilities and takes no picker.
  absl::StatusOr<MtpTreeDraft> ProposeTree(std::span<const int32_t> sequence, const TreeShape& shape,
                                           const MtpChildPicker& pick = nullptr);

  // For cost benchmarks at real dimensions: the backend's cache already holds pairs [0, pairs),
  // written outside the chain (bench/prefix_target.h fills them with random rows instead of running
  // the MTP layer over a long prompt), so the next Commit starts at position `pairs`. Only right
  // after Reset.
  absl::Status AssumeCommitted(int64_t pairs);

  const MtpOptions& options() const { return options_; }
  MtpChainBackend& backend() const { return *backend_; }
  int64_t committed_pairs() const { return committed_; }  // cache slots 0 … committed − 1
  int64_t deferred_pairs() const { return static_cast<int64_t>(queued_tokens_.size()); }

 private:
  MtpDraftChain(std::unique_ptr<MtpChainBackend> backend, const MtpOptions& options)
      : backend_(std::move(backend)), options_(options) {}
  // Runs the queued pairs through the module in chunks; the newest one becomes the start state.
  absl::Status ExtendQueued();
  // Runs a due extend (batch mode), as Commit would have run it.
  absl::Status ExtendDue() { return extend_due_ ? ExtendQueued() : absl::OkStatus(); }
  // The options of an extend chunk.
  MtpOptions ExtendOptions() const;
  // Runs the due extends of `chains` (same options, each one chunk of fewer than kLinearGemmRows
  // pairs) as one batched forward; on success each chain's catch_up_seconds share is added to
  // seconds[i]. On failure nothing is committed and the extends stay due.
  static absl::Status ExtendDueBatch(std::span<MtpDraftChain* const> chains, MtpBatchBackend& batch,
                                     std::span<double* const> seconds);
  // The start of a Propose: catches up on deferred pairs (adding the time to *catch_up_seconds),
  // checks that the newest pair is the sequence's, and drops an earlier draft's slots. Returns the
  // anchor (the newest committed pair's position), or −1 when there is nothing to draft from.
  absl::StatusOr<int64_t> BeginDraft(std::span<const int32_t> sequence, double* catch_up_seconds);
  // Whether chained steps reuse the start's indexer selection (index_share = kShared, sparse cache).
  bool ShareSelection() const;

  std::unique_ptr<MtpChainBackend> backend_;
  MtpOptions options_;
  int64_t committed_ = 0;          // committed pairs in the cache (positions 0 … committed − 1)
  bool extend_at_commit_ = true;   // the prompt (unless deferred), and while the loop keeps proposing
  bool batch_extends_ = false;     // Commit marks its extend due instead of running it
  bool extend_due_ = false;        // the queued pairs await the extend Commit deferred
  std::vector<int32_t> queued_tokens_;  // [queued] x_{t+1} of the pairs from position committed_ on
};

// The attention options of an extend chunk: on the automatic path a chunk of up to extend_chunk
// rows attends through the gather path (O(rows · K), as decode does).
AttentionOptions ExtendAttentionOptions(const MtpOptions& options);

}  // namespace mtpspec
