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
The page's text is templates/batch.md.j2 and, for each run, templates/batch-run.md.j2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from statistics import median
from typing import Any, Dict, List, Optional, Tuple

from results_page import render, write_page  # bench/report/

REPO = Path(__file__).resolve().parents[2]


def cell(table: List[Dict[str, Any]], **match: Any) -> Optional[Dict[str, Any]]:
    return next((row for row in table if all(row[k] == v for k, v in match.items())), None)


def best_k(rows: List[Dict[str, Any]], batch: int, key: str) -> Tuple[int, float]:
    at = [r for r in rows if r["batch"] == batch]
    best = max(at, key=lambda r: r[key])
    return best["k"], best[key]


def best_ks(rows: List[Dict[str, Any]], batches: List[int], key: str) -> List[Tuple[int, int, float]]:
    """(B, its best k by `key`, that value) for each batch size."""
    return [(b, *best_k(rows, b, key)) for b in batches]


def crossover(rows: List[Dict[str, Any]], batches: List[int]) -> Optional[int]:
    """Where speculation stops paying: the largest B whose best k > 0 beats plain; 0 when that is every
    B measured, None when no B."""
    paying = [b for b in batches if best_k(rows, b, "speedup")[0] > 0 and best_k(rows, b, "speedup")[1] > 1.0]
    if paying and max(paying) < max(batches):
        return max(paying)
    return 0 if paying and len(paying) == len(batches) else None


def measured_speedups(e2e: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for r in e2e:
        plain = cell(e2e, batch=r["batch"], k=0)
        out.append({**r, "speedup": r["decode_tokens_per_second"] / plain["decode_tokens_per_second"]})
    return out


# The predictions an end-to-end run is set against (templates/batch-run.md.j2 says what each is): (key
# in the e2e cell, paired per repetition; key in the predicted table, for runs without pairs).
COMPARISONS = {
    "steady": ("paired_predicted_speedup", "speedup"),
    "run": ("paired_run_predicted_speedup", "speedup_for_run"),
    "cycles": ("paired_cycles_predicted_speedup", None),
}


def measured_over_predicted(e2e: List[Dict[str, Any]], r: Dict[str, Any], predicted: Dict[str, Any],
                            comparison: str = "steady") -> Optional[float]:
    """Measured over predicted speedup of one (B, k) against one of COMPARISONS. Where the run repeated
    the costs before each end-to-end repetition, each repetition's measured speedup is set against the
    speedup its own costs predict and the median is taken (paired); otherwise the run's tokens/s
    against the cost table measured before all end-to-end runs. None where the run did not record it."""
    paired_key, table_key = COMPARISONS[comparison]
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


def comparisons(data: Dict[str, Any], measured: List[Dict[str, Any]],
                predicted: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Measured / predicted speedup, one entry per prediction the run carries: the ratio per (B, k)
    where the run recorded it, and where the steady state misses by more than 10%, the cycles those
    batches ran against requests finishing together (`tail`)."""
    out = []
    for comparison in comparisons_present(measured):
        ratios = {}  # (B, k) -> measured / predicted, where the run recorded it
        for r in measured:
            if r["k"] in (0, "auto"):
                continue
            x = measured_over_predicted(measured, r, cell(predicted, batch=r["batch"], k=r["k"]), comparison)
            if x is not None:
                ratios[(r["batch"], r["k"])] = x
        if not ratios:
            continue
        misses = [(b, k, x) for (b, k), x in ratios.items() if x < 0.9]
        tails = [tail(r, data["acceptance_length"][r["k"]]) for r in measured
                 if ratios.get((r["batch"], r["k"]), 1.0) < 0.9] if comparison == "steady" else []
        out.append({"name": comparison, "low": min(ratios.values()), "high": max(ratios.values()), "count": len(ratios),
                    "passing": sum(1 for x in ratios.values() if x >= 0.9), "misses": misses, "tails": tails})
    return out


def point_findings(data: Dict[str, Any], point: Dict[str, Any]) -> Dict[str, Any]:
    """One context's findings: the best k per batch predicted (and at the release's expert union) and
    measured, the verify's cost against its bound and the plain step's growth with B, the verify's
    cost per row count at B = 1 and the largest B, and the end-to-end runs against the predictions."""
    predicted, costs = point["predicted"], point["costs"]
    batches = sorted({r["batch"] for r in predicted})
    b_top = max(c["batch"] for c in costs if c["rows_per_sequence"] == 1)
    widest = max(costs, key=lambda c: c["rows"])
    plain = {b: cell(costs, batch=b, rows_per_sequence=1)["seconds"] for b in (1, b_top)}
    out = {"n": point["context"], "best": best_ks(predicted, batches, "speedup"),
           "crossover": crossover(predicted, batches), "bounds": [c["measured_over_bound"] for c in costs],
           "widest": widest, "widest_at_union": widest.get("experts_at_union", float("nan")), "b_top": b_top,
           "plain_growth": plain[b_top] / plain[1],
           "verify": {b: [(c["rows_per_sequence"], c["seconds"] / plain[b]) for c in costs
                          if c["batch"] == b and c["rows_per_sequence"] > 1] for b in (1, b_top)},
           "best_at_union": best_ks(predicted, batches, "speedup_at_union") if at_union(data) else None}
    if "e2e" in point:
        measured = measured_speedups(point["e2e"])
        out["e2e"] = {"best": best_ks([r for r in measured if r["k"] != "auto"], batches, "speedup"),
                      "comparisons": comparisons(data, measured, predicted), "shown": len(comparisons_present(measured)),
                      "auto": [r for r in measured if r["k"] == "auto"]}
    return out


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


def tail(r: Dict[str, Any], al: float) -> Dict[str, Any]:
    """The cycles an end-to-end run of B requests took (its first repetition) and its verify rows per
    cycle, against the cycles those B requests would take finishing together and their B · (k + 1)."""
    st = r["stats"]
    per_request = st["generated_tokens"] / r["batch"] - 1  # each request's decoded tokens (the prefill draws one)
    return {"batch": r["batch"], "k": r["k"], "cycles": st["cycles"], "rows": st["verify_rows"] / st["cycles"],
            "together": per_request / al, "together_rows": r["batch"] * (r["k"] + 1)}


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


def projection_plot(projected: List[Tuple[int, Dict[str, Any]]], path: Path) -> bool:
    """The full release's projected speedup against B for each k, per context; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(projected), figsize=(5.5 * len(projected), 4), squeeze=False)
    for ax, (n, proj) in zip(axes[0], projected):
        batches = sorted({r["batch"] for r in proj["rows"]})
        for k in sorted({r["k"] for r in proj["rows"] if r["k"] > 0}):
            ax.plot(batches, [cell(proj["rows"], batch=b, k=k)["speedup"] for b in batches], "-o", label=f"k = {k}")
        style_speedup_axes(ax, batches, f"{proj['release']} PROJECTION, N = {n}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def point_tables(data: Dict[str, Any], point: Dict[str, Any]) -> Dict[str, Any]:
    """One context's tables: the batched verify's costs, the draft steps and extends, and the predicted
    tokens/s and speedups with each end-to-end run's measurement (and its measured / predicted for each
    prediction the run carries) beside them."""
    e2e = measured_speedups(point["e2e"]) if "e2e" in point else []
    shown = comparisons_present(e2e) if e2e else []
    rows = []
    for p in point["predicted"]:
        m = cell(e2e, batch=p["batch"], k=p["k"]) if e2e else None
        rows.append((p, m, [measured_over_predicted(e2e, m, p, c) for c in shown] if m is not None else []))
    fixed = [x for x in e2e if x["k"] != "auto"]
    return {"n": point["context"], "costs": point["costs"], "draft": point["draft"], "rows": rows, "shown": shown,
            "plain": cell(point["costs"], batch=1, rows_per_sequence=1)["seconds"],
            "run_cols": "speedup_for_run" in point["predicted"][0], "e2e": e2e,
            "auto": [(r, best_k(fixed, r["batch"], "speedup")) for r in e2e if r["k"] == "auto"],
            "top_batch": [r for r in e2e if r["batch"] == max(x["batch"] for x in e2e)]}


def section(data: Dict[str, Any], folder: Path, source: Path, key: str, rates_label: str) -> str:
    """One run's section of the page."""
    shutil.copyfile(source, folder / f"{key}.json")
    projected = [(n, p) for n, p in ((point["context"], projection(data, point)) for point in data["points"])
                 if p is not None]
    for n, proj in projected:
        rows, batches = proj["rows"], sorted({r["batch"] for r in proj["rows"]})
        proj.update(n=n, batches=batches, best=best_ks(rows, batches, "speedup"), crossover=crossover(rows, batches),
                    one=cell(rows, batch=batches[0], k=0), top=cell(rows, batch=batches[-1], k=0),
                    k2=[cell(rows, batch=b, k=2)["speedup"] for b in batches if cell(rows, batch=b, k=2)])
    point = data["points"][0]
    plain = {c["batch"]: c["seconds"] for c in point["costs"] if c["rows_per_sequence"] == 1}
    steps = [point["draft"]["draft_steps"][i] for i in (0, -1)]
    return render("batch-run.md.j2", data=data, run=data["run"], key=key, rates_label=rates_label,
                  model=model_info(data), union_cols=at_union(data), new_tokens=new_tokens(data),
                  run_predictions="speedup_for_run" in point["predicted"][0],
                  findings=[point_findings(data, p) for p in data["points"]], projected=projected,
                  drafts={"n": point["context"], "steps": [(x["batch"], x["seconds"] / plain[x["batch"]],
                                                            extend_share(x, plain)) for x in steps],
                          "extend": point["draft"]["extend_seconds"] / plain[1]},
                  plot=plot(data, folder / f"{key}_speedup_vs_batch.png"),
                  projection_plot=bool(projected) and projection_plot(
                      projected, folder / f"{key}_projection_speedup_vs_batch.png"),
                  points=[point_tables(data, p) for p in data["points"]])


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
    sections = [section(json.loads(source.read_text()), folder, source, source.stem, label) for source, label in runs]
    write_page(args.out / "batch.md", render("batch.md.j2", command=command, sections=sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
