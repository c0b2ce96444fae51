// libFuzzer target: arbitrary bytes as a JSONL prompt set. Parsing must return a Status, never crash
// or hang, and every item it accepts must have a category and at least one non-blank turn.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "pipeline/prompt_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto items = mtpspec::ParsePromptSet(text, "fuzz/set.jsonl");
  if (items.ok()) {
    if (items->empty()) __builtin_trap();
    for (const mtpspec::PromptSetItem& item : *items) {
      if (item.category.empty() || item.turns.empty() || item.id.empty()) __builtin_trap();
      for (const std::string& turn : item.turns) {
        if (absl::StripAsciiWhitespace(turn).empty()) __builtin_trap();
      }
    }
  }
  return 0;
}
