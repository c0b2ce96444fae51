#include "pipeline/stop_strings.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mtpspec {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD: where Decode met bytes that are no UTF-8 (yet)

// `text` without trailing replacement characters: a partial UTF-8 sequence may still change.
size_t StableLength(const std::string& text) {
  size_t n = text.size();
  while (n >= 3 && text.compare(n - 3, 3, kReplacement) == 0) n -= 3;
  return n;
}

}  // namespace

absl::StatusOr<StopStrings> StopStrings::Create(const Tokenizer& tokenizer, std::vector<std::string> stops,
                                                const std::string& option, bool skip_special_tokens) {
  if (stops.empty()) return absl::InvalidArgumentError(absl::StrCat(option, " must hold at least one string"));
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) return absl::InvalidArgumentError(absl::StrCat(option, "[", i, "] is empty"));
  }
  return StopStrings(tokenizer, std::move(stops), skip_special_tokens);
}

StopStrings::StopStrings(const Tokenizer& tokenizer, std::vector<std::string> stops, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens), stops_(std::move(stops)) {
  for (const std::string& s : stops_) longest_ = std::max(longest_, s.size());
}

std::string StopStrings::Decode(std::span<const int32_t> ids) const {
  absl::StatusOr<std::string> text = tokenizer_->Decode(ids, skip_special_tokens_);
  return text.ok() ? *std::move(text) : std::string();
}

std::optional<size_t> StopStrings::Find(const std::string& text, size_t start) const {
  std::optional<size_t> first;
  for (const std::string& stop : stops_) {
    const size_t at = text.find(stop, start);
    if (at != std::string::npos && (!first || at < *first)) first = at;
  }
  return first;
}

bool StopStrings::Feed(std::span<const int32_t> tokens) {
  if (hit_) return false;
  const size_t before = tokens_.size();
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  const std::string text = Decode(tokens_);
  const size_t start = searched_ >= longest_ ? searched_ - longest_ + 1 : 0;
  if (!Find(text, start)) {
    searched_ = StableLength(text);
    return true;
  }
  for (size_t m = before + 1; m <= tokens_.size(); ++m) {  // the fewest tokens that hold it
    const std::string prefix = Decode(std::span<const int32_t>(tokens_.data(), m));
    if (std::optional<size_t> at = Find(prefix, start)) {
      hit_ = prefix.substr(0, *at);
      hit_tokens_ = static_cast<int64_t>(m);
      break;
    }
  }
  return false;
}

}  // namespace mtpspec
