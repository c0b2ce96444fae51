// The Python handle of an adaptive-k controller carried across requests (python/src/adaptive.cc).
#pragma once

#include <atomic>
#include <memory>

#include "python/src/bindings.h"
#include "spec/adaptive_k.h"

namespace mtpspec::python {

struct ControllerHandle {
  std::shared_ptr<AdaptiveK> controller;
  std::atomic<bool> busy{false};  // a request is using it
};

// Marks the controller busy for one request; throws when another request holds it.
class ControllerLease {
 public:
  explicit ControllerLease(ControllerHandle& handle);
  ~ControllerLease();
  ControllerLease(const ControllerLease&) = delete;
  ControllerLease& operator=(const ControllerLease&) = delete;

 private:
  ControllerHandle& handle_;
};

}  // namespace mtpspec::python
