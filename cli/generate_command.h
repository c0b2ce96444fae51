// `mtpspec generate`: speculative decoding from the command line.
#pragma once

#include "absl/status/status.h"
#include "core/cli_args.h"

namespace mtpspec {

// Option names `generate` accepts (for CliArgs::Parse).
const std::set<std::string>& GenerateOptionNames();
absl::Status RunGenerate(const CliArgs& args);

}  // namespace mtpspec
