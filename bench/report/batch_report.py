#!/usr/bin/env python3
"""Writes docs/results/batch.md (and batch-data/) from a batch_bench run.

  build/pyenv/bin/python bench/report/batch_report.py [--json build/results/batch.json] [--out docs/results]

The page: the batched verify's measured cost against its bound with the expert union counted, the
cost model's predicted tokens/s and speedup per batch size B and draft length k, the measured ones
from end-to-end batches (SYNTHETIC acceptance), the best k per B and where speculation stops paying.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]


def cell(table: List[Dict[str, Any]], **match: Any) -> Optional[Dict[str, Any]]:
    return next((row for row in table if all(row[k] == v for k, v in match.items())), None)


def best_k(rows: List[Dict[str, Any]], batch: int, key: str) -> Tuple[int, float]:
    at = [r for r in rows if r["batch"] == batch]
    best = max(at, key=lambda r: r[key])
    return best["k"], best[key]


def measured_speedups(e2e: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for r in e2e:
        plain = cell(e2e, batch=r["batch"], k=0)
        out.append({**r, "speedup": r["decode_tokens_per_second"] / plain["decode_tokens_per_second"]})
    return out


def median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def measured_over_predicted(e2e: List[Dict[str, Any]], r: Dict[str, Any], predicted: Dict[str, Any]) -> float:
    """Measured over predicted speedup of one (B, k). Where the run repeated the costs before each
    end-to-end repetition, each repetition's measured speedup is set against the speedup its own
    costs predict and the median is taken (paired); otherwise the run's tokens/s against the cost
    table measured before all end-to-end runs."""
    pairs = r.get("paired_predicted_speedup")
    plain = cell(e2e, batch=r["batch"], k=0)
    if pairs and len(pairs) == len(r.get("run_tokens_per_second", [])) == len(plain.get("run_tokens_per_second", [])):
        return median([(tps / base) / pred for tps, base, pred in
                       zip(r["run_tokens_per_second"], plain["run_tokens_per_second"], pairs)])
    return r["speedup"] / predicted["speedup"]


def findings(data: Dict[str, Any]) -> List[str]:
    lines = ["## Findings\n"]
    for point in data["points"]:
        n = point["context"]
        predicted = point["predicted"]
        batches = sorted({r["batch"] for r in predicted})
        parts = []
        for b in batches:
            k, s = best_k(predicted, b, "speedup")
            parts.append(f"B = {b}: k = {k} ({s:.2f}x)")
        paying = [b for b in batches if best_k(predicted, b, "speedup")[0] > 0 and best_k(predicted, b, "speedup")[1] > 1.0]
        stop = (f"speculation pays up to B = {max(paying)} and not beyond" if paying and max(paying) < max(batches)
                else "speculation pays at every B measured" if paying and len(paying) == len(batches)
                else "no k > 0 beats plain batched decoding at any B")
        lines.append(f"- N = {n}, predicted best k per batch: {'; '.join(parts)}; {stop}.")
        costs = point["costs"]
        ones = [c for c in costs if c["rows_per_sequence"] == 1]
        widest = max(costs, key=lambda c: c["rows"])
        lines.append(f"  The batched verify costs {min(c['measured_over_bound'] for c in costs):.2f} to "
                     f"{max(c['measured_over_bound'] for c in costs):.2f} times its bound; at {widest['rows']} rows "
                     f"(B = {widest['batch']}, L = {widest['rows_per_sequence']}) it read {widest['experts_read']} routed "
                     f"experts for {widest['expert_choices']} routing choices "
                     f"({widest['experts_read'] / widest['expert_choices']:.2f} per choice). A plain step of B = "
                     f"{max(c['batch'] for c in ones)} costs "
                     f"{max(ones, key=lambda c: c['batch'])['seconds'] / cell(costs, batch=1, rows_per_sequence=1)['seconds']:.2f} "
                     "times a single request's.")
        b_top = max(c["batch"] for c in ones)
        al = data["acceptance_length"]
        ratios = ", ".join(f"L = {c['rows_per_sequence']}: {c['seconds'] / cell(costs, batch=b_top, rows_per_sequence=1)['seconds']:.2f}"
                           for c in costs if c["batch"] == b_top and c["rows_per_sequence"] > 1)
        ratios_one = ", ".join(f"L = {c['rows_per_sequence']}: {c['seconds'] / cell(costs, batch=1, rows_per_sequence=1)['seconds']:.2f}"
                               for c in costs if c["batch"] == 1 and c["rows_per_sequence"] > 1)
        lines.append(f"  Why: a verify of L rows per request costs, relative to the plain step of the same batch, "
                     f"{ratios_one} at B = 1 and {ratios} at B = {b_top}, against acceptance lengths AL(L - 1) = "
                     f"{', '.join(f'{x:.2f}' for x in al[1:])}: the extra rows are paid in multiply-adds and in "
                     "experts that a single row would not read.")
        if "e2e" in point:
            measured = measured_speedups(point["e2e"])
            ratios = []
            for r in measured:
                if r["k"] == 0 or r["k"] == "auto":
                    continue
                p = cell(predicted, batch=r["batch"], k=r["k"])
                ratios.append(measured_over_predicted(measured, r, p))
            passing = sum(1 for x in ratios if x >= 0.9)
            fixed = [r for r in measured if r["k"] != "auto"]
            parts = []
            for b in batches:
                k, s = best_k(fixed, b, "speedup")
                parts.append(f"B = {b}: k = {k} ({s:.2f}x)")
            lines.append(f"  Measured end to end: best k per batch {'; '.join(parts)}. Measured / predicted speedup "
                         f"{min(ratios):.2f} to {max(ratios):.2f} ({passing} of {len(ratios)} points at >= 0.9, the "
                         "goal).")
            auto = [r for r in measured if r["k"] == "auto"]
            if auto:
                worst = min(auto, key=lambda r: r["speedup"])
                lines.append("  k = auto (the batch's draft-length controller): " + "; ".join(
                    f"B = {r['batch']}: {r['speedup']:.2f}x, mean k {r['mean_k']:.2f}" for r in auto)
                    + f" (worst {worst['speedup']:.2f}x of plain at B = {worst['batch']}).")
    point = data["points"][0]
    steps = point["draft"]["draft_steps"]
    plain = {c["batch"]: c["seconds"] for c in point["costs"] if c["rows_per_sequence"] == 1}
    lines.append(f"- At N = {point['context']} one draft step costs {steps[0]['seconds'] / plain[steps[0]['batch']]:.2f} "
                 f"of a plain step at B = {steps[0]['batch']} and {steps[-1]['seconds'] / plain[steps[-1]['batch']]:.2f} "
                 f"at B = {steps[-1]['batch']} (the drafts of a batch run together); the batch's extends of its "
                 f"committed rows cost {extend_share(steps[0], plain):.2f} of a plain step at B = {steps[0]['batch']} "
                 f"and {extend_share(steps[-1], plain):.2f} at B = {steps[-1]['batch']} (one forward for all "
                 f"requests; one request's extend alone is {point['draft']['extend_seconds'] / plain[1]:.2f} of a "
                 "plain single-request step).")
    return lines


def extend_share(step: Dict[str, Any], plain: Dict[int, float]) -> float:
    """X(B), the batched extend of one cycle, over the plain batched step T(B, 1)."""
    return step.get("extend_seconds", float("nan")) / plain[step["batch"]]


def plot(data: Dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    points = data["points"]
    fig, axes = plt.subplots(1, len(points), figsize=(5.5 * len(points), 4), squeeze=False)
    for ax, point in zip(axes[0], points):
        predicted = point["predicted"]
        batches = sorted({r["batch"] for r in predicted})
        ks = sorted({r["k"] for r in predicted if r["k"] > 0})
        for i, k in enumerate(ks):
            color = f"C{i}"
            ax.plot(batches, [cell(predicted, batch=b, k=k)["speedup"] for b in batches], "-o", color=color,
                    label=f"k = {k} predicted")
            if "e2e" in point:
                measured = measured_speedups(point["e2e"])
                ax.plot(batches, [cell(measured, batch=b, k=k)["speedup"] for b in batches], "--x", color=color,
                        label=f"k = {k} measured")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size B")
        ax.set_ylabel("speedup over plain batched decoding")
        ax.set_title(f"N = {point['context']}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write(data: Dict[str, Any], out: Path, source: Path) -> None:
    folder = out / "batch-data"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, folder / "batch.json")
    run = data["run"]
    al = data["acceptance_length"]
    lines = ["# Batches: batched verify cost and what MTP buys per batch size\n",
             f"Made by `{run['command']}` then `build/pyenv/bin/python bench/report/batch_report.py` on "
             f"{run['date_utc'][:10]} ({run['cpu_model']}, {run['threads']} threads). Data: `batch-data/batch.json`.\n",
             "The bench model (`bench/bench_model.cc`, 1.15 GB of bf16 weights, 10 layers, 32 experts top-4) with "
             "B caches filled to the context N with random rows. Read bandwidth "
             f"{data['read_bandwidth']['bytes_per_second'] / 1e9:.1f} GB/s and {data['mac_rate']['macs_per_second'] / 1e9:.0f} "
             "GMAC/s (the project's Linear on 8 rows), both measured in the run. Acceptance: the trained head's "
             f"conditional rates {', '.join(f'{r:.3f}' for r in data['rates'])}, so AL(k) = "
             f"{', '.join(f'{x:.2f}' for x in al)} for k = 0..{len(al) - 1}; the end-to-end runs impose them "
             "(SYNTHETIC acceptance), each request with its own seed at T = 1.\n",
             "Cost model: tokens/s(B, k) = B · AL(k) / (T(B, k + 1) + k · D(B) + X(B)), with T(B, L) the measured "
             "batched forward of B sequences of L rows, D(B) one batched MTP draft step for B requests (the "
             "drafters draft together, one forward per depth) and X(B) one batched extend of every request's "
             "committed rows (the drafters' extends run together too, one forward before the drafts), each "
             "measured at N; plain batched decoding is B / T(B, 1).\n"]
    lines += findings(data)
    if plot(data, folder / "speedup_vs_batch.png"):
        lines.append("\n![speedup against B for each k, predicted and measured](batch-data/speedup_vs_batch.png)\n")
    for point in data["points"]:
        n = point["context"]
        lines.append(f"\n## N = {n}\n")
        lines.append("### Batched verify: measured cost against its bound\n")
        lines.append("Bound = max(bytes / bandwidth, multiply-adds / MAC rate); bytes = the weights once, the routed "
                     "experts of the union, each sequence's attended cache rows (at least min(N + L, K) per layer).\n")
        lines.append("| B | L | rows | ms | experts read / routing choices | bytes bound ms | compute bound ms | measured / bound |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for c in point["costs"]:
            lines.append(f"| {c['batch']} | {c['rows_per_sequence']} | {c['rows']} | {c['seconds'] * 1e3:.2f} | "
                         f"{c['experts_read']} / {c['expert_choices']} | {c['bytes_seconds'] * 1e3:.2f} | "
                         f"{c['compute_seconds'] * 1e3:.2f} | {c['measured_over_bound']:.2f} |")
        d = point["draft"]
        steps = ", ".join(f"D({x['batch']}) = {x['seconds'] * 1e3:.2f}" for x in d["draft_steps"])
        extends = ", ".join(f"X({x['batch']}) = {x['extend_seconds'] * 1e3:.2f}" for x in d["draft_steps"]
                            if "extend_seconds" in x)
        lines.append(f"\nOne batched MTP draft step (B chains' steps and heads in one forward), ms: {steps}; one "
                     f"batched extend of {d['extend_rows']} rows per request, ms: {extends}; one request's extend "
                     f"alone x = {d['extend_seconds'] * 1e3:.2f} ms; a plain single-request step "
                     f"{cell(point['costs'], batch=1, rows_per_sequence=1)['seconds'] * 1e3:.2f} ms.\n")
        lines.append("### Tokens/s and speedup over plain batched decoding\n")
        e2e = measured_speedups(point["e2e"]) if "e2e" in point else []
        if e2e:
            lines.append("| B | k | predicted tokens/s | predicted speedup | measured tokens/s | measured speedup | "
                         "measured / predicted | mean request seconds |")
            lines.append("|---|---|---|---|---|---|---|---|")
        else:
            lines.append("| B | k | predicted tokens/s | predicted speedup |")
            lines.append("|---|---|---|---|")
        for p in point["predicted"]:
            row = f"| {p['batch']} | {p['k']} | {p['tokens_per_second']:.1f} | {p['speedup']:.3f} |"
            m = cell(e2e, batch=p["batch"], k=p["k"]) if e2e else None
            if m is not None:
                ratio = measured_over_predicted(e2e, m, p)
                row += (f" {m['decode_tokens_per_second']:.1f} | {m['speedup']:.3f} | {ratio:.3f} | "
                        f"{m['mean_request_seconds']:.2f} |")
            lines.append(row)
        auto = [r for r in e2e if r["k"] == "auto"]
        if auto:
            lines.append("\nk = auto, chosen each cycle for every request by the batch's controller (spec/batch_k.h):\n")
            lines.append("| B | measured tokens/s | speedup over plain | mean k drafted | best fixed k measured |")
            lines.append("|---|---|---|---|---|")
            for r in auto:
                k, sp = best_k([x for x in e2e if x["k"] != "auto"], r["batch"], "speedup")
                lines.append(f"| {r['batch']} | {r['decode_tokens_per_second']:.1f} | {r['speedup']:.3f} | "
                             f"{r['mean_k']:.2f} | k = {k} ({sp:.3f}) |")
        if e2e:
            reps = len(e2e[0].get("run_tokens_per_second", [1]))
            lines.append("\nMeasured tokens/s are decode tokens (after each request's first) over the batch's wall "
                         "time less its prefills; a request's seconds run from its prefill to its last token."
                         + (f" Each B ran {reps} repetitions, each running plain decoding and every k in turn; a k's "
                            "tokens/s is over all of them"
                            + (", and measured / predicted is the median over the repetitions of each one's measured "
                               "speedup over the speedup that costs measured just before it predict (this machine's "
                               "memory reads at about 35 or 60 GB/s by turns, which moves a memory-bound plain step "
                               "more than a verify of several rows)"
                               if e2e[0].get("paired_predicted_speedup") else "")
                            + " (single runs: "
                            + "; ".join(f"B = {r['batch']}, k = {r['k']}: {min(r['run_tokens_per_second']):.1f}-"
                                        f"{max(r['run_tokens_per_second']):.1f}" for r in e2e
                                        if r["batch"] == max(x["batch"] for x in e2e))
                            + ")." if reps > 1 else ""))
    (out / "batch.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=REPO / "build" / "results" / "batch.json")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results")
    args = parser.parse_args()
    data = json.loads(args.json.read_text())
    write(data, args.out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
