// Shared pieces of the mtpspec._ext extension: status → exception translation, zero-copy numpy
// arrays, the model handle every bound function works on, and one Register* entry per bound class.
//
// Rules followed by every binding: argument conversion happens with the GIL held, every C++ call
// that may take long runs inside py::gil_scoped_release, and callbacks into Python re-acquire it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "model/model.h"

namespace mtpspec::python {

namespace py = pybind11;

// Raises the Python exception that matches `status` (FileNotFoundError for NotFound, ValueError for
// InvalidArgument / OutOfRange, mtpspec.Error otherwise; all of them are mtpspec.Error subclasses).
// Must be called with the GIL held. Does nothing for OK.
void ThrowIfError(const absl::Status& status);

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return std::move(value).value();
}

// A float32 tensor handed to numpy without a copy: the Tensor moves to the heap and a capsule owns
// it, so the buffer lives exactly as long as the array (and its views).
py::array_t<float> TensorToArray(Tensor tensor);

// The same for a vector the binding filled itself.
template <typename T>
py::array_t<T> VectorToArray(std::vector<T> values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), owner);
}

// What a Python `_ext.Model` holds.
struct ModelHandle {
  std::unique_ptr<Model> model;
  int64_t cache_capacity = 0;  // 0: each call sizes its own cache
};

// The KV capacity a call that needs `wanted` positions gets: the handle's fixed capacity when set,
// else `wanted` capped at max_position_embeddings.
int64_t CacheCapacityFor(const ModelHandle& handle, int64_t wanted);

void RegisterErrors(py::module_& m);
void RegisterModel(py::module_& m);
void RegisterStats(py::module_& m);
void RegisterGenerate(py::module_& m);
void RegisterAdaptive(py::module_& m);
void RegisterTokenizer(py::module_& m);
void RegisterEngine(py::module_& m);
void RegisterPromptSet(py::module_& m);

}  // namespace mtpspec::python
