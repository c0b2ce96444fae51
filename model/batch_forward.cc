// Model::ForwardBatch: one forward over several sequences, each bit-identical to its own Forward.
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"
#include "model/model.h"

namespace mtpspec {

absl::StatusOr<BatchForwardOutput> Model::ForwardBatch(std::span<const BatchSequence> sequences,
                                                       const ForwardOptions& options) const {
  if (sequences.empty()) return absl::InvalidArgumentError("ForwardBatch: no sequences given");
  if (options.attention.tree != nullptr) {
    return absl::InvalidArgumentError("ForwardBatch: a token tree belongs to one sequence (BatchSequence::tree)");
  }
  if (!options.logit_rows.empty()) {
    return absl::InvalidArgumentError("ForwardBatch: logits come for every row; logit_rows must be empty");
  }
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  std::set<const KvCache*> caches;
  int64_t rows = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BatchSequence& sequence = sequences[s];
    if (sequence.cache == nullptr) return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: sequence ", s, " has no cache"));
    if (!caches.insert(sequence.cache).second) {
      return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: sequence ", s, " shares its cache with an earlier one"));
    }
    ForwardOptions own = options;  // this sequence's arguments as its own Forward would take them
    own.attention.tree = sequence.tree;
    const absl::Status status = CheckForwardArguments(sequence.cache->num_layers(), sequence.cache->length(),
                                                      sequence.cache->capacity(), sequence.tokens, sequence.positions,
                                                      own);
    if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: sequence ", s, ": ", status.message()));
    rows += static_cast<int64_t>(sequence.tokens.size());
  }

  const RowInvariantScope row_invariant;  // every row's bits as in its own sequence's Forward
  ForwardProfile* profile = options.attention.profile;
  std::vector<float> hidden(rows * H);  // [rows, H] the sequences' rows in order
  {
    ScopedTimer timer(profile, Component::kEmbed);
    int64_t first = 0;
    for (const BatchSequence& sequence : sequences) {
      Embed(weights_->embed, sequence.tokens, hidden.data() + first * H);
      first += static_cast<int64_t>(sequence.tokens.size());
    }
  }
  BatchForwardOutput out;
  out.rows = rows;
  out.sequences.resize(sequences.size());
  out.experts_used.assign(config_.num_hidden_layers, 0);
  std::vector<TopK> topk(sequences.size());  // [sequences] the selection carried from full to shared layers
  std::vector<MlaSegment> segments(sequences.size());
  const int64_t layers = options.trunk_layers == -1 ? config_.num_hidden_layers : options.trunk_layers;
  for (ForwardOutput& o : out.sequences) {
    o.paths.resize(config_.num_hidden_layers);
    if (options.capture_topk) o.topk.resize(config_.num_hidden_layers);
  }
  for (int64_t l = 0; l < layers; ++l) {
    for (size_t s = 0; s < sequences.size(); ++s) {
      MlaSegment& segment = segments[s];
      segment.rows = static_cast<int64_t>(sequences[s].tokens.size());
      segment.positions = sequences[s].positions.data();
      segment.cache = &sequences[s].cache->layer(l);
      segment.capacity = sequences[s].cache->capacity();
      segment.tree = sequences[s].tree;
      segment.topk = &topk[s];
    }
    RETURN_IF_ERROR(DecoderLayerForwardSegments(weights_->layers[l], ctx_, hidden.data(), segments, options.attention,
                                                &out.experts_used[l]));
    for (size_t s = 0; s < sequences.size(); ++s) {
      out.sequences[s].paths[l] = segments[s].path_used;
      if (options.capture_topk) out.sequences[s].topk[l] = topk[s];
    }
  }
  for (const BatchSequence& sequence : sequences) {
    sequence.cache->SetLength(sequence.tree != nullptr ? sequence.tree->num_slots() : sequence.positions.back() + 1);
  }

  ScopedTimer head_timer(profile, Component::kHead);
  std::vector<float> post(rows * H);  // [rows, H]
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(hidden.data() + r * H, weights_->final_norm.data<float>(), H, config_.rms_norm_eps, post.data() + r * H);
  }
  std::vector<float> logits(rows * V);  // [rows, V]
  ApplyHead(weights_->lm_head, post.data(), rows, logits.data());
  int64_t first = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t n = static_cast<int64_t>(sequences[s].tokens.size());
    ForwardOutput& o = out.sequences[s];
    o.hidden_prenorm = Tensor::Empty(DType::kF32, {n, H});
    o.hidden_postnorm = Tensor::Empty(DType::kF32, {n, H});
    o.logits = Tensor::Empty(DType::kF32, {n, V});
    std::memcpy(o.hidden_prenorm.data<float>(), hidden.data() + first * H, n * H * sizeof(float));
    std::memcpy(o.hidden_postnorm.data<float>(), post.data() + first * H, n * H * sizeof(float));
    std::memcpy(o.logits.data<float>(), logits.data() + first * V, n * V * sizeof(float));
    first += n;
  }
  return out;
}

}  // namespace mtpspec
