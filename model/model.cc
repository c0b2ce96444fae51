#include "model/model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/linear.h"

namespace mtpspec {

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  model->dir_ = dir;
  ASSIGN_OR_RETURN(model->config_, LoadModelConfig(dir + "/config.json"));
  if (!model->config_.has_indexer && options.index_keys != IndexKeyStorage::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("index keys ", IndexKeyStorageName(options.index_keys), ": ", dir,
                                                   " is a ", model->config_.model_type_name,
                                                   " model, which has no DSA indexer (no indexer keys to store)"));
  }
  if (absl::Status fits = CheckIndexKeyStorage(options.index_keys, model->config_.index_head_dim); !fits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: ", fits.message()));
  }
  model->index_keys_ = options.index_keys;
  model->activations_ = options.activations;
  ASSIGN_OR_RETURN(model->weights_, LoadWeights(model->config_, dir, options, &model->report_));
  model->ctx_ = MakeLayerContext(model->config_);
  return model;
}

int64_t Model::SetActivationPrecision(ActivationPrecision precision) {
  activations_ = precision;
  return SetActivations(*weights_, precision);
}

KvCacheShape CacheShapeFor(const ModelConfig& config, LatentStorage storage, IndexKeyStorage index_keys) {
  KvCacheShape shape;
  shape.latent_storage = storage;
  shape.index_key_storage = index_keys;
  shape.kv_lora_rank = config.kv_lora_rank;
  shape.rope_dim = config.qk_rope_head_dim;
  shape.index_head_dim = config.index_head_dim;
  shape.has_indexer = config.layer_has_indexer;
  return shape;
}

absl::StatusOr<std::unique_ptr<KvCache>> Model::NewCache(int64_t capacity, LatentStorage storage) const {
  if (capacity <= 0 || capacity > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("cache capacity ", capacity, " is outside [1, max_position_embeddings = ",
                                                   config_.max_position_embeddings, "]"));
  }
  if (absl::Status fits = CheckLatentStorage(storage, config_.kv_lora_rank, config_.qk_rope_head_dim); !fits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, "/config.json: ", fits.message()));
  }
  return std::make_unique<KvCache>(CacheShape(storage), capacity);
}

absl::Status Model::CheckTokens(std::span<const int32_t> tokens, const std::string& what) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", tokens[i], " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void Model::Embed(const TensorView& table, std::span<const int32_t> tokens, float* out) const {
  const int64_t H = config_.hidden_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    float* dst = out + i * H;
    if (table.dtype == DType::kBF16) {
      const uint16_t* src = table.as<uint16_t>() + tokens[i] * table.stride[0];
      for (int64_t j = 0; j < H; ++j) dst[j] = Bf16ToF32(src[j]);
    } else {
      std::memcpy(dst, table.as<float>() + tokens[i] * table.stride[0], H * sizeof(float));
    }
  }
}

void Model::ApplyHead(const TensorView& head, const float* x, int64_t rows, float* logits) const {
  Linear(x, rows, head, logits);
}

absl::Status Model::CheckForwardArguments(int64_t cache_layers, int64_t cache_length, int64_t cache_capacity,
                                          std::span<const int32_t> tokens, std::span<const int64_t> positions,
                                          const ForwardOptions& options) const {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  if (rows == 0) return absl::InvalidArgumentError("Forward: no tokens given");
  if (positions.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: ", tokens.size(), " tokens but ", positions.size(), " positions"));
  }
  RETURN_IF_ERROR(CheckTokens(tokens, "token id"));
  if (cache_layers != config_.num_hidden_layers) {
    return absl::InvalidArgumentError("Forward: the cache was not made for this model");
  }
  if (const TreeMask* tree = options.attention.tree) {
    RETURN_IF_ERROR(tree->Validate("Forward"));
    if (tree->rows() != rows) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: ", rows, " tokens but a tree of ", tree->rows(), " rows"));
    }
    for (int64_t r = 0; r < rows; ++r) {  // a node's RoPE position: first slot + its depth ≤ its slot
      if (positions[r] < tree->first_slot || positions[r] > tree->slots[r]) {
        return absl::InvalidArgumentError(absl::StrCat("Forward: tree row ", r, " at position ", positions[r],
                                                       " outside [", tree->first_slot, ", its slot ", tree->slots[r],
                                                       "]"));
      }
    }
  } else {
    for (int64_t r = 1; r < rows; ++r) {
      if (positions[r] != positions[0] + r) {
        return absl::InvalidArgumentError(absl::StrCat("Forward: positions must be consecutive; positions[", r,
                                                       "] = ", positions[r], " after ", positions[r - 1]));
      }
    }
  }
  const int64_t first_slot = options.attention.tree ? options.attention.tree->slots[0] : positions[0];
  if (first_slot < 0 || first_slot > cache_length) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: first position ", first_slot,
                                                   " leaves a gap after the cache's ", cache_length, " tokens"));
  }
  const int64_t last_slot = options.attention.tree ? options.attention.tree->num_slots() - 1 : positions[rows - 1];
  if (last_slot >= cache_capacity) {
    return absl::OutOfRangeError(absl::StrCat("Forward: position ", last_slot, " is beyond the cache capacity ",
                                              cache_capacity));
  }
  const int64_t num_layers = config_.num_hidden_layers;
  if (options.trunk_layers != -1 && (options.trunk_layers < 1 || options.trunk_layers > num_layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: trunk_layers = ", options.trunk_layers, " is outside [1, ", num_layers, "] (or -1)"));
  }
  for (int64_t row : options.logit_rows) {
    if (row < 0 || row >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: logit row ", row, " is outside [0, ", rows, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardOutput> Model::Forward(KvCache& cache, std::span<const int32_t> tokens,
                                             std::span<const int64_t> positions, const ForwardOptions& options) const {
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const int64_t H = config_.hidden_size;
  RETURN_IF_ERROR(CheckForwardArguments(cache.num_layers(), cache.length(), cache.capacity(), tokens, positions,
                                        options));

  ForwardOutput out;
  out.hidden_prenorm = Tensor::Empty(DType::kF32, {rows, H});
  float* hidden = out.hidden_prenorm.data<float>();  // [rows, H]
  ForwardProfile* profile = options.attention.profile;
  {
    ScopedTimer timer(profile, Component::kEmbed);
    Embed(weights_->embed, tokens, hidden);
  }
  TopK topk;
  out.paths.resize(config_.num_hidden_layers);
  if (options.capture_topk) out.topk.resize(config_.num_hidden_layers);
  const int64_t layers = options.trunk_layers == -1 ? config_.num_hidden_layers : options.trunk_layers;
  for (int64_t l = 0; l < layers; ++l) {
    RETURN_IF_ERROR(DecoderLayerForward(weights_->layers[l], ctx_, hidden, rows, positions.data(), cache.layer(l),
                                        cache.capacity(), options.attention, &topk, &out.paths[l]));
    if (options.capture_topk) {
      out.topk[l].width = topk.width;
      out.topk[l].selected = topk.selected;
    }
  }
  cache.SetLength(options.attention.tree ? options.attention.tree->num_slots() : positions[rows - 1] + 1);

  ScopedTimer head_timer(profile, Component::kHead);
  out.hidden_postnorm = Tensor::Empty(DType::kF32, {rows, H});
  float* post = out.hidden_postnorm.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(hidden + r * H, weights_->final_norm.data<float>(), H, config_.rms_norm_eps, post + r * H);
  }
  std::vector<int64_t> logit_rows = options.logit_rows;
  if (logit_rows.empty()) {
    for (int64_t r = 0; r < rows; ++r) logit_rows.push_back(r);
  }
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  std::vector<float> selected(R * H);  // [R, H]
  for (int64_t i = 0; i < R; ++i) std::memcpy(selected.data() + i * H, post + logit_rows[i] * H, H * sizeof(float));
  out.logits = Tensor::Empty(DType::kF32, {R, config_.vocab_size});
  ApplyHead(weights_->lm_head, selected.data(), R, out.logits.data<float>());
  return out;
}

}  // namespace mtpspec
