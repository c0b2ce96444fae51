#include "pipeline/prompt_set.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace mtpspec {
namespace {

// SPEED-Bench's published files hold this in place of the turns that come from other datasets; its
// prepare step fetches them.
constexpr absl::string_view kSpeedBenchPlaceholder = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE";

absl::Status Fault(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// A sorted list as Python prints one: ['a', 'b'].
std::string ListText(const std::set<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back(absl::StrCat("'", name, "'"));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

// The member `key` of `object` (null when absent). Values are looked at in place, never copied: a
// copy of a deeply nested value would recurse once per level.
const nlohmann::json* Member(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The turns of a record, as pointers into it.
absl::StatusOr<std::vector<const nlohmann::json*>> TurnsOf(const nlohmann::json& record, const std::string& where) {
  std::vector<const nlohmann::json*> turns;
  if (const nlohmann::json* list = Member(record, "turns")) {
    if (!list->is_array()) return Fault(where, "the prompt has no turns");
    for (const nlohmann::json& turn : *list) turns.push_back(&turn);
    return turns;
  }
  if (const nlohmann::json* messages = Member(record, "messages")) {
    if (!messages->is_array()) return Fault(where, "messages must be a list");
    for (const nlohmann::json& m : *messages) {
      if (!m.is_object()) continue;
      const nlohmann::json* role = Member(m, "role");
      if (role == nullptr || !role->is_string() || role->get_ref<const std::string&>() != "user") continue;
      const nlohmann::json* content = Member(m, "content");
      turns.push_back(content != nullptr ? content : &m);  // a user message without content: not text
    }
    return turns;
  }
  if (const nlohmann::json* prompt = Member(record, "prompt")) return std::vector<const nlohmann::json*>{prompt};
  return Fault(where, "the line has no turns, messages or prompt field");
}

absl::StatusOr<PromptSetItem> ItemOf(const nlohmann::json& record, const std::string& where, int64_t number) {
  if (!record.is_object()) {
    return Fault(where, absl::StrCat("a line must be a JSON object, got ", record.type_name()));
  }
  absl::StatusOr<std::vector<const nlohmann::json*>> turns = TurnsOf(record, where);
  if (!turns.ok()) return turns.status();
  if (turns->empty()) return Fault(where, "the prompt has no turns");
  PromptSetItem item;
  for (size_t i = 0; i < turns->size(); ++i) {
    const nlohmann::json& turn = *(*turns)[i];
    if (!turn.is_string() || absl::StripAsciiWhitespace(turn.get_ref<const std::string&>()).empty()) {
      return Fault(where, absl::StrCat("turn ", i, " is empty or not text"));
    }
    if (absl::StartsWith(turn.get_ref<const std::string&>(), kSpeedBenchPlaceholder)) {
      return Fault(where, absl::StrCat("turn ", i, " is SPEED-Bench's placeholder for data it has not fetched; "
                                       "prepare the set with its prepare_data.py first"));
    }
    item.turns.push_back(turn.get<std::string>());
  }
  const nlohmann::json* category = Member(record, "category");
  if (category != nullptr && category->is_string() && !category->get_ref<const std::string&>().empty()) {
    item.category = category->get<std::string>();
  } else if ((category == nullptr || category->is_null() || *category == "") && !record.contains("turns") &&
             !record.contains("messages")) {
    item.category = record.contains("task_id") ? "humaneval" : "default";  // the HumanEval and plain layouts
  } else {
    return Fault(where, "the line has no category");
  }
  if (item.category == "all") return Fault(where, "the category \"all\" names the whole set's statistics; rename it");
  for (const char* key : {"question_id", "task_id", "id"}) {
    const nlohmann::json* id = Member(record, key);
    if (id == nullptr) continue;
    if (id->is_string()) {
      item.id = id->get<std::string>();
    } else if (id->is_number()) {
      item.id = id->dump();
    } else {
      return Fault(where, absl::StrCat(key, " must be text or a number"));
    }
    break;
  }
  if (item.id.empty()) item.id = absl::StrCat(number);
  item.source = where;
  return item;
}

}  // namespace

absl::StatusOr<std::vector<PromptSetItem>> ParsePromptSet(absl::string_view text, absl::string_view source,
                                                          const std::vector<std::string>& categories) {
  std::vector<PromptSetItem> items;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::string where = absl::StrCat(source, ":", number);
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) return Fault(where, "not JSON");
    absl::StatusOr<PromptSetItem> item = ItemOf(record, where, number);
    if (!item.ok()) return item.status();
    items.push_back(*std::move(item));
  }
  if (items.empty()) return Fault(source, "holds no prompts");
  if (categories.empty()) return items;
  const std::set<std::string> wanted(categories.begin(), categories.end());
  std::set<std::string> present, missing;
  for (const PromptSetItem& item : items) present.insert(item.category);
  std::set_difference(wanted.begin(), wanted.end(), present.begin(), present.end(),
                      std::inserter(missing, missing.begin()));
  if (!missing.empty()) {
    return Fault(source, absl::StrCat("no prompt of categories ", ListText(missing), " (it has ", ListText(present), ")"));
  }
  std::erase_if(items, [&](const PromptSetItem& item) { return !wanted.contains(item.category); });
  return items;
}

absl::StatusOr<std::vector<PromptSetItem>> LoadPromptSet(const std::string& path,
                                                         const std::vector<std::string>& categories) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be opened"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ParsePromptSet(text.str(), path, categories);
}

}  // namespace mtpspec
