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


def findings(results: List[Dict[str, Any]], costs: List[Dict[str, Any]]) -> List[str]:
    """The page's summary, computed from the tables below it."""
    lines = ["\n## Findings\n"]
    for mode in modes_of(results):
        rows = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
        by_L: Dict[int, Tuple[float, Dict[str, Any]]] = {}
        for L in sorted({r["rows"] for r in rows}):
            at = [r for r in rows if r["rows"] == L]
            chain = next(r for r in at if r["kind"] == "chain")
            trees = [r for r in at if r["kind"] != "chain"]
            if not trees:  # L = 2 with sampled drafts: only the chain (the one-node tree is the chain)
                continue
            best = max(trees, key=lambda r: r["mean_acceptance_length"])
            by_L[L] = (chain["mean_acceptance_length"], best)
        top_L = max(by_L)
        chain_top, best_top = by_L[top_L]
        chain_peak = max(v[0] for v in by_L.values())
        saturates = min(L for L, v in by_L.items() if v[0] >= chain_peak - 1e-9)
        crossover = next((L for L, v in by_L.items() if v[1]["mean_acceptance_length"] > 1.01 * v[0]
                          and all(w[1]["mean_acceptance_length"] > 1.01 * w[0] for M, w in by_L.items() if M >= L)),
                         None)
        label = best_top["shape"] if best_top["kind"] == "dynamic" else f"tree {best_top['shape']}"
        lines.append(f"- {mode}: the chain's AL stops growing at {chain_peak:.3f} from L = {saturates}; "
                     f"at L = {top_L} the best tree ({label}) reaches {best_top['mean_acceptance_length']:.3f}, "
                     f"{best_top['mean_acceptance_length'] / chain_top:.2f} times the chain"
                     + (f"; trees beat the chain by more than 1% from L = {crossover} on." if crossover else "."))
    for mode in modes_of(results):
        sampled = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
        if not sampled or "sampled" not in mode:
            continue
        argmax_mode = mode_label(sampled[0]["temperature"], False)
        argmax = [r for r in results if result_mode(r) == argmax_mode and r["rows"] > 1]
        if not argmax:
            continue
        top_L = max(r["rows"] for r in sampled)

        def peak(rows: List[Dict[str, Any]], kind: str) -> float:
            return max(r["mean_acceptance_length"] for r in rows if r["kind"] == kind) if any(
                r["kind"] == kind for r in rows) else 0.0

        def best_at(rows: List[Dict[str, Any]], L: int) -> Dict[str, Any]:
            return max((r for r in rows if r["rows"] == L and r["kind"] != "chain"),
                       key=lambda r: r["mean_acceptance_length"])

        b_s, b_a = best_at(sampled, top_L), best_at(argmax, top_L)
        lines.append(f"- Sampled drafts against the head's top tokens at T = {sampled[0]['temperature']}: the chain's "
                     f"best AL {peak(sampled, 'chain'):.3f} against {peak(argmax, 'chain'):.3f}; at L = {top_L} the "
                     f"best tree {b_s['shape']} {b_s['mean_acceptance_length']:.3f} against {b_a['shape']} "
                     f"{b_a['mean_acceptance_length']:.3f} ({b_s['mean_acceptance_length'] / b_a['mean_acceptance_length']:.2f} "
                     "times): a draft drawn from q is accepted with probability sum_x min(p, q), an argmax draft "
                     "with p(argmax q), and at T > 0 the first is the larger when q is close to p.")
    if costs:
        best_projection, best_run = 0.0, None
        for r in results:
            for c in costs:
                if r["rows"] > 1 and r["rows"] in c["r_tree"]:
                    projected = projected_speedup(r, c)
                    if projected > best_projection:
                        best_projection, best_run = projected, (r, c["context"])
        d1 = [c["d"][1] for c in costs]
        verdict = ("so neither trees nor chains pay there; the tables show how much of the gap trees close at each L"
                   if best_projection < 1 else "the tables show which shapes pay at each L")
        lines.append(f"- With the bench model's measured costs (one draft depth of one node d(1) = {min(d1):.2f} to "
                     f"{max(d1):.2f} plain steps) the best projected speedup of any chain or tree is "
                     f"{best_projection:.3f} ({best_run[0]['kind']} {best_run[0]['shape']}, {result_mode(best_run[0])}, "
                     f"N = {best_run[1]}): {verdict}.")
        for mode in modes_of(results):
            at = [r for r in results if result_mode(r) == mode and r["rows"] > 1]
            best_of = {}
            for kind in ("chain", "tree"):
                runs = [(projected_speedup(r, c), r, c["context"]) for r in at for c in costs
                        if (r["kind"] == "chain") == (kind == "chain") and r["rows"] in c["r_tree"]]
                best_of[kind] = max(runs, key=lambda x: x[0]) if runs else None
            if best_of["chain"] and best_of["tree"]:
                (sc, rc, nc), (st, rt, nt) = best_of["chain"], best_of["tree"]
                lines.append(f"- {mode}, projected: the best chain {sc:.3f} ({rc['shape']}, N = {nc}) against the best "
                             f"tree {st:.3f} ({rt['shape']}, L = {rt['rows']}, N = {nt})"
                             + ("; a tree pays more than any chain." if st > sc else
                                "; no tree beats the best chain, since the extra rows and draft depths cost more "
                                "than the extra accepted tokens bring."))
        top = max(max(c["r_tree"]) for c in costs)
        for c in costs:
            if top in c["r_tree"]:
                lines.append(f"- At N = {c['context']} a verify of {top} rows costs {c['r_chain'][top]:.2f} plain steps as "
                             f"a chain and {c['r_tree'][top]:.2f} as a tree; a draft depth over 4 nodes "
                             f"{depth_cost(c['d'], 4):.2f} against {c['d'][1]:.2f} over one.")
    plain_time = {r["temperature"]: r["seconds_per_token"] for r in results if r["kind"] == "plain"}
    fastest = min((r for r in results if r["kind"] != "plain"),
                  key=lambda r: r["seconds_per_token"] / plain_time[r["temperature"]])
    ratio = fastest["seconds_per_token"] / plain_time[fastest["temperature"]]
    lines.append(f"- Measured wall time per token on the trained model, relative to plain decoding: the fastest run "
                 f"is {fastest['kind']} {fastest['shape']} at {result_mode(fastest)}, {ratio:.3f}"
                 + (" (every chain and tree is slower than plain: this model's MTP layer and head are a large share "
                    "of its decode step, so each draft depth costs nearly a plain step)." if ratio > 1 else "."))
    return lines


def write_report(out: Path, meta: Dict[str, Any], results: List[Dict[str, Any]],
                 costs: List[Dict[str, Any]], e2e: List[Dict[str, Any]]) -> None:
    data = out / "tree-data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "tree.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [f"# Trees against chains at an equal verify budget\n",
             f"Made by `build/pyenv/bin/python {meta['command']}` on {meta['date']} "
             f"({meta['machine']}). Data: `tree-data/tree.json`."
             + (f" Page written by `build/pyenv/bin/python {meta['page_command']}`." if meta.get("page_command") else "")
             + "\n",
             f"Model `{meta['model']}` on {meta['windows']} windows of its held-out prose ({meta['heldout']}), "
             f"{meta['context']} tokens of context, {meta['new_tokens']} new tokens each. L is the verify's rows "
             "(the pending token and L - 1 drafts): the chain k = L - 1 against every static tree of L - 1 nodes with "
             "at most 4 children per node and depth at most 6, and the dynamic tree of L - 1 nodes (expand width 4). AL is the mean "
             "acceptance length (tokens per verify with drafts, the bonus token included). Every run with the head's "
             "top tokens as drafts gives plain decoding's tokens; runs with sampled drafts under rejection are "
             "lossless in distribution, not token for token (dynamic trees take argmax drafts and are not run "
             "there). Time is wall time per generated token measured in this run, relative to plain "
             "decoding of the same windows.\n"]
    lines += findings(results, costs)
    lines += tree_e2e.tree_chain_lines(results, e2e, costs, modes_of(results), result_mode, projected_speedup)
    lines += tree_e2e.plots(out, results, e2e, costs, modes_of(results), result_mode, projected_speedup)
    for mode in modes_of(results):
        rows = [r for r in results if result_mode(r) == mode]
        temperature = rows[0]["temperature"]
        plain = next(r for r in results if r["kind"] == "plain" and r["temperature"] == temperature)
        lines.append(f"\n## {mode}\n")
        lines.append("| L | chain AL | best static tree | its AL | dynamic tree AL | best tree AL / chain AL | "
                     "time per token: chain | best tree |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for L in sorted({r["rows"] for r in rows if r["rows"] > 1}):
            at = [r for r in rows if r["rows"] == L]
            chain = next(r for r in at if r["kind"] == "chain")
            static = [r for r in at if r["kind"] == "static"]
            dynamic = next((r for r in at if r["kind"] == "dynamic"), None)
            best_static = max(static, key=lambda r: r["mean_acceptance_length"]) if static else None
            trees = static + ([dynamic] if dynamic else [])
            best = max(trees, key=lambda r: r["mean_acceptance_length"]) if trees else chain
            relative = lambda r: r["seconds_per_token"] / plain["seconds_per_token"]  # noqa: E731
            static_cells = (f"{best_static['shape']} | {best_static['mean_acceptance_length']:.3f}" if best_static
                            else "- | -")
            dynamic_cell = f"{dynamic['mean_acceptance_length']:.3f}" if dynamic else "-"
            lines.append(f"| {L} | {chain['mean_acceptance_length']:.3f} | {static_cells} | {dynamic_cell} | "
                         f"{best['mean_acceptance_length'] / chain['mean_acceptance_length']:.3f} | "
                         f"{relative(chain):.3f} | {relative(best):.3f} |")
        lines.append("")
        lines.append("Times are relative to plain decoding (1.000) in the same run.")
        if costs:
            lines.append("")
            lines.append("Projected speedup over plain decoding with the bench model's measured costs "
                         "(see the cost table below): AL / (r(L) + Σ d(w)), AL from this model, r(L) the verify of L "
                         "rows relative to a plain step, measured as a chain for the chain and as a tree for the "
                         "trees, and d(w) one MTP draft depth over w nodes (the first depth over one, each later "
                         "depth over the nodes of the depth above; a dynamic tree over 4 per depth after the first, "
                         "for its mean depth). The best tree is the one of highest projected speedup.")
            lines.append("")
            header = "| L |" + "".join(f" chain, N = {c['context']} | best tree, N = {c['context']} |" for c in costs)
            lines.append(header)
            lines.append("|---|" + "---|---|" * len(costs))
            for L in sorted({r["rows"] for r in rows if r["rows"] > 1}):
                if any(L not in c["r_tree"] for c in costs):
                    continue
                at = [r for r in rows if r["rows"] == L]
                cells = []
                for c in costs:
                    chain = next(r for r in at if r["kind"] == "chain")
                    trees = [r for r in at if r["kind"] != "chain"]
                    if not trees:
                        cells.append(f" {projected_speedup(chain, c):.3f} | - |")
                        continue
                    best = max(trees, key=lambda r: projected_speedup(r, c))
                    label = best["shape"] if best["kind"] == "dynamic" else f"tree {best['shape']}"
                    cells.append(f" {projected_speedup(chain, c):.3f} | {projected_speedup(best, c):.3f} ({label}) |")
                lines.append(f"| {L} |" + "".join(cells))
    lines += tree_e2e.e2e_section(e2e, costs, meta.get("e2e_source", {}), meta.get("tree_costs_command", ""),
                                  projected_speedup)
    if costs:
        lines.append("\n## Verify and drafting costs on the bench model\n")
        command = meta.get("tree_costs_command", "")
        lines.append(f"Made by `{command}` on the bench model (`bench/bench_model.cc`) "
                     "with its cache filled to N with random rows. r(L): one forward of L rows relative to the plain "
                     "step, as a chain (positions N … N + L − 1) and as a tree of the same rows (each node up to 4 "
                     "children, breadth-first, under its tree mask). d(w): the MTP module's step over w nodes under a "
                     "tree mask plus the head over them, relative to the plain step. Data: `tree-data/costs.json`.")
        lines.append("")
        lines.append("| L |" + "".join(f" r chain, N = {c['context']} | r tree, N = {c['context']} |" for c in costs))
        lines.append("|---|" + "---|---|" * len(costs))
        for L in sorted(costs[0]["r_tree"]):
            lines.append(f"| {L} |" + "".join(f" {c['r_chain'][L]:.2f} | {c['r_tree'][L]:.2f} |" for c in costs))
        lines.append("")
        lines.append("| w |" + "".join(f" d(w), N = {c['context']} |" for c in costs))
        lines.append("|---|" + "---|" * len(costs))
        for w in sorted(costs[0]["d"]):
            lines.append(f"| {w} |" + "".join(f" {c['d'][w]:.2f} |" for c in costs))
    (out / "tree.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
