#include "core/device.h"

#include "absl/strings/str_cat.h"

namespace mtpspec {

const char* DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

absl::StatusOr<Device> ParseDevice(absl::string_view name, absl::string_view what) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown device '", name, "' (expected cpu or cuda)"));
}

const char* DeviceWeightFormatName(DeviceWeightFormat format) {
  return format == DeviceWeightFormat::kFp8 ? "fp8" : "bf16";
}

absl::StatusOr<DeviceWeightFormat> ParseDeviceWeightFormat(absl::string_view name, absl::string_view what) {
  if (name == "bf16") return DeviceWeightFormat::kBf16;
  if (name == "fp8") return DeviceWeightFormat::kFp8;
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown format '", name, "' (expected bf16 or fp8)"));
}

bool BuiltWithCuda() {
#ifdef MTPSPEC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace mtpspec
