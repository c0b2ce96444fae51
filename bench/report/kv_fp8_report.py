#!/usr/bin/env python3
"""The fp8-latent section of docs/results/numerics.md (bench/report/numerics_report.py): the latent
cache as DeepSeek-V3.2 is served (fp8) against f32.

Reads, from numerics_report.py's --results (build/results):
  kv_fp8_trained.json, kv_fp8_glm_a.json, kv_fp8_dsv32_b.json
      numerics_bench --variant fp8-latent (accuracy, MTP acceptance; memory from the first)
  kv_fp8_attention_1.json … kv_fp8_attention_6.json
      linear_bench --benchmark_filter=BM_AttentionCore --benchmark_repetitions=3 --benchmark_format=json, six
      separate processes (the attention core)
  kv_fp8_<cut>_side_by_side.json for the cuts glm7 and dsv4
      real_scale_bench --decode-side-by-side f32,f32:f32:fp8,fp8:fp8:fp8 --side-by-side-rows 3

The text is templates/numerics-kv-fp8.md.j2.
"""

from __future__ import annotations

import re
from statistics import median

from results_page import render, side_by_side, spread

ACCURACY = [("trained", "models/glm-tiny-mtp (trained), held-out text"), ("glm_a", "golden glm_a (random weights)"),
            ("dsv32_b", "golden dsv32_b (random weights)")]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
ORDER = ["f32", "f32:f32:fp8", "fp8:fp8:fp8"]  # side-by-side entries (templates/numerics-kv-fp8.md.j2 names them)


def core_times(data: dict) -> dict[int, float]:
    """BM_AttentionCore's median time (µs) per fp8 argument in one linear_bench process's JSON."""
    times = {}
    for b in data["benchmarks"]:
        m = re.match(r"BM_AttentionCore/fp8:(\d)", b["name"])
        if m and b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median":
            times[int(m.group(1))] = b["real_time"]
    return times


def attention_core(runs: list[dict]) -> dict | None:
    """Each process's f32 and fp8 median times of the attention core, the spread of their ratios, and
    the median saving (ms); None without a process that ran both."""
    pairs = [(t[0], t[1]) for t in (core_times(r) for r in runs) if 0 in t and 1 in t]
    if not pairs:
        return None
    return {"pairs": pairs, "ratios": spread([f32 / fp8 for f32, fp8 in pairs]),
            "saving_ms": median(f32 - fp8 for f32, fp8 in pairs) / 1e3}


def cut_context(name: str, run: dict, core: dict | None) -> dict:
    """One cut's side-by-side table; per context its verifies of 3 rows over its one-row step, f32's
    verify over each other entry's and each entry's cache bytes per token; the fp8 cache's step gains
    and the served entry's verify gains; and what the attention core's measured saving (at
    DeepSeek-V3.2's 128 heads; scaled to the cut's heads, as an upper bound, for other cuts) is worth
    against the cut's f32 decode step at the shortest context."""
    stored = run["contexts"][0]["storages"]
    entries = [e for e in ORDER if e in stored]
    table = side_by_side(run, entries)
    verify = []
    for point in run["contexts"]:
        st = point["storages"]
        if "3" not in st[entries[0]].get("verify", {}):
            continue
        verify.append((point["context"], {e: median(v / w for v, w in zip(st[e]["verify"]["3"], st[e]["whole"]))
                                          for e in entries},
                       {e: median(a / b for a, b in zip(st["f32"]["verify"]["3"], st[e]["verify"]["3"]))
                        for e in entries[1:]},
                       {e: st[e]["cache_bytes_per_token"] for e in entries}))
    steps = [median(a / b for a, b in zip(p["storages"]["f32"]["whole"], p["storages"]["f32:f32:fp8"]["whole"]))
             for p in run["contexts"] if "f32:f32:fp8" in p["storages"]]
    served_verifies = [median(a / b for a, b in zip(p["storages"]["f32"]["verify"]["3"],
                                                    p["storages"]["fp8:fp8:fp8"]["verify"]["3"]))
                       for p in run["contexts"] if "3" in p["storages"].get("fp8:fp8:fp8", {}).get("verify", {})]
    c = run["config"]
    layers, heads = c["num_hidden_layers"], c["num_attention_heads"]
    return {**table, "name": name, "step_bytes": run["step_weight_bytes"], "verify": verify, "steps": steps,
            "served_verifies": served_verifies, "layers": layers, "heads": heads,
            "step_ms": 1e3 * table["rows"][0]["step"]["f32"],
            "core_saving_ms": core["saving_ms"] * heads / 128 * layers if core else None}


def section(load) -> str:
    """The fp8-latent section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = [(name, r) for k, name in ACCURACY if (r := load(f"kv_fp8_{k}.json")) is not None]
    attention = [r for i in range(1, 7) if (r := load(f"kv_fp8_attention_{i}.json")) is not None]
    cuts = {name: r for cut, name in CUTS if (r := load(f"kv_fp8_{cut}_side_by_side.json")) is not None}
    if not cuts and not accuracy:
        return ""
    first = next(iter(cuts.values())) if cuts else accuracy[0][1]
    trained = dict(accuracy).get(ACCURACY[0][1])
    core = attention_core(attention) if attention else None
    return render("numerics-kv-fp8.md.j2", run=first["run"], trained=trained, accuracy=accuracy, core=core,
                  attention_runs=len(attention), cuts=[cut_context(name, run, core) for name, run in cuts.items()])
