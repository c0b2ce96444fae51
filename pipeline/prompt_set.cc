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

absl::StatusOr<std::vector<nlohmann::json>> TurnsOf(const nlohmann::json& record, const std::string& where) {
  if (record.contains("turns")) {
    if (!record["turns"].is_array()) return Fault(where, "the prompt has no turns");
    return std::vector<nlohmann::json>(record["turns"].begin(), record["turns"].end());
  }
  if (record.contains("messages")) {
    const nlohmann::json& messages = record["messages"];
    if (!messages.is_array()) return Fault(where, "messages must be a list");
    std::vector<nlohmann::json> turns;
    for (const nlohmann::json& m : messages) {
      if (m.is_object() && m.value("role", nlohmann::json()) == "user") turns.push_back(m.value("content", nlohmann::json()));
    }
    return turns;
  }
  if (record.contains("prompt")) return std::vector<nlohmann::json>{record["prompt"]};
  return Fault(where, "the line has no turns, messages or prompt field");
}

absl::StatusOr<PromptSetItem> ItemOf(const nlohmann::json& record, const std::string& where, int64_t number) {
  if (!record.is_object()) {
    return Fault(where, absl::StrCat("a line must be a JSON object, got ", record.type_name()));
  }
  absl::StatusOr<std::vector<nlohmann::json>> turns = TurnsOf(record, where);
  if (!turns.ok()) return turns.status();
  if (turns->empty()) return Fault(where, "the prompt has no turns");
  PromptSetItem item;
  for (size_t i = 0; i < turns->size(); ++i) {
    const nlohmann::json& turn = (*turns)[i];
    if (!turn.is_string() || absl::StripAsciiWhitespace(turn.get<std::string>()).empty()) {
      return Fault(where, absl::StrCat("turn ", i, " is empty or not text"));
    }
    if (absl::StartsWith(turn.get<std::string>(), kSpeedBenchPlaceholder)) {
      return Fault(where, absl::StrCat("turn ", i, " is SPEED-Bench's placeholder for data it has not fetched; "
                                       "prepare the set with its prepare_data.py first"));
    }
    item.turns.push_back(turn.get<std::string>());
  }
  nlohmann::json category = record.value("category", nlohmann::json());
  if ((category.is_null() || category == "") && !record.contains("turns") && !record.contains("messages") && record.contains("prompt")) {
    category = record.contains("task_id") ? "humaneval" : "default";
  }
  if (!category.is_string() || category.get<std::string>().empty()) return Fault(where, "the line has no category");
  item.category = category.get<std::string>();
  for (const char* key : {"question_id", "task_id", "id"}) {
    if (!record.contains(key)) continue;
    item.id = record[key].is_string() ? record[key].get<std::string>() : record[key].dump();
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
