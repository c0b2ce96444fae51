// The mtpspec._ext module: registers every bound class, the process-wide thread count and the
// zero-copy tensor → numpy hand-off.
#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "core/parallel.h"
#include "python/src/bindings.h"
#include "spec/generator.h"

#ifndef MTPSPEC_PY_VERSION
#define MTPSPEC_PY_VERSION "0.0.0"
#endif

namespace mtpspec::python {

py::array_t<float> TensorToArray(Tensor tensor) {
  if (tensor.empty()) return py::array_t<float>(std::vector<py::ssize_t>{0});
  if (tensor.dtype() != DType::kF32) {
    ThrowIfError(absl::InternalError("TensorToArray: only float32 tensors are handed to numpy"));
  }
  auto* owned = new Tensor(std::move(tensor));
  py::capsule owner(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  const TensorView& v = owned->view();
  std::vector<py::ssize_t> shape, strides;
  for (int i = 0; i < v.ndim; ++i) {
    shape.push_back(v.shape[i]);
    strides.push_back(v.stride[i] * static_cast<py::ssize_t>(sizeof(float)));
  }
  return py::array_t<float>(shape, strides, owned->data<float>(), owner);
}

namespace {

// Sets the C++ default pool size; fine if the pool already runs exactly that many threads.
void SetThreads(int64_t threads) {
  if (threads < 1 || threads > kMaxThreads) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("threads must be in [1, ", kMaxThreads, "], got ", threads)));
  }
  const absl::Status status = SetDefaultThreadCount(static_cast<int>(threads));
  if (status.code() == absl::StatusCode::kFailedPrecondition) {
    const int running = DefaultThreadPool().num_threads();
    if (running == threads) return;
    ThrowIfError(absl::FailedPreconditionError(absl::StrCat(
        "threads=", threads, " was requested but the thread pool already runs ", running,
        " threads; the count is fixed by the first model call in a process (pass threads= to the first "
        "Model.load, or set MTPSPEC_THREADS before starting Python)")));
  }
  ThrowIfError(status);
}

}  // namespace
}  // namespace mtpspec::python

PYBIND11_MODULE(_ext, m) {
  using namespace mtpspec::python;
  m.doc() = "C++ core of mtpspec (use the `mtpspec` package, not this module, directly).";
  m.attr("__version__") = MTPSPEC_PY_VERSION;
  RegisterErrors(m);
  RegisterModel(m);
  RegisterStats(m);
  RegisterAdaptive(m);
  RegisterGenerate(m);
  RegisterTokenizer(m);
  RegisterEngine(m);
  RegisterPromptSet(m);
  m.def("set_threads", &SetThreads, py::arg("threads"),
        "Sets the C++ thread pool size; an error if the pool already runs a different count.");
  m.def("thread_count", []() { return mtpspec::DefaultThreadPool().num_threads(); },
        "Threads of the C++ pool (starts it with the default count if it was not running).");
  m.attr("MAX_DRAFT_TOKENS") = mtpspec::kMaxDraftTokens;
}
