// A small strict argument parser for the `mtpspec` command: positional arguments plus
// `--name value` / `--name=value` options. Unknown options and malformed values are errors that
// name the option.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mtpspec {

class CliArgs {
 public:
  // `flags` lists the options that take no value (e.g. "help").
  static absl::StatusOr<CliArgs> Parse(int argc, char** argv, int first, const std::set<std::string>& known,
                                       const std::set<std::string>& flags = {});

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  absl::StatusOr<uint64_t> GetUint64(const std::string& name, uint64_t fallback) const;
  // Comma-separated integers, e.g. "1,2,3".
  absl::StatusOr<std::vector<int64_t>> GetIntList(const std::string& name) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
};

// `--threads N`, when given: the default thread pool's size (1 … kMaxThreads, else an error that
// names the option).
absl::Status ApplyThreadsOption(const CliArgs& args);

}  // namespace mtpspec
