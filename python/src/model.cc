// _ext.Model: a loaded checkpoint, its config, raw forward passes (logits, timing) and the MTP draft
// chain for analysis. Generation is bound in generate.cc.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/prefill_passes.h"
#include "mtp/mtp_chain.h"
#include "mtp/mtp_chain_cpu.h"
#include "mtp/mtp_module.h"
#include "pipeline/request.h"
#include "python/src/bindings.h"
#include "spec/generator.h"
#include "verify/sampler.h"

namespace mtpspec::python {
namespace {

absl::StatusOr<AttentionPath> ParsePath(const std::string& name) {
  if (name == "auto") return AttentionPath::kAuto;
  if (name == "dense") return AttentionPath::kDense;
  if (name == "mask") return AttentionPath::kMask;
  if (name == "gather") return AttentionPath::kGather;
  return absl::InvalidArgumentError(absl::StrCat("path must be auto, dense, mask or gather, got \"", name, "\""));
}

const Model& Get(const ModelHandle& h) { return *h.model; }

std::unique_ptr<ModelHandle> Load(const std::string& path, std::optional<std::string> dtype,
                                  std::optional<int64_t> capacity, const std::string& index_keys,
                                  const std::string& activations) {
  LoadOptions options;
  options.weight_dtype = ValueOrThrow(ParseWeightDType(dtype.value_or("stored"), Frontend::kPython));
  options.index_keys = ValueOrThrow(ParseIndexKeyStorage(index_keys, "index_keys"));
  options.activations = ValueOrThrow(ParseActivationPrecision(activations, "activations"));
  if (capacity && *capacity < 1) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("cache_capacity must be >= 1 (or None), got ", *capacity)));
  }
  const int64_t cache_capacity = capacity.value_or(0);
  absl::StatusOr<std::unique_ptr<Model>> model;
  {
    py::gil_scoped_release release;
    model = Model::Load(path, options);
  }
  auto handle = std::make_unique<ModelHandle>();
  handle->model = ValueOrThrow(std::move(model));
  const int64_t max_positions = handle->model->config().max_position_embeddings;
  if (cache_capacity > max_positions) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat("cache_capacity = ", cache_capacity, " exceeds max_position_embeddings = ", max_positions)));
  }
  handle->cache_capacity = cache_capacity;
  return handle;
}

py::dict RopeDict(const RopeConfig& r) {
  py::dict d;
  d["theta"] = r.theta;
  d["type"] = r.type;
  d["factor"] = r.factor;
  d["original_max_position_embeddings"] = r.original_max_position_embeddings;
  d["beta_fast"] = r.beta_fast;
  d["beta_slow"] = r.beta_slow;
  d["mscale"] = r.mscale;
  d["mscale_all_dim"] = r.mscale_all_dim;
  d["attention_factor"] = r.attention_factor;
  d["truncate"] = r.truncate;
  return d;
}

py::dict ConfigDict(const ModelHandle& h) {
  const ModelConfig& c = Get(h).config();
  py::dict d;
  d["model_type"] = c.model_type_name;
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["num_hidden_layers"] = c.num_hidden_layers;
  d["num_attention_heads"] = c.num_attention_heads;
  d["q_lora_rank"] = c.q_lora_rank;
  d["kv_lora_rank"] = c.kv_lora_rank;
  d["qk_nope_head_dim"] = c.qk_nope_head_dim;
  d["qk_rope_head_dim"] = c.qk_rope_head_dim;
  d["qk_head_dim"] = c.qk_head_dim();
  d["v_head_dim"] = c.v_head_dim;
  d["intermediate_size"] = c.intermediate_size;
  d["moe_intermediate_size"] = c.moe_intermediate_size;
  d["first_k_dense_replace"] = c.first_k_dense_replace;
  d["moe_layer_freq"] = c.moe_layer_freq;
  d["n_routed_experts"] = c.n_routed_experts;
  d["n_shared_experts"] = c.n_shared_experts;
  d["num_experts_per_tok"] = c.num_experts_per_tok;
  d["n_group"] = c.n_group;
  d["topk_group"] = c.topk_group;
  d["norm_topk_prob"] = c.norm_topk_prob;
  d["routed_scaling_factor"] = c.routed_scaling_factor;
  d["scoring_func"] = c.scoring_func;
  d["topk_method"] = c.topk_method;
  d["rms_norm_eps"] = c.rms_norm_eps;
  d["rope"] = RopeDict(c.rope);
  d["rope_interleave"] = c.rope_interleave;
  d["max_position_embeddings"] = c.max_position_embeddings;
  d["has_indexer"] = c.has_indexer;
  d["index_n_heads"] = c.index_n_heads;
  d["index_head_dim"] = c.index_head_dim;
  if (c.has_indexer) {
    d["index_topk"] = c.index_topk;
  } else {
    d["index_topk"] = py::none();  // no indexer: every key attends
  }
  d["mtp_chain_default"] = c.mtp_chain_raw ? "raw" : "normed";
  d["mtp_chain_source"] = c.mtp_chain_source;
  d["indexer_rope_interleave"] = c.indexer_rope_interleave;
  d["indexer_rope_source"] = c.indexer_rope_source;
  d["index_share_for_mtp_iteration"] = c.index_share_for_mtp_iteration;
  d["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  d["tie_word_embeddings"] = c.tie_word_embeddings;
  d["attention_bias"] = c.attention_bias;
  d["eos_token_ids"] = c.eos_token_ids;
  d["hidden_act"] = c.hidden_act;
  d["softmax_scale"] = c.softmax_scale();
  d["layer_is_dense"] = c.layer_is_dense;
  d["layer_has_indexer"] = c.layer_has_indexer;
  d["index_schedule_source"] = c.index_schedule_source;
  return d;
}

py::dict LoadReportDict(const ModelHandle& h) {
  const Model& model = Get(h);
  const LoadReport& r = model.load_report();
  py::dict d;
  d["tensors_loaded"] = r.tensors_loaded;
  d["fp8_tensors_in_place"] = r.fp8_tensors_in_place;
  d["fp8_tensors_dequantised"] = r.fp8_tensors_dequantised;
  d["fp8_tensors_quantised"] = r.fp8_tensors_quantised;
  d["matrices_reduced_activations"] = r.matrices_reduced_activations;
  d["mtp_present"] = r.mtp_present;
  d["mtp_note"] = r.mtp_note;
  d["activations_note"] = r.activations_note;
  d["parameter_count"] = model.weights().parameter_count;
  d["mtp_parameter_count"] = model.weights().mtp_parameter_count;
  d["weight_bytes"] = model.weights().weight_bytes;
  KvCache probe(model.CacheShape(), 1);
  d["cache_bytes_per_token"] = probe.BytesPerToken();
  return d;
}

py::array_t<float> Logits(const ModelHandle& h, const std::vector<int32_t>& ids,
                          std::optional<std::vector<int64_t>> positions, const py::object& rows,
                          const std::string& path, const std::string& kv_cache) {
  const Model& model = Get(h);
  const LatentStorage storage = ValueOrThrow(ParseLatentStorage(kv_cache, "kv_cache"));
  if (ids.empty()) ThrowIfError(absl::InvalidArgumentError("ids is empty"));
  std::vector<int64_t> pos;
  if (positions) {
    pos = *positions;
    if (pos.size() != ids.size()) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("positions has ", pos.size(), " entries but ids has ", ids.size())));
    }
    if (pos[0] != 0) {
      ThrowIfError(absl::InvalidArgumentError("positions must start at 0 (logits runs on an empty cache)"));
    }
  } else {
    for (size_t i = 0; i < ids.size(); ++i) pos.push_back(static_cast<int64_t>(i));
  }
  ForwardOptions options;
  options.attention.path = ValueOrThrow(ParsePath(path));
  if (py::isinstance<py::str>(rows)) {
    const std::string which = rows.cast<std::string>();
    if (which == "last") {
      options.logit_rows = {static_cast<int64_t>(ids.size()) - 1};
    } else if (which != "all") {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("rows must be None, \"all\", \"last\" or a list of row indices, got \"", which, "\"")));
    }
  } else if (!rows.is_none()) {
    options.logit_rows = rows.cast<std::vector<int64_t>>();
  }
  absl::StatusOr<ForwardOutput> out;
  {
    py::gil_scoped_release release;
    auto cache = model.NewCache(CacheCapacityFor(h, std::max<int64_t>(pos.back() + 1, 1)), storage);
    out = cache.ok() ? ForwardInPasses(model, **cache, ids, pos, options) : absl::StatusOr<ForwardOutput>(cache.status());
  }
  return TensorToArray(std::move(ValueOrThrow(std::move(out)).logits));
}

// Seconds of `repeats` timed forwards of `rows` tokens (all rows' logits, as in a verify) on top of
// a context of len(ids) positions that is prefilled once, untimed. The timed tokens are ids[0 ..].
py::array_t<double> TimeForward(const ModelHandle& h, const std::vector<int32_t>& ids, int64_t rows, int64_t repeats,
                                int64_t warmup) {
  const Model& model = Get(h);
  if (ids.empty()) ThrowIfError(absl::InvalidArgumentError("ids (the context) is empty"));
  if (rows < 1) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("rows must be >= 1, got ", rows)));
  if (repeats < 1) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", repeats)));
  if (warmup < 0) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("warmup must be >= 0, got ", warmup)));
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<double> seconds;
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = [&]() -> absl::Status {
      const int64_t capacity = n + rows;
      if (capacity > model.config().max_position_embeddings) {
        return absl::InvalidArgumentError(absl::StrCat("context ", n, " + rows ", rows,
                                                       " exceeds max_position_embeddings = ",
                                                       model.config().max_position_embeddings));
      }
      ASSIGN_OR_RETURN(auto cache, model.NewCache(capacity));
      std::vector<int64_t> positions(n);
      for (int64_t i = 0; i < n; ++i) positions[i] = i;
      ForwardOptions prefill;
      prefill.logit_rows = {n - 1};
      RETURN_IF_ERROR(ForwardInPasses(model, *cache, ids, positions, prefill).status());
      std::vector<int32_t> block(rows);
      std::vector<int64_t> block_positions(rows);
      for (int64_t r = 0; r < rows; ++r) {
        block[r] = ids[r % n];
        block_positions[r] = n + r;
      }
      for (int64_t i = 0; i < warmup + repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(model.Forward(*cache, block, block_positions).status());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (i >= warmup) seconds.push_back(s);
        RETURN_IF_ERROR(cache->Truncate(n));
      }
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  const auto count = static_cast<py::ssize_t>(seconds.size());
  return VectorToArray(std::move(seconds), {count});
}

// The MTP chain of a drafter (mtp/mtp_chain.h, the same code) after a prefill, with greedy drafts,
// keeping each step's softmax. Returns (draft tokens, probs [k, V] float32, the token after ids).
py::tuple MtpDraft(const ModelHandle& h, const std::vector<int32_t>& ids, int64_t k, const std::string& chain,
                   const std::string& hidden, const std::string& index_share, std::optional<int32_t> next_token) {
  const Model& model = Get(h);
  if (ids.empty()) ThrowIfError(absl::InvalidArgumentError("ids is empty"));
  if (k < 1 || k > kMaxDraftTokens) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("k must be in [1, ", kMaxDraftTokens, "], got ", k)));
  }
  MtpOptions options;
  options.chain = ValueOrThrow(ParseMtpChain(chain));
  options.hidden = ValueOrThrow(ParseMtpHidden(hidden));
  options.index_share = ValueOrThrow(ParseMtpIndexShare(index_share));
  const int64_t vocab = model.config().vocab_size;
  if (next_token && (*next_token < 0 || *next_token >= vocab)) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat("next_token = ", *next_token, " is outside the vocabulary [0, ", vocab, ")")));
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int32_t> tokens;
  std::vector<float> probs;
  int32_t next = 0;
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(auto target_cache, model.NewCache(CacheCapacityFor(h, n)));
      std::vector<int64_t> positions(n);
      for (int64_t i = 0; i < n; ++i) positions[i] = i;
      ForwardOptions prefill;
      prefill.logit_rows = {n - 1};
      ASSIGN_OR_RETURN(ForwardOutput target, ForwardInPasses(model, *target_cache, ids, positions, prefill));
      next = next_token ? *next_token : Argmax(target.logits.data<float>(), vocab);

      // The chain a drafter runs: the prompt's pairs (h_t, x_{t+1}) committed, then k drafts.
      ASSIGN_OR_RETURN(auto backend, CpuMtpBackend::Create(model, CacheCapacityFor(h, n + k)));
      ASSIGN_OR_RETURN(auto chain, MtpDraftChain::Create(std::move(backend), options));
      std::vector<int32_t> sequence(ids.begin(), ids.end());
      sequence.push_back(next);
      const Tensor& hidden_rows = options.hidden == MtpHidden::kPostNorm ? target.hidden_postnorm : target.hidden_prenorm;
      RETURN_IF_ERROR(chain->Commit(sequence, 0, n, hidden_rows.data<float>()));
      SamplingParams softmax;
      softmax.temperature = 1.0;
      std::vector<double> q;
      const MtpDraftPicker keep = [&](MtpHeadRow& head, int64_t) -> absl::StatusOr<int32_t> {
        ASSIGN_OR_RETURN(std::span<const float> logits, head.HostLogits());
        SamplingDistribution(logits.data(), vocab, softmax, &q);
        for (double p : q) probs.push_back(static_cast<float>(p));
        return Argmax(logits.data(), vocab);
      };
      ASSIGN_OR_RETURN(MtpChainDraft drafted, chain->Propose(sequence, k, keep));
      tokens = std::move(drafted.tokens);
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  const auto rows = static_cast<py::ssize_t>(tokens.size());
  py::array_t<float> array = VectorToArray(std::move(probs), {rows, static_cast<py::ssize_t>(vocab)});
  return py::make_tuple(tokens, array, next);
}

}  // namespace

int64_t CacheCapacityFor(const ModelHandle& handle, int64_t wanted) {
  if (handle.cache_capacity > 0) return handle.cache_capacity;
  // Rounded up to a whole number of 256-position blocks, so that requests of similar lengths ask
  // for caches of the same size and the allocator reuses the blocks the last one freed, instead of
  // fragmenting its heap over thousands of requests.
  constexpr int64_t kCapacityBlock = 256;
  const int64_t rounded = (wanted + kCapacityBlock - 1) / kCapacityBlock * kCapacityBlock;
  return std::min(rounded, handle.model->config().max_position_embeddings);
}

void RegisterModel(py::module_& m) {
  py::class_<ModelHandle>(m, "Model", "A loaded checkpoint (see mtpspec.Model for the documented wrapper).")
      .def_static("load", &Load, py::arg("path"), py::arg("dtype") = py::none(),
                  py::arg("cache_capacity") = py::none(), py::arg("index_keys") = "f32",
                  py::arg("activations") = "f32")
      .def_property_readonly("index_keys",
                             [](const ModelHandle& h) { return IndexKeyStorageName(Get(h).index_key_storage()); })
      .def_property_readonly("activations",
                             [](const ModelHandle& h) { return ActivationPrecisionName(Get(h).activation_precision()); })
      .def_property_readonly("path", [](const ModelHandle& h) { return Get(h).dir(); })
      .def_property_readonly("vocab_size", [](const ModelHandle& h) { return Get(h).config().vocab_size; })
      .def_property_readonly("has_mtp", [](const ModelHandle& h) { return Get(h).has_mtp(); })
      .def_property_readonly("cache_capacity", [](const ModelHandle& h) { return h.cache_capacity; })
      .def("config", &ConfigDict)
      .def("load_report", &LoadReportDict)
      .def("logits", &Logits, py::arg("ids"), py::arg("positions") = py::none(), py::arg("rows") = py::none(),
           py::arg("path") = "auto", py::arg("kv_cache") = "f32")
      .def("time_forward", &TimeForward, py::arg("ids"), py::arg("rows"), py::arg("repeats") = 5,
           py::arg("warmup") = 1)
      .def("mtp_draft", &MtpDraft, py::arg("ids"), py::arg("k"), py::arg("chain") = "default",
           py::arg("hidden") = "post", py::arg("index_share") = "exact", py::arg("next_token") = py::none());
}

}  // namespace mtpspec::python
