#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"
#include "core/status.h"

namespace mtpspec::tokenizer_internal {
namespace {

// The regex GPT-2's ByteLevel pre-tokenizer applies when `use_regex` is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string Pcre2ErrorMessage(int error_code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(error_code, buffer, sizeof(buffer)) < 0) {
    return absl::StrCat("PCRE2 error ", error_code);
  }
  return std::string(reinterpret_cast<const char*>(buffer));
}

// Rejects escapes that Oniguruma (what HF runs) and PCRE2 read differently.
absl::Status CheckPortable(std::string_view pattern, const std::string& source) {
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '\\') continue;
    const char escaped = pattern[i + 1];
    if (std::string_view("wWbBhH").find(escaped) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": pre_tokenizer pattern \"", AbslView(pattern), "\" uses \\", std::string(1, escaped),
                       ", which Oniguruma (Hugging Face) and PCRE2 interpret differently; not supported"));
    }
    ++i;  // skip the escaped character, so "\\w" (an escaped backslash, then w) passes
  }
  return absl::OkStatus();
}

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// HF's SplitDelimiterBehavior applied to the spans covering one piece.
std::vector<Span> ApplyBehavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> result;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kRemoved:
      for (const Span& span : spans) {
        if (!span.is_match) result.push_back(span);
      }
      return result;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !result.empty()) {
          result.back().end = span.end;
        } else {
          result.push_back(span);
        }
        previous_match = span.is_match;
      }
      return result;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !result.empty()) {
          result.back().begin = it->begin;
        } else {
          result.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(result.begin(), result.end());
      return result;
    case SplitBehavior::kContiguous:
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !result.empty()) {
          result.back().end = span.end;
        } else {
          result.push_back(span);
        }
        previous_match = span.is_match;
      }
      return result;
  }
  return spans;
}

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& value, const std::string& source) {
  static constexpr std::pair<std::string_view, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous},
  };
  if (value.is_string()) {
    for (const auto& [name, behavior] : kNames) {
      if (value.get<std::string>() == name) return behavior;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": Split pre_tokenizer behavior ", value.dump(),
                                                 " is not supported (Removed, Isolated, MergedWithPrevious, "
                                                 "MergedWithNext or Contiguous)"));
}

absl::StatusOr<bool> OptionalBool(const nlohmann::json& object, const char* key, bool fallback,
                                  const std::string& source, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, ".", key, " must be true or false"));
  }
  return it->get<bool>();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pcre2Regex

absl::StatusOr<std::unique_ptr<Pcre2Regex>> Pcre2Regex::Compile(std::string_view pattern, bool literal,
                                                                const std::string& source) {
  if (!literal) RETURN_IF_ERROR(CheckPortable(pattern, source));
  const uint32_t options = literal ? (PCRE2_LITERAL | PCRE2_UTF) : (PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": pre_tokenizer pattern \"", AbslView(pattern),
                                                   "\" does not compile at offset ", error_offset, ": ",
                                                   Pcre2ErrorMessage(error_code)));
  }
  // JIT is an optimization only; without it pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Pcre2Regex>(new Pcre2Regex(code, std::string(pattern)));
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(code_); }

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Pcre2Regex::FindAll(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  if (match_data == nullptr) return absl::ResourceExhaustedError("PCRE2 could not allocate match data");
  static constexpr char kEmpty[] = "";
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.empty() ? kEmpty : text.data());

  std::vector<std::pair<size_t, size_t>> matches;
  size_t search_from = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, match_data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("pre_tokenizer pattern \"", pattern_, "\" failed to match: ", Pcre2ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const size_t begin = ovector[0];
    const size_t end = std::max<size_t>(ovector[0], ovector[1]);
    if (begin == end && have_previous && previous_end == end) {
      if (search_from >= text.size()) break;
      bool valid = false;
      search_from += ScanUtf8(text, search_from, &valid);
      continue;
    }
    matches.emplace_back(begin, end);
    search_from = end;
    previous_end = end;
    have_previous = true;
  }
  return matches;
}

// ---------------------------------------------------------------------------------------------
// PreTokenizer

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  // kSplit; for kByteLevel with use_regex, the GPT-2 pattern (null when use_regex is false).
  std::unique_ptr<Pcre2Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& value,
                                                                     const std::string& source) {
  auto pre_tokenizer = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  if (value.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": pre_tokenizer null is not supported (byte-level BPE needs a ByteLevel pre_tokenizer)"));
  }
  // Flatten nested Sequences into the list of steps, in order.
  std::vector<const nlohmann::json*> pending = {&value};
  std::vector<const nlohmann::json*> flat;
  while (!pending.empty()) {
    const nlohmann::json* node = pending.back();
    pending.pop_back();
    if (!node->is_object() || !node->contains("type") || !node->at("type").is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": pre_tokenizer entry has no \"type\": ", node->dump().substr(0, 200)));
    }
    if (node->at("type") == "Sequence") {
      auto it = node->find("pretokenizers");
      if (it == node->end() || !it->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": pre_tokenizer Sequence has no pretokenizers array"));
      }
      for (auto child = it->rbegin(); child != it->rend(); ++child) pending.push_back(&*child);
    } else {
      flat.push_back(node);
    }
  }

  bool has_byte_level = false;
  for (const nlohmann::json* node : flat) {
    const std::string type = node->at("type").get<std::string>();
    Step step;
    if (type == "Split") {
      step.kind = Step::Kind::kSplit;
      auto pattern = node->find("pattern");
      const bool is_regex = pattern != node->end() && pattern->is_object() && pattern->size() == 1 &&
                            pattern->contains("Regex") && pattern->at("Regex").is_string();
      const bool is_string = pattern != node->end() && pattern->is_object() && pattern->size() == 1 &&
                             pattern->contains("String") && pattern->at("String").is_string();
      if (!is_regex && !is_string) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": Split pre_tokenizer pattern must be {\"Regex\": ...} or {\"String\": ...}, got ",
                         pattern == node->end() ? std::string("nothing") : pattern->dump().substr(0, 200)));
      }
      const std::string text = pattern->at(is_regex ? "Regex" : "String").get<std::string>();
      ASSIGN_OR_RETURN(step.regex, Pcre2Regex::Compile(text, /*literal=*/is_string, source));
      ASSIGN_OR_RETURN(step.behavior, ParseBehavior(node->value("behavior", nlohmann::json()), source));
      ASSIGN_OR_RETURN(step.invert, OptionalBool(*node, "invert", false, source, "Split pre_tokenizer"));
    } else if (type == "ByteLevel") {
      step.kind = Step::Kind::kByteLevel;
      has_byte_level = true;
      // Defaults follow HF's ByteLevel::default().
      ASSIGN_OR_RETURN(step.add_prefix_space,
                       OptionalBool(*node, "add_prefix_space", true, source, "ByteLevel pre_tokenizer"));
      ASSIGN_OR_RETURN(bool use_regex, OptionalBool(*node, "use_regex", true, source, "ByteLevel pre_tokenizer"));
      if (use_regex) {
        ASSIGN_OR_RETURN(step.regex, Pcre2Regex::Compile(kGpt2Pattern, /*literal=*/false, source));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(source, ": pre_tokenizer of type ", type,
                                                     " is not supported (supported: Sequence, Split, ByteLevel)"));
    }
    pre_tokenizer->steps_.push_back(std::move(step));
  }
  if (!has_byte_level) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported"));
  }
  return pre_tokenizer;
}

absl::Status PreTokenizer::Apply(std::string_view text, std::vector<std::string>* words) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : pieces) {
      if (step.kind == Step::Kind::kSplit) {
        ASSIGN_OR_RETURN(auto matches, step.regex->FindAll(piece));
        std::vector<Span> spans;
        size_t previous = 0;
        for (const auto& [begin, end] : matches) {
          if (previous != begin) spans.push_back({previous, begin, false});
          spans.push_back({begin, end, true});
          previous = end;
        }
        if (previous != piece.size()) spans.push_back({previous, piece.size(), false});
        if (step.invert) {
          for (Span& span : spans) span.is_match = !span.is_match;
        }
        for (const Span& span : ApplyBehavior(std::move(spans), step.behavior)) {
          if (span.end > span.begin) next.push_back(piece.substr(span.begin, span.end - span.begin));
        }
      } else {
        const std::string prefixed = step.add_prefix_space && piece.front() != ' ' ? " " + piece : piece;
        std::vector<std::string_view> parts;
        if (step.regex != nullptr) {
          ASSIGN_OR_RETURN(auto matches, step.regex->FindAll(prefixed));
          size_t previous = 0;
          const std::string_view whole(prefixed);
          for (const auto& [begin, end] : matches) {
            if (previous != begin) parts.push_back(whole.substr(previous, begin - previous));
            parts.push_back(whole.substr(begin, end - begin));
            previous = end;
          }
          if (previous != whole.size()) parts.push_back(whole.substr(previous));
        } else {
          parts.push_back(prefixed);
        }
        for (std::string_view part : parts) {
          if (part.empty()) continue;
          std::string mapped;
          mapped.reserve(part.size() * 2);
          AppendByteLevel(part, &mapped);
          next.push_back(std::move(mapped));
        }
      }
    }
    pieces.swap(next);
  }
  for (std::string& piece : pieces) words->push_back(std::move(piece));
  return absl::OkStatus();
}

}  // namespace mtpspec::tokenizer_internal
