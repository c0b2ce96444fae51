// _ext.generate and _ext.GenerateResult: one speculative-decoding request (spec/generator.h) with
// the drafter chosen by name, cancellation and streaming through on_tokens, and an optional Python
// acceptance rule.
//
// Generate runs with the GIL released. The callbacks re-acquire it: on_tokens after every committed
// batch (it checks for signals, so Ctrl-C stops the request within one verify step, and forwards
// the tokens to a Python callable), and the acceptance hook once per verify block with drafts. A
// Python exception raised in either is kept, generation is stopped, and the exception is re-raised
// once the C++ call has returned. An AdaptiveController (python/src/adaptive.cc) carries adaptive
// k's learned costs and acceptance from one call to the next.
#include <pybind11/stl.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "python/src/adaptive.h"
#include "python/src/bindings.h"
#include "spec/generator.h"
#include "spec/lookup_drafter.h"
#include "spec/model_target.h"
#include "spec/mtp_drafter.h"

namespace mtpspec::python {
namespace {

absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const std::string& kind, const Model& model, int64_t capacity,
                                                     const MtpOptions& mtp, const LookupOptions& lookup) {
  if (kind == "none") return std::unique_ptr<Drafter>();
  if (kind == "lookup") return std::unique_ptr<Drafter>(std::make_unique<LookupDrafter>(lookup));
  if (kind == "mtp" || kind == "hybrid") {
    ASSIGN_OR_RETURN(auto mtp_drafter, MtpDrafter::Create(model, capacity, mtp));
    if (kind == "mtp") return std::unique_ptr<Drafter>(std::move(mtp_drafter));
    return std::unique_ptr<Drafter>(
        std::make_unique<HybridDrafter>(std::make_unique<LookupDrafter>(lookup), std::move(mtp_drafter)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("draft must be \"mtp\", \"lookup\", \"hybrid\" or \"none\", got \"", kind, "\""));
}

absl::StatusOr<MtpIndexShare> ParseIndexShare(const std::string& name) {
  if (name == "exact") return MtpIndexShare::kExact;
  if (name == "shared") return MtpIndexShare::kShared;
  return absl::InvalidArgumentError(
      absl::StrCat("mtp_index_share must be \"exact\" or \"shared\", got \"", name, "\""));
}

// Copies rows of doubles into a new [rows, V] float64 array.
py::array_t<double> Rows(const std::vector<std::vector<double>>& rows, int64_t vocab) {
  py::array_t<double> out({static_cast<py::ssize_t>(rows.size()), static_cast<py::ssize_t>(vocab)});
  double* dst = out.mutable_data();
  for (const auto& row : rows) dst = std::copy(row.begin(), row.end(), dst);
  return out;
}

// The Python acceptance rule: hook(target_probs [k+1, V], draft_tokens, draft_probs [k, V] | None)
// → (accepted, token). Called with the GIL held; a Python error is parked in `pending`.
absl::StatusOr<AcceptResult> CallHook(const py::object& hook, const VerifyBlock& block, const SamplingParams& sampling,
                                      std::optional<py::error_already_set>& pending) {
  const int64_t k = static_cast<int64_t>(block.drafts.size());
  std::vector<std::vector<double>> target(k + 1);
  for (int64_t j = 0; j <= k; ++j) {
    SamplingDistribution(block.target_logits + j * block.vocab, block.vocab, sampling, &target[j]);
  }
  try {
    py::object draft_probs = py::none();
    if (block.draft_probs != nullptr && !block.draft_probs->empty()) {
      draft_probs = Rows(*block.draft_probs, block.vocab);
    }
    std::vector<int32_t> drafts(block.drafts.begin(), block.drafts.end());
    py::object answer = hook(Rows(target, block.vocab), drafts, draft_probs);
    py::sequence pair;
    if (!py::isinstance<py::sequence>(answer) || py::len(answer) != 2) {
      throw py::type_error("acceptance_hook must return a pair (accepted: int, token: int)");
    }
    pair = answer.cast<py::sequence>();
    AcceptResult result;
    result.accepted = pair[0].cast<int64_t>();
    const int64_t token = pair[1].cast<int64_t>();
    if (result.accepted < 0 || result.accepted > k) {
      throw py::value_error(absl::StrCat("acceptance_hook returned accepted = ", result.accepted,
                                         " for ", k, " drafts (must be in [0, ", k, "])"));
    }
    if (token < 0 || token >= block.vocab) {
      throw py::value_error(absl::StrCat("acceptance_hook returned token ", token, " outside the vocabulary [0, ",
                                         block.vocab, ")"));
    }
    result.tokens.assign(block.drafts.begin(), block.drafts.begin() + result.accepted);
    result.tokens.push_back(static_cast<int32_t>(token));
    return result;
  } catch (py::error_already_set& e) {
    pending = std::move(e);
  } catch (const py::builtin_exception& e) {  // type_error, value_error, cast_error
    e.set_error();
    pending = py::error_already_set();
  }
  return absl::CancelledError("the acceptance hook raised");
}

GenerateResult Run(const ModelHandle& handle, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                   const std::string& draft, int64_t k, const std::string& accept, double temperature, int64_t top_k,
                   double top_p, double min_p, uint64_t seed, const std::string& mtp_hidden,
                   const std::string& mtp_chain, const std::string& mtp_index_share, bool sample_drafts,
                   bool adaptive_k, std::optional<std::vector<double>> synthetic_rates, py::object acceptance_hook,
                   py::object on_tokens, bool stop_at_eos, int64_t ngram, int64_t relaxed_top_n, double relaxed_delta,
                   const std::string& kv_cache, std::shared_ptr<ControllerHandle> adaptive_controller) {
  const Model& model = *handle.model;
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.k = k;
  options.adaptive_k = adaptive_k;
  if (adaptive_controller) options.adaptive_controller = adaptive_controller->controller;
  options.accept.rule = ValueOrThrow(ParseAcceptRule(accept));
  SamplingParams& s = options.accept.sampling;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.seed = seed;
  options.accept.relaxed_top_n = relaxed_top_n;
  options.accept.relaxed_delta = relaxed_delta;
  if (synthetic_rates) options.accept.synthetic_rates = *synthetic_rates;
  options.sample_drafts = sample_drafts;
  options.stop_at_eos = stop_at_eos;
  ThrowIfError(ValidateGenerateOptions(options));
  MtpOptions mtp;
  mtp.hidden = ValueOrThrow(ParseMtpHidden(mtp_hidden));
  mtp.chain = ValueOrThrow(ParseMtpChain(mtp_chain));
  mtp.index_share = ValueOrThrow(ParseIndexShare(mtp_index_share));
  const LatentStorage storage = ValueOrThrow(ParseLatentStorage(kv_cache, "kv_cache"));
  LookupOptions lookup;
  lookup.max_ngram = ngram;
  if (ngram < 1) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("ngram must be >= 1, got ", ngram)));
  if (!acceptance_hook.is_none() && !PyCallable_Check(acceptance_hook.ptr())) {
    ThrowIfError(absl::InvalidArgumentError("acceptance_hook must be callable or None"));
  }
  if (!on_tokens.is_none() && !PyCallable_Check(on_tokens.ptr())) {
    ThrowIfError(absl::InvalidArgumentError("on_tokens must be callable or None"));
  }

  std::optional<ControllerLease> lease;  // the carried controller serves this request only
  if (adaptive_controller) lease.emplace(*adaptive_controller);
  std::optional<py::error_already_set> pending;
  options.on_tokens = [&](std::span<const int32_t> tokens) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {  // runs the SIGINT handler when this is the main thread
      pending = py::error_already_set();
      return false;
    }
    if (on_tokens.is_none()) return true;
    try {
      py::object keep_going = on_tokens(std::vector<int32_t>(tokens.begin(), tokens.end()));
      return keep_going.is_none() || keep_going.cast<bool>();
    } catch (py::error_already_set& e) {
      pending = std::move(e);
    } catch (const py::builtin_exception& e) {
      e.set_error();
      pending = py::error_already_set();
    }
    return false;
  };
  if (!acceptance_hook.is_none()) {
    options.custom_accept = [&](const VerifyBlock& block) -> absl::StatusOr<AcceptResult> {
      py::gil_scoped_acquire gil;
      return CallHook(acceptance_hook, block, options.accept.sampling, pending);
    };
  }

  absl::StatusOr<GenerateResult> result;
  {
    py::gil_scoped_release release;
    result = [&]() -> absl::StatusOr<GenerateResult> {
      const int64_t wanted = static_cast<int64_t>(prompt.size()) + max_new_tokens + kMaxDraftTokens + 1;
      const int64_t capacity = CacheCapacityFor(handle, wanted);
      ASSIGN_OR_RETURN(auto target, ModelTarget::Create(model, capacity, {}, storage));
      ASSIGN_OR_RETURN(auto drafter, MakeDrafter(draft, model, capacity, mtp, lookup));
      return Generate(*target, drafter.get(), prompt, options);
    }();
  }
  if (pending) throw std::move(*pending);
  return ValueOrThrow(std::move(result));
}

}  // namespace

void RegisterGenerate(py::module_& m) {
  py::class_<GenerateResult>(m, "GenerateResult")
      .def_readonly("tokens", &GenerateResult::tokens)
      .def_readonly("stats", &GenerateResult::stats)
      .def_readonly("stop_reason", &GenerateResult::stop_reason);
  m.def("generate", &Run, py::arg("model"), py::arg("prompt"), py::arg("max_new_tokens"), py::arg("draft") = "mtp",
        py::arg("k") = 3, py::arg("accept") = "sampler-equality", py::arg("temperature") = 0.0, py::arg("top_k") = 0,
        py::arg("top_p") = 1.0, py::arg("min_p") = 0.0, py::arg("seed") = 0, py::arg("mtp_hidden") = "post",
        py::arg("mtp_chain") = "normed", py::arg("mtp_index_share") = "exact", py::arg("sample_drafts") = false,
        py::arg("adaptive_k") = false, py::arg("synthetic_rates") = py::none(),
        py::arg("acceptance_hook") = py::none(), py::arg("on_tokens") = py::none(), py::arg("stop_at_eos") = true,
        py::arg("ngram") = 3, py::arg("relaxed_top_n") = 3, py::arg("relaxed_delta") = 0.1,
        py::arg("kv_cache") = "f32", py::arg("adaptive_controller") = py::none());
}

}  // namespace mtpspec::python
