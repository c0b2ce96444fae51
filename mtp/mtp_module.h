// The MTP module: the checkpoint's extra decoder layer (index num_hidden_layers) restored as a
// draft head (docs/models.md, "The MTP layer as a drafter").
//
// One step over the pair (h_t, x_{t+1}) at position t:
//   e = Emb(x_{t+1});  u = W_eh [enorm(e); hnorm(h_t)]   (embedding first)
//   g = DecoderBlock(u) at RoPE position t, with the module's own latent + indexer cache
//   logits(x_{t+2}) = head(shared_head.norm(g))
// Slot t of the module's cache holds the pair (h_t, x_{t+1}).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "attention/kv_cache.h"
#include "model/model.h"

namespace mtpspec {

// Which target hidden feeds step 1 (docs/models.md, "The MTP layer as a drafter").
enum class MtpHidden { kPostNorm, kPreNorm };
// Which MTP output feeds the next chained step (docs/models.md, "Chaining the MTP layer"):
// shared_head.norm(g), the raw block output g, or the model type's default (ModelConfig::mtp_chain_raw).
enum class MtpChain { kNormed, kRaw, kModelDefault };
// index_share_for_mtp_iteration (§7.5): rescore every draft step, or reuse step 1's top-k.
enum class MtpIndexShare { kExact, kShared };

const char* MtpHiddenName(MtpHidden v);
const char* MtpChainName(MtpChain v);
const char* MtpIndexShareName(MtpIndexShare v);
// kNormed or kRaw: `chain` itself, or the model type's default for kModelDefault.
MtpChain ResolveMtpChain(MtpChain chain, const ModelConfig& config);
// "post" / "pre", "normed" / "raw" / "default", "exact" / "shared"; errors name `what` (the option) and the value.
absl::StatusOr<MtpHidden> ParseMtpHidden(const std::string& name, const std::string& what = "mtp hidden");
absl::StatusOr<MtpChain> ParseMtpChain(const std::string& name, const std::string& what = "mtp chain");
absl::StatusOr<MtpIndexShare> ParseMtpIndexShare(const std::string& name,
                                                 const std::string& what = "mtp index share");

struct MtpOptions {
  MtpHidden hidden = MtpHidden::kPostNorm;
  MtpChain chain = MtpChain::kModelDefault;
  MtpIndexShare index_share = MtpIndexShare::kExact;
  AttentionOptions attention;
  // Rows per MtpModule call when the drafter extends its cache over committed pairs (the prompt,
  // or a backlog after plain steps): bounds the indexer's [rows, T] score matrix. On the automatic
  // path these chunks attend through the gather path (O(rows·K), as decode does).
  int64_t extend_chunk = 256;
};

struct MtpStepOutput {
  Tensor logits;   // [R, V] for the requested rows
  Tensor raw;      // [rows, H] g, the block output
  Tensor normed;   // [rows, H] shared_head.norm(g)
  TopK topk;       // the module indexer's selection for these rows
  AttentionPath path = AttentionPath::kAuto;
};

// The argument rules of an MTP forward (host or device): at least one token, one position per
// token, in-vocabulary tokens, consecutive positions that start at or before `cache_length` (no
// gap) and end inside `cache_capacity`. Shared by MtpModule and its CUDA twin.
// With `tree` (options.attention.tree: a tree drafting step) the rows write the tree's slots and
// `positions` are their RoPE positions instead.
absl::Status CheckMtpForwardArguments(const Model& model, std::span<const int32_t> tokens,
                                      std::span<const int64_t> positions, int64_t cache_length,
                                      int64_t cache_capacity, const TreeMask* tree = nullptr);

// One chain's rows in a batched MTP forward (MtpModule::ExtendBatch): its own cache and pairs, as
// Extend takes them.
struct MtpSegment {
  KvCache* cache = nullptr;
  const float* hidden = nullptr;       // [rows, H]
  std::span<const int32_t> tokens;     // [rows]
  std::span<const int64_t> positions;  // [rows]
  const TreeMask* tree = nullptr;      // as options.attention.tree, for this segment
  const TopK* reuse_topk = nullptr;    // as Extend's; all segments or none
};

class MtpModule {
 public:
  // Fails with a clear error when the model has no MTP weights.
  static absl::StatusOr<std::unique_ptr<MtpModule>> Create(const Model& model, int64_t layer = 0);

  const Model& model() const { return model_; }
  // A one-layer cache (latent, rope key and indexer key) for up to `capacity` positions.
  absl::StatusOr<std::unique_ptr<KvCache>> NewCache(int64_t capacity) const;

  // Runs the pairs (hidden[i], tokens[i]) at positions[i] (consecutive, starting at or before the
  // cache length; later slots are overwritten). hidden: [rows, H]. Logits for `logit_rows` (empty:
  // every row). With `reuse_topk` (and index_share = kShared) attention reuses that selection.
  absl::StatusOr<MtpStepOutput> Forward(KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                                        std::span<const int64_t> positions, const MtpOptions& options,
                                        std::vector<int64_t> logit_rows = {},
                                        const TopK* reuse_topk = nullptr) const;
  // Forward without the head (logits left empty): the drafter's extend of committed pairs, whose
  // logits it needs at most for the last row, and only when it drafts.
  absl::StatusOr<MtpStepOutput> Extend(KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                                       std::span<const int64_t> positions, const MtpOptions& options,
                                       const TopK* reuse_topk = nullptr) const;
  // Extend over several chains at once (the drafts of a batch of requests): the embedding, the
  // norms, W_eh, the block's projections and experts run once over every row, attention is
  // block-diagonal (each segment sees its own cache). Inside a RowInvariantScope
  // (kernels/linear.h) every segment's outputs equal its own Extend bit for bit. The caches must
  // be distinct; on error every cache is unchanged. options.attention.tree is ignored (each
  // segment has its own).
  absl::StatusOr<std::vector<MtpStepOutput>> ExtendBatch(std::span<const MtpSegment> segments,
                                                         const MtpOptions& options) const;
  // The head over normed rows: [rows, H] → logits [rows, V].
  Tensor Logits(const float* normed, int64_t rows) const;

 private:
  MtpModule(const Model& model, const MtpLayerWeights& weights) : model_(model), w_(weights) {}
  const Model& model_;
  const MtpLayerWeights& w_;
};

}  // namespace mtpspec
