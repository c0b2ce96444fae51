#!/usr/bin/env python3
"""docs/results/numerics.md: every cache and precision variant against f32, in one page. Each variant is
the same experiment (a variant against the f32 reference, compared on KL, argmax agreement, held-out
loss, MTP acceptance, bytes per token and a side-by-side step) and has its section, written by its
module from the runs it finds in --results:

  int8 latent cache       kv_int8_report.py      numerics_bench (no --variant): kv_int8_*.json
  indexer keys bf16/fp8   index_keys_report.py   numerics_bench --variant *-index-keys, real_scale_bench
  input rows bf16/fp8     activations_report.py  numerics_bench --variant *-activations, linear_bench, real_scale_bench
  fp8 latent cache        kv_fp8_report.py       numerics_bench --variant fp8-latent, linear_bench, real_scale_bench

  python bench/report/numerics_report.py [--results build/results] [--command "..."] [--out docs/results]
"""

from __future__ import annotations

import activations_report
import index_keys_report
import kv_fp8_report
import kv_int8_report
from results_page import json_loader, page_arguments

SECTIONS = [
    ("int8-latent", "the latent cache in int8 (`--kv-cache int8`)", kv_int8_report),
    ("index-keys", "the indexer's keys in bf16 and fp8 (`--index-keys`)", index_keys_report),
    ("activations", "the FP8 matrices' input rows in bf16 and fp8 (`--activations`)", activations_report),
    ("fp8-latent", "the latent cache in fp8 as DeepSeek-V3.2 is served (`--kv-cache fp8`)", kv_fp8_report),
]


def main() -> None:
    args = page_arguments(__doc__)
    load = json_loader(args.results, args.out / "numerics-data")
    bodies = [(name, what, module.section(load)) for name, what, module in SECTIONS]
    present = [(name, what, body) for name, what, body in bodies if body]
    if not present:
        raise SystemExit(f"{args.results}: no numerics run found: run scripts/reproduce_results.sh numerics first")
    lines = ["# Numerics: the cache and precision variants against f32", "",
             "Each variant changes how one part of the model is stored or computed, and each is measured the same "
             "way: against the f32 reference on KL, argmax agreement and held-out loss (teacher-forced), greedy "
             "outputs, MTP acceptance, bytes per token, and whole decode steps side by side. Speculative output stays "
             "identical to plain output under every variant (tests/spec/lossless_test.cc, "
             "tests/mtp/reduced_activations_test.cc), since both decode with the same numerics. Sections: "
             + "; ".join(what for _, what, _ in present) + ".", "",
             "- Data: `numerics-data/` (the JSON of every run).", "", "Commands:", "", "```"]
    lines += (args.command or ["scripts/reproduce_results.sh numerics"]) + ["```", ""]
    for _, _, body in present:
        lines += body + [""]
    (args.out / "numerics.md").write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {args.out / 'numerics.md'}")


if __name__ == "__main__":
    main()
