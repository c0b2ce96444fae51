// Small configs for the tests: glm_moe_dsa at a few dozen widths, written with
// model/checkpoint_writer.h.
#pragma once

#include "model/checkpoint_writer.h"
#include "nlohmann/json.hpp"

namespace mtpspec {

// A small glm_moe_dsa config for tests: 4 layers (dense first, F/F/S/F schedule), 8 experts.
nlohmann::json TinyGlmConfig();
// TinyGlmConfig with hidden and MLP widths that are not multiples of 128, so an FP8 checkpoint of
// it has partial scale blocks.
nlohmann::json TinyGlmConfigWithPartialFp8Blocks();

}  // namespace mtpspec
