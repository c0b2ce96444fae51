"""Parts of the tree report (tree_report.py) beyond the trained model's own runs.

* conditional_tree_rates: a run's acceptance as a table of conditional rates by depth and sibling
  rank, the table that SYNTHETIC tree acceptance (AcceptTreeSynthetic) draws with;
* e2e_section: the bench model decoding with those rates imposed (bench/tree_bench --e2e-from),
  measured speedup against the one the cost model predicts from the same run's costs;
* plots: accepted length against L, and predicted and measured speedup on the bench model.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List

# One cycle's widths per depth and the projected speedup (tree_report's own, passed in to keep
# one definition of each).
Projection = Callable[[Dict[str, Any], Dict[str, Any]], float]


def add_table(into: List[List[int]], table: Any) -> None:
    """Adds a ragged [depth][rank] count table into `into`, growing it."""
    for d, row in enumerate(table):
        if d == len(into):
            into.append([])
        for r, v in enumerate(row):
            if r == len(into[d]):
                into[d].append(0)
            into[d][r] += int(v)


def conditional_tree_rates(result: Dict[str, Any]) -> List[List[float]]:
    """[depth][rank] the probability that a node reached at depth d (0: the root) has its child of
    rank r accepted, given that its lower-ranked children were not: accepted(d, r) over the reaches
    of depth d less the acceptances of lower ranks there. Widths per depth: 1 for a chain, the
    branching for a static tree. A chain's counts are its per-position ones."""
    reached = result["reached_per_pos"]
    if result["kind"] == "chain":  # a chain's one child per depth: its per-position counts
        accepted = [[a] for a in result["accepted_per_pos"]]
        widths = [1] * (result["rows"] - 1)
    else:
        accepted = result["accepted_per_depth_rank"]
        widths = [int(b) for b in result["shape"].split(",")]
    table = []
    for d, width in enumerate(widths):
        left = reached[d] if d < len(reached) else 0
        row = []
        for r in range(width):
            a = accepted[d][r] if d < len(accepted) and r < len(accepted[d]) else 0
            row.append(min(1.0, a / left) if left > 0 else 0.0)
            left -= a
        table.append(row)
    return table


def e2e_points(path: Path) -> List[Dict[str, Any]]:
    """The end-to-end part of a tree_bench run: per context its e2e JSON (empty if none)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return [dict(p["e2e"], context=p["context"]) for p in data.get("points", []) if "e2e" in p]


def predicted(entry: Dict[str, Any], cost: Dict[str, Any], project: Projection) -> float:
    """The cost model's speedup for an end-to-end entry, with the AL measured in that run."""
    return project({"kind": entry["kind"], "shape": entry["shape"], "rows": entry["rows"],
                    "mean_depth": entry["mean_depth"],
                    "mean_acceptance_length": entry["mean_acceptance_length"]}, cost)


def e2e_section(points: List[Dict[str, Any]], costs: List[Dict[str, Any]], source: Dict[str, Any],
                command: str, project: Projection) -> List[str]:
    """The report's section on the bench model's measured speedups."""
    if not points:
        return []
    by_context = {c["context"]: c for c in costs}
    lines = ["\n## Measured on the bench model, SYNTHETIC acceptance at the trained model's rates\n",
             f"Made by `{command}` in the same run as the costs below. The bench model's random weights accept "
             "nothing, so every cycle accepts by SYNTHETIC acceptance (benchmarks only): at a node reached at depth "
             "d, its child of sibling rank r is accepted with the conditional rate the trained model showed for the "
             f"same shape at that depth and rank (mode \"{source.get('mode', '?')}\" of the runs above). The drafter, "
             "the tree verify, the kept path and the drafter's extend are the real ones. For each L the chain and "
             "the static tree of highest trained AL run, interleaved with plain decoding and its repeat (A/A), "
             "each for the same new tokens after a prompt of N tokens. AL here is measured in this run (trained AL "
             "in brackets); predicted is AL / (r(L) + Σ d(w)) with this run's r and d; measured is tokens/s over "
             "plain's.\n"]
    ratios: List[float] = []
    best_lines: List[str] = []
    for point in points:
        cost = by_context.get(point["context"])
        if cost is None:
            continue
        lines.append(f"\n### N = {point['context']} (plain {point['plain_tokens_per_second']:.1f} tokens/s, "
                     f"A/A {point['plain_control_ratio']:.3f})\n")
        lines.append("| L | chain AL | predicted | measured | tree | its AL | predicted | measured |")
        lines.append("|---|---|---|---|---|---|---|---|")
        entries = point["configs"]
        best: Dict[str, Any] = {}
        for L in sorted({e["rows"] for e in entries}):
            chain = next((e for e in entries if e["rows"] == L and e["kind"] == "chain"), None)
            tree = next((e for e in entries if e["rows"] == L and e["kind"] != "chain"), None)
            cells = []
            for e in (chain, tree):
                if e is None:
                    cells.append(("-", "-", "-", "-"))
                    continue
                p = predicted(e, cost, project)
                ratios.append(e["speedup"] / p)
                kind = "chain" if e["kind"] == "chain" else "tree"
                if e["speedup"] > best.get(kind, {}).get("speedup", 0.0):
                    best[kind] = e
                cells.append((e["shape"], f"{e['mean_acceptance_length']:.3f} ({e['source_acceptance_length']:.3f})",
                              f"{p:.3f}", f"{e['speedup']:.3f}"))
            (_, c_al, c_p, c_m), (t_shape, t_al, t_p, t_m) = cells
            lines.append(f"| {L} | {c_al} | {c_p} | {c_m} | {t_shape} | {t_al} | {t_p} | {t_m} |")
        faster = [L for L in sorted({e["rows"] for e in entries})
                  if any(e["rows"] == L and e["kind"] != "chain" for e in entries)
                  and max(e["speedup"] for e in entries if e["rows"] == L and e["kind"] != "chain")
                  > max(e["speedup"] for e in entries if e["rows"] == L and e["kind"] == "chain")]
        if faster:
            best_lines.append(f"N = {point['context']}: at equal L the tree is the faster at L = "
                              f"{', '.join(map(str, faster))}")
        if "chain" in best and "tree" in best:
            bc, bt = best["chain"], best["tree"]
            best_lines.append(f"N = {point['context']}: the fastest chain {bc['shape']} {bc['speedup']:.3f}, the fastest "
                              f"tree {bt['shape']} (L = {bt['rows']}) {bt['speedup']:.3f}")
    if ratios:
        lines.insert(2, f"Measured / predicted over every chain and tree: median {statistics.median(ratios):.3f}, "
                        f"from {min(ratios):.3f} to {max(ratios):.3f} ({len(ratios)} runs). "
                        + "; ".join(best_lines) + ".\n")
    return lines


def plots(out: Path, results: List[Dict[str, Any]], points: List[Dict[str, Any]], costs: List[Dict[str, Any]],
          modes: List[str], mode_of: Callable[[Dict[str, Any]], str], project: Projection) -> List[str]:
    """Writes the figures into out/tree-data and returns the report's lines that show them."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    data = out / "tree-data"
    lines = ["\n## Plots\n"]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.8), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        at = [r for r in results if mode_of(r) == mode and r["rows"] > 1]
        Ls = sorted({r["rows"] for r in at})
        for kind, label in (("chain", "chain"), ("static", "best static tree"), ("dynamic", "dynamic tree")):
            xs, ys = [], []
            for L in Ls:
                runs = [r["mean_acceptance_length"] for r in at if r["rows"] == L and r["kind"] == kind]
                if runs:
                    xs.append(L)
                    ys.append(max(runs))
            if xs:
                ax.plot(xs, ys, marker="o", ms=3, label=label)
        ax.set_title(mode, fontsize=9)
        ax.set_xlabel("verify rows L")
        ax.set_ylabel("accepted length (trained model)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(data / "al_vs_rows.png", dpi=110)
    plt.close(fig)
    lines.append("![Accepted length against verify rows](tree-data/al_vs_rows.png)\n")
    by_context = {c["context"]: c for c in costs}
    shown = [p for p in points if p["context"] in by_context]
    if shown:
        fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 3.8), squeeze=False)
        for ax, point in zip(axes[0], shown):
            cost = by_context[point["context"]]
            for kind, colour in (("chain", "tab:blue"), ("static", "tab:orange")):
                entries = sorted((e for e in point["configs"] if e["kind"] == kind), key=lambda e: e["rows"])
                if not entries:
                    continue
                xs = [e["rows"] for e in entries]
                ax.plot(xs, [e["speedup"] for e in entries], color=colour, marker="o", ms=3,
                        label=f"{'chain' if kind == 'chain' else 'best tree'}, measured")
                ax.plot(xs, [predicted(e, cost, project) for e in entries], color=colour, ls="--",
                        label=f"{'chain' if kind == 'chain' else 'best tree'}, predicted")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_title(f"bench model, N = {point['context']} (SYNTHETIC acceptance)", fontsize=9)
            ax.set_xlabel("verify rows L")
            ax.set_ylabel("speedup over plain decoding")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(data / "speedup_bench_model.png", dpi=110)
        plt.close(fig)
        lines.append("![Predicted and measured speedup on the bench model](tree-data/speedup_bench_model.png)\n")
    return lines


def branches(run: Dict[str, Any]) -> bool:
    """Whether a tree run can hold siblings: a static shape with a branch above 1, or a dynamic tree
    of more than one node. A one-node tree is the chain k = 1, so it does not count as a tree for
    as a tree."""
    if run["kind"] == "static":
        return any(int(b) > 1 for b in run["shape"].split(","))
    return run["kind"] == "dynamic" and int(run["shape"].split("=")[1]) > 1


def tree_chain_lines(results: List[Dict[str, Any]], points: List[Dict[str, Any]], costs: List[Dict[str, Any]],
               modes: List[str], mode_of: Callable[[Dict[str, Any]], str], project: Projection) -> List[str]:
    """Trees against chains: at each equal verify budget L >= 4 the best tree's AL over the chain's on
    the trained model, and the fastest tree's measured end-to-end speedup against the fastest chain's
    (only trees that can branch count, `branches`)."""
    lines = ["\n## Trees against chains\n"]
    for mode in modes:
        at = [r for r in results if mode_of(r) == mode and r["rows"] >= 4]
        gains = []
        for L in sorted({r["rows"] for r in at}):
            chain = next((r for r in at if r["rows"] == L and r["kind"] == "chain"), None)
            trees = [r for r in at if r["rows"] == L and r["kind"] != "chain"]
            if chain and trees:
                best = max(trees, key=lambda r: r["mean_acceptance_length"])
                gains.append((best["mean_acceptance_length"] / chain["mean_acceptance_length"], L, best))
        if not gains:
            continue
        top = max(gains, key=lambda g: g[0])
        lines.append(f"- Accepted length, {mode}: the best tree over the chain at the same L: "
                     + ", ".join(f"L = {g[1]} {g[0]:.3f}x" for g in gains)
                     + f" (largest {top[0]:.3f}x, {top[2]['shape']} at L = {top[1]}).")
    for mode in modes:
        runs = [r for r in results if mode_of(r) == mode and r["rows"] > 1]
        temperature = runs[0]["temperature"] if runs else None
        plain = next((r for r in results if r["kind"] == "plain" and r["temperature"] == temperature), None)
        chains = [r for r in runs if r["kind"] == "chain"]
        trees = [r for r in runs if r["kind"] != "chain" and branches(r)]
        if plain is None or not chains or not trees:
            continue
        speed = lambda r: plain["seconds_per_token"] / r["seconds_per_token"]  # noqa: E731
        bc, bt = max(chains, key=speed), max(trees, key=speed)
        close = abs(speed(bt) / speed(bc) - 1) < 0.02  # one run on a shared machine does not separate them
        lines.append(f"- Measured speedup on the trained model, {mode}: "
                     f"the fastest tree {bt['shape']} (L = {bt['rows']}) {speed(bt):.3f}x against the fastest chain "
                     f"{bc['shape']} {speed(bc):.3f}x plain"
                     + (" (both slower than plain decoding)" if max(speed(bt), speed(bc)) < 1 else "")
                     + ("; the two are within 2% of each other, which one run on a shared machine does not "
                        "separate." if close else "."))
    for point in points:
        chains = [e for e in point["configs"] if e["kind"] == "chain"]
        trees = [e for e in point["configs"] if e["kind"] != "chain" and branches(e)]
        if not chains or not trees:
            continue
        bc = max(chains, key=lambda e: e["speedup"])
        bt = max(trees, key=lambda e: e["speedup"])
        lines.append(f"- Measured speedup on the bench model at N = {point['context']} (SYNTHETIC acceptance at the "
                     f"trained rates): the fastest tree {bt['shape']} (L = {bt['rows']}) "
                     f"{bt['speedup']:.3f}x against the fastest chain {bc['shape']} {bc['speedup']:.3f}x plain.")
        cost = next((c for c in costs if c["context"] == point["context"]), None)
        if bt["speedup"] <= bc["speedup"] and cost is not None:
            def spent(e: Dict[str, Any]) -> float:  # plain steps per cycle: r(L) + the draft depths
                return e["mean_acceptance_length"] / predicted(e, cost, project)
            lines.append(f"  Why, in this run's measured parts: the tree accepts {bt['mean_acceptance_length']:.3f} "
                         f"tokens per cycle ({bt['mean_acceptance_length'] / bc['mean_acceptance_length']:.2f}x the chain's "
                         f"{bc['mean_acceptance_length']:.3f}) and its cycle costs "
                         f"{spent(bt):.2f} plain steps (verify r({bt['rows']}) and its draft depths) against "
                         f"{spent(bc):.2f} ({spent(bt) / spent(bc):.2f}x).")
    return lines
