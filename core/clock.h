// The time as the decoding loops read it. Their timings feed what they report and what adaptive k
// decides, so a test can hand them a clock of its own (a fake model then advances it by the cost it
// stands for), and those decisions no longer depend on what else the machine is doing.
#pragma once

namespace mtpspec {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since an arbitrary origin; never decreases.
  virtual double Seconds() const = 0;
};

// std::chrono::steady_clock: the clock of every loop that is not given one.
const Clock& SteadyClock();

}  // namespace mtpspec
