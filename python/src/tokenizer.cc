// _ext.Tokenizer: tokenizer/tokenizer.h (a tokenizer.json reader).
#include <pybind11/stl.h>

#include "tokenizer/tokenizer.h"
#include "pipeline/stop_strings.h"
#include "python/src/bindings.h"
#include "python/src/kwargs.h"

namespace mtpspec::python {
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

void RegisterTokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer", "A Hugging Face tokenizer.json (tokenizer/tokenizer.h).")
      .def_static("load", &LoadTokenizer, py::arg("path"))
      .def("encode", &Encode, py::arg("text"))
      .def("decode", &Decode, py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("special_tokens", &Tokenizer::SpecialTokens)
      .def("token_to_id", &Tokenizer::TokenToId, py::arg("token"))
      .def(
          "id_to_token",
          [](const Tokenizer& t, py::handle id) { return t.IdToToken(static_cast<int32_t>(IntArgument(id, "id", INT32_MIN, INT32_MAX))); },
          py::arg("id"));
  py::class_<StopStrings>(m, "StopStrings",
                          "Stop strings over a request's decoded text (pipeline/stop_strings.h), fed step by step.")
      .def(py::init([](const Tokenizer& tokenizer, std::vector<std::string> stops, bool skip_special_tokens) {
             return ValueOrThrow(StopStrings::Create(tokenizer, std::move(stops), "stop", skip_special_tokens));
           }),
           py::arg("tokenizer"), py::arg("stops"), py::arg("skip_special_tokens") = false, py::keep_alive<1, 2>())
      .def("feed", [](StopStrings& s, const std::vector<int32_t>& tokens) { return s.Feed(tokens); },
           py::arg("tokens"), "Adds a step's tokens; False once the text holds a stop string.")
      .def_property_readonly("hit", [](const StopStrings& s) -> py::object {
        if (!s.hit()) return py::none();
        return py::reinterpret_steal<py::object>(
            PyUnicode_DecodeUTF8(s.hit()->data(), static_cast<Py_ssize_t>(s.hit()->size()), "replace"));
      })
      .def_property_readonly("hit_tokens", &StopStrings::hit_tokens)
      .def_property_readonly("fed", &StopStrings::fed);
}

}  // namespace mtpspec::python
