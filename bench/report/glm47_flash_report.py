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
from results_page import heading_lines, json_loader, page_arguments

DATA = "glm-4.7-flash-data"
CONTEXT = 1024
# The published k = 1 acceptance for GLM-4.7-Flash (vLLM, 60%), the rate the end-to-end runs use at
# every position; the published GLM-5.2 lists stand in for later positions, since none are
# published for GLM-4.7-Flash.
RATES = {"GLM-4.7-Flash, vLLM k = 1 (0.6 at every position, conditional)": [0.6]}
RATES.update({f"{name}, {form}": conditional_rates(form, rates) for name, (form, rates) in PUBLISHED_RATES.items()})
WEIGHTS = {"stored": "bf16 (as shipped)", "fp8": "`--weights fp8`"}
LLAMA = {"bf16": "bf16 GGUF", "q8_0": "Q8_0 GGUF"}


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


def plain_lines(load, rs: dict[str, dict]) -> list[str]:
    """Plain decoding and prefill of each engine and format."""
    params = step_weight_bytes(rs["stored"]) / 2  # bf16: two bytes per weight a token reads
    samples = bandwidth_samples(load, rs)
    typical = median(samples)
    lines = ["## Plain decoding and prefill", "",
             f"One token reads {params / 1e9:.2f} G weights ({step_weight_bytes(rs['stored']) / 1e9:.2f} GB in bf16; "
             f"the head is {rs['stored']['head_bytes'] / step_weight_bytes(rs['stored']):.1%} of them). "
             f"Decode at context {CONTEXT} and prefill of 256 tokens from an empty cache (decode_bench, llama-bench). "
             f"The read bandwidth moved between {min(samples) / 1e9:.0f} and {max(samples) / 1e9:.0f} GB/s during the "
             f"run (median {typical / 1e9:.0f}; {len(samples)} StreamSum measurements), so weight bytes per second are "
             "held against it two ways: for mtpspec, each real_scale_bench repetition's one-row forward against "
             "the bandwidth measured just before it (median); for llama.cpp, its decode rate against the run's "
             "median, with its bytes per token from the same weight count at 2 bytes (bf16) or 34/32 bytes (Q8_0).", "",
             "| engine | weights | decode tok/s | weight GB/token | ÷ read bandwidth | prefill tok/s |",
             "|---|---|---|---|---|---|"]
    for w, label in WEIGHTS.items():
        run = load(f"decode_{w}.json")
        decode, prefill = benchmark(run, f"BM_Decode/ctx:{CONTEXT}"), benchmark(run, "BM_Prefill/ctx:0")
        lines.append(f"| mtpspec | {label} | {decode['tok/s']:.2f} | {decode['weight_MB/step'] / 1e3:.2f} | "
                     f"{paired_ratio(rs[w]):.2f} | {prefill['tok/s']:.1f} |")
    for t, label in LLAMA.items():
        decode, prefill = load(f"llama_decode_{t}.json"), load(f"llama_prefill_{t}.json")
        tok_s = llama_rate(decode, 0, 32, CONTEXT)
        per_token = params * (2 if t == "bf16" else 34 / 32)
        lines.append(f"| llama.cpp | {label} | {tok_s:.2f} | {per_token / 1e9:.2f} | {tok_s * per_token / typical:.2f} | "
                     f"{llama_rate(prefill, 256, 0, 0):.1f} |")
    lines += [""]
    for w, t in (("stored", "bf16"), ("fp8", "q8_0")):
        run, decode, prefill = load(f"decode_{w}.json"), load(f"llama_decode_{t}.json"), load(f"llama_prefill_{t}.json")
        ours_d = benchmark(run, f"BM_Decode/ctx:{CONTEXT}")["tok/s"]
        ours_p = benchmark(run, "BM_Prefill/ctx:0")["tok/s"]
        lines.append(f"- mtpspec {WEIGHTS[w]} against the {LLAMA[t]}: decode {ours_d / llama_rate(decode, 0, 32, CONTEXT):.2f}×, "
                     f"prefill {ours_p / llama_rate(prefill, 256, 0, 0):.2f}×.")
    commit = load("llama_decode_bf16.json")[0].get("build_commit", "?")
    return lines + [f"- llama.cpp build {commit}, 2 threads, llama-bench `-r 2`; mtpspec's prefill takes its rows in f32 "
                    "(the exact path).", ""]


def e2e_lines(rs: dict[str, dict]) -> list[str]:
    lines = ["## MTP end to end, SYNTHETIC acceptance", "",
             "Generate from a 1024-token random prefix, 32 new tokens, plain and k = 1..4, with SYNTHETIC acceptance "
             "at a conditional 0.6 per position (the published k = 1 rate, carried to later positions as an "
             "assumption). Each repetition runs plain and k = 1..4 in turn; the numbers are the runs' totals, over "
             "short runs on a host whose memory speed moved (above), so the speedups are indicative; the next "
             "section's expected speedups come from the parts' medians.", "",
             "| weights | k | tok/s | speedup | acceptance length | verify ms/step | draft ms/step | draft ÷ verify |",
             "|---|---|---|---|---|---|---|---|"]
    for w, label in WEIGHTS.items():
        runs = rs[w]["e2e"][0]["runs"]
        plain = runs[0]["tokens_per_second"]
        for k, r in enumerate(runs):
            steps = r["verify_steps"]
            verify = r["verify_seconds"] / steps
            draft = r["draft_seconds"] / steps if k else 0.0
            al = r["mean_acceptance_length"] if k else 1.0
            lines.append(f"| {label} | {k} | {r['tokens_per_second']:.2f} | {r['tokens_per_second'] / plain:.2f}× | {al:.2f} | "
                         f"{1e3 * verify:.0f} | {1e3 * draft:.1f} | {draft / verify:.3f} |")
    return lines + [""]


def verify_lines(costs: dict[str, LayerCosts]) -> list[str]:
    lines = ["## Verify cost per row count", "",
             f"One forward of L rows at context {CONTEXT} over one of a row (r_L), measured on the cut (16 experts: "
             "the rows' expert union is what they read) and priced for the release's 64 experts (each MoE layer's "
             "time per expert read, times the expected union of L rows routing 4 of 64).", "",
             "| weights | " + " | ".join(f"r_{L}, measured | r_{L}, 64 experts" for L in range(2, 6)) + " |",
             "|---|" + "---|" * 8]
    for w, label in WEIGHTS.items():
        c = costs[w]
        kinds = [layer["kind"] for layer in c.data["layers"]]
        one = c.project(CONTEXT, 1, kinds, scaled=False)["seconds"]
        one_full = c.project(CONTEXT, 1, kinds, scaled=True)["seconds"]
        cells = []
        for L in range(2, 6):
            cells.append(f"{c.project(CONTEXT, L, kinds, scaled=False)['seconds'] / one:.2f}")
            cells.append(f"{c.project(CONTEXT, L, kinds, scaled=True)['seconds'] / one_full:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + [""]


def best_k_lines(costs: dict[str, LayerCosts]) -> list[str]:
    """The expected speedup per k from the measured parts, priced at 64 experts, with the head's cost
    in the drafts and without it."""
    lines = ["## The head's share and the best k", "",
             "A draft step runs the MTP layer and the head (154,880 × 2,048). Here the head is about 10% of a "
             "token's weights, against about 2% in GLM-5.2, so it dominates the draft. The expected speedup "
             "E[L] / (r_{k+1} + drafts + MTP extend), in plain steps, from the measured parts priced at 64 experts; "
             "the second number of each cell takes the head out of the drafts (a draft as cheap as its MTP layer).", ""]
    for w, label in WEIGHTS.items():
        c = costs[w]
        kinds = [layer["kind"] for layer in c.data["layers"]]
        t1 = c.project(CONTEXT, 1, kinds)["seconds"]
        head, step = c.head_row(CONTEXT), c.mtp_step(CONTEXT)
        lines += [f"### {label}", "",
                  f"Plain step {1e3 * t1:.0f} ms (64 experts); head over one row {1e3 * head:.1f} ms; MTP step with the head "
                  f"{1e3 * step:.1f} ms, so the head is {head / step:.0%} of a draft step.", "",
                  "| rates | " + " | ".join(f"k = {k}" for k in range(1, 5)) + " | best k (with head, without) |",
                  "|---|---|---|---|---|---|"]
        for name, rates in RATES.items():
            cells, with_head, without = [], [], []
            for k in range(1, 5):
                rk = c.project(CONTEXT, k + 1, kinds)["seconds"] / t1
                el = expected_length(rates, k)
                s = c.speedup(CONTEXT, t1, rk, k, rates)
                drafts = (head + (k - 1) * step) / t1
                s_free = el / (rk + (drafts - k * head / t1) + c.mtp_extend(CONTEXT, el) / t1)
                with_head.append(s)
                without.append(s_free)
                cells.append(f"{s:.2f} / {s_free:.2f}")
            best = (max(range(4), key=lambda i: with_head[i]) + 1, max(range(4), key=lambda i: without[i]) + 1)
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {best[0]}, {best[1]} |")
        lines.append("")
    return lines


def llama_spec(path) -> dict:
    text = path.read_text()
    get = lambda key: re.search(rf"{key}\s*=\s*([0-9.]+)", text)  # noqa: E731
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds, speed:\s+([0-9.]+)", text)
    return {"drafted": int(get("n_drafted").group(1)), "accepted": int(get("n_accept").group(1)),
            "tok_s": float(decoded.group(3))}


def mtp_draft_lines(load, results, out_dir) -> list[str]:
    lines = ["## Each engine's own MTP drafts on the same weights", "",
             "Greedy, 32 new tokens from a short prompt, the bf16 weights (llama.cpp: `llama-speculative-simple "
             "--spec-type draft-mtp --spec-draft-n-max k`; mtpspec: `generate --k k`). The weights are random, so "
             "the acceptance says nothing about the trained head: these rows show what drafting costs each engine "
             "at the acceptance it reached.", "",
             "| k | llama.cpp tok/s | llama.cpp accepted / drafted | mtpspec tok/s | mtpspec accepted / drafted |",
             "|---|---|---|---|---|"]
    plain = load("mtpspec_spec_k0.json")
    llama_plain = llama_rate(load("llama_decode_bf16.json"), 0, 32, 0)
    lines.append(f"| 0 | {llama_plain:.2f} (llama-bench) | — | {plain['tokens_per_second']:.2f} | — |")
    for k in (1, 2, 3):
        log = results / f"llama_spec_bf16_k{k}.log"
        shutil.copyfile(log, out_dir / log.name)
        theirs, ours = llama_spec(log), load(f"mtpspec_spec_k{k}.json")
        lines.append(f"| {k} | {theirs['tok_s']:.2f} | {theirs['accepted']} / {theirs['drafted']} | "
                     f"{ours['tokens_per_second']:.2f} | {ours['num_accepted_tokens']} / {ours['num_draft_tokens']} |")
    return lines + [""]


def main() -> None:
    args = page_arguments(__doc__)
    load = json_loader(args.results, args.out / DATA)
    rs = {w: load(f"real_scale_{w}.json") for w in WEIGHTS}
    missing = [w for w, run in rs.items() if run is None]
    if missing:
        raise SystemExit(f"{args.results}: no real_scale run for {missing}: run scripts/compare_glm47_flash.sh first")
    costs = {w: LayerCosts(run) for w, run in rs.items()}
    run = rs["stored"]["run"]
    cfg = rs["stored"]["config"]
    intro = (f"GLM-4.7-Flash at full depth: all {cfg['num_hidden_layers']} layers and the MTP layer at the release's "
             f"real dimensions, with {cfg['n_routed_experts']} of its "
             f"{cfg.get('mtpspec_cut_from', {}).get('n_routed_experts', '?')} routed experts, so every token still reads "
             "the release's active weights (4 routed experts and the shared one). The weights are random "
             "(`mtpspec make-checkpoint --like glm-4.7-flash --experts 16`): the page measures speed, and acceptance is "
             "SYNTHETIC at published rates, each list stated with its form. Rates, their sources and forms: "
             "`bench/report/real_scale_report.py`, `docs/models.md`.")
    lines = heading_lines("GLM-4.7-Flash at full depth", intro, run, DATA, args.command or [run["command"]])
    lines += plain_lines(load, rs) + e2e_lines(rs) + verify_lines(costs) + best_k_lines(costs)
    lines += mtp_draft_lines(load, args.results, args.out / DATA)
    (args.out / "glm-4.7-flash.md").write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {args.out / 'glm-4.7-flash.md'}")


if __name__ == "__main__":
    main()
