// Feeds arbitrary bytes to the .npy parser; an accepted array must match the input's size.
#include <cstdint>
#include <string_view>

#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr char kName[] = "fuzz.npy";
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<mtpspec::Tensor> tensor = mtpspec::ParseNpy(kName, bytes);
  if (!tensor.ok()) {
    if (tensor.status().message().find(kName) == std::string_view::npos) __builtin_trap();
    return 0;
  }
  if (tensor->view().nbytes() > size) __builtin_trap();
  uint64_t checksum = 0;
  const uint8_t* values = tensor->data<uint8_t>();
  for (size_t i = 0; i < tensor->view().nbytes(); ++i) checksum += values[i];
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
