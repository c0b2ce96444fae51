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
// How a checkpoint's FP8 matrices live on the GPU. kBf16: dequantised and rounded to bf16 at upload
// (2 bytes per weight). kFp8: kept as stored, e4m3 bytes and f32 128 × 128 block scales, and widened
// in registers inside the kernels (the matrices that feed Linear and the routed experts; kv_b_proj,
// read by the attention kernels, stays bf16). Matrices stored in bf16 or f32 are bf16 either way.
enum class DeviceWeightFormat { kBf16, kFp8 };

const char* DeviceWeightFormatName(DeviceWeightFormat format);
// "bf16" or "fp8"; anything else is an InvalidArgument error naming `what`.
absl::StatusOr<DeviceWeightFormat> ParseDeviceWeightFormat(absl::string_view name,
                                                           absl::string_view what = "device weights");

// True when this build contains the CUDA backend (whether or not a GPU is present).
bool BuiltWithCuda();

}  // namespace mtpspec
