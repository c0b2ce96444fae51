#include "mtp/mtp_module.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"
#include "model/decoder_layer.h"

namespace mtpspec {

const char* MtpHiddenName(MtpHidden v) { return v == MtpHidden::kPostNorm ? "post" : "pre"; }
const char* MtpChainName(MtpChain v) { return v == MtpChain::kNormed ? "normed" : "raw"; }

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
  return absl::InvalidArgumentError(absl::StrCat(what, " must be normed or raw, got \"", name, "\""));
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
  shape.kv_lora_rank = c.kv_lora_rank;
  shape.rope_dim = c.qk_rope_head_dim;
  shape.index_head_dim = c.index_head_dim;
  shape.has_indexer = {true};
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
  const ModelConfig& c = model_.config();
  const int64_t rows = static_cast<int64_t>(tokens.size()), H = c.hidden_size;
  RETURN_IF_ERROR(
      CheckMtpForwardArguments(model_, tokens, positions, cache.length(), cache.capacity(), options.attention.tree));

  // u = W_eh [enorm(Emb(x)); hnorm(h)]  [rows, H]
  std::vector<float> embedded(rows * H), joined(rows * 2 * H);
  model_.Embed(w_.embed, tokens, embedded.data());
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(embedded.data() + r * H, w_.enorm.data<float>(), H, c.rms_norm_eps, joined.data() + r * 2 * H);
    RmsNorm(hidden + r * H, w_.hnorm.data<float>(), H, c.rms_norm_eps, joined.data() + r * 2 * H + H);
  }
  MtpStepOutput out;
  out.raw = Tensor::Empty(DType::kF32, {rows, H});
  float* g = out.raw.data<float>();
  Linear(joined.data(), rows, w_.eh_proj, g);

  AttentionOptions attention = options.attention;
  if (reuse_topk != nullptr && options.index_share == MtpIndexShare::kShared) {
    out.topk = *reuse_topk;
    attention.reuse_topk = true;
  }
  RETURN_IF_ERROR(DecoderLayerForward(w_.block, model_.layer_context(), g, rows, positions.data(), cache.layer(0),
                                      cache.capacity(), attention, &out.topk, &out.path));
  cache.SetLength(options.attention.tree ? options.attention.tree->num_slots() : positions[rows - 1] + 1);

  out.normed = Tensor::Empty(DType::kF32, {rows, H});
  float* normed = out.normed.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(g + r * H, w_.shared_head_norm.data<float>(), H, c.rms_norm_eps, normed + r * H);
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
