#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "tokenizer/byte_level.h"
#include "core/status.h"

namespace mtpspec::tokenizer_internal {
namespace {

absl::Status FieldError(const std::string& source, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

// True if `model[key]` is absent, null, or equal to `allowed`.
bool AbsentNullOr(const nlohmann::json& model, const char* key, const nlohmann::json& allowed) {
  auto it = model.find(key);
  return it == model.end() || it->is_null() || *it == allowed;
}

absl::StatusOr<bool> OptionalBool(const nlohmann::json& model, const char* key, const std::string& source) {
  auto it = model.find(key);
  if (it == model.end() || it->is_null()) return false;
  if (!it->is_boolean()) return FieldError(source, absl::StrCat("model.", key, " must be true or false"));
  return it->get<bool>();
}

// Splits one merge entry into its two tokens: ["a", "b"] or the legacy "a b".
absl::Status ParseMergeEntry(const nlohmann::json& entry, size_t index, const std::string& source, std::string* left,
                             std::string* right) {
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    *left = entry[0].get<std::string>();
    *right = entry[1].get<std::string>();
    return absl::OkStatus();
  }
  if (entry.is_string()) {
    const std::string line = entry.get<std::string>();
    const size_t space = line.find(' ');
    if (space != std::string::npos && line.find(' ', space + 1) == std::string::npos) {
      *left = line.substr(0, space);
      *right = line.substr(space + 1);
      return absl::OkStatus();
    }
  }
  return FieldError(source, absl::StrCat("model.merges[", index, "] must be [\"a\", \"b\"] or \"a b\", got ",
                                         entry.dump().substr(0, 200)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& model, const std::string& source) {
  if (!model.is_object()) return FieldError(source, "model must be an object");
  auto type = model.find("type");
  if (type == model.end() || !type->is_string()) return FieldError(source, "model has no \"type\"");
  if (*type != "BPE") {
    return FieldError(source, absl::StrCat("model of type ", type->get<std::string>(), " is not supported (only BPE)"));
  }
  if (!AbsentNullOr(model, "dropout", 0.0)) {
    return FieldError(source, absl::StrCat("BPE model.dropout = ", model["dropout"].dump(), " is not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!AbsentNullOr(model, key, nlohmann::json())) {
      return FieldError(source,
                        absl::StrCat("BPE model.", key, " = ", model[key].dump(), " is not supported (only null)"));
    }
  }
  ASSIGN_OR_RETURN(const bool byte_fallback, OptionalBool(model, "byte_fallback", source));
  if (byte_fallback) return FieldError(source, "BPE model.byte_fallback = true is not supported");

  auto result = std::unique_ptr<BpeModel>(new BpeModel());
  ASSIGN_OR_RETURN(result->ignore_merges_, OptionalBool(model, "ignore_merges", source));
  ASSIGN_OR_RETURN(result->fuse_unk_, OptionalBool(model, "fuse_unk", source));

  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return FieldError(source, "model.vocab must be an object");
  result->vocab_.reserve(vocab->size());
  result->id_to_token_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX) {
      return FieldError(source,
                        absl::StrCat("model.vocab[\"", it.key(), "\"] = ", it->dump(), " is not an id in [0, 2^31)"));
    }
    const auto id = static_cast<int32_t>(it->get<int64_t>());
    auto [entry, inserted] = result->id_to_token_.emplace(id, it.key());
    if (!inserted) {
      return FieldError(source, absl::StrCat("model.vocab: \"", entry->second, "\" and \"", it.key(),
                                             "\" both have id ", id));
    }
    result->max_id_ = std::max(result->max_id_, id);
    result->vocab_.emplace(it.key(), id);
  }

  auto unk = model.find("unk_token");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_string()) return FieldError(source, "model.unk_token must be a string or null");
    auto id = result->TokenToId(unk->get<std::string>());
    if (!id) {
      return FieldError(source,
                        absl::StrCat("model.unk_token \"", unk->get<std::string>(), "\" is not in model.vocab"));
    }
    result->unk_id_ = *id;
  }

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return FieldError(source, "model.merges must be an array");
  result->merges_.reserve(merges->size());
  int32_t rank = 0;
  std::string left, right;
  for (size_t i = 0; i < merges->size(); ++i) {
    const nlohmann::json& entry = (*merges)[i];
    // merges.txt headers, which HF skips when reading the legacy form.
    if (entry.is_string() && entry.get<std::string>().starts_with("#version")) continue;
    RETURN_IF_ERROR(ParseMergeEntry(entry, i, source, &left, &right));
    auto left_id = result->TokenToId(left);
    auto right_id = result->TokenToId(right);
    auto new_id = result->TokenToId(left + right);
    const std::pair<std::string, std::optional<int32_t>> parts[] = {
        {left, left_id}, {right, right_id}, {left + right, new_id}};
    for (const auto& [token, id] : parts) {
      if (!id) {
        return FieldError(source, absl::StrCat("model.merges[", i, "]: token \"", token, "\" is not in model.vocab"));
      }
    }
    // A repeated pair keeps its last rank, as HF's map does.
    result->merges_[PairKey(*left_id, *right_id)] = Merge{rank++, *new_id};
  }
  return result;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AbslView(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  auto it = id_to_token_.find(id);
  return it == id_to_token_.end() ? nullptr : &it->second;
}

absl::Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (auto id = TokenToId(word)) {
      ids->push_back(*id);
      return absl::OkStatus();
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(AbslView(word));
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  std::vector<int32_t> word_ids;
  RETURN_IF_ERROR(MergeWord(word, &word_ids));
  ids->insert(ids->end(), word_ids.begin(), word_ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(word_ids));
  }
  return absl::OkStatus();
}

absl::Status BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  // Symbols form a doubly linked list over the word; merging absorbs the right symbol into the
  // left one and marks the right one dead.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool previous_unknown = false;
  for (size_t pos = 0; pos < word.size();) {
    bool valid = false;
    const size_t length = ScanUtf8(word, pos, &valid);
    const std::string_view character = word.substr(pos, length);
    pos += length;
    int32_t id;
    if (auto known = TokenToId(character)) {
      id = *known;
      previous_unknown = false;
    } else if (unk_id_) {
      const bool fuse = fuse_unk_ && previous_unknown;
      previous_unknown = true;
      if (fuse) continue;
      id = *unk_id_;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("BPE: the character \"", AbslView(character), "\" of word \"",
                                                     AbslView(word), "\" has no token and the model has no unk_token"));
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return absl::OkStatus();
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t position;  // index of the left symbol
    int32_t new_id;
  };
  // Lowest rank first; among equal ranks the leftmost position.
  auto after = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(after)> queue(after);
  auto push_pair = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    auto it = merges_.find(PairKey(symbols[left].id, symbols[symbols[left].next].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (!left.alive || left.next < 0) continue;
    // The entry is stale if either symbol changed since it was queued.
    auto it = merges_.find(PairKey(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    push_pair(left.prev);
    push_pair(top.position);
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.alive) ids->push_back(symbol.id);
  }
  return absl::OkStatus();
}

}  // namespace mtpspec::tokenizer_internal
