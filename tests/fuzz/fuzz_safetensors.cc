// Feeds arbitrary bytes to the in-memory safetensors parser. Beyond "no crash, no sanitizer
// report", it traps when the reader breaks a promise: an error must name the file, every listed
// tensor must be gettable, and its bytes must lie in memory the file object owns, aligned for the
// dtype.
#include <cstdint>
#include <cstring>
#include <string>

#include "io/safetensors.h"

namespace {

constexpr char kName[] = "fuzz.safetensors";

uint64_t TouchTensor(const mtpspec::TensorView& view, size_t input_size) {
  if (view.nbytes() > input_size) __builtin_trap();
  if (reinterpret_cast<uintptr_t>(view.data) % mtpspec::DTypeSize(view.dtype) != 0) {
    __builtin_trap();
  }
  uint64_t checksum = 0;
  const uint8_t* bytes = view.as<uint8_t>();
  for (size_t i = 0; i < view.nbytes(); ++i) checksum += bytes[i];  // ASan checks every byte
  absl::StatusOr<mtpspec::Tensor> widened = mtpspec::ToF32(view);   // typed reads, floats only
  if (widened.ok()) {
    for (int64_t i = 0; i < widened->numel(); ++i) {
      float value = widened->data<float>()[i];
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      checksum += bits;
    }
  }
  return checksum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<mtpspec::SafetensorsFile>> file =
      mtpspec::SafetensorsFile::FromBuffer(kName,
                                           std::string(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) {
    if (file.status().message().find(kName) == std::string_view::npos) __builtin_trap();
    return 0;
  }
  uint64_t checksum = 0;
  for (const std::string& name : (*file)->names()) {
    if (!(*file)->Has(name)) __builtin_trap();
    absl::StatusOr<mtpspec::TensorView> view = (*file)->Get(name);
    if (!view.ok()) __builtin_trap();
    checksum += TouchTensor(*view, size);
  }
  for (const auto& [key, value] : (*file)->metadata()) checksum += key.size() + value.size();
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
