// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the format of GLM-4.x / GLM-5,
// DeepSeek-V3.x and GPT-2 style tokenizers). Encode and Decode give the ids and text that the
// Hugging Face `tokenizers` library gives for the same file (tests/tokenizer/tokenizer_test.cc checks
// this against fixtures that library produced).
//
// Supported components (anything else is rejected at load with an error naming the file, the
// component and its type):
//   model           BPE: vocab, merges as ["a", "b"] pairs or legacy "a b" strings, ignore_merges,
//                   unk_token / fuse_unk; dropout, continuing_subword_prefix and end_of_word_suffix
//                   null; byte_fallback false.
//   normalizer      null, or a Sequence with no normalizers in it (NFC, NFKC, Precompiled, ... are
//                   rejected: mtpspec has no Unicode normalization).
//   pre_tokenizer   Split (Regex or String pattern, every behavior, invert), ByteLevel
//                   (add_prefix_space, use_regex), or a Sequence of them; a ByteLevel step is required.
//   post_processor  null, ByteLevel (offsets only, so a no-op for ids), TemplateProcessing (its
//                   "single" template: the special tokens around the sequence), or a Sequence of these.
//   decoder         ByteLevel.
//   added_tokens    special, normalized, lstrip, rstrip; single_word = true is rejected.
//   truncation, padding must be null.
// Added tokens are matched in the text first, as HF does: leftmost-longest, the non-normalized
// ones on the raw text, then the normalized ones in the text between.
//
// Thread-safe: all methods are const and may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace mtpspec {

namespace tokenizer_internal {
class BpeModel;
class PreTokenizer;
}  // namespace tokenizer_internal

class Tokenizer {
 public:
  // Loads a Hugging Face tokenizer.json. NotFound if the file does not exist; every error names
  // the file and, for unsupported content, the component, e.g. "normalizer of type Precompiled is
  // not supported".
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // Same, from the JSON text; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& json_text, const std::string& source);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids HF's `Tokenizer.encode(text).ids` gives (add_special_tokens=True: a TemplateProcessing
  // post-processor adds its special tokens, e.g. DeepSeek's BOS). Added and special tokens written
  // in `text` are matched as tokens. InvalidArgument if `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;

  // Concatenates the tokens' bytes (byte-level characters mapped back to bytes; a token with
  // characters outside the byte-level alphabet, such as most added tokens, contributes its UTF-8
  // text) and decodes them as UTF-8, replacing ill-formed bytes with U+FFFD like
  // bytes.decode("utf-8", errors="replace"). `skip_special_tokens` drops added tokens flagged
  // special. InvalidArgument naming the index for an id outside [0, vocab_size()) or without a token.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Largest id of the model vocabulary and the added tokens, plus one.
  int64_t vocab_size() const { return vocab_size_; }
  // Added tokens first, then the model vocabulary (as HF looks them up).
  std::optional<int32_t> TokenToId(const std::string& token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  // The added tokens flagged special (content and id, in the file's order): BOS, EOS, chat markers.
  std::vector<std::pair<std::string, int32_t>> SpecialTokens() const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false;
    bool normalized = false;
    bool lstrip = false;
    bool rstrip = false;
  };
  // Finds added tokens in text, leftmost-longest. Indexes into added_tokens_, per first byte,
  // longest content first.
  struct AddedTokenMatcher {
    std::vector<std::vector<size_t>> by_first_byte = std::vector<std::vector<size_t>>(256);
  };
  // A run of the text to encode: either plain text or one added token (with any whitespace its
  // lstrip / rstrip absorbed).
  struct Segment {
    size_t begin = 0;
    size_t end = 0;
    std::optional<size_t> added_index;
  };

  Tokenizer();
  absl::Status ParseAddedTokens(const nlohmann::json& value, const std::string& source);
  absl::Status ParsePostProcessor(const nlohmann::json& value, const std::string& source);
  // Appends the segments of text[begin, end), splitting on the tokens `matcher` finds.
  void SplitOnAddedTokens(std::string_view text, size_t begin, size_t end, const AddedTokenMatcher& matcher,
                          std::vector<Segment>* segments) const;
  const AddedToken* FindAdded(int32_t id) const;

  std::unique_ptr<tokenizer_internal::BpeModel> model_;
  std::unique_ptr<tokenizer_internal::PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_tokens_;
  std::unordered_map<std::string, size_t> added_by_content_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  AddedTokenMatcher raw_matcher_;         // tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // tokens with normalized = true
  std::vector<int32_t> prefix_ids_;       // from the post-processor
  std::vector<int32_t> suffix_ids_;
  int64_t vocab_size_ = 0;
};

}  // namespace mtpspec
