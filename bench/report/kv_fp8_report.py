#!/usr/bin/env python3
"""The fp8-latent section of docs/results/numerics.md (bench/report/numerics_report.py): the latent
cache as DeepSeek-V3.2 is served (fp8) against f32.

Reads, from numerics_report.py's --results (build/results):
  kv_fp8_trained.json, kv_fp8_glm_a.json, kv_fp8_dsv32_b.json
      numerics_bench --variant fp8-latent (accuracy, MTP acceptance; memory from the first)
  kv_fp8_attention_1.json … kv_fp8_attention_6.json
      linear_bench --benchmark_filter=BM_AttentionCore --benchmark_repetitions=3 --benchmark_format=json, six
      separate processes (the attention core)
  kv_fp8_<cut>_side_by_side.json for the cuts glm7 and dsv4
      real_scale_bench --decode-side-by-side f32,f32:f32:fp8,fp8:fp8:fp8 --side-by-side-rows 3


"""

from __future__ import annotations

import re
from statistics import median

from results_page import DIVERGENCE_NOTE, comparison_row, demoted, section_heading, side_by_side_table  # noqa: E402  (bench/report/)

ACCURACY = [("trained", "models/glm-tiny-mtp (trained), held-out text"), ("glm_a", "golden glm_a (random weights)"),
            ("dsv32_b", "golden dsv32_b (random weights)")]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
ORDER = ["f32", "f32:f32:fp8", "fp8:fp8:fp8"]
LABEL = {"f32": "f32 cache, f32 indexer keys, f32 input rows",
         "f32:f32:fp8": "fp8 cache (f32 indexer keys and input rows)",
         "fp8:fp8:fp8": "as served: fp8 cache, fp8 indexer keys, fp8 input rows"}

INTRO = """`--kv-cache fp8` (C++ `LatentStorage::kFp8`, Python `kv_cache="fp8"`) keeps the trunk's latent
cache as DeepSeek-V3.2 is served by FlashMLA's sparse decoding kernel: per token and layer the 512
latent values as float8_e4m3fn with one f32 scale per 128 of them (the smallest power of two ≥
max(max|c| / 448, 1e-4)), and the 64 rope values in bf16, 656 bytes against 2,304 in f32. The decode
and verify attention over it computes as that kernel does: the selected keys dequantised to bf16
(exactly), the queries and the softmax weights rounded to bf16, and both products as chains of bf16
pair products summed in f32, the arithmetic of the AVX-512 BF16 instruction VDPBF16PS
(`attention/mla_bf16.h`); the softmax is f32. Prefill chunks that take the naive form widen the cached
latents to f32; the MTP layer's own cache stays f32. Every (row, head) result is one fixed chain, so
speculative output stays identical to plain output (tests/spec/lossless_test.cc,
tests/spec/tree_verify_test.cc)."""


def accuracy_lines(results: dict[str, dict]) -> list[str]:
    lines = ["## What the fp8 cache changes", "",
             "`numerics_bench --variant fp8-latent` runs every window through the model twice, with the f32 cache (the "
             "reference) and the fp8 cache: teacher-forced decode steps after a one-call prefill (KL(p_f32 ‖ p_fp8), "
             "the largest logit error relative to the row's logit range, argmax agreement, the held-out loss of the "
             "true next token), free-running greedy decoding, and MTP drafting at k = 2 (sampler-equality, T = 0). "
             "The golden models have random weights and random ids, so their numbers bound the effect on "
             "untrained attention rather than measure it on text.", "",
             "| model | windows × steps | mean KL (nats) | p99 KL | max rel. logit error | argmax agreement | "
             "held-out loss, f32 → fp8 | greedy: first difference, equal share | MTP mean acceptance length f32 → fp8 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, name in ACCURACY:
        r = results.get(key)
        if r is None:
            continue
        lines.append(comparison_row(name, r, "fp8"))
    lines += ["", DIVERGENCE_NOTE]
    return lines + [""]


def memory_lines(trained: dict) -> list[str]:
    lines = ["## Memory", "",
             "Cache bytes per token, all layers, from each config (`CacheBytesPerToken`). The fp8 column keeps the "
             "indexer keys in f32; the last column adds `--index-keys fp8` (e4m3 keys with one f32 scale each), the "
             "pair the release is served with.", "",
             "| config | layers | f32 | int8 latent | fp8 latent | fp8 latent and fp8 indexer keys | "
             "GiB at 131072 tokens, f32 → fp8 and fp8 keys |",
             "|---|---|---|---|---|---|---|"]
    for m in trained.get("memory", []):
        b = m["bytes_per_token"]
        served = b["fp8_with_fp8_index_keys"]
        gib = m["context"] / 2**30
        lines.append(f"| {m['source']} | {m['layers']} | {b['f32']:,} | {b['int8']:,} | {b['fp8']:,} | {served:,} | "
                     f"{b['f32'] * gib:.2f} → {served * gib:.2f} |")
    return lines + [""]


def core_times(data: dict) -> dict[int, float]:
    """BM_AttentionCore's median time (µs) per fp8 argument in one linear_bench process's JSON."""
    times = {}
    for b in data["benchmarks"]:
        m = re.match(r"BM_AttentionCore/fp8:(\d)", b["name"])
        if m and b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median":
            times[int(m.group(1))] = b["real_time"]
    return times


def attention_lines(runs: list[dict]) -> tuple[list[str], tuple[float, float, float, float] | None]:
    pairs = [(t[0], t[1]) for t in (core_times(r) for r in runs) if 0 in t and 1 in t]
    if not pairs:
        return [], None
    ratios = [f32 / fp8 for f32, fp8 in pairs]
    lines = ["## The attention core", "",
             "`linear_bench --benchmark_filter=BM_AttentionCore`: one query row's absorbed attention over 2048 selected "
             "keys of a 16384-slot cache at DeepSeek-V3.2's shape (128 heads, r_kv = 512, d_r = 64), 2 threads, heads "
             "split between them: the scores, the softmax and the weighted latents, and with the fp8 cache also each "
             "thread's own layout of the keys for the pair products. The products with kv_b_proj are not part of "
             f"it. {len(pairs)} separate processes, each the median of 3 repetitions of both: on this host the fp8 "
             "cache's speed differs from process to process while the f32 cache's barely moves, so every process is "
             "listed.", "",
             "| process | f32 cache (µs) | fp8 cache (µs) | f32 ÷ fp8 |", "|---|---|---|---|"]
    for i, (f32, fp8) in enumerate(pairs, 1):
        lines.append(f"| {i} | {f32:.0f} | {fp8:.0f} | {f32 / fp8:.2f} |")
    lines += ["", f"Median f32 ÷ fp8 over the processes: {median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})."]
    saving_ms = median(f32 - fp8 for f32, fp8 in pairs) / 1e3
    return lines + [""], (median(ratios), saving_ms, min(ratios), max(ratios))


def share_line(name: str, run: dict, core_saving_ms: float) -> str:
    """What the attention core's measured saving (at DeepSeek-V3.2's 128 heads; scaled to the cut's
    heads, as an upper bound, for other cuts) is worth against the cut's f32 decode step at the
    shortest context."""
    c = run["config"]
    layers, heads = c["num_hidden_layers"], c["num_attention_heads"]
    point = run["contexts"][0]
    step_ms = 1e3 * median(point["storages"]["f32"]["whole"])
    saving = core_saving_ms * heads / 128 * layers
    measured = "" if heads == 128 else (f"; scaled to this cut's {heads}, an upper bound since the keys' layout does "
                                         "not shrink with the heads")
    return (f"- The attention core's saving ({core_saving_ms:.2f} ms a layer at 128 heads{measured}) "
            f"over its {layers} layers is {saving:.1f} ms, {100 * saving / step_ms:.1f}% of its f32 decode step at "
            f"N = {point['context']} ({step_ms:.0f} ms): a step streams weights, and the fp8 cache changes only the "
            "attention over the selected keys, so its effect on a decode step lies within this run's spread. The "
            "served numerics move the step further through the fp8 indexer keys (the indexer's scores) and the fp8 "
            "input rows (the FP8 GEMV's widening).")


def side_by_side_lines(name: str, run: dict) -> tuple[list[str], dict]:
    stored = run["contexts"][0]["storages"]
    entries = [e for e in ORDER if e in stored]
    lines = [f"### {name}", "",
             f"The cut in the release's FP8 format and dimensions (`real_scale_bench --decode-side-by-side`); one row's "
             f"decode step reads {run['step_weight_bytes'] / 1e9:.2f} GB of weights, its head in bf16. One model, "
             "switched between input-row precisions, and one cache per entry filled with the same random values; in "
             "every repetition each entry in turn (the order rotating) runs one decode step after its own "
             "read-bandwidth measurement, then a verify of 3 rows. Ratios are medians over repetitions of ratios "
             "within a repetition.", "",
             "Entries: " + "; ".join(f"`{e}` = {LABEL[e]}" for e in entries) + ".", ""]
    table, pooled = side_by_side_table(run, entries)
    lines += table
    lines += ["", "A verify of 3 rows over the one-row step of the same entry in the same repetition (r_2 on the "
              "cut), and the f32 entry's verify over each other entry's.", "",
              "| N | " + " | ".join(f"T(3) ÷ T(1), {e}" for e in entries) + " | " +
              " | ".join(f"verify f32 ÷ {e}" for e in entries[1:]) + " | cache bytes per token (" +
              ", ".join(entries) + ") |",
              "|---|" + "---|" * (2 * len(entries))]
    for point in run["contexts"]:
        st = point["storages"]
        if "3" not in st[entries[0]].get("verify", {}):
            continue
        r = {e: median(v / w for v, w in zip(st[e]["verify"]["3"], st[e]["whole"])) for e in entries}
        gain = {e: median(a / b for a, b in zip(st["f32"]["verify"]["3"], st[e]["verify"]["3"])) for e in entries[1:]}
        lines.append(f"| {point['context']} | " + " | ".join(f"{r[e]:.2f}" for e in entries) + " | " +
                     " | ".join(f"{gain[e]:.2f}" for e in entries[1:]) + " | " +
                     " / ".join(f"{st[e]['cache_bytes_per_token']:,}" for e in entries) + " |")
    lines.append("")
    bws = [b for p in run["contexts"] for e in entries for b in p["storages"][e]["read_bandwidth"]]
    for e in entries:
        overall = median(pooled[e])
        lines.append(f"- Decode weight bytes per second ÷ read bandwidth, `{e}`: median {overall:.2f} over "
                     f"{len(pooled[e])} paired repetitions.")
    lines.append(f"- Read bandwidth in this run: median {median(bws) / 1e9:.1f} GB/s "
                 f"({min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}).")
    return lines + [""], {e: median(v) for e, v in pooled.items()}


def section(load) -> list[str]:
    """The fp8-latent section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = {k: r for k, _ in ACCURACY if (r := load(f"kv_fp8_{k}.json")) is not None}
    attention = [r for i in range(1, 7) if (r := load(f"kv_fp8_attention_{i}.json")) is not None]
    cuts = {name: r for cut, name in CUTS if (r := load(f"kv_fp8_{cut}_side_by_side.json")) is not None}
    if not cuts and not accuracy:
        return []
    first = next(iter(cuts.values())) if cuts else next(iter(accuracy.values()))
    md = section_heading("The latent cache as DeepSeek-V3.2 is served (fp8)", INTRO, first["run"])
    body, summary = [], ["## Summary", ""]
    if "trained" in accuracy:
        t = accuracy["trained"]["teacher_forced"]
        mtp = accuracy["trained"].get("mtp") or {}
        summary.append(f"- On the bundled trained model over held-out text: mean KL {t['mean_kl_nats']:.1e} nats, argmax "
                       f"agreement {t['argmax_agreement']:.4f}, held-out loss {t['mean_nll_f32']:.4f} → "
                       f"{t['mean_nll_fp8']:.4f}" + (f"; MTP mean acceptance length at k = 2 "
                                                     f"{mtp['mean_acceptance_length_f32']:.3f} → "
                                                     f"{mtp['mean_acceptance_length_fp8']:.3f}" if mtp else "") + ".")
        for m in accuracy["trained"].get("memory", []):
            if "deepseek" in m["source"]:
                b = m["bytes_per_token"]
                summary.append(f"- DeepSeek-V3.2's cache per token: {b['f32']:,} bytes in f32, {b['fp8']:,} with the fp8 "
                               "latent (the memory table adds fp8 indexer keys).")
    body += accuracy_lines(accuracy)
    if "trained" in accuracy:
        body += memory_lines(accuracy["trained"])
    core = None
    if attention:
        lines, core = attention_lines(attention)
        body += lines
        if core is not None:
            summary.append(f"- The attention core at DeepSeek-V3.2's shape (one row, 2048 keys, 2 threads): {core[0]:.2f}x as "
                           f"fast with the fp8 cache's bf16 products as with the f32 cache (median over {len(attention)} "
                           f"processes, {core[2]:.2f}-{core[3]:.2f}).")
    if cuts:
        body += ["## Whole decode steps and verifies on the cuts", ""]
    for name, run_json in cuts.items():
        lines, pooled = side_by_side_lines(name, run_json)
        if core is not None:
            lines.insert(len(lines) - 1, share_line(name, run_json, core[1]))
        body += lines
        steps = [median(a / b for a, b in zip(p["storages"]["f32"]["whole"], p["storages"][e]["whole"]))
                 for p in run_json["contexts"] for e in ("f32:f32:fp8",) if e in p["storages"]]
        verifies = [median(a / b for a, b in zip(p["storages"]["f32"]["verify"]["3"],
                                                 p["storages"]["fp8:fp8:fp8"]["verify"]["3"]))
                    for p in run_json["contexts"] if "3" in p["storages"].get("fp8:fp8:fp8", {}).get("verify", {})]
        summary.append(f"- {name} cut, measured side by side: the fp8 cache's decode step "
                       f"{min(steps):.2f}-{max(steps):.2f}x as fast as f32's over the contexts; decode weight bytes per "
                       "second ÷ read bandwidth (median over all contexts): " +
                       ", ".join(f"`{e}` {v:.2f}" for e, v in pooled.items()) + "." +
                       (f" A verify of 3 rows as served: {min(verifies):.2f}-{max(verifies):.2f}x as fast as with f32."
                        if verifies else ""))
    return md + demoted(summary + [""] + body)
