#include "python/src/kwargs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mtpspec::python {
namespace {

std::string TypeName(py::handle value) { return py::str(py::type::handle_of(value).attr("__name__")); }

[[noreturn]] void TypeError(const std::string& message) { throw py::type_error(message); }

}  // namespace

int64_t IntArgument(py::handle value, const char* name, int64_t lo, int64_t hi) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    TypeError(absl::StrCat(name, " must be an int, got ", TypeName(value), " ", std::string(py::repr(value))));
  }
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < lo || v > hi) {
    ThrowIfError(absl::OutOfRangeError(absl::StrCat(name, " = ", std::string(py::str(index)), " is outside [", lo,
                                                    ", ", hi, "]")));
  }
  return static_cast<int64_t>(v);
}

bool Kwargs::Has(const char* name) const { return kwargs_.contains(name) && !kwargs_[name].is_none(); }

py::handle Kwargs::Get(const char* name) {
  used_.emplace_back(name);
  if (!kwargs_.contains(name)) return py::handle();
  py::handle value = kwargs_[name];
  return value.is_none() ? py::handle() : value;
}

int64_t Kwargs::Int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  py::handle v = Get(name);
  return v ? IntArgument(v, name, lo, hi) : fallback;
}

uint64_t Kwargs::Uint64(const char* name, uint64_t fallback) {
  py::handle v = Get(name);
  if (!v) return fallback;
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) {
    TypeError(absl::StrCat(name, " must be an int, got ", TypeName(v), " ", std::string(py::repr(v))));
  }
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!index) throw py::error_already_set();
  const unsigned long long u = PyLong_AsUnsignedLongLong(index.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    ThrowIfError(absl::OutOfRangeError(
        absl::StrCat(name, " = ", std::string(py::str(index)), " is outside [0, 2**64 - 1]")));
  }
  return static_cast<uint64_t>(u);
}

double Kwargs::Float(const char* name, double fallback) {
  py::handle v = Get(name);
  if (!v) return fallback;
  if (PyBool_Check(v.ptr()) || !(PyFloat_Check(v.ptr()) || PyIndex_Check(v.ptr()) || PyNumber_Check(v.ptr()))) {
    TypeError(absl::StrCat(name, " must be a number, got ", TypeName(v), " ", std::string(py::repr(v))));
  }
  const double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return d;
}

bool Kwargs::Bool(const char* name, bool fallback) {
  py::handle v = Get(name);
  if (!v) return fallback;
  if (!PyBool_Check(v.ptr())) {
    TypeError(absl::StrCat(name, " must be True or False, got ", TypeName(v), " ", std::string(py::repr(v))));
  }
  return v.ptr() == Py_True;
}

std::string Kwargs::Str(const char* name, const std::string& fallback) {
  py::handle v = Get(name);
  if (!v) return fallback;
  if (!py::isinstance<py::str>(v)) {
    TypeError(absl::StrCat(name, " must be a str, got ", TypeName(v), " ", std::string(py::repr(v))));
  }
  return v.cast<std::string>();
}

std::optional<std::vector<double>> Kwargs::FloatList(const char* name) {
  py::handle v = Get(name);
  if (!v) return std::nullopt;
  if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(v)) {
    TypeError(absl::StrCat(name, " must be a sequence of numbers, got ", TypeName(v)));
  }
  std::vector<double> out;
  for (py::handle item : v.cast<py::sequence>()) {
    if (PyBool_Check(item.ptr()) || !(PyFloat_Check(item.ptr()) || PyIndex_Check(item.ptr()))) {
      TypeError(absl::StrCat(name, " must hold numbers, got ", TypeName(item), " ", std::string(py::repr(item))));
    }
    out.push_back(PyFloat_AsDouble(item.ptr()));
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  return out;
}

std::optional<std::vector<int64_t>> Kwargs::IntList(const char* name, int64_t lo, int64_t hi) {
  py::handle v = Get(name);
  if (!v || v.is_none()) return std::nullopt;
  const bool sequence = py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v) && !py::isinstance<py::bytes>(v);
  if (!sequence && PyIndex_Check(v.ptr()) && !PyBool_Check(v.ptr())) {
    return std::vector<int64_t>{IntArgument(v, name, lo, hi)};
  }
  if (!sequence) {
    TypeError(absl::StrCat(name, " must be an int or a sequence of ints, got ", TypeName(v)));
  }
  std::vector<int64_t> out;
  size_t i = 0;
  for (py::handle item : v.cast<py::sequence>()) {
    const std::string item_name = absl::StrCat(name, "[", i++, "]");
    out.push_back(IntArgument(item, item_name.c_str(), lo, hi));
  }
  return out;
}

py::object Kwargs::Object(const char* name) {
  py::handle v = Get(name);
  return v ? py::reinterpret_borrow<py::object>(v) : py::none();
}

void Kwargs::CheckAllUsed() {
  for (auto item : kwargs_) {
    const std::string key = py::str(item.first);
    if (std::find(used_.begin(), used_.end(), key) == used_.end()) {
      TypeError(absl::StrCat(function_, "() got an unexpected keyword argument '", key, "'"));
    }
  }
}

}  // namespace mtpspec::python
