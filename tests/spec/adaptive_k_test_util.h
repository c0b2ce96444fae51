// Shared by the adaptive-k tests.
#pragma once

#include "spec/adaptive_k.h"

namespace mtpspec {

// The warm-up every controller goes through first: kWarmUpPlainSteps plain steps of `seconds`.
inline void WarmUp(AdaptiveK& controller, double seconds) {
  for (int64_t i = 0; i < kWarmUpPlainSteps; ++i) controller.RecordVerify(0, 0, seconds);
}

}  // namespace mtpspec
