#!/usr/bin/env python3
"""docs/results/glm-4.7-flash.md from scripts/compare_glm47_flash.sh's runs (build/results/glm47-flash/):
GLM-4.7-Flash at full depth (47 layers and the MTP layer, real dimensions, 16 of 64 experts) on the
CPU, as shipped (bf16) and with --weights fp8, side by side with llama.cpp on the same weights.

  python bench/report/glm47_flash_report.py --results build/results/glm47-flash [--command "..."] [--out docs/results]
"""

from __future__ import annotations

import re
import shutil
from statistics import median

from real_scale_report import PUBLISHED_RATES, LayerCosts, conditional_rates, expected_length
from results_page import json_loader, page_arguments, render, write_page

DATA = "glm-4.7-flash-data"
CONTEXT = 1024
# The published k = 1 acceptance for GLM-4.7-Flash (vLLM, 60%), the rate the end-to-end runs use at
# every position; the published GLM-5.2 lists stand in for later positions, since none are
# published for GLM-4.7-Flash.
RATES = {"GLM-4.7-Flash, vLLM k = 1 (0.6 at every position, conditional)": [0.6]}
RATES.update({f"{name}, {form}": conditional_rates(form, rates) for name, (form, rates) in PUBLISHED_RATES.items()})
WEIGHTS = {"stored": "bf16 (as shipped)", "fp8": "`--weights fp8`"}
LLAMA = {"bf16": "bf16 GGUF", "q8_0": "Q8_0 GGUF"}
VERIFY_ROWS = range(2, 6)  # the verify costs' row counts L
KS = [1, 2, 3, 4]  # the draft lengths priced


def benchmark(run: dict, prefix: str) -> dict:
    return next(b for b in run["benchmarks"] if b["name"].startswith(prefix) and b.get("run_type") != "aggregate")


def llama_rate(run: list[dict], prompt: int, gen: int, depth: int) -> float:
    rows = [r for r in run if r["n_prompt"] == prompt and r["n_gen"] == gen and r["n_depth"] == depth]
    return rows[0]["avg_ts"]


def step_weight_bytes(rs: dict) -> int:
    return sum(layer["row_weight_bytes"] for layer in rs["layers"]) + rs["head_bytes"]


def bandwidth_samples(load, rs: dict[str, dict]) -> list[float]:
    """Every read bandwidth the run measured (bytes/s): StreamSum before and after each real_scale_bench
    run and before each of its repetitions, and decode_bench's StreamRead."""
    samples = []
    for run in rs.values():
        samples += run["read_bandwidth_start"]["samples"] + run["read_bandwidth_end"]["samples"]
        samples += run["contexts"][0]["read_bandwidth_by_rep"]
    for w in WEIGHTS:
        samples.append(benchmark(load(f"decode_{w}.json"), "BM_StreamRead")["GB/s"] * 1e9)
    return samples


def paired_ratio(run: dict) -> float:
    """Median over real_scale_bench's repetitions of a one-row forward's weight bytes per second over
    the read bandwidth measured just before it."""
    point = run["contexts"][0]
    ratios = [step_weight_bytes(run) / pair["whole"] / bw
              for pair, bw in zip(point["rows"][0]["paired"], point["read_bandwidth_by_rep"])]
    return median(ratios)


def plain_rows(load, rs: dict[str, dict]) -> dict:
    """Plain decoding and prefill of each engine and format, and the read bandwidth they are held against."""
    params = step_weight_bytes(rs["stored"]) / 2  # bf16: two bytes per weight a token reads
    samples = bandwidth_samples(load, rs)
    typical = median(samples)
    engines = []
    for w, label in WEIGHTS.items():
        run = load(f"decode_{w}.json")
        decode = benchmark(run, f"BM_Decode/ctx:{CONTEXT}")
        engines.append({"engine": "mtpspec", "label": label, "decode": decode["tok/s"],
                        "bytes": decode["weight_MB/step"] * 1e6, "ratio": paired_ratio(rs[w]),
                        "prefill": benchmark(run, "BM_Prefill/ctx:0")["tok/s"]})
    for t, label in LLAMA.items():
        tok_s = llama_rate(load(f"llama_decode_{t}.json"), 0, 32, CONTEXT)
        per_token = params * (2 if t == "bf16" else 34 / 32)
        engines.append({"engine": "llama.cpp", "label": label, "decode": tok_s, "bytes": per_token,
                        "ratio": tok_s * per_token / typical,
                        "prefill": llama_rate(load(f"llama_prefill_{t}.json"), 256, 0, 0)})
    return {"params": params, "step_bytes": step_weight_bytes(rs["stored"]),
            "head_share": rs["stored"]["head_bytes"] / step_weight_bytes(rs["stored"]), "samples": samples,
            "typical": typical, "engines": engines, "pairs": [(engines[0], engines[2]), (engines[1], engines[3])],
            "llama_commit": load("llama_decode_bf16.json")[0].get("build_commit", "?")}


def e2e_rows(rs: dict[str, dict]) -> list[dict]:
    """Each end-to-end run: tok/s, speedup over plain, acceptance length, verify and draft seconds per step."""
    rows = []
    for w, label in WEIGHTS.items():
        runs = rs[w]["e2e"][0]["runs"]
        for k, r in enumerate(runs):
            steps = r["verify_steps"]
            rows.append({"label": label, "k": k, "tok_s": r["tokens_per_second"],
                         "speedup": r["tokens_per_second"] / runs[0]["tokens_per_second"],
                         "length": r["mean_acceptance_length"] if k else 1.0, "verify": r["verify_seconds"] / steps,
                         "draft": r["draft_seconds"] / steps if k else 0.0})
    return rows


def verify_cells(c: LayerCosts) -> list[float]:
    """r_L for L = 2..5 at CONTEXT, measured on the cut and priced at the release's experts, in turn."""
    kinds = [layer["kind"] for layer in c.data["layers"]]
    cells = []
    for L in VERIFY_ROWS:
        for scaled in (False, True):
            cells.append(c.project(CONTEXT, L, kinds, scaled=scaled)["seconds"] /
                         c.project(CONTEXT, 1, kinds, scaled=scaled)["seconds"])
    return cells


def best_k(label: str, c: LayerCosts) -> dict:
    """The expected speedup per k from the measured parts, priced at 64 experts, with the head's cost
    in the drafts and without it, for each list of rates."""
    kinds = [layer["kind"] for layer in c.data["layers"]]
    t1 = c.project(CONTEXT, 1, kinds)["seconds"]
    head, step = c.head_row(CONTEXT), c.mtp_step(CONTEXT)
    rows = []
    for name, rates in RATES.items():
        cells = []
        for k in KS:
            rk = c.project(CONTEXT, k + 1, kinds)["seconds"] / t1
            el = expected_length(rates, k)
            drafts = (head + (k - 1) * step) / t1
            cells.append((c.speedup(CONTEXT, t1, rk, k, rates),
                          el / (rk + (drafts - k * head / t1) + c.mtp_extend(CONTEXT, el) / t1)))
        rows.append({"rates": name, "cells": cells, "best": KS[max(range(len(KS)), key=lambda i: cells[i][0])],
                     "best_free": KS[max(range(len(KS)), key=lambda i: cells[i][1])]})
    return {"label": label, "plain": t1, "head": head, "step": step, "rows": rows}


def llama_spec(path) -> dict:
    text = path.read_text()
    get = lambda key: re.search(rf"{key}\s*=\s*([0-9.]+)", text)  # noqa: E731
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds, speed:\s+([0-9.]+)", text)
    return {"drafted": int(get("n_drafted").group(1)), "accepted": int(get("n_accept").group(1)),
            "tok_s": float(decoded.group(3))}


def mtp_drafts(load, results, out_dir) -> list[dict]:
    """Each engine's own MTP drafts on the bf16 weights, k = 0..3 (llama.cpp's logs copied beside the page)."""
    drafts = [{"k": 0, "ours": load("mtpspec_spec_k0.json")}]
    for k in (1, 2, 3):
        log = results / f"llama_spec_bf16_k{k}.log"
        shutil.copyfile(log, out_dir / log.name)
        drafts.append({"k": k, "theirs": llama_spec(log), "ours": load(f"mtpspec_spec_k{k}.json")})
    return drafts


def main() -> None:
    args = page_arguments(__doc__)
    load = json_loader(args.results, args.out / DATA)
    rs = {w: load(f"real_scale_{w}.json") for w in WEIGHTS}
    missing = [w for w, run in rs.items() if run is None]
    if missing:
        raise SystemExit(f"{args.results}: no real_scale run for {missing}: run scripts/compare_glm47_flash.sh first")
    costs = {w: LayerCosts(run) for w, run in rs.items()}
    run, cfg = rs["stored"]["run"], rs["stored"]["config"]
    write_page(args.out / "glm-4.7-flash.md", render(
        "glm-4.7-flash.md.j2", run=run, commands=args.command or [run["command"]], config=cfg,
        release_experts=cfg.get("mtpspec_cut_from", {}).get("n_routed_experts", "?"), context=CONTEXT,
        **plain_rows(load, rs), e2e=e2e_rows(rs), verify_rows=VERIFY_ROWS,
        verify=[(label, verify_cells(costs[w])) for w, label in WEIGHTS.items()], ks=KS,
        best_k=[best_k(label, costs[w]) for w, label in WEIGHTS.items()],
        llama_plain=llama_rate(load("llama_decode_bf16.json"), 0, 32, 0),
        drafts=mtp_drafts(load, args.results, args.out / DATA)))


if __name__ == "__main__":
    main()
