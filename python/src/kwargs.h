// Strict keyword arguments for the bindings: each value must have the type its parameter takes
// (an int for an int: no floats, no bools), integers must fit, unknown keywords are an error, and
// every message names the Python parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/request.h"
#include "python/src/bindings.h"

namespace mtpspec::python {

class Kwargs {
 public:
  // `function` names the call in the unknown-keyword error.
  Kwargs(py::kwargs kwargs, std::string function) : kwargs_(std::move(kwargs)), function_(std::move(function)) {}

  bool Has(const char* name) const;
  // A Python int (or numpy integer), not a bool or float, within [lo, hi].
  int64_t Int(const char* name, int64_t fallback, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
  uint64_t Uint64(const char* name, uint64_t fallback);
  double Float(const char* name, double fallback);  // an int or a float (not a bool)
  bool Bool(const char* name, bool fallback);       // True or False only
  std::string Str(const char* name, const std::string& fallback);
  std::optional<std::vector<double>> FloatList(const char* name);  // None or a sequence of numbers
  // None (nullopt), one int, or a sequence of ints, each within [lo, hi].
  std::optional<std::vector<int64_t>> IntList(const char* name, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
  py::object Object(const char* name);                               // None when absent
  // Raises TypeError naming the first keyword no getter asked for.
  void CheckAllUsed();

 private:
  py::handle Get(const char* name);
  py::kwargs kwargs_;
  std::string function_;
  std::vector<std::string> used_;
};

// The request options among `kw` (the option table of pipeline/options.h, each keyword by its
// option's type), validated; raises ValueError / TypeError naming the keyword.
RequestOptions ParseRequestKwargs(Kwargs& kw);

// The same rules for one positional value (e.g. a binding's own int argument).
int64_t IntArgument(py::handle value, const char* name, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);

}  // namespace mtpspec::python
