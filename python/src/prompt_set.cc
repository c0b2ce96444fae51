// _ext.parse_prompt_set: pipeline/prompt_set.h, the JSONL prompt-set reader mtpspec.prompts uses.
#include <pybind11/stl.h>

#include "pipeline/prompt_set.h"
#include "python/src/bindings.h"

namespace mtpspec::python {

void RegisterPromptSet(py::module_& m) {
  m.def(
      "parse_prompt_set",
      [](const std::string& text, const std::string& source, const std::vector<std::string>& categories) {
        std::vector<PromptSetItem> items = ValueOrThrow(ParsePromptSet(text, source, categories));
        py::list out;
        for (PromptSetItem& item : items) {
          out.append(py::make_tuple(item.id, item.category, item.turns, item.source));
        }
        return out;
      },
      py::arg("text"), py::arg("source"), py::arg("categories") = std::vector<std::string>{},
      "The (id, category, turns, source) of each prompt of a JSONL prompt set's text (pipeline/prompt_set.h); "
      "InvalidArgumentError names the source and line of a fault.");
}

}  // namespace mtpspec::python
