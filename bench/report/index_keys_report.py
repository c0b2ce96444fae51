#!/usr/bin/env python3
"""Writes docs/results/index-keys.md: the DSA indexer with its keys in bf16 against f32.

Reads, from --results (build/results):
  index_keys_trained.json, index_keys_glm_a.json, index_keys_dsv32_b.json
      kv_int8_bench --variant bf16-index-keys (accuracy, selection overlap, MTP acceptance)
  index_keys_<cut>_f32.json, index_keys_<cut>_bf16.json for the cuts glm7 and dsv4
      real_scale_bench --max-rows 1 --index-keys f32|bf16 (speed, decode bandwidth)

  python bench/report/index_keys_report.py --results build/results [--command "..."] [--out docs/results]

The JSON files are copied into <out>/index-keys-data/ beside the report.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from statistics import median

from real_scale_bandwidth import paired_ratios  # noqa: E402  (bench/report/)
from real_scale_report import LayerCosts, full_schedule  # noqa: E402

CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
ACCURACY = [("trained", "bundled trained model (models/glm-tiny-mtp), held-out text"),
            ("glm_a", "golden glm_a (random weights), random ids"),
            ("dsv32_b", "golden dsv32_b (random weights), random ids")]

INTRO = """`--index-keys bf16` (C++ `LoadOptions::index_keys = IndexKeyStorage::kBf16`, Python
`Model.load(..., index_keys="bf16")`) keeps the lightning indexer's keys in bf16 and rounds each query
head to bf16 before scoring. Each (row, head, key) dot product is one chain of bf16 pair products
summed in f32, the arithmetic of the AVX-512 BF16 instruction VDPBF16PS (`kernels/bf16_pairs.h`):
it does 32 multiply-adds per instruction where an f32 multiply-add does 16, and the keys take half
the bytes. The ReLU, the head weights, the top-k and everything else stay f32. DeepSeek's own GPU
kernel for these scores (DeepGEMM's `fp8_mqa_logits`) takes FP8 queries and keys: the releases are
served with these scores computed below f32 precision. The row-independence
rule holds as in f32, so speculative output stays identical to plain output with bf16 keys
(tests/mtp/lossless_test.cc).

With bf16 keys the indexer's scores differ from f32's by the rounding of q and k (2^-8 relative
each), so near-ties in the top-k can resolve the other way. The sections below measure what that
changes, and what it saves."""

GOLDEN_NOTE = """The golden models are random weights made sharp on purpose (index_topk 8, so that a comparison
with transformers catches small errors): there one near-tie resolved the other way in an early
layer changes the later layers' inputs, and the differences compound. They show the mechanism;
the trained model shows its size on real text."""


def cut_bytes(run: dict) -> int:
    return sum(l["row_weight_bytes"] for l in run["layers"]) + run["head_bytes"]


def indexer_ms(costs: LayerCosts, n: int) -> float:
    return 1e3 * sum(l["components"].get("indexer", 0.0) + l["components"].get("topk", 0.0)
                     for l in costs.row(n, 1)["layers"])


def whole_ms(costs: LayerCosts, n: int) -> float:
    return 1e3 * median(p["whole"] for p in costs.row(n, 1)["paired"])


def speed_section(name: str, runs: dict[str, dict]) -> list[str]:
    """The indexer's time with each key storage (measured in each run), and the step without the time
    bf16 keys save: the f32 run's measured steps less the saving (composed; the runs are minutes apart
    and the memory's speed moves between them, so their whole steps are not compared directly)."""
    costs = {keys: LayerCosts(run) for keys, run in runs.items()}
    f32, bf16 = costs["f32"], costs["bf16"]
    contexts = [n for n in f32.contexts if n in bf16.contexts]
    kinds = full_schedule(f32.cfg)
    full_layers = sum(k.endswith("+full") for k in kinds)
    layers = len(runs["f32"]["layers"])
    cut_full = sum(l["kind"].endswith("+full") for l in runs["f32"]["layers"])
    step_bytes = cut_bytes(runs["f32"])
    lines = [f"### {name}", "",
             f"The cut has {layers} layers ({cut_full} with their own indexer) in the release's FP8 format and "
             f"dimensions; one row's decode step reads {step_bytes / 1e9:.2f} GB of weights. The indexer's time is "
             "measured in each run (medians of the repetitions; it is compute, and barely moves with the memory's "
             "speed). The whole steps are not compared run against run: the memory's speed moved between the runs "
             "(see the range below) and moves a step by more than the indexer's share. Instead the step with bf16 "
             "keys is **composed**: each repetition of the f32 run less the indexer time bf16 keys save at that N, "
             "over the read bandwidth measured just before that repetition. The full release's step is a "
             f"**PROJECTION** as in real-scale.md: its {len(kinds)} layers ({full_layers} with their own indexer, "
             "256 experts) summed from the f32 run's per-layer costs, less the saving on each layer with an indexer.",
             "",
             "| N | indexer + top-k, f32 (ms) | bf16 (ms) | speedup | cut step, f32 (ms) | composed, bf16 (ms) | "
             "÷ read bandwidth, f32 | composed, bf16 | PROJECTED full step, f32 (ms) | bf16 (ms) | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {"f32": [], "bf16": []}
    for n in contexts:
        saved = indexer_ms(f32, n) - indexer_ms(bf16, n)  # ms over the cut's layers with an indexer
        bws = f32.point(n).get("read_bandwidth_by_rep") or []
        paired = f32.row(n, 1).get("paired", [])
        plain = [step_bytes / p["whole"] / bw for p, bw in zip(paired, bws)]
        composed = [step_bytes / (p["whole"] - saved / 1e3) / bw for p, bw in zip(paired, bws)]
        ratios["f32"] += plain
        ratios["bf16"] += composed
        full = 1e3 * f32.project(n, 1, kinds)["seconds"]
        full_bf16 = full - saved / cut_full * full_layers
        step = whole_ms(f32, n)
        lines.append(f"| {n} | {indexer_ms(f32, n):.1f} | {indexer_ms(bf16, n):.1f} | "
                     f"{indexer_ms(f32, n) / indexer_ms(bf16, n):.2f} | {step:.1f} | {step - saved:.1f} | "
                     f"{median(plain):.2f} | {median(composed):.2f} | {full:.0f} | {full_bf16:.0f} | "
                     f"{full / full_bf16:.2f} |")
    lines.append("")
    for keys, label in (("f32", "f32 keys (measured)"), ("bf16", "bf16 keys (composed)")):
        if ratios[keys]:
            overall = median(ratios[keys])
            verdict = "meets" if overall >= 0.75 else "is below"
            lines.append(f"- Decode weight bytes per second ÷ read bandwidth, {label}: median {overall:.2f} over "
                         f"{len(ratios[keys])} paired repetitions at all contexts; it {verdict} the 0.75 goal.")
    for keys, c in costs.items():
        bws = [b for n in contexts for b in c.point(n).get("read_bandwidth_by_rep", [])]
        if bws:
            lines.append(f"- Read bandwidth in the {keys} run: median {median(bws) / 1e9:.1f} GB/s "
                         f"({min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}).")
    return lines + [""]


def memory_lines(runs: list[tuple[str, dict]]) -> list[str]:
    lines = ["### Cache bytes per token of the full releases", "",
             "The f32 cache keeps, per layer, the latent (kv_lora_rank values) and the rope key, and on layers with "
             "their own indexer the indexer key (index_head_dim values); bf16 keys halve the last.", "",
             "| release | layers (with an indexer) | f32 keys (bytes/token) | bf16 keys | saved |", "|---|---|---|---|---|"]
    for name, run in runs:
        cfg = run["config"]
        kinds = full_schedule(cfg)
        full = sum(k.endswith("+full") for k in kinds)
        base = len(kinds) * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 4
        f32 = base + full * cfg["index_head_dim"] * 4
        bf16 = base + full * cfg["index_head_dim"] * 2
        lines.append(f"| {name} | {len(kinds)} ({full}) | {f32} | {bf16} | {1 - bf16 / f32:.1%} |")
    return lines + [""]


def accuracy_lines(results: dict[str, dict]) -> list[str]:
    lines = ["## What bf16 keys change", "",
             "`kv_int8_bench --variant bf16-index-keys` runs every window twice, with f32 keys (the reference) and "
             "bf16 keys: teacher-forced decode steps after a one-call prefill (KL(p_f32 ‖ p_bf16), argmax agreement, "
             "the held-out loss of the true next token), free-running greedy decoding, and MTP drafting at k = 2 "
             "(sampler-equality, T = 0), each side with its own MTP layer cache. At every teacher-forced step it also "
             "compares the two top-k selections of each layer with its own indexer, when the step sees more keys "
             "than index_topk.", "",
             "| model | windows × steps | mean KL (nats) | p99 KL | argmax agreement | held-out loss f32 → bf16 | "
             "greedy: first difference, equal share | MTP mean acceptance length f32 → bf16 |",
             "|---|---|---|---|---|---|---|---|"]
    for key, label in ACCURACY:
        r = results.get(key)
        if r is None:
            continue
        t, g, s = r["teacher_forced"], r["greedy"], r["settings"]
        mtp = r.get("mtp") or {}
        acc = (f"{mtp['mean_acceptance_length_f32']:.3f} → {mtp['mean_acceptance_length_bf16_index_keys']:.3f}"
               if mtp else "—")
        lines.append(f"| {label} | {s['windows']} × {s['eval_tokens']} | {t['mean_kl_nats']:.2e} | "
                     f"{t['p99_kl_nats']:.2e} | {t['argmax_agreement']:.4f} | {t['mean_nll_f32']:.4f} → "
                     f"{t['mean_nll_bf16_index_keys']:.4f} | {g['mean_first_difference']:.1f} of {g['tokens']}, "
                     f"{g['mean_equal_fraction']:.3f} | {acc} |")
    lines += ["", "The share of each decode step's top-k keys that the bf16 selection has in common with f32's, per "
              "layer with its own indexer (the first such layer sees the same inputs in both runs, so it isolates "
              "the rounding; later ones also carry the earlier layers' differences):", "",
              "| model | layer: shared share (top-k keys compared) |", "|---|---|"]
    for key, label in ACCURACY:
        r = results.get(key)
        if r is None or not r.get("selection_overlap"):
            continue
        cells = ", ".join(f"{o['layer']}: {o['shared_fraction']:.4f} ({o['selected_keys']})"
                          for o in r["selection_overlap"])
        lines.append(f"| {label} | {cells} |")
    lines += ["", GOLDEN_NOTE]
    return lines + [""]


def summary_lines(speed: dict[str, dict], accuracy: dict[str, dict]) -> list[str]:
    lines = ["## Summary", ""]
    for name, runs in speed.items():
        f32, bf16 = LayerCosts(runs["f32"]), LayerCosts(runs["bf16"])
        contexts = [n for n in f32.contexts if n in bf16.contexts]
        kinds = full_schedule(f32.cfg)
        full_layers = sum(k.endswith("+full") for k in kinds)
        cut_full = sum(l["kind"].endswith("+full") for l in runs["f32"]["layers"])
        speedups = [indexer_ms(f32, n) / indexer_ms(bf16, n) for n in contexts]
        projected = []
        for n in contexts:
            full = f32.project(n, 1, kinds)["seconds"]
            saved = (indexer_ms(f32, n) - indexer_ms(bf16, n)) / 1e3 / cut_full * full_layers
            projected.append(f"{full / (full - saved):.2f}x at N = {n}")
        lines.append(f"- {name}: the indexer and its top-k run {min(speedups):.2f}-{max(speedups):.2f}x faster "
                     f"(measured); the full model's decode step, PROJECTED: {', '.join(projected)}.")
    t = accuracy.get("trained")
    if t:
        shares = [o["shared_fraction"] for o in t.get("selection_overlap", [])]
        mtp = t.get("mtp") or {}
        lines.append(f"- On the bundled trained model over held-out text: {min(shares):.1%}-{max(shares):.1%} of each "
                     f"decode step's top-k keys are the ones f32 selects; mean KL {t['teacher_forced']['mean_kl_nats']:.1e} "
                     f"nats; held-out loss {t['teacher_forced']['mean_nll_f32']:.4f} → "
                     f"{t['teacher_forced']['mean_nll_bf16_index_keys']:.4f}"
                     + (f"; MTP mean acceptance length at k = 2 {mtp['mean_acceptance_length_f32']:.3f} → "
                        f"{mtp['mean_acceptance_length_bf16_index_keys']:.3f}." if mtp else "."))
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("build/results"))
    parser.add_argument("--command", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()
    data_dir = args.out / "index-keys-data"
    data_dir.mkdir(parents=True, exist_ok=True)

    def load(name: str) -> dict | None:
        path = args.results / name
        if not path.exists():
            return None
        shutil.copyfile(path, data_dir / name)
        return json.loads(path.read_text())

    accuracy = {key: r for key, _ in ACCURACY if (r := load(f"index_keys_{key}.json")) is not None}
    speed = {}
    for cut, name in CUTS:
        runs = {keys: load(f"index_keys_{cut}_{keys}.json") for keys in ("f32", "bf16")}
        if all(runs.values()):
            speed[name] = runs
    first = next(iter(speed.values()))["f32"] if speed else next(iter(accuracy.values()))
    run = first["run"]
    md = [f"# The indexer's keys in bf16 (run of {run['date_utc'][:10]})", "", INTRO, "",
          f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
          f"{run.get('threads', '?')} mtpspec threads; date (UTC) {run['date_utc']}",
          "- Data: `index-keys-data/` (the JSON of every run).", "", "Commands:", "", "```"]
    md += args.command + ["```", ""]
    md += summary_lines(speed, accuracy)
    md += ["## What bf16 keys save", ""]
    for name, runs in speed.items():
        md += speed_section(name, runs)
    if speed:
        md += memory_lines([(name, runs["f32"]) for name, runs in speed.items()])
    md += accuracy_lines(accuracy)
    (args.out / "index-keys.md").write_text("\n".join(md))
    print(f"wrote {args.out / 'index-keys.md'}")


if __name__ == "__main__":
    main()
