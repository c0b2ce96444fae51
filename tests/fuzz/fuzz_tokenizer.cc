// libFuzzer target: arbitrary bytes as tokenizer.json. Loading must return a Status, never crash or
// hang; a tokenizer that loads must encode and decode a fixed text without crashing, and every id
// it encodes to must decode.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = mtpspec::Tokenizer::FromJson(text, "fuzz/tokenizer.json");
  if (!tokenizer.ok()) return 0;
  auto ids = (*tokenizer)->Encode("Hello, world! 123 \xc3\xa9t\xc3\xa9\n\tx");
  if (!ids.ok()) return 0;  // e.g. a vocabulary without the bytes this text needs
  for (int32_t id : *ids) {
    if (id < 0 || id >= (*tokenizer)->vocab_size()) __builtin_trap();
  }
  if (!(*tokenizer)->Decode(*ids).ok()) __builtin_trap();
  return 0;
}
