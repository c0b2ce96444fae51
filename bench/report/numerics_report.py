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
from results_page import json_loader, page_arguments, render, write_page

# Each section: its name (templates/numerics.md.j2 says what it is) and the module that writes it.
SECTIONS = [("int8-latent", kv_int8_report), ("index-keys", index_keys_report), ("activations", activations_report),
            ("fp8-latent", kv_fp8_report)]


def main() -> None:
    args = page_arguments(__doc__)
    load = json_loader(args.results, args.out / "numerics-data")
    present = [(name, body) for name, module in SECTIONS if (body := module.section(load))]
    if not present:
        raise SystemExit(f"{args.results}: no numerics run found: run scripts/reproduce_results.sh numerics first")
    write_page(args.out / "numerics.md", render("numerics.md.j2", sections=present,
                                                commands=args.command or ["scripts/reproduce_results.sh numerics"]))


if __name__ == "__main__":
    main()
