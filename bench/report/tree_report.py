#!/usr/bin/env python3
"""Trees against chains at an equal verify budget, on the trained model with its real acceptance.

A verify of L rows holds the pending token and L - 1 drafts: the chain k = L - 1, or any tree of
L - 1 nodes. For every L = 2 .. 16 this runs, on windows of the held-out text:

* the chain of L - 1 drafts;
* every static tree of L - 1 nodes with at most 4 children per node and depth <= 6;
* the dynamic tree of L - 1 nodes (expand width 4);

and records the mean acceptance length (tokens per verify, the bonus token included), the
acceptance by depth and by sibling rank, and the wall time per generated token, all measured in the
same run, with plain decoding (``draft="none"``) of the same windows as the baseline. Greedy
(T = 0) and sampled (T = 0.7) decoding; every run is checked against plain decoding token for token.

  build/pyenv/bin/python bench/report/tree_report.py [--model models/glm-tiny-mtp]
      [--heldout build/heldout/prose.npy] [--windows 12] [--context 256] [--new-tokens 64]
      [--json build/results/tree.json] [--out docs/results]   (tree.md, tree-data/ there)
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

REPO = Path(__file__).resolve().parents[2]


def nodes_of(branching: Tuple[int, ...]) -> int:
    total, width = 0, 1
    for b in branching:
        width *= b
        total += width
    return total


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
    return {
        "num_drafts": drafts, "num_accepted_tokens": accepted, "verify_steps": verifies, "generated_tokens": generated,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "acceptance_by_depth": [a / d if d else 0.0 for a, d in zip(per_depth_accepted, per_depth_drafted)],
        # Depths drafted per cycle: the drafter's heads per cycle (one per depth, as a chain's one per draft).
        "mean_depth": sum(per_depth_drafted) / drafts if drafts else 0.0,
        "accepted_per_rank": per_rank,
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
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    parser.add_argument("--max-rows", type=int, default=16)
    parser.add_argument("--tradeoff", type=Path, default=REPO / "docs" / "results" / "tradeoff-data" / "tradeoff.json",
                        help="the bench model's measured verify costs r(L) and draft step c (bench/tradeoff_bench)")
    parser.add_argument("--json", type=Path, default=REPO / "build" / "results" / "tree.json")
    parser.add_argument("--out", type=Path, default=None, help="write tree.md and tree-data/ here")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="rewrite the report from an earlier run's tree.json instead of running")
    args = parser.parse_args()
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        costs = bench_model_costs(args.tradeoff) if args.tradeoff.exists() else []
        write_report(args.out or REPO / "docs" / "results", data["meta"], data["results"], costs)
        return 0

    import mtpspec  # the installed bindings (scripts/test_python.sh installs them into build/pyenv)

    model = mtpspec.Model.load(args.model, threads=args.threads)
    ids = np.load(args.heldout)
    prompts = list(windows(ids, args.windows, args.context, args.new_tokens))
    results: List[Dict[str, Any]] = []
    for temperature in args.temperatures:
        sampling = dict(temperature=temperature, seed=11)
        base = run_all(model, prompts, args.new_tokens, dict(draft="none", **sampling), None)
        plain = base.pop("outputs")
        results.append({"temperature": temperature, "kind": "plain", "shape": "", "rows": 1, **base})
        for rows in range(2, args.max_rows + 1):
            nodes = rows - 1
            runs: List[Tuple[str, str, Dict[str, Any]]] = [("chain", f"k={nodes}", dict(k=nodes))]
            runs += [("static", ",".join(map(str, s)), dict(tree=list(s))) for s in static_shapes(nodes)]
            runs.append(("dynamic", f"nodes={nodes}", dict(tree_nodes=nodes)))
            for kind, shape, options in runs:
                r = run_all(model, prompts, args.new_tokens, {**options, **sampling}, plain)
                r.pop("outputs")
                results.append({"temperature": temperature, "kind": kind, "shape": shape, "rows": rows, **r})
            print(f"T {temperature} L {rows}: {len(runs)} shapes", flush=True)

    meta = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {args.threads} threads",
            "model": str(args.model.relative_to(REPO) if REPO in args.model.parents else args.model),
            "heldout": args.heldout.name, "windows": args.windows, "context": args.context,
            "new_tokens": args.new_tokens, "command": " ".join(["bench/report/tree_report.py", *sys.argv[1:]])}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    costs = bench_model_costs(args.tradeoff) if args.tradeoff.exists() else []
    meta["tradeoff"] = str(args.tradeoff.relative_to(REPO)) if REPO in args.tradeoff.parents else str(args.tradeoff)
    if args.out:
        write_report(args.out, meta, results, costs)
    return 0


def bench_model_costs(path: Path) -> List[Dict[str, Any]]:
    """Per context N of a tradeoff run: r(L) = T_verify(L) / T_plain on the gather path, and c, one
    MTP draft step in plain steps."""
    data = json.loads(path.read_text())
    costs = []
    for point in data.get("points", []):
        gather = point.get("paths", {}).get("gather", [])
        if not gather or "mtp_step" not in point:
            continue
        costs.append({"context": point["context"], "c": point["mtp_step"]["c"],
                      "r": {entry["rows"]: entry["r"] for entry in gather}})
    return costs


def findings(results: List[Dict[str, Any]], costs: List[Dict[str, Any]]) -> List[str]:
    """The page's summary, computed from the tables below it."""
    lines = ["\n## Findings\n"]
    for temperature in sorted({r["temperature"] for r in results}):
        rows = [r for r in results if r["temperature"] == temperature and r["rows"] > 1]
        by_L: Dict[int, Tuple[float, Dict[str, Any]]] = {}
        for L in sorted({r["rows"] for r in rows}):
            at = [r for r in rows if r["rows"] == L]
            chain = next(r for r in at if r["kind"] == "chain")
            best = max((r for r in at if r["kind"] != "chain"), key=lambda r: r["mean_acceptance_length"])
            by_L[L] = (chain["mean_acceptance_length"], best)
        top_L = max(by_L)
        chain_top, best_top = by_L[top_L]
        chain_peak = max(v[0] for v in by_L.values())
        saturates = min(L for L, v in by_L.items() if v[0] >= chain_peak - 1e-9)
        crossover = next((L for L, v in by_L.items() if v[1]["mean_acceptance_length"] > 1.01 * v[0]
                          and all(w[1]["mean_acceptance_length"] > 1.01 * w[0] for M, w in by_L.items() if M >= L)),
                         None)
        label = best_top["shape"] if best_top["kind"] == "dynamic" else f"tree {best_top['shape']}"
        lines.append(f"- T = {temperature}: the chain's AL stops growing at {chain_peak:.3f} from L = {saturates}; "
                     f"at L = {top_L} the best tree ({label}) reaches {best_top['mean_acceptance_length']:.3f}, "
                     f"{best_top['mean_acceptance_length'] / chain_top:.2f} times the chain"
                     + (f"; trees beat the chain by more than 1% from L = {crossover} on." if crossover else "."))
    if costs:
        best_projection = 0.0
        for r in results:
            for c in costs:
                if r["rows"] > 1 and r["rows"] in c["r"]:
                    best_projection = max(best_projection,
                                          r["mean_acceptance_length"] / (c["r"][r["rows"]] + r["mean_depth"] * c["c"]))
        c_low, c_high = min(c["c"] for c in costs), max(c["c"] for c in costs)
        verdict = ("so neither trees nor chains pay there; the tables show how much of the gap trees close at each L"
                   if best_projection < 1 else "the tables show which shapes pay at each L")
        lines.append(f"- With the bench model's measured costs (one MTP draft step c = {c_low:.2f} to {c_high:.2f} "
                     f"plain steps) the best projected speedup of any chain or tree is {best_projection:.3f}: "
                     f"{verdict}.")
    plain_time = {r["temperature"]: r["seconds_per_token"] for r in results if r["kind"] == "plain"}
    fastest = min((r for r in results if r["kind"] != "plain"),
                  key=lambda r: r["seconds_per_token"] / plain_time[r["temperature"]])
    ratio = fastest["seconds_per_token"] / plain_time[fastest["temperature"]]
    lines.append(f"- Measured wall time per token on the trained model, relative to plain decoding: the fastest run "
                 f"is {fastest['kind']} {fastest['shape']} at T = {fastest['temperature']}, {ratio:.3f}"
                 + (" (every chain and tree is slower than plain: this model's MTP layer and head are a large share "
                    "of its decode step, so each draft depth costs nearly a plain step)." if ratio > 1 else "."))
    return lines


def write_report(out: Path, meta: Dict[str, Any], results: List[Dict[str, Any]],
                 costs: List[Dict[str, Any]]) -> None:
    data = out / "tree-data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "tree.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [f"# Trees against chains at an equal verify budget\n",
             f"Made by `build/pyenv/bin/python {meta['command']}` on {meta['date']} "
             f"({meta['machine']}). Data: `tree-data/tree.json`.\n",
             f"Model `{meta['model']}` on {meta['windows']} windows of its held-out prose ({meta['heldout']}), "
             f"{meta['context']} tokens of context, {meta['new_tokens']} new tokens each. L is the verify's rows "
             "(the pending token and L - 1 drafts): the chain k = L - 1 against every static tree of L - 1 nodes with "
             "at most 4 children per node and depth at most 6, and the dynamic tree of L - 1 nodes (expand width 4). AL is the mean "
             "acceptance length (tokens per verify with drafts, the bonus token included). Every run's tokens equal "
             "plain decoding's. Time is wall time per generated token measured in this run, relative to plain "
             "decoding of the same windows.\n"]
    lines += findings(results, costs)
    for temperature in sorted({r["temperature"] for r in results}):
        rows = [r for r in results if r["temperature"] == temperature]
        plain = next(r for r in rows if r["kind"] == "plain")
        lines.append(f"\n## T = {temperature}\n")
        lines.append("| L | chain AL | best static tree | its AL | dynamic tree AL | best tree AL / chain AL | "
                     "time per token: chain | best tree |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for L in sorted({r["rows"] for r in rows if r["rows"] > 1}):
            at = [r for r in rows if r["rows"] == L]
            chain = next(r for r in at if r["kind"] == "chain")
            static = [r for r in at if r["kind"] == "static"]
            dynamic = next(r for r in at if r["kind"] == "dynamic")
            best_static = max(static, key=lambda r: r["mean_acceptance_length"]) if static else None
            best = max(static + [dynamic], key=lambda r: r["mean_acceptance_length"])
            relative = lambda r: r["seconds_per_token"] / plain["seconds_per_token"]  # noqa: E731
            static_cells = (f"{best_static['shape']} | {best_static['mean_acceptance_length']:.3f}" if best_static
                            else "- | -")
            lines.append(f"| {L} | {chain['mean_acceptance_length']:.3f} | {static_cells} | "
                         f"{dynamic['mean_acceptance_length']:.3f} | "
                         f"{best['mean_acceptance_length'] / chain['mean_acceptance_length']:.3f} | "
                         f"{relative(chain):.3f} | {relative(best):.3f} |")
        lines.append("")
        lines.append("Times are relative to plain decoding (1.000) in the same run.")
        if costs:
            lines.append("")
            lines.append(f"Projected speedup over plain decoding with the bench model's measured costs "
                         f"(`{meta['tradeoff']}`): AL / (r(L) + depth · c), AL from this model, r(L) the verify of "
                         "L rows relative to a plain step and c one MTP draft step, at each context N; depth is the "
                         "mean number of depths drafted per cycle (the drafter runs one head and one forward per "
                         "depth, as a chain does per draft). A tree verify of L rows is taken to cost a chain verify of L "
                         "rows (the same kernels over the same rows, with a tree mask); r(L) is measured up to L = 8. "
                         "The best tree is the one of highest projected speedup.")
            lines.append("")
            header = "| L |" + "".join(f" chain, N = {c['context']} | best tree, N = {c['context']} |" for c in costs)
            lines.append(header)
            lines.append("|---|" + "---|---|" * len(costs))
            for L in sorted({r["rows"] for r in rows if r["rows"] > 1}):
                if any(L not in c["r"] for c in costs):
                    continue
                at = [r for r in rows if r["rows"] == L]
                cells = []
                for c in costs:
                    projected = lambda r: r["mean_acceptance_length"] / (c["r"][L] + r["mean_depth"] * c["c"])  # noqa: E731
                    chain = next(r for r in at if r["kind"] == "chain")
                    best = max((r for r in at if r["kind"] != "chain"), key=projected)
                    label = best["shape"] if best["kind"] == "dynamic" else f"tree {best['shape']}"
                    cells.append(f" {projected(chain):.3f} | {projected(best):.3f} ({label}) |")
                lines.append(f"| {L} |" + "".join(cells))
    (out / "tree.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
