#!/usr/bin/env python3
"""The activations section of docs/results/numerics.md (bench/report/numerics_report.py): the FP8
matrices' input rows in bf16 or fp8 against f32.

Reads, from numerics_report.py's --results (build/results):
  activations_V_trained.json for V in bf16, fp8
      numerics_bench --variant V-activations (accuracy and MTP acceptance on the trained model)
  activations_linear.json
      linear_bench --benchmark_format=json, BM_StreamRead and BM_Linear/fp8:3|4|5 (the GEMV)
  activations_<cut>_side_by_side.json for the cuts glm7 and dsv4
      real_scale_bench --decode-side-by-side f32,f32:bf16,f32:fp8,bf16:fp8 --side-by-side-rows 3,5

The text is templates/numerics-activations.md.j2.
"""

from __future__ import annotations

import re
from statistics import median

from results_page import render, side_by_side, spread

VARIANTS = ["bf16", "fp8"]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
KINDS = {3: "f32", 4: "bf16", 5: "fp8"}  # linear_bench's fp8:N argument: the rows' precision
ORDER = ["f32", "f32:bf16", "f32:fp8", "bf16:fp8"]  # side-by-side entries: keys[:rows]

def parse_linear(data: dict) -> tuple[dict, dict]:
    """(read bandwidth GB/s by threads, Gw/s by (precision, rows, threads, resident))."""
    bandwidth, rates = {}, {}
    for b in data["benchmarks"]:
        name = b["name"]
        if name.startswith("BM_StreamRead"):
            threads = int(re.search(r"threads:(\d+)", name).group(1))
            bandwidth[threads] = b["GB/s"]
            continue
        m = re.match(r"BM_Linear/fp8:(\d+)/rows:(\d+)/threads:(\d+)/resident:(\d+)", name)
        if m and int(m.group(1)) in KINDS:
            kind, rows, threads, resident = (int(g) for g in m.groups())
            rates[(KINDS[kind], rows, threads, resident == 1)] = b["Gw/s"]
    return bandwidth, rates


def gemv_rows(rates: dict) -> list[tuple]:
    """(rows, threads, resident, f32, bf16, fp8 Gw/s) of every GEMV measured with all three precisions."""
    out = []
    for resident in (True, False):
        for threads in (1, 2):
            for rows in (1, 3, 4):
                got = [rates.get((p, rows, threads, resident)) for p in ("f32", "bf16", "fp8")]
                if None not in got:
                    out.append((rows, threads, resident, *got))
    return out


def cut_context(name: str, run: dict) -> dict:
    """One cut's side-by-side table, and the verify costs: per context and row count, each entry's verify
    over its one-row step, and f32's verify over each other entry's (medians within repetitions)."""
    stored = run["contexts"][0]["storages"]
    entries = [e for e in ORDER if e in stored] + [e for e in stored if e not in ORDER]
    table = side_by_side(run, entries)
    verify_rows = sorted({int(r) for p in run["contexts"] for e in entries for r in p["storages"][e].get("verify", {})})
    verify = []
    for point in run["contexts"]:
        st = point["storages"]
        for rows in verify_rows:
            key = str(rows)
            verify.append((point["context"], rows,
                           {e: median(v / w for v, w in zip(st[e]["verify"][key], st[e]["whole"])) for e in entries},
                           {e: median(a / b for a, b in zip(st["f32"]["verify"][key], st[e]["verify"][key]))
                            for e in table["others"]}))
    return {**table, "name": name, "step_bytes": run["step_weight_bytes"], "verify": verify}


def section(load) -> str:
    """The activations section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = [(v, r) for v in VARIANTS if (r := load(f"activations_{v}_trained.json")) is not None]
    linear = load("activations_linear.json")
    cuts = {name: r for cut, name in CUTS if (r := load(f"activations_{cut}_side_by_side.json")) is not None}
    if not cuts and not accuracy:
        return ""
    first = next(iter(cuts.values())) if cuts else accuracy[0][1]
    gemv, ceilings, rates = None, [], {}
    if linear is not None:
        bandwidth, rates = parse_linear(linear)
        gemv = {"rows": gemv_rows(rates), "bandwidth": sorted(bandwidth.items())}
        for rows in (1, 3):
            r = {p: rates.get((p, rows, 2, True)) for p in ("f32", "bf16", "fp8")}
            if None not in r.values():
                ceilings.append((rows, r))
    # fp8 rows against f32 rows, side by side: decode steps and verifies, medians per context.
    step_gains, verify_gains = [], []
    for run in cuts.values():
        for point in run["contexts"]:
            st = point["storages"]
            if "f32:fp8" not in st:
                continue
            step_gains.append(median(a / b for a, b in zip(st["f32"]["whole"], st["f32:fp8"]["whole"])))
            for rows in st["f32"].get("verify", {}):
                verify_gains.append(median(a / b for a, b in zip(st["f32"]["verify"][rows], st["f32:fp8"]["verify"][rows])))
    bws = [b for r in cuts.values() for p in r["contexts"] for e in p["storages"].values() for b in e["read_bandwidth"]]
    return render("numerics-activations.md.j2", run=first["run"], ceilings=ceilings, gemv=gemv,
                  cuts=[cut_context(name, run) for name, run in cuts.items()], step_gains=step_gains,
                  verify_gains=verify_gains, cut_bandwidth=spread(bws) if bws else None,
                  ceiling=rates.get(("f32", 1, 2, True)), accuracy=accuracy)
