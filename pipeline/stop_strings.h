// Stop strings: a request ends once its decoded text contains one of them. Fed each step's committed
// tokens, the watcher decodes the text so far and finds the earliest stop string; the request keeps
// the fewest tokens whose text holds it, and its text ends where the stop string starts. Used as a
// token callback (RequestRunner, the batch front ends, the server), so every front end stops alike.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace mtpspec {

class StopStrings {
 public:
  // `stops` must be non-empty strings; the error names `option`. With `skip_special_tokens` the text
  // searched leaves out the special tokens' text, as a server's output text does.
  static absl::StatusOr<StopStrings> Create(const Tokenizer& tokenizer, std::vector<std::string> stops,
                                            const std::string& option, bool skip_special_tokens = false);

  // Adds a step's tokens; false once the text holds a stop string (then hit() is set), true while
  // it does not. After a hit every call returns false.
  bool Feed(std::span<const int32_t> tokens);

  // The text before the first stop string, once one was found.
  const std::optional<std::string>& hit() const { return hit_; }
  // The tokens up to the one that completed the stop string (of all those fed).
  int64_t hit_tokens() const { return hit_tokens_; }
  // Tokens fed so far.
  int64_t fed() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  StopStrings(const Tokenizer& tokenizer, std::vector<std::string> stops, bool skip_special_tokens);
  // The earliest stop string in `text` at or after `start`, as its offset.
  std::optional<size_t> Find(const std::string& text, size_t start) const;
  std::string Decode(std::span<const int32_t> ids) const;

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_ = false;
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::vector<int32_t> tokens_;
  size_t searched_ = 0;  // bytes of the text known to hold no stop string that ends before them
  std::optional<std::string> hit_;
  int64_t hit_tokens_ = 0;
};

}  // namespace mtpspec
