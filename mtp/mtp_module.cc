#include "mtp/mtp_module.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"
#include "model/decoder_layer.h"

namespace mtpspec {

const char* MtpHiddenName(MtpHidden v) { return v == MtpHidden::kPostNorm ? "post" : "pre"; }
const char* MtpChainName(MtpChain v) {
  switch (v) {
    case MtpChain::kNormed: return "normed";
    case MtpChain::kRaw: return "raw";
    case MtpChain::kModelDefault: return "default";
  }
  return "?";
}

MtpChain ResolveMtpChain(MtpChain chain, const ModelConfig& config) {
  if (chain != MtpChain::kModelDefault) return chain;
  return config.mtp_chain_raw ? MtpChain::kRaw : MtpChain::kNormed;
}

const char* MtpIndexShareName(MtpIndexShare v) { return v == MtpIndexShare::kExact ? "exact" : "shared"; }

absl::StatusOr<MtpIndexShare> ParseMtpIndexShare(const std::string& name, const std::string& what) {
  if (name == "exact") return MtpIndexShare::kExact;
  if (name == "shared") return MtpIndexShare::kShared;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be exact or shared, got \"", name, "\""));
}

absl::StatusOr<MtpHidden> ParseMtpHidden(const std::string& name, const std::string& what) {
  if (name == "post") return MtpHidden::kPostNorm;
  if (name == "pre") return MtpHidden::kPreNorm;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be post or pre, got \"", name, "\""));
}

absl::StatusOr<MtpChain> ParseMtpChain(const std::string& name, const std::string& what) {
  if (name == "normed") return MtpChain::kNormed;
  if (name == "raw") return MtpChain::kRaw;
  if (name == "default") return MtpChain::kModelDefault;
  return absl::InvalidArgumentError(absl::StrCat(what, " must be normed, raw or default, got \"", name, "\""));
}

absl::StatusOr<std::unique_ptr<MtpModule>> MtpModule::Create(const Model& model, int64_t layer) {
  if (!model.has_mtp()) {
    return absl::FailedPreconditionError(absl::StrCat(model.dir(), ": model has no MTP weights (",
                                                      model.load_report().mtp_note, ")"));
  }
  if (layer < 0 || layer >= static_cast<int64_t>(model.weights().mtp.size())) {
    return absl::InvalidArgumentError(absl::StrCat("MTP layer ", layer, " does not exist"));
  }
  return std::unique_ptr<MtpModule>(new MtpModule(model, model.weights().mtp[layer]));
}

absl::StatusOr<std::unique_ptr<KvCache>> MtpModule::NewCache(int64_t capacity) const {
  const ModelConfig& c = model_.config();
  if (capacity <= 0 || capacity > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("MTP cache capacity ", capacity, " is outside [1, ",
                                                   c.max_position_embeddings, "]"));
  }
  KvCacheShape shape;
  shape.index_key_storage = model_.index_key_storage();
  shape.kv_lora_rank = c.kv_lora_rank;
  shape.rope_dim = c.qk_rope_head_dim;
  shape.index_head_dim = c.index_head_dim;
  shape.has_indexer = {c.has_indexer};
  return std::make_unique<KvCache>(shape, capacity);
}

absl::Status CheckMtpForwardArguments(const Model& model, std::span<const int32_t> tokens,
                                      std::span<const int64_t> positions, int64_t cache_length,
                                      int64_t cache_capacity, const TreeMask* tree) {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (rows == 0) return absl::InvalidArgumentError("MTP forward: no tokens");
  if (positions.size() != tokens.size()) return absl::InvalidArgumentError("MTP forward: tokens/positions differ");
  RETURN_IF_ERROR(model.CheckTokens(tokens, "MTP token"));
  if (tree != nullptr) {
    RETURN_IF_ERROR(tree->Validate("MTP forward"));
    if (tree->rows() != rows) {
      return absl::InvalidArgumentError(absl::StrCat("MTP forward: ", rows, " tokens but a tree of ", tree->rows(),
                                                     " rows"));
    }
    if (tree->first_slot > cache_length || tree->slots[0] > cache_length) {
      return absl::InvalidArgumentError(absl::StrCat("MTP forward: tree slot ", tree->slots[0], " leaves a gap after ",
                                                     cache_length, " cached pairs"));
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (positions[r] < 0 || positions[r] > tree->slots[r]) {
        return absl::InvalidArgumentError(absl::StrCat("MTP forward: tree row ", r, " at position ", positions[r],
                                                       " is after its slot ", tree->slots[r]));
      }
    }
    if (tree->num_slots() > cache_capacity) {
      return absl::OutOfRangeError(absl::StrCat("MTP forward: tree slot ", tree->num_slots() - 1,
                                                " is beyond the MTP cache capacity ", cache_capacity));
    }
    return absl::OkStatus();
  }
  for (int64_t r = 1; r < rows; ++r) {
    if (positions[r] != positions[0] + r) return absl::InvalidArgumentError("MTP forward: positions not consecutive");
  }
  if (positions[0] < 0 || positions[0] > cache_length) {
    return absl::InvalidArgumentError(absl::StrCat("MTP forward: position ", positions[0], " leaves a gap after ",
                                                   cache_length, " cached pairs"));
  }
  if (positions[rows - 1] >= cache_capacity) {
    return absl::OutOfRangeError(absl::StrCat("MTP forward: position ", positions[rows - 1],
                                              " is beyond the MTP cache capacity ", cache_capacity));
  }
  return absl::OkStatus();
}

absl::StatusOr<MtpStepOutput> MtpModule::Extend(KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                                                std::span<const int64_t> positions, const MtpOptions& options,
                                                const TopK* reuse_topk) const {
  MtpSegment segment;
  segment.cache = &cache;
  segment.hidden = hidden;
  segment.tokens = tokens;
  segment.positions = positions;
  segment.tree = options.attention.tree;
  segment.reuse_topk = reuse_topk;
  ASSIGN_OR_RETURN(std::vector<MtpStepOutput> out, ExtendBatch(std::span<const MtpSegment>(&segment, 1), options));
  return std::move(out[0]);
}

absl::StatusOr<std::vector<MtpStepOutput>> MtpModule::ExtendBatch(std::span<const MtpSegment> segments,
                                                                  const MtpOptions& options) const {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size;
  if (segments.empty()) return absl::InvalidArgumentError("MTP forward: no segments");
  const bool reuse = segments[0].reuse_topk != nullptr && options.index_share == MtpIndexShare::kShared;
  int64_t rows = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const MtpSegment& segment = segments[s];
    if (segment.cache == nullptr) return absl::InvalidArgumentError(absl::StrCat("MTP forward: segment ", s, " has no cache"));
    for (size_t t = 0; t < s; ++t) {
      if (segments[t].cache == segment.cache) {
        return absl::InvalidArgumentError(absl::StrCat("MTP forward: segment ", s, " shares its cache"));
      }
    }
    if ((segment.reuse_topk != nullptr && options.index_share == MtpIndexShare::kShared) != reuse) {
      return absl::InvalidArgumentError("MTP forward: a reused selection must be given for every segment or none");
    }
    RETURN_IF_ERROR(CheckMtpForwardArguments(model_, segment.tokens, segment.positions, segment.cache->length(),
                                             segment.cache->capacity(), segment.tree));
    rows += static_cast<int64_t>(segment.tokens.size());
  }

  // u = W_eh [enorm(Emb(x)); hnorm(h)]  [rows, H], the segments' rows in order
  std::vector<float> embedded(rows * H), joined(rows * 2 * H), g(rows * H);
  int64_t first = 0;
  for (const MtpSegment& segment : segments) {
    const int64_t n = static_cast<int64_t>(segment.tokens.size());
    model_.Embed(w_.embed, segment.tokens, embedded.data() + first * H);
    for (int64_t r = 0; r < n; ++r) {
      RmsNorm(embedded.data() + (first + r) * H, w_.enorm.data<float>(), H, c.rms_norm_eps,
              joined.data() + (first + r) * 2 * H);
      RmsNorm(segment.hidden + r * H, w_.hnorm.data<float>(), H, c.rms_norm_eps,
              joined.data() + (first + r) * 2 * H + H);
    }
    first += n;
  }
  Linear(joined.data(), rows, w_.eh_proj, g.data());

  AttentionOptions attention = options.attention;
  attention.reuse_topk = reuse || options.attention.reuse_topk;
  std::vector<MtpStepOutput> out(segments.size());
  std::vector<MlaSegment> mla(segments.size());
  for (size_t s = 0; s < segments.size(); ++s) {
    if (reuse) out[s].topk = *segments[s].reuse_topk;
    mla[s].rows = static_cast<int64_t>(segments[s].tokens.size());
    mla[s].positions = segments[s].positions.data();
    mla[s].cache = &segments[s].cache->layer(0);
    mla[s].capacity = segments[s].cache->capacity();
    mla[s].tree = segments[s].tree;
    mla[s].topk = &out[s].topk;
  }
  RETURN_IF_ERROR(DecoderLayerForwardSegments(w_.block, model_.layer_context(), g.data(), mla, attention, nullptr));

  first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const MtpSegment& segment = segments[s];
    const int64_t n = static_cast<int64_t>(segment.tokens.size());
    segment.cache->SetLength(segment.tree ? segment.tree->num_slots() : segment.positions[n - 1] + 1);
    out[s].path = mla[s].path_used;
    out[s].raw = Tensor::Empty(DType::kF32, {n, H});
    out[s].normed = Tensor::Empty(DType::kF32, {n, H});
    std::memcpy(out[s].raw.data<float>(), g.data() + first * H, n * H * sizeof(float));
    for (int64_t r = 0; r < n; ++r) {
      RmsNorm(g.data() + (first + r) * H, w_.shared_head_norm.data<float>(), H, c.rms_norm_eps,
              out[s].normed.data<float>() + r * H);
    }
    first += n;
  }
  return out;
}

Tensor MtpModule::Logits(const float* normed, int64_t rows) const {
  Tensor logits = Tensor::Empty(DType::kF32, {rows, model_.config().vocab_size});  // [rows, V]
  model_.ApplyHead(w_.head, normed, rows, logits.data<float>());
  return logits;
}

absl::StatusOr<MtpStepOutput> MtpModule::Forward(KvCache& cache, const float* hidden, std::span<const int32_t> tokens,
                                                 std::span<const int64_t> positions, const MtpOptions& options,
                                                 std::vector<int64_t> logit_rows, const TopK* reuse_topk) const {
  ASSIGN_OR_RETURN(MtpStepOutput out, Extend(cache, hidden, tokens, positions, options, reuse_topk));
  const int64_t rows = static_cast<int64_t>(tokens.size()), H = model_.config().hidden_size;
  if (logit_rows.empty()) {
    for (int64_t r = 0; r < rows; ++r) logit_rows.push_back(r);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  std::vector<float> selected(R * H);  // [R, H] the normed rows that get logits
  const float* normed = out.normed.data<float>();
  for (int64_t i = 0; i < R; ++i) std::memcpy(selected.data() + i * H, normed + logit_rows[i] * H, H * sizeof(float));
  out.logits = Logits(selected.data(), R);
  return out;
}

}  // namespace mtpspec
