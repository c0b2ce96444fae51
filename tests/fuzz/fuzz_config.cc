// libFuzzer target: arbitrary bytes as config.json. Parsing must return a Status, never crash,
// hang or accept inconsistent dimensions.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = mtpspec::ParseModelConfigText(text, "fuzz/config.json");
  if (config.ok()) {
    // A parsed config must be internally consistent: every per-layer vector sized to the layers,
    // layer 0 full, every shared layer with a donor.
    if (static_cast<int64_t>(config->layer_has_indexer.size()) != config->num_hidden_layers) __builtin_trap();
    if (static_cast<int64_t>(config->layer_is_dense.size()) != config->num_hidden_layers) __builtin_trap();
    for (int64_t l = 0; l < config->num_hidden_layers; ++l) {
      if (config->IndexDonor(l) < 0) __builtin_trap();
    }
    if (!(config->softmax_scale() > 0)) __builtin_trap();
  }
  return 0;
}
