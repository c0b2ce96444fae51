#!/usr/bin/env python3
"""Writes docs/results/batch.md (and batch-data/) from batch_bench runs, one section per run.

  build/pyenv/bin/python bench/report/batch_report.py [--run JSON RATES_LABEL ...] [--results build/results] \
      [--out docs/results]

Without --run: batch.json (the bench model, the trained head's rates) and batch_glm7.json (a GLM-5.2
cut, the published mlx-lm rates) in --results, whichever exist. A run on a
checkpoint cut from a release (batch_bench --model, `mtpspec make-checkpoint`) adds each cost at the
release's expert union and, when it timed its prefix forwards (--prefix-layers), a PROJECTION of the
full release per batch size.

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

from results_page import demoted  # bench/report/

REPO = Path(__file__).resolve().parents[2]


def cell(table: List[Dict[str, Any]], **match: Any) -> Optional[Dict[str, Any]]:
    return next((row for row in table if all(row[k] == v for k, v in match.items())), None)


def best_k(rows: List[Dict[str, Any]], batch: int, key: str) -> Tuple[int, float]:
    at = [r for r in rows if r["batch"] == batch]
    best = max(at, key=lambda r: r[key])
    return best["k"], best[key]


def crossover_text(rows: List[Dict[str, Any]], batches: List[int]) -> str:
    """Where speculation stops paying: the largest B whose best k > 0 beats plain."""
    paying = [b for b in batches if best_k(rows, b, "speedup")[0] > 0 and best_k(rows, b, "speedup")[1] > 1.0]
    if paying and max(paying) < max(batches):
        return f"speculation pays up to B = {max(paying)} and not beyond"
    if paying and len(paying) == len(batches):
        return "speculation pays at every B measured"
    return "no k > 0 beats plain batched decoding at any B"


def best_k_text(rows: List[Dict[str, Any]], batches: List[int], key: str) -> str:
    """'B = 1: k = 1 (1.03x); B = 2: ...', the best k of each batch size by `key`."""
    return "; ".join(f"B = {b}: k = {best_k(rows, b, key)[0]} ({best_k(rows, b, key)[1]:.2f}x)" for b in batches)


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


# The predictions an end-to-end run is set against: (key in the e2e cell, paired per repetition;
# key in the predicted table, for runs without pairs; what it is).
COMPARISONS = {
    "steady": ("paired_predicted_speedup", "speedup", "the steady state (every cycle B requests at k)"),
    "run": ("paired_run_predicted_speedup", "speedup_for_run",
            "a run of this length, from the rates (simulated runs' cycles, priced)"),
    "cycles": ("paired_cycles_predicted_speedup", None,
               "the cost model alone (each run's own cycles, from its log, priced)"),
}


def measured_over_predicted(e2e: List[Dict[str, Any]], r: Dict[str, Any], predicted: Dict[str, Any],
                            comparison: str = "steady") -> Optional[float]:
    """Measured over predicted speedup of one (B, k) against one of COMPARISONS. Where the run repeated
    the costs before each end-to-end repetition, each repetition's measured speedup is set against the
    speedup its own costs predict and the median is taken (paired); otherwise the run's tokens/s
    against the cost table measured before all end-to-end runs. None where the run did not record it."""
    paired_key, table_key, _ = COMPARISONS[comparison]
    pairs = r.get(paired_key)
    plain = cell(e2e, batch=r["batch"], k=0)
    if pairs and len(pairs) == len(r.get("run_tokens_per_second", [])) == len(plain.get("run_tokens_per_second", [])):
        return median([(tps / base) / pred for tps, base, pred in
                       zip(r["run_tokens_per_second"], plain["run_tokens_per_second"], pairs)])
    if table_key is None or table_key not in predicted:
        return None
    return r["speedup"] / predicted[table_key]


def comparisons_present(e2e: List[Dict[str, Any]]) -> List[str]:
    """The COMPARISONS this run's end-to-end cells carry (the steady state always)."""
    fixed = [r for r in e2e if r["k"] not in (0, "auto")]
    return [c for c in COMPARISONS if c == "steady" or (fixed and fixed[0].get(COMPARISONS[c][0]))]


def new_tokens(data: Dict[str, Any]) -> Optional[int]:
    """Tokens per request of the end-to-end runs (the prefill's first one included)."""
    if "new_tokens" in data:
        return int(data["new_tokens"])
    for point in data["points"]:
        for r in point.get("e2e", []):
            return round(r["stats"]["generated_tokens"] / r["batch"])
    return None


def union(experts: int, per_token: int, rows: int) -> float:
    """Expected distinct experts of `rows` rows each routing to `per_token` of `experts` independently."""
    return experts * (1.0 - (1.0 - per_token / experts) ** rows)


def model_info(data: Dict[str, Any]) -> Dict[str, Any]:
    """The run's model block (runs before it was recorded: the bench model)."""
    return data.get("model", {"bench_model": True, "union_experts": data["model_config"].get("n_routed_experts")})


def at_union(data: Dict[str, Any]) -> bool:
    """Whether the run priced its forwards at another expert count than the checkpoint's own."""
    return model_info(data).get("union_experts") not in (None, data["model_config"].get("n_routed_experts"))


def describe_model(data: Dict[str, Any]) -> str:
    m, cfg = model_info(data), data["model_config"]
    if m.get("bench_model", True):
        size = f"{m['weight_bytes'] / 1e9:.2f} GB of bf16 weights as used" if "weight_bytes" in m else "bf16 weights"
        return (f"The bench model (`bench/bench_model.cc`, {size}, {cfg['num_hidden_layers']} layers, "
                f"{cfg['n_routed_experts']} experts top-{cfg['num_experts_per_tok']})")
    cut = cfg.get("mtpspec_cut_from", {})
    if not cut:
        return f"`{m['name']}` ({m['weight_bytes'] / 1e9:.1f} GB of weights as used, {cfg['num_hidden_layers']} layers)"
    return (f"A checkpoint at the real dimensions of {cut['release']}, written by `mtpspec make-checkpoint "
            f"--like {cut['release']} --layers {cfg['num_hidden_layers']} --experts {cfg['n_routed_experts']}` "
            f"(random weights in the release's FP8 format, used as stored, {m['weight_bytes'] / 1e9:.1f} GB: "
            f"{cfg['num_hidden_layers']} of its {cut['num_hidden_layers']} layers, {m['moe_layers']} of them MoE "
            f"with {cfg['n_routed_experts']} of its {cut['n_routed_experts']} experts, top-"
            f"{cfg['num_experts_per_tok']}, its MTP layer and head)")


def comparison_lines(data: Dict[str, Any], measured: List[Dict[str, Any]], predicted: List[Dict[str, Any]]) -> List[str]:
    """The findings' lines on measured / predicted speedup, one per prediction the run carries, and
    where the steady state misses, the cycles the batch ran against requests finishing together."""
    lines = []
    shown = comparisons_present(measured)
    for comparison in shown:
        ratios = {}  # (B, k) -> measured / predicted, where the run recorded it
        for r in measured:
            if r["k"] in (0, "auto"):
                continue
            x = measured_over_predicted(measured, r, cell(predicted, batch=r["batch"], k=r["k"]), comparison)
            if x is not None:
                ratios[(r["batch"], r["k"])] = x
        if not ratios:
            continue
        values = list(ratios.values())
        passing = sum(1 for x in values if x >= 0.9)
        misses = [f"B = {b}, k = {k}: {x:.3f}" for (b, k), x in ratios.items() if x < 0.9]
        lines.append(f"  Measured / predicted speedup against {COMPARISONS[comparison][2]}: {min(values):.2f} "
                     f"to {max(values):.2f} ({passing} of {len(values)} points at >= 0.9"
                     + (f"; below it: {', '.join(misses)}" if misses else "") + ").")
        if comparison == "steady" and misses:
            below = [r for r in measured if ratios.get((r["batch"], r["k"]), 1.0) < 0.9]
            lines.append("  Where the steady state is above the measured speedup, the batch ran more cycles "
                         "than requests finishing together would: "
                         + "; ".join(tail_text(r, data["acceptance_length"][r["k"]]) for r in below)
                         + ". Each request stops at its own last token, so the batch's last cycles run "
                         "fewer requests, and a request near its budget drafts fewer tokens"
                         + ("; the predictions below price those cycles." if len(shown) > 1 else "."))
    return lines


def findings(data: Dict[str, Any]) -> List[str]:
    lines = ["## Findings\n"]
    for point in data["points"]:
        n = point["context"]
        predicted = point["predicted"]
        batches = sorted({r["batch"] for r in predicted})
        lines.append(f"- N = {n}, predicted best k per batch: {best_k_text(predicted, batches, 'speedup')}; "
                     f"{crossover_text(predicted, batches)}.")
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
        if at_union(data):
            experts = model_info(data)["union_experts"]
            widest_u = widest.get("experts_at_union", float("nan"))
            lines.append(f"  With the union of {experts} experts (each forward also reads the experts a {experts}-expert "
                         f"router would add: {widest_u:.0f} instead of {widest['experts_read']} at {widest['rows']} rows; "
                         f"a lower bound on the cost): best k per batch {best_k_text(predicted, batches, 'speedup_at_union')}.")
        if "e2e" in point:
            measured = measured_speedups(point["e2e"])
            fixed = [r for r in measured if r["k"] != "auto"]
            lines.append(f"  Measured end to end: best k per batch {best_k_text(fixed, batches, 'speedup')}.")
            lines += comparison_lines(data, measured, predicted)
            auto = [r for r in measured if r["k"] == "auto"]
            if auto:
                worst = min(auto, key=lambda r: r["speedup"])
                lines.append("  k = auto (the batch's draft-length controller): " + "; ".join(
                    f"B = {r['batch']}: {r['speedup']:.2f}x, mean k {r['mean_k']:.2f}" for r in auto)
                    + f" (worst {worst['speedup']:.2f}x of plain at B = {worst['batch']}).")
    lines += projection_findings(data)
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


def projection(data: Dict[str, Any], point: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """A PROJECTION of the full release from a cut checkpoint's cost table, or None when the run
    cannot give one. The run timed each forward whole and through its first P trunk layers (the
    release's dense layers) and the head; the rest, over the cut's MoE layers, is one MoE layer's
    cost (the median over the repetitions of whole minus prefix, paired). The release's forward is
    the prefix plus that many MoE layers, each also reading the experts a router over all of the
    release's experts would add (union(E, k_e, rows) per layer, less those the cut read, at the
    read bandwidth: a lower bound). The drafts and extends are the cut's MTP layer and head with the
    same addition (batch_bench's *_at_union)."""
    m, cfg = model_info(data), data["model_config"]
    cut = cfg.get("mtpspec_cut_from")
    prefix = m.get("prefix_layers", 0)
    if not cut or prefix <= 0 or "prefix_samples" not in point["costs"][0]:
        return None
    dense_first = cfg.get("first_k_dense_replace", 0)
    kinds = cfg.get("mlp_layer_types") or ["dense" if l < dense_first else "sparse" for l in range(cfg["num_hidden_layers"])]
    if prefix != dense_first or any(k != "dense" for k in kinds[:prefix]) or any(k == "dense" for k in kinds[prefix:]):
        return None  # the prefix must be exactly the dense layers
    moe_cut, moe_full = cfg["num_hidden_layers"] - prefix, cut["num_hidden_layers"] - prefix
    experts, per_token = m["union_experts"], cfg["num_experts_per_tok"]
    bandwidth = data["read_bandwidth"]["bytes_per_second"]
    times = {}
    for c in point["costs"]:
        layer = median([w - p for w, p in zip(c["samples"], c["prefix_samples"])]) / moe_cut
        extra = max(0.0, union(experts, per_token, c["rows"]) - c["experts_read"] / moe_cut) * m["expert_bytes"] / bandwidth
        times[(c["batch"], c["rows_per_sequence"])] = c["prefix_seconds"] + moe_full * (layer + extra)
    al = data["acceptance_length"]
    rows = []
    for step in point["draft"]["draft_steps"]:
        b = step["batch"]
        d, x = step["seconds_at_union"], step["extend_seconds_at_union"]
        t_plain = times[(b, 1)]
        for k in range(len(al)):
            if (b, k + 1) not in times:
                continue
            cycle = times[(b, k + 1)] + (0.0 if k == 0 else k * d + x)
            tps = b * al[k] / cycle
            rows.append({"batch": b, "k": k, "t_plain": t_plain, "r": times[(b, k + 1)] / t_plain, "c": d / t_plain,
                         "x": x / t_plain, "tokens_per_second": tps, "speedup": tps * t_plain / b})
    return {"rows": rows, "moe_cut": moe_cut, "moe_full": moe_full, "layers_full": cut["num_hidden_layers"],
            "release": cut["release"], "experts": experts, "prefix": prefix}


def projection_findings(data: Dict[str, Any]) -> List[str]:
    lines = []
    for point in data["points"]:
        proj = projection(data, point)
        if proj is None:
            continue
        rows = proj["rows"]
        batches = sorted({r["batch"] for r in rows})
        one = cell(rows, batch=batches[0], k=0)
        top = cell(rows, batch=batches[-1], k=0)
        k2 = ", ".join(f"{cell(rows, batch=b, k=2)['speedup']:.2f}" for b in batches if cell(rows, batch=b, k=2))
        lines.append(f"- **PROJECTION of the full {proj['release']}** ({proj['layers_full']} layers, {proj['experts']} "
                     f"experts) at N = {point['context']}: a plain step takes {one['t_plain']:.2f} s at B = "
                     f"{batches[0]} and {top['t_plain']:.2f} s at B = {batches[-1]} ({top['tokens_per_second'] / one['tokens_per_second']:.1f}x "
                     f"the tokens/s); best k per batch {best_k_text(rows, batches, 'speedup')}; {crossover_text(rows, batches)}. "
                     f"k = 2 projects to {k2} for "
                     f"B = {', '.join(str(b) for b in batches)}.")
    return lines


def tail_text(r: Dict[str, Any], al: float) -> str:
    """The cycles an end-to-end run of B requests took (its first repetition) against those B
    requests that finish together would take, and its verify rows per cycle against B · (k + 1)."""
    st = r["stats"]
    b = r["batch"]
    per_request = st["generated_tokens"] / b - 1  # each request's decoded tokens (the prefill draws one)
    return (f"B = {b}, k = {r['k']}: {st['cycles']} cycles of {st['verify_rows'] / st['cycles']:.1f} verify rows, "
            f"where requests finishing together take {per_request / al:.1f} cycles of {b * (r['k'] + 1)}")


def extend_share(step: Dict[str, Any], plain: Dict[int, float]) -> float:
    """X(B), the batched extend of one cycle, over the plain batched step T(B, 1)."""
    return step.get("extend_seconds", float("nan")) / plain[step["batch"]]


def style_speedup_axes(ax: Any, batches: List[int], title: str) -> None:
    """Speedup over plain batched decoding against B (log 2), with the line at 1."""
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch size B")
    ax.set_ylabel("speedup over plain batched decoding")
    ax.set_title(title)
    ax.legend(fontsize=7)


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
        # Against measured runs, the prediction for a run of their length (where the run made it).
        key = "speedup_for_run" if "e2e" in point and "speedup_for_run" in predicted[0] else "speedup"
        for i, k in enumerate(ks):
            color = f"C{i}"
            ax.plot(batches, [cell(predicted, batch=b, k=k)[key] for b in batches], "-o", color=color,
                    label=f"k = {k} predicted" + (" (run length)" if key == "speedup_for_run" else ""))
            if "e2e" in point:
                measured = measured_speedups(point["e2e"])
                ax.plot(batches, [cell(measured, batch=b, k=k)["speedup"] for b in batches], "--x", color=color,
                        label=f"k = {k} measured")
        style_speedup_axes(ax, batches, f"N = {point['context']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def projection_section(data: Dict[str, Any], folder: Path, key: str) -> List[str]:
    """The full release's projected batch costs and speedups, with a plot; empty without a projection."""
    projected = [(point["context"], projection(data, point)) for point in data["points"]]
    projected = [(n, p) for n, p in projected if p is not None]
    if not projected:
        return []
    first = projected[0][1]
    lines = [f"\n## PROJECTION: the full {first['release']} per batch size\n",
             f"Each forward of the cut model ran whole and through its first {first['prefix']} layers (the release's "
             f"dense layers) and the head. Whole minus prefix over the cut's {first['moe_cut']} MoE layers is one MoE "
             f"layer (the median over the repetitions, paired); the release is the prefix plus {first['moe_full']} such "
             f"layers, each also reading the experts a {first['experts']}-expert router adds for the batch's rows "
             "(independent routing, at the run's read bandwidth: a lower bound; trained routers pick correlated "
             "experts, so real unions are smaller). The cut's MoE layers mix full and shared indexer layers about as "
             "the release does. The draft step D(B) and extend X(B) are the cut's MTP layer and head, with the same "
             "expert addition. Every number in this section is a PROJECTION.\n"]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(projected), figsize=(5.5 * len(projected), 4), squeeze=False)
        for ax, (n, proj) in zip(axes[0], projected):
            batches = sorted({r["batch"] for r in proj["rows"]})
            for k in sorted({r["k"] for r in proj["rows"] if r["k"] > 0}):
                ax.plot(batches, [cell(proj["rows"], batch=b, k=k)["speedup"] for b in batches], "-o", label=f"k = {k}")
            style_speedup_axes(ax, batches, f"{proj['release']} PROJECTION, N = {n}")
        fig.tight_layout()
        fig.savefig(folder / f"{key}_projection_speedup_vs_batch.png", dpi=110)
        lines.append(f"![projected speedup against B for each k](batch-data/{key}_projection_speedup_vs_batch.png)\n")
    except ImportError:
        pass
    for n, proj in projected:
        lines.append(f"### N = {n} (PROJECTION)\n")
        lines.append("| B | k | plain batched step (s) | r = T(B, k + 1) / T(B, 1) | D(B) / T(B, 1) | X(B) / T(B, 1) | "
                     "tokens/s | speedup over plain |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for r in proj["rows"]:
            lines.append(f"| {r['batch']} | {r['k']} | {r['t_plain']:.2f} | {r['r']:.2f} | {r['c']:.3f} | {r['x']:.3f} | "
                         f"{r['tokens_per_second']:.2f} | {r['speedup']:.3f} |")
        lines.append("")
    return lines


def section(data: Dict[str, Any], folder: Path, source: Path, key: str, rates_label: str) -> str:
    """One run's section, its headings one level below the page's."""
    shutil.copyfile(source, folder / f"{key}.json")
    run = data["run"]
    al = data["acceptance_length"]
    bench_model = model_info(data).get("bench_model", True)
    title = "# The bench model\n" if bench_model else "# At real dimensions\n"
    lines = [title,
             f"Made by `{run['command']}` on {run['date_utc'][:10]} ({run['cpu_model']}, {run['threads']} threads). "
             f"Data: `batch-data/{key}.json`.\n",
             f"{describe_model(data)} with "
             "B caches filled to the context N with random rows. Read bandwidth "
             f"{data['read_bandwidth']['bytes_per_second'] / 1e9:.1f} GB/s and {data['mac_rate']['macs_per_second'] / 1e9:.0f} "
             f"GMAC/s (the project's Linear on 8 rows), both measured in the run. Acceptance: {rates_label} "
             f"{', '.join(f'{r:.3f}' for r in data['rates'])}, so AL(k) = "
             f"{', '.join(f'{x:.2f}' for x in al)} for k = 0..{len(al) - 1}; the end-to-end runs impose them "
             "(SYNTHETIC acceptance), each request with its own seed at T = 1.\n",
             "Cost model: tokens/s(B, k) = B · AL(k) / (T(B, k + 1) + k · D(B) + X(B)), with T(B, L) the measured "
             "batched forward of B sequences of L rows, D(B) one batched MTP draft step for B requests (the "
             "drafters draft together, one forward per depth) and X(B) one batched extend of every request's "
             "committed rows (the drafters' extends run together too, one forward before the drafts), each "
             "measured at N; plain batched decoding is B / T(B, 1)."
             + (" That is the steady state. A run of G tokens "
             "per request also has a tail: each request stops at its own G-th token, so the last cycles run fewer "
             "requests, and a request near its budget drafts min(k, tokens left - 1). The prediction for a run of "
             "that length prices the cycles of 2000 simulated runs at the rates, each cycle at T(A, rows / A) "
             "for its A requests plus one batched draft step per depth and the extend of the requests that "
             "drafted (bilinear between the table's B and L). The cost model alone prices each end-to-end run's "
             "own cycles, from its cycle log, the same way: it sets the costs against the measurement without "
             "the luck of one run's acceptance draws." if "speedup_for_run" in data["points"][0]["predicted"][0]
                else "") + "\n"]
    lines += findings(data)
    if plot(data, folder / f"{key}_speedup_vs_batch.png"):
        lines.append(f"\n![speedup against B for each k, predicted and measured](batch-data/{key}_speedup_vs_batch.png)\n")
    lines += projection_section(data, folder, key)
    for point in data["points"]:
        n = point["context"]
        lines.append(f"\n## N = {n}\n")
        lines.append("### Batched verify: measured cost against its bound\n")
        lines.append("Bound = max(bytes / bandwidth, multiply-adds / MAC rate); bytes = the weights once, the routed "
                     "experts of the union, each sequence's attended cache rows (at least min(N + L, K) per layer).\n")
        union_cols = at_union(data)
        experts = model_info(data).get("union_experts")
        lines.append("| B | L | rows | ms | experts read / routing choices | bytes bound ms | compute bound ms | measured / bound |"
                     + (f" experts at a {experts}-expert union | ms at that union (at least) |" if union_cols else ""))
        lines.append("|---|---|---|---|---|---|---|---|" + ("---|---|" if union_cols else ""))
        for c in point["costs"]:
            lines.append(f"| {c['batch']} | {c['rows_per_sequence']} | {c['rows']} | {c['seconds'] * 1e3:.2f} | "
                         f"{c['experts_read']} / {c['expert_choices']} | {c['bytes_seconds'] * 1e3:.2f} | "
                         f"{c['compute_seconds'] * 1e3:.2f} | {c['measured_over_bound']:.2f} |"
                         + (f" {c['experts_at_union']:.0f} | {c['seconds_at_union'] * 1e3:.2f} |" if union_cols else ""))
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
        union_head = f" predicted speedup at the {experts}-expert union |" if union_cols else ""
        run_cols = "speedup_for_run" in point["predicted"][0]
        g = new_tokens(data)
        run_head = f" predicted speedup, a run of {g} tokens per request |" if run_cols else ""
        shown = comparisons_present(e2e) if e2e else []
        ratio_names = {"steady": "steady state", "run": "run length", "cycles": "the run's own cycles"}
        ratio_head = "".join(f" measured / predicted ({ratio_names[c]}) |" for c in shown)
        head = "| B | k | predicted tokens/s | predicted speedup (steady state) |" + union_head + run_head
        if e2e:
            head += " measured tokens/s | measured speedup |" + ratio_head + " mean request seconds |"
        lines.append(head)
        lines.append("|" + "---|" * head.count(" |"))
        for p in point["predicted"]:
            row = f"| {p['batch']} | {p['k']} | {p['tokens_per_second']:.2f} | {p['speedup']:.3f} |"
            if union_cols:
                row += f" {p['speedup_at_union']:.3f} |"
            if run_cols:
                row += f" {p['speedup_for_run']:.3f} |"
            m = cell(e2e, batch=p["batch"], k=p["k"]) if e2e else None
            if m is not None:
                row += f" {m['decode_tokens_per_second']:.2f} | {m['speedup']:.3f} |"
                for c in shown:
                    ratio = measured_over_predicted(e2e, m, p, c)
                    row += f" {ratio:.3f} |" if ratio is not None else " |"
                row += f" {m['mean_request_seconds']:.2f} |"
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
    return "\n".join(demoted(lines))


# The runs the page reports unless --run names others: (JSON in --results, where its --rates come from).
DEFAULT_RUNS = [("batch.json", "the trained head's conditional rates"),
                ("batch_glm7.json", "the published GLM-5.2 conditional rates (mlx-lm #1419)")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", nargs=2, action="append", metavar=("JSON", "RATES_LABEL"),
                        help="a batch_bench JSON and where its --rates come from (repeatable)")
    parser.add_argument("--results", type=Path, default=REPO / "build" / "results",
                        help="where the default runs are (without --run)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results")
    args = parser.parse_args()
    runs = ([(Path(j), label) for j, label in args.run] if args.run else
            [(args.results / name, label) for name, label in DEFAULT_RUNS if (args.results / name).exists()])
    if not runs:
        raise SystemExit("batch_report: no batch_bench JSON: run scripts/reproduce_results.sh batch or batch-real")
    folder = args.out / "batch-data"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    command = "build/pyenv/bin/python bench/report/batch_report.py" + "".join(
        f" --run {j} '{label}'" for j, label in (args.run or []))
    lines = ["# Batches: batched verify cost and what MTP buys per batch size", "",
             f"Page written by `{command}` from the runs below, each with its own command.", ""]
    for source, label in runs:
        lines += [section(json.loads(source.read_text()), folder, source, source.stem, label).rstrip(), ""]
    (args.out / "batch.md").write_text("\n".join(lines).rstrip() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
