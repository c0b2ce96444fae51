// Wall-time accounting per forward-pass component, for the verify-cost benchmarks. A null
// profile costs one branch per section; timing is taken on the calling thread around each
// (internally parallel) section.
#pragma once

#include <array>
#include <chrono>

namespace mtpspec {

enum class Component : int {
  kEmbed,
  kAttentionProjections,  // q/kv down- and up-projections, latent norms, RoPE, o_proj
  kIndexerScores,         // indexer key writes and scoring
  kTopK,                  // top-k selection
  kAttention,             // score/softmax/value over the selected keys (plus q absorption)
  kFeedForward,           // dense MLP or MoE (router included)
  kNorms,                 // residual-stream RMSNorms
  kHead,                  // final norm + lm_head
  kCount,
};

const char* ComponentName(Component c);

struct ForwardProfile {
  std::array<double, static_cast<int>(Component::kCount)> seconds{};
  double& operator[](Component c) { return seconds[static_cast<int>(c)]; }
  double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
  void Clear() { seconds.fill(0.0); }
};

// Adds the time from construction to destruction to profile[c] (no-op when profile is null).
class ScopedTimer {
 public:
  ScopedTimer(ForwardProfile* profile, Component c) : profile_(profile), component_(c) {
    if (profile_) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedTimer() {
    if (profile_) {
      (*profile_)[component_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  ForwardProfile* profile_;
  Component component_;
  std::chrono::steady_clock::time_point start_;
};

inline const char* ComponentName(Component c) {
  switch (c) {
    case Component::kEmbed: return "embed";
    case Component::kAttentionProjections: return "attn_proj";
    case Component::kIndexerScores: return "indexer";
    case Component::kTopK: return "topk";
    case Component::kAttention: return "attention";
    case Component::kFeedForward: return "moe_mlp";
    case Component::kNorms: return "norms";
    case Component::kHead: return "head";
    case Component::kCount: break;
  }
  return "?";
}

}  // namespace mtpspec
