// Shared helpers of the GPU tests.
#pragma once

#include <vector>

#include "core/cuda_context.h"
#include "gtest/gtest.h"

// Skips the current test, with the reason, unless a usable CUDA device is present.
#define MTPSPEC_REQUIRE_GPU()                                                                 \
  do {                                                                                        \
    const absl::Status _gpu = ::mtpspec::cuda::DeviceStatus();                                \
    if (!_gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU (label cuda): " << _gpu.message();      \
  } while (0)

namespace mtpspec::cuda {

// Host vector → new device array (asserting success).
template <typename T>
DeviceArray<T> ToDevice(const std::vector<T>& host, Context& ctx) {
  auto array = DeviceArray<T>::Create(static_cast<int64_t>(host.size()), "test upload");
  EXPECT_TRUE(array.ok()) << array.status();
  EXPECT_TRUE(array->CopyFromHost(host.data(), static_cast<int64_t>(host.size()), ctx.stream()).ok());
  return std::move(*array);
}

template <typename T>
std::vector<T> ToHost(const DeviceArray<T>& array, Context& ctx) {
  std::vector<T> host(static_cast<size_t>(array.size()));
  const absl::Status st = array.CopyToHost(host.data(), array.size(), ctx.stream());
  EXPECT_TRUE(st.ok()) << st;
  return host;
}

}  // namespace mtpspec::cuda
