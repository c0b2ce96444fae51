#include "core/clock.h"

#include <chrono>

namespace mtpspec {
namespace {

class Steady final : public Clock {
 public:
  double Seconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

const Clock& SteadyClock() {
  static const Steady clock;
  return clock;
}

}  // namespace mtpspec
