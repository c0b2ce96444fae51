#!/usr/bin/env python3
"""The int8-latent section of docs/results/numerics.md (bench/report/numerics_report.py), from
numerics_bench's JSON: kv_int8_trained.json (the trained model) and kv_int8_glm_a.json,
kv_int8_dsv32_b.json (the golden models). The text is templates/numerics-kv-int8.md.j2.
"""

from __future__ import annotations

from pathlib import Path

from results_page import render


def section(load) -> str:
    """The int8-latent section of the numerics page, from the runs `load` finds (empty without any)."""
    trained = load("kv_int8_trained.json")
    if trained is None:
        return ""
    golden = [(Path(r["model"]).name, r) for m in ("glm_a", "dsv32_b") if (r := load(f"kv_int8_{m}.json")) is not None]
    identical = sum(1 for w in trained["windows"] if w["greedy"]["equal_fraction"] == 1.0)
    return render("numerics-kv-int8.md.j2", d=trained, golden=golden, identical=identical)
