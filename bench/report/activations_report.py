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


"""

from __future__ import annotations

import re
from statistics import median

from results_page import DIVERGENCE_NOTE, comparison_row, demoted, section_heading, side_by_side_table  # noqa: E402  (bench/report/)

VARIANTS = ["bf16", "fp8"]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
KINDS = {3: "f32", 4: "bf16", 5: "fp8"}  # linear_bench's fp8:N argument: the rows' precision
ORDER = ["f32", "f32:bf16", "f32:fp8", "bf16:fp8"]  # side-by-side entries: keys[:rows]

INTRO = """`--activations bf16|fp8` (C++ `LoadOptions::activations` or `Model::SetActivationPrecision`, Python
`Model.load(..., activations=...)`) sets the precision in which the Linear kernels take their input
rows when the matrix is FP8. The default, f32, multiplies the rows as given: each FP8 weight is widened
to f32 in registers and every product is exact.

- **bf16**: each row rounded to bf16.
- **fp8**: each row quantised to e4m3 in groups of 128 (one per weight block column) with a
  power-of-two scale per group, as DeepSeek-V3.2's reference inference code quantises activations
  before its FP8 GEMM (`act_quant`); served FP8 kernels take their activations the same way.

Both then multiply pairs of bf16 values, the arithmetic of the AVX-512 BF16 instruction VDPBF16PS
(`kernels/fp8_pairs.h`): the weights are widened to bf16 words (exactly: every e4m3 value is a bf16
value) by two bit-matrix products and two unpacks per 64 weights, against nine operations for the f32
widening; every product is exact and the sums are f32. Matrices stored in f32 or bf16, the MoE router
and kv_b_proj take f32 rows whatever the setting. Every row keeps its own accumulation order, so
speculative output stays identical to plain output (tests/spec/lossless_test.cc,
tests/mtp/reduced_activations_test.cc)."""


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


def gemv_lines(bandwidth: dict, rates: dict) -> list[str]:
    lines = ["## The GEMV", "",
             "`linear_bench`: Linear on an FP8 matrix [out, 6144] quantised from normally distributed weights as the "
             "releases quantise theirs (with its line flags, as the loader attaches them), the same matrix with its "
             "input rows in each precision. Resident: 1.5 MiB per thread, called over and over (the kernel's "
             "compute ceiling); streamed: 512 MiB read once per call. G weights per second.", "",
             "| rows | threads | matrix | f32 rows | bf16 rows | fp8 rows | bf16 ÷ f32 | fp8 ÷ f32 |",
             "|---|---|---|---|---|---|---|---|"]
    for resident in (True, False):
        for threads in (1, 2):
            for rows in (1, 3, 4):
                got = [rates.get((p, rows, threads, resident)) for p in ("f32", "bf16", "fp8")]
                if None in got:
                    continue
                f32, bf16, fp8 = got
                lines.append(f"| {rows} | {threads} | {'resident' if resident else 'streamed'} | {f32:.1f} | "
                             f"{bf16:.1f} | {fp8:.1f} | {bf16 / f32:.2f} | {fp8 / f32:.2f} |")
    if bandwidth:
        lines += ["", "Read bandwidth in the same run (BM_StreamRead): " +
                  ", ".join(f"{bw:.1f} GB/s on {t} thread{'s' if t > 1 else ''}" for t, bw in sorted(bandwidth.items())) +
                  ". An FP8 weight is one byte, so G weights per second are GB per second; a streamed GEMV reaches "
                  "its read bandwidth only where the resident rate lies above it."]
    return lines + [""]


def side_by_side_lines(name: str, run: dict) -> tuple[list[str], dict]:
    step_bytes = run["step_weight_bytes"]
    stored = run["contexts"][0]["storages"]
    entries = [e for e in ORDER if e in stored] + [e for e in stored if e not in ORDER]
    others = [e for e in entries if e != "f32"]
    label = {e: (f"keys {e.split(':')[0]}, rows {e.split(':')[1]}" if ":" in e else f"keys {e}, rows f32")
             for e in entries}
    lines = [f"### {name}", "",
             f"The cut in the release's FP8 format and dimensions (`real_scale_bench --decode-side-by-side`); one row's "
             f"decode step reads {step_bytes / 1e9:.2f} GB of weights, its head in bf16. One model, switched between "
             "precisions, and one cache per indexer-key storage; in every repetition each entry in turn (the order "
             "rotating) runs one decode step after its own read-bandwidth measurement, then a verify of 3 and of 5 "
             "rows. Ratios are medians over repetitions of ratios within a repetition.", "",
             "Entries: " + "; ".join(f"`{e}` = {label[e]}" for e in entries) + ".", ""]
    table, pooled = side_by_side_table(run, entries)
    lines += table
    verify_rows = sorted({int(r) for p in run["contexts"] for e in entries for r in p["storages"][e].get("verify", {})})
    if verify_rows:
        lines += ["", "Verify cost: a verify of L rows over the one-row step of the same entry in the same repetition "
                  "(r_{L-1} on the cut), and the f32 entry's verify over each other entry's.", "",
                  "| N | L | " + " | ".join(f"T(L) ÷ T(1), {e}" for e in entries) + " | " +
                  " | ".join(f"verify f32 ÷ {e}" for e in others) + " |",
                  "|---|---|" + "---|" * (len(entries) + len(others))]
        for point in run["contexts"]:
            st = point["storages"]
            for rows in verify_rows:
                key = str(rows)
                r = {e: median(v / w for v, w in zip(st[e]["verify"][key], st[e]["whole"])) for e in entries}
                lines.append(f"| {point['context']} | {rows} | " + " | ".join(f"{r[e]:.2f}" for e in entries) + " | " +
                             " | ".join(f"{median(a / b for a, b in zip(st['f32']['verify'][key], st[e]['verify'][key])):.2f}"
                                        for e in others) + " |")
    lines.append("")
    reps = len(stored[entries[0]]["whole"])
    for e in entries:
        overall = median(pooled[e])
        lines.append(f"- Decode weight bytes per second ÷ read bandwidth, `{e}`: median {overall:.2f} over "
                     f"{len(pooled[e])} paired repetitions ({reps} per context).")
    bws = [b for p in run["contexts"] for e in entries for b in p["storages"][e]["read_bandwidth"]]
    lines.append(f"- Read bandwidth in this run: median {median(bws) / 1e9:.1f} GB/s "
                 f"({min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}).")
    return lines + [""], {e: median(v) for e, v in pooled.items()}


def accuracy_lines(results: dict[str, dict]) -> list[str]:
    lines = ["## What reduced-precision rows change", "",
             "`numerics_bench --variant bf16-activations|fp8-activations` loads the bundled trained model "
             "(models/glm-tiny-mtp) with every matrix quantised to FP8 (128 × 128 blocks) twice, with f32 rows (the "
             "reference) and with the reduced rows, and runs every window of held-out text through both: "
             "teacher-forced decode steps after a one-call prefill (KL(p_f32 ‖ p), argmax agreement, the held-out "
             "loss of the true next token), free-running greedy decoding, and MTP drafting at k = 2 "
             "(sampler-equality, T = 0; the MTP layer's matrices take the same rows as its side's).", "",
             "| rows | windows × steps | mean KL (nats) | p99 KL | max rel. logit error | argmax agreement | "
             "held-out loss, f32 rows → rows | greedy: first difference, equal share | MTP mean acceptance length f32 → rows |",
             "|---|---|---|---|---|---|---|---|---|"]
    for v in VARIANTS:
        r = results.get(v)
        if r is None:
            continue
        lines.append(comparison_row(v, r, f"{v}_activations"))
    lines += ["", DIVERGENCE_NOTE]
    return lines + [""]


def section(load) -> list[str]:
    """The activations section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = {v: r for v in VARIANTS if (r := load(f"activations_{v}_trained.json")) is not None}
    linear = load("activations_linear.json")
    cuts = {name: r for cut, name in CUTS if (r := load(f"activations_{cut}_side_by_side.json")) is not None}
    if not cuts and not accuracy:
        return []
    first = next(iter(cuts.values())) if cuts else next(iter(accuracy.values()))
    md = section_heading("The FP8 matrices' input rows in bf16 and fp8", INTRO, first["run"])
    body, summary = [], ["## Summary", ""]
    if linear is not None:
        bandwidth, rates = parse_linear(linear)
        body += gemv_lines(bandwidth, rates)
        for rows in (1, 3):
            r = {p: rates.get((p, rows, 2, True)) for p in ("f32", "bf16", "fp8")}
            if None not in r.values():
                summary.append(f"- The FP8 GEMV's compute ceiling on 2 threads, {rows} row{'s' if rows > 1 else ''}: "
                               f"{r['f32']:.1f} G weights/s with f32 rows, {r['bf16']:.1f} with bf16 "
                               f"({r['bf16'] / r['f32']:.2f}x), {r['fp8']:.1f} with fp8 ({r['fp8'] / r['f32']:.2f}x).")
    if cuts:
        body += ["## Whole decode steps and verifies on the cuts", ""]
    step_gains, verify_gains = [], []
    for name, run_json in cuts.items():
        lines, pooled = side_by_side_lines(name, run_json)
        body += lines
        summary.append(f"- {name} cut, decode weight bytes per second ÷ read bandwidth, measured side by side "
                       "(median over all contexts): " + ", ".join(f"`{e}` {v:.2f}" for e, v in pooled.items()) + ".")
        for point in run_json["contexts"]:
            st = point["storages"]
            if "f32:fp8" not in st:
                continue
            step_gains.append(median(a / b for a, b in zip(st["f32"]["whole"], st["f32:fp8"]["whole"])))
            for rows in st["f32"].get("verify", {}):
                verify_gains.append(median(a / b for a, b in zip(st["f32"]["verify"][rows], st["f32:fp8"]["verify"][rows])))
    if step_gains:
        bws = [b for r in cuts.values() for p in r["contexts"] for e in p["storages"].values() for b in e["read_bandwidth"]]
        ceiling = ""
        if linear is not None and rates.get(("f32", 1, 2, True)):
            ceiling = (f"; the one-row GEMV's ceiling with f32 rows is {rates[('f32', 1, 2, True)]:.1f} G weights/s "
                       "on 2 threads, above")
        summary.append(f"- Decode steps with fp8 rows against f32 rows, side by side: {min(step_gains):.2f}-"
                       f"{max(step_gains):.2f}x as fast (medians per context, both cuts; read bandwidth median "
                       f"{median(bws) / 1e9:.1f} GB/s, {min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}{ceiling}). A one-row "
                       "step streams its FP8 weights at about the read bandwidth either way, and its attention, "
                       "indexer and bf16 head do not depend on the rows' precision. Verifies of 3 and 5 rows, where "
                       "several rows share each widened weight: "
                       f"{min(verify_gains):.2f}-{max(verify_gains):.2f}x. A verify reads the same bytes either way, so "
                       "the bytes bound on what MTP can buy at the releases' dimensions (real-scale.md) does not move.")
    for v in VARIANTS:
        r = accuracy.get(v)
        if r:
            t = r["teacher_forced"]
            mtp = r.get("mtp") or {}
            summary.append(f"- {v} rows on the trained model in FP8, over held-out text: mean KL {t['mean_kl_nats']:.1e} "
                           f"nats, argmax agreement {t['argmax_agreement']:.4f}, held-out loss {t['mean_nll_f32']:.4f} → "
                           f"{t[f'mean_nll_{v}_activations']:.4f}" +
                           (f"; MTP mean acceptance length at k = 2 {mtp['mean_acceptance_length_f32']:.3f} → "
                            f"{mtp[f'mean_acceptance_length_{v}_activations']:.3f}." if mtp else "."))
    return md + demoted(summary + [""] + body + accuracy_lines(accuracy))
