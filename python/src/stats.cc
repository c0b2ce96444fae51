// _ext.SpecStats: read-only view of spec/stats.h. The Python package turns it into the
// `mtpspec.Stats` dataclass (numpy arrays, to_dict()).
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "spec/stats.h"

namespace mtpspec::python {

void RegisterStats(py::module_& m) {
  py::class_<SpecStats>(m, "SpecStats", "Speculative-decoding statistics of one request (spec/stats.h).")
      .def_readonly("drafter", &SpecStats::drafter)
      .def_readonly("accept_rule", &SpecStats::accept_rule)
      .def_readonly("lossy", &SpecStats::lossy)
      .def_readonly("synthetic", &SpecStats::synthetic)
      .def_readonly("prompt_tokens", &SpecStats::prompt_tokens)
      .def_readonly("generated_tokens", &SpecStats::generated_tokens)
      .def_readonly("verify_steps", &SpecStats::verify_steps)
      .def_readonly("num_drafts", &SpecStats::num_drafts)
      .def_readonly("num_draft_tokens", &SpecStats::num_draft_tokens)
      .def_readonly("num_accepted_tokens", &SpecStats::num_accepted_tokens)
      .def_readonly("drafted_per_pos", &SpecStats::drafted_per_pos)
      .def_readonly("reached_per_pos", &SpecStats::reached_per_pos)
      .def_readonly("accepted_per_pos", &SpecStats::accepted_per_pos)
      .def_readonly("accepted_histogram", &SpecStats::accepted_histogram)
      .def_readonly("step_drafted", &SpecStats::step_drafted)
      .def_readonly("step_accepted", &SpecStats::step_accepted)
      .def_readonly("k_decisions", &SpecStats::k_decisions)
      .def_readonly("probe_decisions", &SpecStats::probe_decisions)
      .def_readonly("verify_seconds_by_k", &SpecStats::verify_seconds_by_k)
      .def_readonly("cycle_seconds_by_k", &SpecStats::cycle_seconds_by_k)
      .def_readonly("prefill_seconds", &SpecStats::prefill_seconds)
      .def_readonly("draft_seconds", &SpecStats::draft_seconds)
      .def_readonly("verify_seconds", &SpecStats::verify_seconds)
      .def_readonly("sample_seconds", &SpecStats::sample_seconds)
      .def_readonly("other_seconds", &SpecStats::other_seconds)
      .def_readonly("draft_prefill_seconds", &SpecStats::draft_prefill_seconds)
      .def_readonly("prompts_deferred", &SpecStats::prompts_deferred)
      .def_readonly("adaptive_k", &SpecStats::adaptive_k)
      .def_readonly("extend_seconds", &SpecStats::extend_seconds)
      .def_readonly("total_seconds", &SpecStats::total_seconds)
      .def_readonly("tree", &SpecStats::tree)
      .def_readonly("accepted_per_rank", &SpecStats::accepted_per_rank)
      .def_readonly("accepted_per_depth_rank", &SpecStats::accepted_per_depth_rank)
      .def_property_readonly("mean_acceptance_length", &SpecStats::mean_acceptance_length)
      .def_property_readonly("draft_acceptance_rate", &SpecStats::draft_acceptance_rate)
      .def_property_readonly("per_position_acceptance", &SpecStats::per_position_acceptance)
      .def_property_readonly("conditional_acceptance", &SpecStats::conditional_acceptance)
      .def_property_readonly("tokens_per_second", &SpecStats::tokens_per_second)
      .def("summary", &SpecStats::Summary)
      .def("to_json", [](const SpecStats& s) { return s.ToJson().dump(); });
  m.def(
      "merge_stats",
      [](const std::vector<const SpecStats*>& parts) {
        SpecStats total;
        for (const SpecStats* part : parts) total.Merge(*part);
        return total;
      },
      py::arg("stats"), "The statistics of several requests as one (SpecStats::Merge).");
}

}  // namespace mtpspec::python
