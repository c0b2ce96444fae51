"""Parts of the tree report (tree_report.py) beyond the trained model's own runs.

* conditional_tree_rates: a run's acceptance as a table of conditional rates by depth and sibling
  rank, the table that SYNTHETIC tree acceptance (AcceptTreeSynthetic) draws with;
* e2e_section: the bench model decoding with those rates imposed (bench/tree_bench --e2e-from),
  measured speedup against the one the cost model predicts from the same run's costs;
* trees_against_chains: the best tree against the chain at equal L, in acceptance and speed;
* plots: accepted length against L, and predicted and measured speedup on the bench model.

The page's text is templates/tree.md.j2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from results_page import spread

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


def e2e_section(points: List[Dict[str, Any]], costs: List[Dict[str, Any]], project: Projection) -> Dict[str, Any] | None:
    """The bench model's measured speedups: per context each L's chain and tree with the predicted
    speedup, where trees are the faster and the fastest of each; and measured / predicted over all."""
    if not points:
        return None
    by_context = {c["context"]: c for c in costs}
    ratios: List[float] = []
    tables, notes = [], []  # notes: where trees are the faster, and the fastest chain and tree, per context
    for point in points:
        cost = by_context.get(point["context"])
        if cost is None:
            continue
        entries = point["configs"]
        rows, best = [], {}
        for L in sorted({e["rows"] for e in entries}):
            cells = []
            for kind in ("chain", "tree"):
                e = next((e for e in entries if e["rows"] == L and (e["kind"] == "chain") == (kind == "chain")), None)
                if e is not None:
                    p = predicted(e, cost, project)
                    ratios.append(e["speedup"] / p)
                    if e["speedup"] > best.get(kind, {}).get("speedup", 0.0):
                        best[kind] = e
                cells.append((e, p if e is not None else None))
            rows.append((L, cells))
        def speed(L: int, chain: bool) -> float | None:  # the fastest chain's or tree's speedup at L
            return max((e["speedup"] for e in entries if e["rows"] == L and (e["kind"] == "chain") == chain),
                       default=None)

        faster = [L for L in sorted({e["rows"] for e in entries})
                  if speed(L, False) is not None and speed(L, False) > speed(L, True)]
        tables.append({"point": point, "rows": rows})
        if faster:
            notes.append({"context": point["context"], "faster": faster})
        if "chain" in best and "tree" in best:
            notes.append({"context": point["context"], "chain": best["chain"], "tree": best["tree"]})
    return {"tables": tables, "ratios": spread(ratios) if ratios else None, "notes": notes}


def plots(out: Path, results: List[Dict[str, Any]], points: List[Dict[str, Any]], costs: List[Dict[str, Any]],
          modes: List[str], mode_of: Callable[[Dict[str, Any]], str], project: Projection) -> List[Tuple[str, str]]:
    """Writes the figures into out/tree-data and returns each one's (caption, file); none without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    data = out / "tree-data"
    figures = []
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
    figures.append(("Accepted length against verify rows", "al_vs_rows.png"))
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
        figures.append(("Predicted and measured speedup on the bench model", "speedup_bench_model.png"))
    return figures


def branches(run: Dict[str, Any]) -> bool:
    """Whether a tree run can hold siblings: a static shape with a branch above 1, or a dynamic tree
    of more than one node. A one-node tree is the chain k = 1, so it does not count as a tree for
    as a tree."""
    if run["kind"] == "static":
        return any(int(b) > 1 for b in run["shape"].split(","))
    return run["kind"] == "dynamic" and int(run["shape"].split("=")[1]) > 1


def trees_against_chains(results: List[Dict[str, Any]], points: List[Dict[str, Any]], costs: List[Dict[str, Any]],
                         modes: List[str], mode_of: Callable[[Dict[str, Any]], str], project: Projection) -> Dict[str, Any]:
    """Trees against chains: at each equal verify budget L >= 4 the best tree's AL over the chain's on
    the trained model, and the fastest tree's measured speedup against the fastest chain's on the
    trained model and end to end on the bench model, with the cycle's cost in plain steps where the
    tree is not the faster (only trees that can branch count, `branches`)."""
    gains = []
    for mode in modes:
        at = [r for r in results if mode_of(r) == mode and r["rows"] >= 4]
        by_L = []
        for L in sorted({r["rows"] for r in at}):
            chain = next((r for r in at if r["rows"] == L and r["kind"] == "chain"), None)
            trees = [r for r in at if r["rows"] == L and r["kind"] != "chain"]
            if chain and trees:
                best = max(trees, key=lambda r: r["mean_acceptance_length"])
                by_L.append((best["mean_acceptance_length"] / chain["mean_acceptance_length"], L, best))
        if by_L:
            gains.append((mode, by_L, max(by_L, key=lambda g: g[0])))
    trained = []
    for mode in modes:
        runs = [r for r in results if mode_of(r) == mode and r["rows"] > 1]
        temperature = runs[0]["temperature"] if runs else None
        plain = next((r for r in results if r["kind"] == "plain" and r["temperature"] == temperature), None)
        chains = [r for r in runs if r["kind"] == "chain"]
        trees = [r for r in runs if r["kind"] != "chain" and branches(r)]
        if plain is not None and chains and trees:
            speed = lambda r: plain["seconds_per_token"] / r["seconds_per_token"]  # noqa: E731
            bc, bt = max(chains, key=speed), max(trees, key=speed)
            trained.append({"mode": mode, "chain": bc, "tree": bt, "chain_speed": speed(bc), "tree_speed": speed(bt),
                            # one run on a shared machine does not separate two within 2%
                            "close": abs(speed(bt) / speed(bc) - 1) < 0.02})
    bench = []
    for point in points:
        chains = [e for e in point["configs"] if e["kind"] == "chain"]
        trees = [e for e in point["configs"] if e["kind"] != "chain" and branches(e)]
        if not chains or not trees:
            continue
        bc, bt = max(chains, key=lambda e: e["speedup"]), max(trees, key=lambda e: e["speedup"])
        cost = next((c for c in costs if c["context"] == point["context"]), None)
        # Where the tree is not the faster: each one's plain steps per cycle, r(L) and the draft depths.
        spent = ({id(e): e["mean_acceptance_length"] / predicted(e, cost, project) for e in (bc, bt)}
                 if bt["speedup"] <= bc["speedup"] and cost is not None else None)
        bench.append({"context": point["context"], "chain": bc, "tree": bt,
                      "spent": (spent[id(bt)], spent[id(bc)]) if spent else None})
    return {"gains": gains, "trained": trained, "bench": bench}
