#include "core/json_util.h"

#include "absl/strings/str_cat.h"

namespace mtpspec {

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view source,
                                             std::string_view what) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": ", std::string(what),
                                                   " is not valid JSON: ", error.what()));
  }
}

absl::StatusOr<std::map<std::string, std::string>> ParseStringMap(const nlohmann::json& value,
                                                                  std::string_view source,
                                                                  std::string_view field) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": \"", std::string(field),
                                                   "\" is a JSON ", value.type_name(),
                                                   ", not an object"));
  }
  std::map<std::string, std::string> result;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source), ": \"", std::string(field), "\" entry \"", key,
                       "\" is a JSON ", item.type_name(), ", not a string"));
    }
    result.emplace(key, item.get<std::string>());
  }
  return result;
}

}  // namespace mtpspec
