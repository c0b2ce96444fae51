// _ext.AdaptiveController: one adaptive-k controller (spec/adaptive_k.h) that a notebook carries
// across generate() calls, so the costs and acceptance it learned in one request price the next
// (GenerateOptions::adaptive_controller). It serves one request at a time: a second generate() that
// passes it while the first is running (stream() runs on a thread) gets an error instead of a data
// race.
#include "python/src/adaptive.h"

#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "python/src/bindings.h"
#include "spec/generator.h"

namespace mtpspec::python {

ControllerLease::ControllerLease(ControllerHandle& handle) : handle_(handle) {
  if (handle_.busy.exchange(true)) {
    ThrowIfError(absl::FailedPreconditionError(
        "adaptive_controller is in use by another generate() call; it serves one request at a time"));
  }
}

ControllerLease::~ControllerLease() { handle_.busy.store(false); }

void RegisterAdaptive(py::module_& m) {
  py::class_<ControllerHandle, std::shared_ptr<ControllerHandle>>(
      m, "AdaptiveController",
      "Adaptive k's estimates, carried across generate() calls.\n\n"
      "AdaptiveController(k_max, exploration_budget=0.01): pass it as generate(..., k=k_max, adaptive_k=True,\n"
      "adaptive_controller=c). It learns the target's verify cost for each row count, the draft cost and the\n"
      "conditional acceptance per position, and picks each cycle the k with the most expected tokens per\n"
      "second. exploration_budget is the share of a request's decode time that probes of other k may cost.\n"
      "One request at a time: a second concurrent generate() with the same controller is an error.")
      .def(py::init([](int64_t k_max, double exploration_budget) {
             if (k_max < 1 || k_max > kMaxDraftTokens) {
               ThrowIfError(absl::InvalidArgumentError(
                   absl::StrCat("k_max must be in [1, ", kMaxDraftTokens, "], got ", k_max)));
             }
             // The share of each request's decode time that probes may lose (spec/adaptive_k.h).
             if (!(exploration_budget >= 0.0 && exploration_budget <= 1.0)) {
               ThrowIfError(absl::InvalidArgumentError(
                   absl::StrCat("exploration_budget must be in [0, 1], got ", exploration_budget)));
             }
             auto handle = std::make_shared<ControllerHandle>();
             handle->controller = std::make_shared<AdaptiveK>(k_max, kProbeInterval, kMaxProbeInterval,
                                                                exploration_budget);
             return handle;
           }),
           py::arg("k_max"), py::arg("exploration_budget") = kExplorationBudget)
      .def_property_readonly(
          "k_max", [](const ControllerHandle& h) { return h.controller->k_max(); }, "The largest k it may choose.")
      .def_property_readonly(
          "requests", [](const ControllerHandle& h) { return h.controller->requests(); },
          "Requests it has served.")
      .def_property_readonly(
          "probes", [](const ControllerHandle& h) { return h.controller->probes(); },
          "Exploration cycles it has run (a k other than its best, to measure that k's cost).")
      .def_property_readonly(
          "exploration_budget", [](const ControllerHandle& h) { return h.controller->exploration_budget(); },
          "The share of decode time probes may cost.")
      .def_property_readonly(
          "best_k", [](const ControllerHandle& h) { return h.controller->Best(); },
          "The k with the most expected tokens per second under the current estimates.")
      .def_property_readonly("conditional_acceptance",
                             [](const ControllerHandle& h) {
                               std::vector<double> rates;  // [k_max]
                               for (int64_t i = 0; i < h.controller->k_max(); ++i) {
                                 rates.push_back(h.controller->conditional_acceptance(i));
                               }
                               return rates;
                             },
                             "Estimated P(position i accepted | positions before it accepted), [k_max].")
      .def(
          "expected_tokens_per_second",
          [](const ControllerHandle& h, int64_t k) {
            if (k < 0 || k > h.controller->k_max()) {
              ThrowIfError(absl::InvalidArgumentError(
                  absl::StrCat("k must be in [0, ", h.controller->k_max(), "], got ", k)));
            }
            const double cost = h.controller->ExpectedCost(k);
            return cost > 0 ? h.controller->ExpectedTokens(k) / cost : 0.0;
          },
          py::arg("k"),
          "Expected tokens per second of cycles that draft k tokens (0: plain decoding), from the estimates.");
}

}  // namespace mtpspec::python
