// _ext.Engine: the live batch engine (spec/batch_engine.h) over one loaded model, for the server.
//
//   engine = _ext.Engine(model, batch=B, max_waiting=Q, capacity=N, **slot options)
//   handle = engine.submit(prompt_ids, callback, **request options)
//   engine.cancel(handle); engine.drain(seconds); engine.close()
//
// The callback runs on the engine's thread with the GIL held, once per verify step with
// (tokens, logprobs, done, error, result): error is None or (status code name, message), result a
// GenerateResult on the last call. Every call into the engine releases the GIL.
#include <pybind11/stl.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeline/batch.h"
#include "pipeline/request.h"
#include "python/src/bindings.h"
#include "python/src/kwargs.h"
#include "spec/batch_engine.h"

namespace mtpspec::python {
namespace {

// A Python callable that the engine's thread may hold and drop: the last reference goes with the
// GIL held.
struct PythonCallable {
  py::object fn;
  explicit PythonCallable(py::object f) : fn(std::move(f)) {}
  ~PythonCallable() {
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
};

struct EngineHandle {
  const Model* model = nullptr;
  RequestOptions slots_options;  // what the slots share: the drafter, its settings, the cache
  int64_t capacity = 0;
  BatchPipeline pipeline;
  std::unique_ptr<BatchEngine> engine;

  ~EngineHandle() { Close(); }
  void Close() {
    if (engine == nullptr) return;
    py::gil_scoped_release release;  // the engine's thread may be waiting for the GIL in a callback
    engine.reset();
  }
  BatchEngine& Get() {
    if (engine == nullptr) ThrowIfError(absl::FailedPreconditionError("the engine is closed"));
    return *engine;
  }
};

py::object ToPython(EngineEvent event) {
  py::object error = py::none();
  if (!event.status.ok()) {
    error = py::make_tuple(absl::StatusCodeToString(event.status.code()), std::string(event.status.message()));
  }
  py::object result = event.done ? py::cast(std::move(event.result)) : py::none();
  return py::make_tuple(std::move(event.tokens), std::move(event.logprobs), event.done, error, result);
}

std::unique_ptr<EngineHandle> MakeEngine(const ModelHandle& handle, int64_t batch, int64_t max_waiting,
                                         int64_t capacity, py::kwargs kwargs) {
  auto out = std::make_unique<EngineHandle>();
  out->model = handle.model.get();
  Kwargs kw(std::move(kwargs), "Engine");
  out->slots_options = ParseRequestKwargs(kw);
  kw.CheckAllUsed();
  if (capacity < 2 || capacity > handle.model->config().max_position_embeddings) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("capacity must be in [2, max_position_embeddings = ",
                                                         handle.model->config().max_position_embeddings, "], got ",
                                                         capacity)));
  }
  out->capacity = capacity;
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(out->pipeline,
                       BuildBatchPipeline(*out->model, out->slots_options, capacity, batch, Frontend::kPython));
      EngineOptions options;
      options.batch.verifier = out->pipeline.verifier.get();
      options.batch.drafter = out->pipeline.drafter.get();
      options.max_waiting = max_waiting;
      ASSIGN_OR_RETURN(out->engine, BatchEngine::Create(out->pipeline.slots, options));
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  return out;
}

int64_t Submit(EngineHandle& e, const py::sequence& prompt_ids, py::object callback, py::kwargs kwargs) {
  if (!PyCallable_Check(callback.ptr())) throw py::type_error("callback must be callable");
  BatchRequest request;
  for (size_t i = 0; i < py::len(prompt_ids); ++i) {
    const std::string name = absl::StrCat("prompt[", i, "]");
    request.prompt.push_back(static_cast<int32_t>(IntArgument(prompt_ids[i], name.c_str(), INT32_MIN, INT32_MAX)));
  }
  Kwargs kw(std::move(kwargs), "submit");
  RequestOptions r = ParseRequestKwargs(kw);
  kw.CheckAllUsed();
  // A plain request runs on its seat's drafter with no drafts: the same tokens as plain decoding.
  if (r.draft == DraftKind::kNone) {
    r.draft = e.slots_options.draft;
    r.k = 0;
    r.adaptive_k = false;
  }
  ThrowIfError(CheckSharedSlotOptions(e.slots_options, r, absl::StrCat("this request (the engine's seats run the ",
                                                                      DraftKindName(e.slots_options.draft),
                                                                      " drafter; none decodes plainly)"),
                                      Frontend::kPython));
  const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
  if (prompt_tokens + 1 > e.capacity) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt_tokens,
                                                         " tokens; the engine's cache holds ", e.capacity,
                                                         " positions, with room for the first new token")));
  }
  if (r.max_new_tokens > e.capacity - prompt_tokens) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens = ", r.max_new_tokens, " with a prompt of ", prompt_tokens,
                     " tokens passes the engine's cache of ", e.capacity, " positions (at most ",
                     e.capacity - prompt_tokens, ")")));
  }
  request.options = ToGenerateOptions(r);
  ThrowIfError(ValidateGenerateOptions(request.options));
  auto holder = std::make_shared<PythonCallable>(std::move(callback));
  EngineCallback forward = [holder](EngineEvent event) {
    py::gil_scoped_acquire gil;
    try {
      holder->fn(ToPython(std::move(event)));
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("mtpspec engine callback");
    } catch (...) {  // nothing may unwind the engine's thread
      PyErr_SetString(PyExc_RuntimeError, "mtpspec engine callback: a C++ exception");
      PyErr_WriteUnraisable(nullptr);
    }
  };
  absl::StatusOr<int64_t> handle;
  {
    py::gil_scoped_release release;
    handle = e.Get().Submit(std::move(request), std::move(forward));
  }
  return ValueOrThrow(std::move(handle));
}

}  // namespace

void RegisterEngine(py::module_& m) {
  py::class_<EngineHandle>(m, "Engine")
      .def(py::init(&MakeEngine), py::arg("model"), py::arg("batch"), py::arg("max_waiting"), py::arg("capacity"),
           py::keep_alive<1, 2>(),
           "B seats over `model`, each with a cache of `capacity` positions; the keyword options set what the "
           "seats share (draft, mtp_*, ngram, kv_cache) and are generate()'s.")
      .def("submit", &Submit, py::arg("prompt"), py::arg("callback"),
           "Queues a request (generate()'s keyword options); returns its handle. Raises at once when the queue "
           "is full (mtpspec.Error with code ResourceExhausted) or the options are refused.")
      .def(
          "cancel",
          [](EngineHandle& e, int64_t handle) {
            py::gil_scoped_release release;
            return e.Get().Cancel(handle);
          },
          py::arg("handle"))
      .def(
          "drain",
          [](EngineHandle& e, double seconds) {
            py::gil_scoped_release release;
            e.Get().Drain(seconds);
          },
          py::arg("seconds"))
      .def("close", &EngineHandle::Close)
      .def_property_readonly("running",
                             [](EngineHandle& e) {
                               BatchEngine& engine = e.Get();
                               py::gil_scoped_release release;  // the engine's lock is taken without the GIL
                               return engine.running();
                             })
      .def_property_readonly("waiting",
                             [](EngineHandle& e) {
                               BatchEngine& engine = e.Get();
                               py::gil_scoped_release release;
                               return engine.waiting();
                             })
      .def_property_readonly("slots", [](EngineHandle& e) { return e.Get().slots(); })
      .def_property_readonly("capacity", [](const EngineHandle& e) { return e.capacity; })
      .def_property_readonly("draft", [](const EngineHandle& e) { return std::string(DraftKindName(e.slots_options.draft)); })
      .def("stats_json", [](EngineHandle& e) {
        BatchEngine& engine = e.Get();
        std::string text;
        {
          py::gil_scoped_release release;
          text = engine.stats().ToJson().dump();
        }
        return text;
      });
}

}  // namespace mtpspec::python
