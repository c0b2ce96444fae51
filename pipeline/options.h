// Every request option, declared once: its Python keyword (also its field in a server's JSON body),
// its command-line flag, its type, its default, one line of help, and how a value of it changes a
// RequestOptions. The CLI (`mtpspec generate`), the Python bindings (`Model.generate`) and the
// server read their requests through this table, so the three take the same options with the same
// defaults and report the same faults, each in its own spelling (a test checks the help, the Python
// signature, its stub and the README against it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/request.h"

namespace mtpspec {

// How a front end writes an option's value.
enum class OptionType {
  kInt,        // an integer
  kFloat,      // a number
  kBool,       // true or false
  kText,       // a word from a fixed set (the parser names the set)
  kIntOrText,  // an integer or a word ("auto" for k)
  kIntList,    // integers: "1,2,3" on the command line, a list elsewhere
  kFloatList,  // numbers, the same
};
const char* OptionTypeName(OptionType type);

using OptionValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

struct RequestOption {
  std::string name;          // the Python keyword and JSON field, e.g. "max_new_tokens"
  std::string flag;          // the command-line flag, e.g. "--max-new"
  OptionType type;
  std::string default_text;  // the default as the help shows it; "none" for an option unset by default
  std::string help;          // one line
  // Applies a value of this option's type; errors name the option in `frontend`'s spelling.
  std::function<absl::Status(const OptionValue& value, Frontend frontend, RequestOptions& options)> apply;
};

// The table, in the order the help lists it.
const std::vector<RequestOption>& RequestOptionTable();
// The option with this Python name, or null.
const RequestOption* FindRequestOption(const std::string& name);

// The command line's text of a value ("3", "auto", "0.5,0.25", "true") as a value of the option's type.
absl::StatusOr<OptionValue> ParseOptionText(const RequestOption& option, const std::string& text);

// The request that `values` (Python names to values of their options' types; absent options keep
// their defaults) describe: applied in table order, the synthetic rates resolved, and validated
// (ValidateRequest). Unknown names are errors.
absl::StatusOr<RequestOptions> MakeRequest(const std::map<std::string, OptionValue>& values, Frontend frontend);

// "  --max-new N   (default 32)  the most tokens to generate" lines for `mtpspec generate --help`.
std::string RequestOptionsHelp();

}  // namespace mtpspec
