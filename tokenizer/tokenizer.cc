#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mtpspec {
namespace {

using tokenizer_internal::AbslView;

absl::Status Unsupported(const std::string& source, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", AbslView(message)));
}

// "type" of a component object, or "" if it has none.
std::string TypeOf(const nlohmann::json& component) {
  if (!component.is_object()) return "";
  auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Describe(const nlohmann::json& component) {
  const std::string type = TypeOf(component);
  return type.empty() ? absl::StrCat("without a \"type\" (", component.dump().substr(0, 100), ")")
                      : absl::StrCat("of type ", type);
}

// Only identity normalizers are supported: null, or Sequences containing nothing else.
absl::Status CheckNormalizer(const nlohmann::json& normalizer, const std::string& source) {
  if (normalizer.is_null()) return absl::OkStatus();
  if (TypeOf(normalizer) == "Sequence") {
    auto list = normalizer.find("normalizers");
    if (list == normalizer.end() || !list->is_array()) {
      return Unsupported(source, "normalizer Sequence has no normalizers array");
    }
    for (const nlohmann::json& child : *list) RETURN_IF_ERROR(CheckNormalizer(child, source));
    return absl::OkStatus();
  }
  return Unsupported(source, absl::StrCat("normalizer ", Describe(normalizer),
                                          " is not supported (supported: null, or a Sequence of none; "
                                          "mtpspec implements no Unicode normalization)"));
}

absl::Status CheckDecoder(const nlohmann::json& decoder, const std::string& source) {
  if (TypeOf(decoder) == "ByteLevel") return absl::OkStatus();
  return Unsupported(source, absl::StrCat("decoder ", decoder.is_null() ? "null" : Describe(decoder),
                                          " is not supported (only ByteLevel)"));
}

bool FlagOr(const nlohmann::json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& json_text,
                                                               const std::string& source) {
  ASSIGN_OR_RETURN(nlohmann::json root, ParseJsonText(json_text, source, "tokenizer"));
  if (!root.is_object()) return Unsupported(source, "tokenizer JSON must be an object");
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  // The checks below test types before every access, so this only guards against an oversight:
  // no nlohmann exception may leave the library.
  try {
    if (root.contains("version") && root["version"] != "1.0") {
      return Unsupported(
          source, absl::StrCat("tokenizer.json version ", root["version"].dump(), " is not supported (only \"1.0\")"));
    }
    for (const char* key : {"truncation", "padding"}) {
      if (root.contains(key) && !root[key].is_null()) {
        return Unsupported(source, absl::StrCat(key, " is set; only null is supported"));
      }
    }
    const nlohmann::json null_value;
    auto field = [&](const char* key) -> const nlohmann::json& {
      auto it = root.find(key);
      return it == root.end() ? null_value : *it;
    };
    if (!root.contains("model")) return Unsupported(source, "tokenizer.json has no \"model\"");
    ASSIGN_OR_RETURN(tokenizer->model_, tokenizer_internal::BpeModel::FromJson(root["model"], source));
    RETURN_IF_ERROR(CheckNormalizer(field("normalizer"), source));
    ASSIGN_OR_RETURN(tokenizer->pre_tokenizer_,
                     tokenizer_internal::PreTokenizer::FromJson(field("pre_tokenizer"), source));
    RETURN_IF_ERROR(CheckDecoder(field("decoder"), source));
    RETURN_IF_ERROR(tokenizer->ParseAddedTokens(field("added_tokens"), source));
    RETURN_IF_ERROR(tokenizer->ParsePostProcessor(field("post_processor"), source));
  } catch (const nlohmann::json::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed tokenizer.json: ", error.what()));
  }
  return tokenizer;
}

absl::Status Tokenizer::ParseAddedTokens(const nlohmann::json& value, const std::string& source) {
  int64_t max_id = model_->max_id();
  if (!value.is_null()) {
    if (!value.is_array()) return Unsupported(source, "added_tokens must be an array");
    for (size_t i = 0; i < value.size(); ++i) {
      const nlohmann::json& entry = value[i];
      const std::string where = absl::StrCat("added_tokens[", i, "]");
      if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string() ||
          entry["content"].get<std::string>().empty()) {
        return Unsupported(source, absl::StrCat(where, " needs a non-empty string \"content\""));
      }
      AddedToken token;
      token.content = entry["content"].get<std::string>();
      const std::string named = absl::StrCat(where, " (\"", token.content, "\")");
      if (!entry.contains("id") || !entry["id"].is_number_integer() || entry["id"].get<int64_t>() < 0 ||
          entry["id"].get<int64_t>() > INT32_MAX) {
        return Unsupported(source, absl::StrCat(named, " needs an integer \"id\" in [0, 2^31)"));
      }
      token.id = static_cast<int32_t>(entry["id"].get<int64_t>());
      for (const char* flag : {"special", "normalized", "lstrip", "rstrip", "single_word"}) {
        if (entry.contains(flag) && !entry[flag].is_boolean()) {
          return Unsupported(source, absl::StrCat(named, ".", flag, " must be true or false"));
        }
      }
      if (FlagOr(entry, "single_word", false)) {
        return Unsupported(source, absl::StrCat(named, ": single_word = true is not supported"));
      }
      token.special = FlagOr(entry, "special", false);
      token.normalized = FlagOr(entry, "normalized", !token.special);  // HF's default
      token.lstrip = FlagOr(entry, "lstrip", false);
      token.rstrip = FlagOr(entry, "rstrip", false);
      if (auto model_id = model_->TokenToId(token.content); model_id && *model_id != token.id) {
        return Unsupported(source,
                           absl::StrCat(named, " has id ", token.id, " but model.vocab gives it id ", *model_id));
      }
      if (auto it = added_by_content_.find(token.content); it != added_by_content_.end()) {
        return Unsupported(source, absl::StrCat(named, " repeats an earlier added token"));
      }
      if (auto it = added_by_id_.find(token.id); it != added_by_id_.end()) {
        return Unsupported(source,
                           absl::StrCat(named, " has the same id as \"", added_tokens_[it->second].content, "\""));
      }
      if (const std::string* model_token = model_->IdToToken(token.id); model_token && *model_token != token.content) {
        return Unsupported(
            source, absl::StrCat(named, " has id ", token.id, ", which model.vocab gives to \"", *model_token, "\""));
      }
      added_by_content_.emplace(token.content, added_tokens_.size());
      added_by_id_.emplace(token.id, added_tokens_.size());
      max_id = std::max<int64_t>(max_id, token.id);
      added_tokens_.push_back(std::move(token));
    }
  }
  vocab_size_ = max_id + 1;

  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    AddedTokenMatcher& matcher = added_tokens_[i].normalized ? normalized_matcher_ : raw_matcher_;
    matcher.by_first_byte[static_cast<unsigned char>(added_tokens_[i].content[0])].push_back(i);
  }
  for (AddedTokenMatcher* matcher : {&raw_matcher_, &normalized_matcher_}) {
    for (std::vector<size_t>& candidates : matcher->by_first_byte) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
        return added_tokens_[a].content.size() > added_tokens_[b].content.size();
      });
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::ParsePostProcessor(const nlohmann::json& value, const std::string& source) {
  if (value.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(value);
  if (type == "ByteLevel") return absl::OkStatus();  // adjusts offsets only
  if (type == "Sequence") {
    auto list = value.find("processors");
    if (list == value.end() || !list->is_array()) {
      return Unsupported(source, "post_processor Sequence has no processors array");
    }
    // Each processor wraps what the previous ones produced.
    for (const nlohmann::json& child : *list) RETURN_IF_ERROR(ParsePostProcessor(child, source));
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return Unsupported(source, absl::StrCat("post_processor ", Describe(value),
                                            " is not supported (supported: null, ByteLevel, TemplateProcessing, "
                                            "Sequence)"));
  }
  auto single = value.find("single");
  auto specials = value.find("special_tokens");
  if (single == value.end() || !single->is_array() || specials == value.end() || !specials->is_object()) {
    return Unsupported(source,
                       "TemplateProcessing post_processor needs a \"single\" array and a "
                       "\"special_tokens\" object");
  }
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const nlohmann::json& piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      const nlohmann::json& sequence = piece["Sequence"];
      if (seen_sequence || !sequence.is_object() || sequence.value("id", "") != "A") {
        return Unsupported(source, absl::StrCat("TemplateProcessing single template piece ", piece.dump(),
                                                " is not supported (one Sequence \"A\")"));
      }
      seen_sequence = true;
      continue;
    }
    const bool is_special = piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
                            piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string();
    if (!is_special) {
      return Unsupported(source,
                         absl::StrCat("TemplateProcessing single template piece ", piece.dump(), " is not supported"));
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    auto entry = specials->find(name);
    if (entry == specials->end() || !entry->is_object() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
      return Unsupported(
          source, absl::StrCat("TemplateProcessing special token \"", name, "\" is missing from special_tokens"));
    }
    for (const nlohmann::json& id : (*entry)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size_) {
        return Unsupported(source, absl::StrCat("TemplateProcessing special token \"", name, "\" has id ", id.dump(),
                                                " outside the vocabulary [0, ", vocab_size_, ")"));
      }
      (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_sequence) return Unsupported(source, "TemplateProcessing single template has no Sequence \"A\"");
  prefix_ids_.insert(prefix_ids_.begin(), prefix.begin(), prefix.end());
  suffix_ids_.insert(suffix_ids_.end(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

void Tokenizer::SplitOnAddedTokens(std::string_view text, size_t begin, size_t end, const AddedTokenMatcher& matcher,
                                   std::vector<Segment>* segments) const {
  using tokenizer_internal::DecodeUtf8At;
  using tokenizer_internal::IsUnicodeWhitespace;
  const std::string_view piece = text.substr(begin, end - begin);
  size_t emitted = 0;  // end of what has been assigned to segments, relative to `piece`
  size_t search = 0;
  while (search < piece.size()) {
    // Leftmost-longest: the first position where some token matches, then its longest token.
    size_t match_begin = piece.size();
    const AddedToken* token = nullptr;
    for (size_t pos = search; pos < piece.size() && token == nullptr; ++pos) {
      for (size_t index : matcher.by_first_byte[static_cast<unsigned char>(piece[pos])]) {
        if (piece.substr(pos).starts_with(added_tokens_[index].content)) {
          match_begin = pos;
          token = &added_tokens_[index];
          break;
        }
      }
    }
    if (token == nullptr) break;
    size_t start = match_begin;
    size_t stop = match_begin + token->content.size();
    if (token->lstrip) {
      // Absorb the whitespace run before the token, but not what an earlier token already took.
      // Walks back one character at a time; `emitted` is a character boundary.
      while (start > emitted) {
        size_t previous = start - 1;
        while (previous > emitted && (static_cast<unsigned char>(piece[previous]) & 0xC0) == 0x80) --previous;
        size_t pos = previous;
        if (!IsUnicodeWhitespace(DecodeUtf8At(piece, &pos))) break;
        start = previous;
      }
    }
    if (token->rstrip) {
      for (size_t pos = stop; pos < piece.size();) {
        if (!IsUnicodeWhitespace(DecodeUtf8At(piece, &pos))) break;
        stop = pos;
      }
    }
    if (emitted < start) segments->push_back(Segment{begin + emitted, begin + start, std::nullopt});
    segments->push_back(Segment{begin + start, begin + stop, static_cast<size_t>(token - added_tokens_.data())});
    emitted = stop;
    // HF resumes after the token itself; resuming after the absorbed whitespace differs only for
    // added tokens that begin with whitespace, and avoids overlapping segments.
    search = stop;
  }
  if (emitted < piece.size()) segments->push_back(Segment{begin + emitted, end, std::nullopt});
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(const std::string& text) const {
  if (size_t bad = tokenizer_internal::FindInvalidUtf8(text); bad != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("Tokenizer::Encode: text is not valid UTF-8 at byte ", bad));
  }
  // Non-normalized added tokens are found in the raw text, then normalized ones in the text
  // between (the normalizer is the identity, so the normalized text is the raw text).
  std::vector<Segment> raw_split;
  SplitOnAddedTokens(text, 0, text.size(), raw_matcher_, &raw_split);
  std::vector<Segment> segments;
  for (const Segment& segment : raw_split) {
    if (segment.added_index) {
      segments.push_back(segment);
    } else {
      SplitOnAddedTokens(text, segment.begin, segment.end, normalized_matcher_, &segments);
    }
  }

  std::vector<int32_t> ids = prefix_ids_;
  std::vector<std::string> words;
  for (const Segment& segment : segments) {
    if (segment.added_index) {
      ids.push_back(added_tokens_[*segment.added_index].id);
      continue;
    }
    words.clear();
    RETURN_IF_ERROR(
        pre_tokenizer_->Apply(std::string_view(text).substr(segment.begin, segment.end - segment.begin), &words));
    for (const std::string& word : words) RETURN_IF_ERROR(model_->Tokenize(word, &ids));
  }
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

const Tokenizer::AddedToken* Tokenizer::FindAdded(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_tokens_[it->second];
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tokenizer::Decode: ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
    const std::string* token = nullptr;
    if (const AddedToken* added = FindAdded(id)) {
      if (skip_special_tokens && added->special) continue;
      token = &added->content;
    } else {
      token = model_->IdToToken(id);
    }
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tokenizer::Decode: ids[", i, "] = ", id, " has no token (a gap in the vocabulary)"));
    }
    if (!tokenizer_internal::AppendBytesFromByteLevel(*token, &bytes)) bytes.append(*token);
  }
  return tokenizer_internal::Utf8Lossy(bytes);
}

std::optional<int32_t> Tokenizer::TokenToId(const std::string& token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return added_tokens_[it->second].id;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = FindAdded(id)) return added->content;
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

std::vector<std::pair<std::string, int32_t>> Tokenizer::SpecialTokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const AddedToken& t : added_tokens_) {
    if (t.special) out.emplace_back(t.content, t.id);
  }
  return out;
}

}  // namespace mtpspec
