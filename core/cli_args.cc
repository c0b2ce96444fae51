#include "core/cli_args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/parallel.h"
#include "core/status.h"

namespace mtpspec {

absl::StatusOr<CliArgs> CliArgs::Parse(int argc, char** argv, int first, const std::set<std::string>& known,
                                       const std::set<std::string>& flags) {
  CliArgs args;
  for (int i = first; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      args.positional_.emplace_back(arg);
      continue;
    }
    std::string name(arg), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!known.count(name) && !flags.count(name)) return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    if (flags.count(name)) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("option --", name, " takes no value"));
      args.values_[name] = "1";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("option --", name, " needs a value"));
      value = argv[++i];
    }
    args.values_[name] = value;
  }
  return args;
}

std::string CliArgs::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> CliArgs::GetInt(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer, got \"", Get(name), "\""));
  }
  return v;
}

absl::StatusOr<uint64_t> CliArgs::GetUint64(const std::string& name, uint64_t fallback) const {
  if (!Has(name)) return fallback;
  uint64_t v;
  if (!absl::SimpleAtoi(Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an unsigned 64-bit integer, got \"", Get(name), "\""));
  }
  return v;
}

absl::StatusOr<double> CliArgs::GetDouble(const std::string& name, double fallback) const {
  if (!Has(name)) return fallback;
  double v;
  if (!absl::SimpleAtod(Get(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number, got \"", Get(name), "\""));
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> CliArgs::GetIntList(const std::string& name) const {
  std::vector<int64_t> out;
  if (!Has(name)) return out;
  for (absl::string_view piece : absl::StrSplit(Get(name), ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(piece, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": \"", piece, "\" is not an integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " is empty"));
  return out;
}

absl::Status ApplyThreadsOption(const CliArgs& args) {
  if (!args.Has("threads")) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int64_t threads, args.GetInt("threads", 0));
  if (threads < 1 || threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--threads must be in [1, ", kMaxThreads, "], got ", threads));
  }
  return SetDefaultThreadCount(static_cast<int>(threads));
}

}  // namespace mtpspec
