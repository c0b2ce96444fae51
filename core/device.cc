#include "core/device.h"

#include "absl/strings/str_cat.h"

namespace mtpspec {

const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

absl::StatusOr<Device> ParseDevice(absl::string_view name, absl::string_view what) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown device '", name, "' (expected cpu or cuda)"));
}

bool BuiltWithCuda() {
#ifdef MTPSPEC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace mtpspec
