// _ext.Tokenizer: core/tokenizer.h (a tokenizer.json reader), when the C++ library has one.
// _ext.HAS_TOKENIZER tells the Python package whether it was compiled in.
#include <pybind11/stl.h>

#include "python/src/bindings.h"

#if __has_include("core/tokenizer.h")
#include "core/tokenizer.h"
#define MTPSPEC_PY_HAS_TOKENIZER 1
#else
#define MTPSPEC_PY_HAS_TOKENIZER 0
#endif

namespace mtpspec::python {

#if MTPSPEC_PY_HAS_TOKENIZER
namespace {

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  {
    py::gil_scoped_release release;
    tokenizer = Tokenizer::Load(path);
  }
  return ValueOrThrow(std::move(tokenizer));
}

std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids;
  {
    py::gil_scoped_release release;
    ids = tokenizer.Encode(text);
  }
  return ValueOrThrow(std::move(ids));
}

// Text pieces may end inside a UTF-8 sequence (a byte-level token); such bytes decode to U+FFFD
// rather than raising, so streaming can emit partial text and fix it up later.
py::str Decode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special_tokens) {
  absl::StatusOr<std::string> text;
  {
    py::gil_scoped_release release;
    text = tokenizer.Decode(ids, skip_special_tokens);
  }
  const std::string bytes = ValueOrThrow(std::move(text));
  PyObject* decoded = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

}  // namespace
#endif

void RegisterTokenizer(py::module_& m) {
#if MTPSPEC_PY_HAS_TOKENIZER
  m.attr("HAS_TOKENIZER") = true;
  py::class_<Tokenizer>(m, "Tokenizer", "A Hugging Face tokenizer.json (core/tokenizer.h).")
      .def_static("load", &LoadTokenizer, py::arg("path"))
      .def("encode", &Encode, py::arg("text"))
      .def("decode", &Decode, py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size);
#else
  m.attr("HAS_TOKENIZER") = false;
#endif
}

}  // namespace mtpspec::python
