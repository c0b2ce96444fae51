// Pre-tokenizers of Hugging Face `tokenizer.json` files (used by tokenizer/tokenizer.cc): `Split` with a
// regex or literal pattern, `ByteLevel`, and a `Sequence` of them. Regexes run on PCRE2 with UTF
// and Unicode properties (PCRE2_UTF | PCRE2_UCP), JIT-compiled when the library supports it.
//
// HF runs these regexes on Oniguruma (Ruby syntax). The two engines agree on the constructs
// tokenizers use (\p{..} classes, \s, \d, (?i:..), lookahead, ^/$ as line anchors, which is why
// patterns are compiled with PCRE2_MULTILINE). Escapes whose meaning differs (\w \W \b \B: Unicode
// "word" sets differ; \h \H: hex digit in Oniguruma, horizontal space in PCRE2) are rejected.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

struct pcre2_real_code_8;  // pcre2.h stays out of this header

namespace mtpspec::tokenizer_internal {

// One compiled pattern.
class Pcre2Regex {
 public:
  // `literal` matches `pattern` as plain text (HF's {"String": ...} patterns). Errors name
  // `source` and the pattern.
  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> Compile(std::string_view pattern, bool literal,
                                                             const std::string& source);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Byte ranges [begin, end) of the successive non-overlapping matches in `text`, which must be
  // valid UTF-8. An empty match right where the previous match ended is skipped (the search moves
  // on by one character), as in HF's Oniguruma find iterator. Thread-safe.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text) const;

 private:
  Pcre2Regex(pcre2_real_code_8* code, std::string pattern) : code_(code), pattern_(std::move(pattern)) {}

  pcre2_real_code_8* code_;
  std::string pattern_;
};

// HF's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // Parses the "pre_tokenizer" field: Split, ByteLevel, or a Sequence of them (nested Sequences
  // are flattened). At least one ByteLevel step is required, since only byte-level BPE is
  // supported. Errors name `source` and the component, e.g. "pre_tokenizer of type Whitespace is
  // not supported".
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& value, const std::string& source);
  ~PreTokenizer();

  // Splits `text` (valid UTF-8, containing no added token) into the words the BPE model sees,
  // already mapped to byte-level characters, and appends them to `words`.
  absl::Status Apply(std::string_view text, std::vector<std::string>* words) const;

 private:
  struct Step;
  PreTokenizer();

  std::vector<Step> steps_;
};

}  // namespace mtpspec::tokenizer_internal
