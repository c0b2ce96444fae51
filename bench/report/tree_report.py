#!/usr/bin/env python3
"""Trees against chains at an equal verify budget, on the trained model with its real acceptance.

A verify of L rows holds the pending token and L - 1 drafts: the chain k = L - 1, or any tree of
L - 1 nodes. For every L = 2 .. 16 this runs, on windows of the held-out text:

* the chain of L - 1 drafts;
* every static tree of L - 1 nodes with at most 4 children per node and depth <= 6;
* the dynamic tree of L - 1 nodes (expand width 4);

and records the mean acceptance length (tokens per verify, the bonus token included), the
acceptance by depth and by sibling rank, and the wall time per generated token, all measured in the
same run, with plain decoding (``draft="none"``) of the same windows as the baseline. Modes: greedy
(T = 0) and sampled (T = 0.7) decoding with the head's top tokens as drafts under sampler-equality,
every run checked against plain decoding token for token; and T = 0.7 with drafts sampled from the
head (a node's children drawn without replacement) under rejection, which is lossless in
distribution rather than token for token (tests/verify/tree_acceptance_test.cc checks it), so its
runs are not compared with plain decoding's tokens. Dynamic trees take argmax drafts and are left
out of that mode.

  build/pyenv/bin/python bench/report/tree_report.py [--model models/glm-tiny-mtp]
      [--heldout build/heldout/prose.npy] [--windows 12] [--context 256] [--new-tokens 64]
      [--modes 0 0.7 0.7:sampled] [--json build/results/tree.json] [--out docs/results]
      (tree.md, tree-data/ there)

Each chain's and static tree's acceptance is also kept as a table of conditional rates by depth and
sibling rank (tree_e2e.py), which bench/tree_bench --e2e-from imposes on the bench model as
SYNTHETIC acceptance to measure real cycles at its costs. The whole page, in order:

  build/pyenv/bin/python bench/report/tree_report.py --json build/results/tree.json
  build/release/bench/tree_bench --e2e-from build/results/tree.json --json build/results/tree_costs.json
  build/pyenv/bin/python bench/report/tree_report.py --from-json build/results/tree.json --out docs/results

The page's text and tables are templates/tree.md.j2.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tree_e2e  # noqa: E402
from results_page import render, write_page  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def static_shapes(nodes: int, max_depth: int = 6, max_branch: int = 4) -> List[Tuple[int, ...]]:
    """Every branching list (entries <= max_branch, depth <= max_depth) whose tree has exactly
    `nodes` nodes, the chain 1,1,... left out."""
    found: List[Tuple[int, ...]] = []

    def grow(prefix: Tuple[int, ...], width: int, total: int) -> None:
        if total == nodes:
            if any(b > 1 for b in prefix):
                found.append(prefix)
            return
        if len(prefix) == max_depth:
            return
        for b in range(1, max_branch + 1):
            if total + width * b > nodes:
                break
            grow(prefix + (b,), width * b, total + width * b)

    grow((), 1, 0)
    return found


def mode_label(temperature: float, sampled: bool) -> str:
    return f"T = {temperature}" + (", sampled drafts, rejection" if sampled else "")


def result_mode(r: Dict[str, Any]) -> str:
    """A result's mode (results written before modes existed are argmax runs)."""
    return r.get("mode") or mode_label(r["temperature"], False)


def windows(ids: np.ndarray, count: int, context: int, new_tokens: int) -> Iterator[List[int]]:
    """`count` evenly spaced prompt windows of `context` tokens, each with `new_tokens` after it."""
    span = len(ids) - context - new_tokens
    if span <= 0:
        raise SystemExit(f"the held-out text has {len(ids)} tokens, too few for {context} + {new_tokens}")
    for i in range(count):
        start = (span * i) // max(count - 1, 1)
        yield [int(t) for t in ids[start:start + context]]


def run_all(model: Any, prompts: List[List[int]], new_tokens: int, options: Dict[str, Any],
            plain: List[List[int]] | None) -> Dict[str, Any]:
    """Runs every prompt; returns the merged statistics and the wall time, checking against plain."""
    drafts = accepted = verifies = generated = 0
    per_depth_drafted: List[int] = []
    per_depth_accepted: List[int] = []
    per_rank: List[int] = []
    per_depth_reached: List[int] = []
    per_depth_rank: List[List[int]] = []
    seconds = 0.0
    outputs = []
    for i, prompt in enumerate(prompts):
        start = time.perf_counter()
        r = model.generate(prompt, new_tokens, stop_at_eos=False, **options)
        seconds += time.perf_counter() - start
        outputs.append(r.tokens)
        if plain is not None and r.tokens != plain[i]:
            raise SystemExit(f"{options}: window {i} differs from plain decoding")
        s = r.stats
        drafts += s.num_drafts
        accepted += s.num_accepted_tokens
        verifies += s.verify_steps
        generated += s.generated_tokens

        def add(into: List[int], values: Any) -> None:
            for j, v in enumerate(values):
                if j == len(into):
                    into.append(0)
                into[j] += int(v)

        add(per_depth_drafted, s.drafted_per_pos)
        add(per_depth_accepted, s.accepted_per_pos)
        add(per_rank, s.accepted_per_rank)
        add(per_depth_reached, s.reached_per_pos)
        tree_e2e.add_table(per_depth_rank, s.accepted_per_depth_rank.tolist())
    return {
        "num_drafts": drafts, "num_accepted_tokens": accepted, "verify_steps": verifies, "generated_tokens": generated,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "acceptance_by_depth": [a / d if d else 0.0 for a, d in zip(per_depth_accepted, per_depth_drafted)],
        # Depths drafted per cycle: the drafter's heads per cycle (one per depth, as a chain's one per draft).
        "mean_depth": sum(per_depth_drafted) / drafts if drafts else 0.0,
        "accepted_per_rank": per_rank,
        "reached_per_pos": per_depth_reached,
        "accepted_per_pos": per_depth_accepted,
        "accepted_per_depth_rank": per_depth_rank,
        "seconds": seconds, "seconds_per_token": seconds / generated if generated else 0.0,
        "outputs": outputs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "glm-tiny-mtp")
    parser.add_argument("--heldout", type=Path, default=REPO / "build" / "heldout" / "prose.npy")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=["0", "0.7", "0.7:sampled"],
                        help="T (argmax drafts, sampler-equality) or T:sampled (sampled drafts, rejection)")
    parser.add_argument("--max-rows", type=int, default=16)
    parser.add_argument("--tree-costs", type=Path, default=REPO / "build" / "results" / "tree_costs.json",
                        help="the bench model's measured tree and chain verify costs and draft depths (bench/tree_bench)")
    parser.add_argument("--json", type=Path, default=REPO / "build" / "results" / "tree.json")
    parser.add_argument("--out", type=Path, default=None, help="write tree.md and tree-data/ here")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="rewrite the report from an earlier run's tree.json instead of running")
    args = parser.parse_args()
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        data["meta"]["page_command"] = " ".join(["bench/report/tree_report.py", *sys.argv[1:]])
        out = args.out or REPO / "docs" / "results"
        costs = attach_costs(args.tree_costs, data["meta"], out)
        write_report(out, data["meta"], data["results"], costs, tree_e2e.e2e_points(out / "tree-data" / "costs.json"))
        return 0

    import mtpspec  # the installed bindings (scripts/test_python.sh installs them into build/pyenv)

    model = mtpspec.Model.load(args.model, threads=args.threads)
    ids = np.load(args.heldout)
    prompts = list(windows(ids, args.windows, args.context, args.new_tokens))
    results: List[Dict[str, Any]] = []
    plain_by_temperature: Dict[float, List[List[int]]] = {}
    for spec in args.modes:
        temperature_text, _, variant = spec.partition(":")
        if variant not in ("", "sampled"):
            raise SystemExit(f"--modes: {spec!r} is neither T nor T:sampled")
        temperature, sampled = float(temperature_text), variant == "sampled"
        mode = mode_label(temperature, sampled)
        sampling = dict(temperature=temperature, seed=11)
        if sampled:
            sampling.update(sample_drafts=True, accept="rejection")
        if temperature not in plain_by_temperature:
            base = run_all(model, prompts, args.new_tokens, dict(draft="none", temperature=temperature, seed=11), None)
            plain_by_temperature[temperature] = base.pop("outputs")
            results.append({"temperature": temperature, "mode": mode_label(temperature, False), "kind": "plain",
                            "shape": "", "rows": 1, **base})
        check = None if sampled else plain_by_temperature[temperature]
        for rows in range(2, args.max_rows + 1):
            nodes = rows - 1
            runs: List[Tuple[str, str, Dict[str, Any]]] = [("chain", f"k={nodes}", dict(k=nodes))]
            runs += [("static", ",".join(map(str, s)), dict(tree=list(s))) for s in static_shapes(nodes)]
            if not sampled:
                runs.append(("dynamic", f"nodes={nodes}", dict(tree_nodes=nodes)))
            for kind, shape, options in runs:
                r = run_all(model, prompts, args.new_tokens, {**options, **sampling}, check)
                r.pop("outputs")
                entry = {"temperature": temperature, "mode": mode, "kind": kind, "shape": shape, "rows": rows, **r}
                if kind != "dynamic":
                    entry["synthetic_tree_rates"] = tree_e2e.conditional_tree_rates(entry)
                results.append(entry)
            print(f"{mode} L {rows}: {len(runs)} shapes", flush=True)

    meta = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {args.threads} threads",
            "model": str(args.model.relative_to(REPO) if REPO in args.model.parents else args.model),
            "heldout": args.heldout.name, "windows": args.windows, "context": args.context,
            "new_tokens": args.new_tokens, "command": " ".join(["bench/report/tree_report.py", *sys.argv[1:]])}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if args.out:
        costs = attach_costs(args.tree_costs, meta, args.out)
        write_report(args.out, meta, results, costs, tree_e2e.e2e_points(args.out / "tree-data" / "costs.json"))
    return 0


def bench_model_costs(path: Path) -> List[Dict[str, Any]]:
    """Per context N of a tree_bench run: r_chain(L) and r_tree(L), a verify of L rows as a chain and
    as a tree relative to the plain step, and d(R), one MTP draft depth over R nodes (step and head)."""
    data = json.loads(path.read_text())
    costs = []
    for point in data.get("points", []):
        costs.append({"context": point["context"],
                      "r_chain": {v["rows"]: v["r_chain"] for v in point["verify"]},
                      "r_tree": {v["rows"]: v["r_tree"] for v in point["verify"]},
                      "d": {d["nodes"]: d["d"] for d in point["depth"]}})
    return costs


def attach_costs(path: Path, meta: Dict[str, Any], out: Path) -> List[Dict[str, Any]]:
    """The tree bench's costs for the report: read from `path`, else from the copy an earlier report
    kept in out/tree-data/costs.json; the file used is kept there, its command in meta."""
    kept = out / "tree-data" / "costs.json"
    source = path if path.exists() else kept if kept.exists() else None
    if source is None:
        return []
    text = source.read_text()
    kept.parent.mkdir(parents=True, exist_ok=True)
    if source != kept:
        kept.write_text(text)
    meta["tree_costs_command"] = json.loads(text).get("run", {}).get("command", "") or "build/release/bench/tree_bench"
    meta["e2e_source"] = json.loads(text).get("e2e_source", {})
    return bench_model_costs(kept)


def depth_cost(d: Dict[int, float], width: float) -> float:
    """d(width), one draft depth over `width` nodes: measured, or the line through the two widest."""
    if width in d:
        return d[width]
    wide = sorted(d)
    hi, lo = wide[-1], wide[-2] if len(wide) > 1 else wide[-1]
    slope = (d[hi] - d[lo]) / (hi - lo) if hi != lo else 0.0
    return d[hi] + slope * (width - hi)


def frontier_widths(result: Dict[str, Any]) -> List[float]:
    """The nodes a cycle's drafter runs its head (and step) over, per depth: 1 for the first depth,
    then the nodes of the depth above. A chain is 1 per draft; a dynamic tree expands 4 nodes per
    depth after the first, over its mean depth."""
    if result["kind"] == "chain":
        return [1.0] * (result["rows"] - 1)
    if result["kind"] == "dynamic":
        depth = max(1.0, result["mean_depth"])
        return [1.0] + [4.0] * max(0, round(depth) - 1)
    widths, width = [1.0], 1
    branching = [int(b) for b in result["shape"].split(",")]
    for b in branching[:-1]:
        width *= b
        widths.append(float(width))
    return widths


def projected_speedup(result: Dict[str, Any], cost: Dict[str, Any]) -> float:
    """AL / (r(L) + Σ_depth d(frontier width)), r the chain's or the tree's measured verify cost."""
    L = result["rows"]
    r = cost["r_chain" if result["kind"] == "chain" else "r_tree"][L]
    return result["mean_acceptance_length"] / (r + sum(depth_cost(cost["d"], w) for w in frontier_widths(result)))


def modes_of(results: List[Dict[str, Any]]) -> List[str]:
    """The modes with drafts, in the order run."""
    seen: List[str] = []
    for r in results:
        if r["kind"] != "plain" and result_mode(r) not in seen:
            seen.append(result_mode(r))
    return seen


def al(r: Dict[str, Any]) -> float:
    return r["mean_acceptance_length"]


def chain_findings(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per mode: where the chain's AL stops growing, the best tree at the largest L against the chain,
    and the L from which every best tree beats the chain by more than 1% (None if none)."""
    out = []
    for mode in modes_of(results):
        rows = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
        by_L: Dict[int, Tuple[float, Dict[str, Any]]] = {}
        for L in sorted({r["rows"] for r in rows}):
            at = [r for r in rows if r["rows"] == L]
            trees = [r for r in at if r["kind"] != "chain"]
            if trees:  # L = 2 with sampled drafts has only the chain (the one-node tree is the chain)
                by_L[L] = (al(next(r for r in at if r["kind"] == "chain")), max(trees, key=al))
        top_L = max(by_L)
        chain_peak = max(v[0] for v in by_L.values())
        crossover = next((L for L, v in by_L.items() if al(v[1]) > 1.01 * v[0]
                          and all(al(w[1]) > 1.01 * w[0] for M, w in by_L.items() if M >= L)), None)
        out.append({"mode": mode, "chain_peak": chain_peak, "top_L": top_L, "best": by_L[top_L][1],
                    "saturates": min(L for L, v in by_L.items() if v[0] >= chain_peak - 1e-9),
                    "ratio": al(by_L[top_L][1]) / by_L[top_L][0], "crossover": crossover})
    return out


def sampled_findings(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Sampled drafts under rejection against the head's top tokens at the same temperature: the
    chains' best AL and the best trees at the largest L."""
    out = []
    for mode in modes_of(results):
        sampled = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
        argmax = [r for r in results if sampled and result_mode(r) == mode_label(sampled[0]["temperature"], False)
                  and r["rows"] > 1]
        if "sampled" not in mode or not sampled or not argmax:
            continue
        top_L = max(r["rows"] for r in sampled)
        peak = lambda rows: max((al(r) for r in rows if r["kind"] == "chain"), default=0.0)  # noqa: E731
        best_at = lambda rows: max((r for r in rows if r["rows"] == top_L and r["kind"] != "chain"), key=al)  # noqa: E731
        out.append({"temperature": sampled[0]["temperature"], "chain": peak(sampled), "argmax_chain": peak(argmax),
                    "top_L": top_L, "best": best_at(sampled), "argmax_best": best_at(argmax)})
    return out


def projection_findings(results: List[Dict[str, Any]], costs: List[Dict[str, Any]]) -> Dict[str, Any] | None:
    """With the bench model's costs: the best projected speedup of any run, per mode the best chain's
    and the best tree's, and at the largest L measured the verify's and the draft depths' costs."""
    if not costs:
        return None
    best, best_run = 0.0, None
    for r in results:
        for c in costs:
            if r["rows"] > 1 and r["rows"] in c["r_tree"] and projected_speedup(r, c) > best:
                best, best_run = projected_speedup(r, c), (r, c["context"])
    modes = []
    for mode in modes_of(results):
        at = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
        best_of = {}
        for kind in ("chain", "tree"):
            runs = [(projected_speedup(r, c), r, c["context"]) for r in at for c in costs
                    if (r["kind"] == "chain") == (kind == "chain") and r["rows"] in c["r_tree"]]
            best_of[kind] = max(runs, key=lambda x: x[0]) if runs else None
        if best_of["chain"] and best_of["tree"]:
            modes.append({"mode": mode, "chain": best_of["chain"], "tree": best_of["tree"]})
    top = max(max(c["r_tree"]) for c in costs)
    return {"d1": [c["d"][1] for c in costs], "best": best, "run": best_run[0], "mode": result_mode(best_run[0]),
            "context": best_run[1], "modes": modes,
            "top": top, "verify": [(c, depth_cost(c["d"], 4)) for c in costs if top in c["r_tree"]]}


def mode_table(results: List[Dict[str, Any]], mode: str, costs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One mode's table per L: the chain's AL, the best static tree and the dynamic tree, the best
    tree's AL over the chain's and the times per token relative to plain; and, with the bench model's
    costs, the chain's and the best tree's projected speedup per context."""
    rows = [r for r in results if result_mode(r) == mode]
    plain = next(r for r in results if r["kind"] == "plain" and r["temperature"] == rows[0]["temperature"])
    relative = lambda r: r["seconds_per_token"] / plain["seconds_per_token"]  # noqa: E731
    measured, projected = [], []
    for L in sorted({r["rows"] for r in rows if r["rows"] > 1}):
        at = [r for r in rows if r["rows"] == L]
        chain = next(r for r in at if r["kind"] == "chain")
        static = [r for r in at if r["kind"] == "static"]
        dynamic = next((r for r in at if r["kind"] == "dynamic"), None)
        trees = static + ([dynamic] if dynamic else [])
        best = max(trees, key=al) if trees else chain
        measured.append({"L": L, "chain": chain, "static": max(static, key=al) if static else None, "dynamic": dynamic,
                         "ratio": al(best) / al(chain), "time_chain": relative(chain), "time_best": relative(best)})
        if costs and all(L in c["r_tree"] for c in costs):
            others = [r for r in at if r["kind"] != "chain"]
            cells = []
            for c in costs:
                best = max(others, key=lambda r: projected_speedup(r, c)) if others else None
                cells.append((projected_speedup(chain, c), best, projected_speedup(best, c) if best else None))
            projected.append((L, cells))
    return {"mode": mode, "rows": measured, "projected": projected}


def write_report(out: Path, meta: Dict[str, Any], results: List[Dict[str, Any]],
                 costs: List[Dict[str, Any]], e2e: List[Dict[str, Any]]) -> None:
    data = out / "tree-data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "tree.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    plain_time = {r["temperature"]: r["seconds_per_token"] for r in results if r["kind"] == "plain"}
    fastest = min((r for r in results if r["kind"] != "plain"),
                  key=lambda r: r["seconds_per_token"] / plain_time[r["temperature"]])
    modes = modes_of(results)
    write_page(out / "tree.md", render(
        "tree.md.j2", meta=meta, chains=chain_findings(results), sampled=sampled_findings(results),
        projection=projection_findings(results, costs), fastest=fastest, fastest_mode=result_mode(fastest),
        fastest_ratio=fastest["seconds_per_token"] / plain_time[fastest["temperature"]],
        trees_chains=tree_e2e.trees_against_chains(results, e2e, costs, modes, result_mode, projected_speedup),
        plots=tree_e2e.plots(out, results, e2e, costs, modes, result_mode, projected_speedup),
        tables=[mode_table(results, mode, costs) for mode in modes], costs=costs,
        e2e=tree_e2e.e2e_section(e2e, costs, projected_speedup)))


if __name__ == "__main__":
    sys.exit(main())
