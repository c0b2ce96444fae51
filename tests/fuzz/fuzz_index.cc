// libFuzzer target: arbitrary bytes as model.safetensors.index.json. Parsing must return a Status,
// never crash or hang; an accepted index maps every tensor to a non-empty relative shard path with
// no ".." component.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto map = mtpspec::ParseShardIndex(text, "fuzz/model.safetensors.index.json");
  if (!map.ok()) return 0;
  for (const auto& [tensor, shard] : *map) {
    const std::filesystem::path path(shard);
    if (shard.empty() || path.is_absolute()) __builtin_trap();
    for (const auto& part : path) {
      if (part == "..") __builtin_trap();
    }
  }
  return 0;
}
