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

#include <algorithm>
#include <functional>
#include <optional>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "pipeline/batch.h"
#include "pipeline/options.h"
#include "pipeline/request.h"
#include "pipeline/runner.h"
#include "python/src/adaptive.h"
#include "python/src/bindings.h"
#include "python/src/kwargs.h"
#include "spec/batch.h"
#include "spec/generator.h"

namespace mtpspec::python {
namespace {

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
    result.accepted = IntArgument(pair[0], "acceptance_hook's accepted (the first of its pair)");
    const int64_t token = IntArgument(pair[1], "acceptance_hook's token (the second of its pair)");
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

// GenerateOptions::on_tokens for a Python callable (or None): checks for signals (Ctrl-C), forwards
// the tokens, and parks a Python exception in `pending`; once one is parked every call returns
// false, so a batch stops all its requests.
std::function<bool(std::span<const int32_t>)> TokenCallback(py::object on_tokens,
                                                            std::optional<py::error_already_set>& pending) {
  return [on_tokens = std::move(on_tokens), &pending](std::span<const int32_t> tokens) {
    py::gil_scoped_acquire gil;
    if (pending) return false;
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
}

// Re-raises a Python error with `prefix` before its message, keeping its type and `code`.
[[noreturn]] void RaisePrefixed(py::error_already_set& e, const std::string& prefix) {
  py::object type = e.type(), value = e.value();
  py::object instance = type(absl::StrCat(prefix, py::str(value).cast<std::string>()));
  if (py::hasattr(value, "code")) instance.attr("code") = value.attr("code");
  PyErr_SetObject(type.ptr(), instance.ptr());
  throw py::error_already_set();
}

GenerateResult Run(const ModelHandle& handle, const py::sequence& prompt_ids, py::kwargs kwargs) {
  const Model& model = *handle.model;
  std::vector<int32_t> prompt;  // [prompt tokens]
  for (size_t i = 0; i < py::len(prompt_ids); ++i) {
    const std::string name = absl::StrCat("prompt[", i, "]");
    prompt.push_back(static_cast<int32_t>(IntArgument(prompt_ids[i], name.c_str(), INT32_MIN, INT32_MAX)));
  }
  Kwargs kw(std::move(kwargs), "generate");
  RequestOptions request = ParseRequestKwargs(kw);
  py::object acceptance_hook = kw.Object("acceptance_hook");
  request.custom_accept = !acceptance_hook.is_none();
  py::object on_tokens = kw.Object("on_tokens");
  std::shared_ptr<ControllerHandle> adaptive_controller;
  if (py::object c = kw.Object("adaptive_controller"); !c.is_none()) {
    if (!py::isinstance<ControllerHandle>(c)) {
      throw py::type_error("adaptive_controller must be an mtpspec.AdaptiveController or None");
    }
    adaptive_controller = c.cast<std::shared_ptr<ControllerHandle>>();
  }
  kw.CheckAllUsed();
  for (const std::string& warning : RequestWarnings(request, Frontend::kPython)) {
    if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 2) != 0) throw py::error_already_set();
  }
  GenerateOptions options = ToGenerateOptions(request);
  if (adaptive_controller) options.adaptive_controller = adaptive_controller->controller;
  ThrowIfError(ValidateGenerateOptions(options));
  if (!acceptance_hook.is_none() && !PyCallable_Check(acceptance_hook.ptr())) {
    ThrowIfError(absl::InvalidArgumentError("acceptance_hook must be callable or None"));
  }
  if (!on_tokens.is_none() && !PyCallable_Check(on_tokens.ptr())) {
    ThrowIfError(absl::InvalidArgumentError("on_tokens must be callable or None"));
  }

  std::optional<ControllerLease> lease;  // the carried controller serves this request only
  if (adaptive_controller) lease.emplace(*adaptive_controller);
  std::optional<py::error_already_set> pending;
  options.on_tokens = TokenCallback(on_tokens, pending);
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
      const int64_t wanted = RequiredCapacity(model, static_cast<int64_t>(prompt.size()), request);
      ASSIGN_OR_RETURN(std::unique_ptr<RequestRunner> runner,
                       RequestRunner::Create(model, request, CacheCapacityFor(handle, wanted), Frontend::kPython));
      runner->generate_options() = options;  // the hooks and the carried controller
      RunHooks hooks;
      hooks.on_tokens = options.on_tokens;
      return runner->Run(prompt, hooks);
    }();
#if defined(__GLIBC__)
    // Each request builds its own caches and buffers, sized by its prompt. glibc keeps the pages a
    // request freed, so without this a process would stay at the peak of its longest request
    // (measured: +1.7 MiB of 48 MiB after the first 240-character prompt of the soak).
    malloc_trim(0);
#endif
  }
  if (pending) throw std::move(*pending);
  return ValueOrThrow(std::move(result));
}

// _ext.generate_batch(model, [(prompt_ids, {options}), ...], batch=B, k_schedule=None): the requests
// B at a time (spec/batch.h), one verify forward per cycle. Each request's options are generate()'s
// keywords (on_tokens included); what the slots share (draft, the MTP and lookup settings, kv_cache,
// device) must agree across them. Returns ([GenerateResult or None], [error or None], [per-request
// timing dicts], batch statistics as JSON text). Options that are refused raise before anything
// runs, naming requests[i]; a request that fails while running gets its error and the others finish.
py::tuple RunBatch(const ModelHandle& handle, const py::list& requests, int64_t batch, py::object k_schedule) {
  const Model& model = *handle.model;
  if (py::len(requests) == 0) ThrowIfError(absl::InvalidArgumentError("generate: the list of prompts is empty"));
  std::vector<RequestOptions> parsed;
  std::vector<BatchRequest> batch_requests;
  std::vector<py::object> callbacks;
  int64_t wanted = 1;
  for (size_t i = 0; i < py::len(requests); ++i) {
    const std::string where = absl::StrCat("requests[", i, "]: ");
    try {
      py::tuple entry = requests[i].cast<py::tuple>();
      BatchRequest& request = batch_requests.emplace_back();
      py::sequence ids = entry[0].cast<py::sequence>();
      for (size_t j = 0; j < py::len(ids); ++j) {
        const std::string name = absl::StrCat("prompt[", j, "]");
        request.prompt.push_back(static_cast<int32_t>(IntArgument(ids[j], name.c_str(), INT32_MIN, INT32_MAX)));
      }
      Kwargs kw(py::reinterpret_borrow<py::kwargs>(entry[1]), "generate");
      RequestOptions r = ParseRequestKwargs(kw);
      if (!kw.Object("acceptance_hook").is_none()) {
        ThrowIfError(absl::InvalidArgumentError("acceptance_hook runs one request at a time; it cannot join a batch"));
      }
      if (!kw.Object("adaptive_controller").is_none()) {
        ThrowIfError(absl::InvalidArgumentError(
            "adaptive_controller serves one request at a time; in a batch each request adapts k on its own"));
      }
      py::object on_tokens = kw.Object("on_tokens");
      if (!on_tokens.is_none() && !PyCallable_Check(on_tokens.ptr())) {
        ThrowIfError(absl::InvalidArgumentError("on_tokens must be callable or None"));
      }
      kw.CheckAllUsed();
      if (!parsed.empty()) ThrowIfError(CheckSharedSlotOptions(parsed[0], r, "this request", Frontend::kPython));
      request.options = ToGenerateOptions(r);
      ThrowIfError(ValidateGenerateOptions(request.options));
      wanted = std::max(wanted, RequiredCapacity(model, static_cast<int64_t>(request.prompt.size()), r));
      parsed.push_back(std::move(r));
      callbacks.push_back(std::move(on_tokens));
    } catch (py::error_already_set& e) {
      RaisePrefixed(e, where);
    } catch (const py::builtin_exception& e) {
      e.set_error();
      py::error_already_set error;
      RaisePrefixed(error, where);
    }
  }
  for (const std::string& warning : RequestWarnings(parsed[0], Frontend::kPython)) {
    if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 2) != 0) throw py::error_already_set();
  }
  BatchOptions options;
  if (!k_schedule.is_none()) {
    for (py::handle step : k_schedule.cast<py::sequence>()) {
      py::sequence pair = step.cast<py::sequence>();
      if (py::len(pair) != 2) ThrowIfError(absl::InvalidArgumentError("k_schedule must be a list of (B, k) pairs"));
      options.k_schedule.push_back({IntArgument(pair[0], "k_schedule's B"), IntArgument(pair[1], "k_schedule's k")});
    }
    ThrowIfError(ValidateKSchedule(options.k_schedule));
    for (size_t i = 0; i < parsed.size(); ++i) {
      if (parsed[i].adaptive_k) {
        ThrowIfError(absl::InvalidArgumentError(
            absl::StrCat("requests[", i, "]: k=\"auto\" conflicts with k_schedule, which sets k by batch size")));
      }
    }
  }
  std::optional<py::error_already_set> pending;
  for (size_t i = 0; i < batch_requests.size(); ++i) batch_requests[i].options.on_tokens = TokenCallback(callbacks[i], pending);

  absl::StatusOr<BatchResult> result;
  {
    py::gil_scoped_release release;
    result = RunBatchRequests(model, parsed[0], CacheCapacityFor(handle, wanted), batch, batch_requests,
                              options.k_schedule, Frontend::kPython);
#if defined(__GLIBC__)
    malloc_trim(0);  // as in Run: the batch's caches go back to the system
#endif
  }
  if (pending) throw std::move(*pending);
  BatchResult done = ValueOrThrow(std::move(result));
  py::list results, errors, timing;
  for (BatchRequestResult& r : done.requests) {
    timing.append(py::dict(py::arg("slot") = r.slot, py::arg("queued_seconds") = r.queued_seconds,
                           py::arg("latency_seconds") = r.latency_seconds,
                           py::arg("tokens_per_second") = r.tokens_per_second()));
    if (r.status.ok()) {
      results.append(py::cast(std::move(r.result)));
      errors.append(py::none());
    } else {
      results.append(py::none());
      errors.append(py::str(std::string(r.status.message())));
    }
  }
  return py::make_tuple(results, errors, timing, done.stats.ToJson().dump());
}

}  // namespace

// The request options of generate()'s keyword arguments, read through the option table
// (pipeline/options.h) and validated there.
RequestOptions ParseRequestKwargs(Kwargs& kw) {
  std::map<std::string, OptionValue> values;
  for (const RequestOption& option : RequestOptionTable()) {
    const char* name = option.name.c_str();
    if (!kw.Has(name)) {
      kw.Object(name);  // None: the default
      continue;
    }
    switch (option.type) {
      case OptionType::kInt: values[option.name] = kw.Int(name, 0); break;
      case OptionType::kFloat: values[option.name] = kw.Float(name, 0.0); break;
      case OptionType::kBool: values[option.name] = kw.Bool(name, false); break;
      case OptionType::kText: values[option.name] = kw.Str(name, ""); break;
      case OptionType::kIntOrText: {
        py::object v = kw.Object(name);
        if (py::isinstance<py::str>(v)) {
          values[option.name] = v.cast<std::string>();
        } else {
          values[option.name] = IntArgument(v, name);
        }
        break;
      }
      case OptionType::kIntList: values[option.name] = *kw.IntList(name); break;
      case OptionType::kFloatList: values[option.name] = *kw.FloatList(name); break;
    }
  }
  return ValueOrThrow(MakeRequest(values, Frontend::kPython));
}

void RegisterGenerate(py::module_& m) {
  py::class_<GenerateResult>(m, "GenerateResult")
      .def_readonly("tokens", &GenerateResult::tokens)
      .def_readonly("logprobs", &GenerateResult::logprobs)
      .def_readonly("stats", &GenerateResult::stats)
      .def_readonly("stop_reason", &GenerateResult::stop_reason);
  m.def("generate", &Run, py::arg("model"), py::arg("prompt"),
        "One request; every option is a keyword argument (mtpspec.Model.generate documents them).");
  m.def("generate_batch", &RunBatch, py::arg("model"), py::arg("requests"), py::arg("batch"),
        py::arg("k_schedule") = py::none(),
        "Requests [(prompt_ids, options dict)] run `batch` at a time with one verify forward per cycle.");
  m.def(
      "request_options",
      [] {
        py::list out;
        for (const RequestOption& option : RequestOptionTable()) {
          py::dict d;
          d["name"] = option.name;
          d["flag"] = option.flag;
          d["type"] = OptionTypeName(option.type);
          d["default"] = option.default_text;
          d["help"] = option.help;
          out.append(d);
        }
        return out;
      },
      "The request options as the option table declares them: name, flag, type, default, help.");
}

}  // namespace mtpspec::python
