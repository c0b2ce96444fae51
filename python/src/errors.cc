// absl::Status → Python exceptions.
//
//   mtpspec.Error(Exception)                        every error from the C++ library; `.code` holds
//   ├── NotFoundError(Error, FileNotFoundError)     the absl status code name, str() its message
//   └── InvalidArgumentError(Error, ValueError)     (InvalidArgument and OutOfRange)
#include <string>

#include "absl/status/status.h"
#include "python/src/bindings.h"

namespace mtpspec::python {
namespace {

// Owned by the module for the life of the process.
PyObject* g_error = nullptr;
PyObject* g_not_found = nullptr;
PyObject* g_invalid_argument = nullptr;

PyObject* NewException(const char* name, const char* doc, PyObject* bases) {
  PyObject* type = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  Py_DECREF(bases);
  if (type == nullptr) throw py::error_already_set();
  return type;
}

}  // namespace

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  PyObject* type = g_error;
  if (status.code() == absl::StatusCode::kNotFound) {
    type = g_not_found;
  } else if (status.code() == absl::StatusCode::kInvalidArgument || status.code() == absl::StatusCode::kOutOfRange) {
    type = g_invalid_argument;
  }
  // Paths in messages need not be UTF-8; never let the translation itself fail.
  const absl::string_view text = status.message();
  py::object message = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
  if (!message) throw py::error_already_set();
  py::object instance = py::reinterpret_borrow<py::object>(type)(message);
  instance.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(type, instance.ptr());
  throw py::error_already_set();
}

void RegisterErrors(py::module_& m) {
  g_error = NewException("mtpspec.Error",
                         "An error reported by the mtpspec C++ library. `code` names the absl status code.",
                         PyTuple_Pack(1, PyExc_Exception));
  g_not_found = NewException("mtpspec.NotFoundError", "A file or directory the library needed does not exist.",
                             PyTuple_Pack(2, g_error, PyExc_FileNotFoundError));
  g_invalid_argument = NewException("mtpspec.InvalidArgumentError", "An argument (or file content) is invalid.",
                                    PyTuple_Pack(2, g_error, PyExc_ValueError));
  m.add_object("Error", py::reinterpret_borrow<py::object>(g_error));
  m.add_object("NotFoundError", py::reinterpret_borrow<py::object>(g_not_found));
  m.add_object("InvalidArgumentError", py::reinterpret_borrow<py::object>(g_invalid_argument));
  // Lets tests and users check the translation without a model.
  m.def(
      "_raise_status",
      [](int code, const std::string& message) {
        ThrowIfError(absl::Status(static_cast<absl::StatusCode>(code), message));
      },
      py::arg("code"), py::arg("message"));
}

}  // namespace mtpspec::python
