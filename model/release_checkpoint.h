// Checkpoints in the exact format of a release, at its real dimensions: GLM-5.2-FP8, DeepSeek-V3.2,
// GLM-4.7-Flash and DeepSeek-V3 (their published config.json, model/release_configs/), written with the
// releases' tensor names and dtypes (F8_E4M3 with f32 `weight_scale_inv` blocks where the FP8
// releases quantise, bf16 elsewhere; GLM-4.7-Flash is bf16 throughout), the MTP layer's own embed and
// head copies where the release ships them, sharded as model-0000i-of-0000n.safetensors with
// model.safetensors.index.json.
//
// A checkpoint may keep only the first N trunk layers (dense first, then MoE, with the real
// IndexShare schedule of those layers) plus the MTP layer and the head, and fewer routed experts
// when the disk or memory cannot hold 256. Its config.json then records what it was cut from
// (`mtpspec_cut_from`), so `mtpspec info` can state the full model's counts beside the cut one's.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mtpspec {

enum class Release { kGlm52, kDeepSeekV32, kGlm47Flash, kDeepSeekV3 };

// "glm-5.2", "deepseek-v3.2", "glm-4.7-flash" or "deepseek-v3"; errors list the names.
absl::StatusOr<Release> ParseRelease(const std::string& name);
const char* ReleaseName(Release release);
// The release's published config.json.
nlohmann::json ReleaseConfig(Release release);
// Whether the release's MTP layer ships its own embed_tokens and shared_head.head copies (counted in
// its published parameter total; GLM-5.2's layer binds the trunk's).
bool ReleaseHasMtpCopies(Release release);
// Whether the release stores its matrices in FP8 (GLM-4.7-Flash is bf16).
bool ReleaseIsFp8(Release release);

// The release's config cut to the first `layers` trunk layers (0: all) and `experts` routed
// experts (0: all; a multiple of n_group, at least num_experts_per_tok unless that is lowered too).
absl::StatusOr<nlohmann::json> CutConfig(Release release, int64_t layers, int64_t experts);
// The full release config a cut config came from (itself when it was not cut).
nlohmann::json UncutConfig(const nlohmann::json& config);

struct ReleaseCheckpointOptions {
  Release release = Release::kGlm52;
  int64_t layers = 0;   // trunk layers kept (0: all)
  int64_t experts = 0;  // routed experts kept (0: all)
  bool zeros = false;   // structure only: zero weights written as holes (no disk, no memory)
  uint64_t seed = 1;
  int64_t shard_bytes = int64_t{4} << 30;
};

absl::Status WriteReleaseCheckpoint(const std::string& dir, const ReleaseCheckpointOptions& options);

}  // namespace mtpspec
