// Where a model runs: the CPU (the specification) or a CUDA GPU. Chosen at load time; the CUDA
// backend exists only in builds with MTPSPEC_ENABLE_CUDA (core/cuda_context.h).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mtpspec {

enum class Device { kCpu, kCuda };

const char* DeviceName(Device device);
// "cpu" or "cuda"; anything else is an InvalidArgument error naming `what`.
absl::StatusOr<Device> ParseDevice(absl::string_view name, absl::string_view what = "device");
// True when this build contains the CUDA backend (whether or not a GPU is present).
bool BuiltWithCuda();

}  // namespace mtpspec
