// Small helpers for reading JSON (safetensors headers, checkpoint indexes) into Status-
// returning code. nlohmann::json signals parse errors by exception; these helpers catch it at the
// boundary so callers see an absl::Status that names the file.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mtpspec {

// Parses `text`. On failure the message is "<source>: <what> is not valid JSON: <parser detail>".
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view source,
                                             std::string_view what);

// Requires `value` to be an object whose values are all strings, e.g. safetensors `__metadata__`.
// `field` names the object in error messages.
absl::StatusOr<std::map<std::string, std::string>> ParseStringMap(const nlohmann::json& value,
                                                                  std::string_view source,
                                                                  std::string_view field);

}  // namespace mtpspec
