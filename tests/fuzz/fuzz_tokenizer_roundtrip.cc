// libFuzzer target: arbitrary bytes encoded and decoded with the bundled trained model's tokenizer
// (byte-level BPE, no normalizer). Invalid UTF-8 must be refused with a Status; valid UTF-8 must
// come back byte for byte, and every id must be in the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

const mtpspec::Tokenizer& Trained() {
  static const std::unique_ptr<mtpspec::Tokenizer> tokenizer = [] {
    auto loaded = mtpspec::Tokenizer::Load(MTPSPEC_TOKENIZER_JSON);
    if (!loaded.ok()) std::abort();  // the bundled file must load
    return *std::move(loaded);
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtpspec::Tokenizer& tokenizer = Trained();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = tokenizer.Encode(text);
  if (!ids.ok()) return 0;  // not valid UTF-8
  for (int32_t id : *ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
  }
  auto decoded = tokenizer.Decode(*ids);
  if (!decoded.ok() || *decoded != text) __builtin_trap();
  return 0;
}
