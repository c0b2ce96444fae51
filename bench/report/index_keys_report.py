#!/usr/bin/env python3
"""The index-keys section of docs/results/numerics.md (bench/report/numerics_report.py): the DSA
indexer with its keys in bf16 or fp8 against f32.

Reads, from numerics_report.py's --results (build/results), for each variant V in bf16 and fp8 that is there:
  index_keys_V_trained.json, index_keys_V_glm_a.json, index_keys_V_dsv32_b.json
      numerics_bench --variant V-index-keys (accuracy, selection overlap, MTP acceptance)
  index_keys_<cut>_f32.json and index_keys_<cut>_V.json for the cuts glm7 and dsv4
      real_scale_bench --max-rows 1 --index-keys f32|V (the indexer's time, the projection)
  index_keys_<cut>_side_by_side.json
      real_scale_bench --decode-side-by-side f32,bf16,fp8 (whole decode steps, alternating)


"""

from __future__ import annotations

from statistics import median

from results_page import demoted, section_heading, side_by_side_table  # noqa: E402  (bench/report/)

from real_scale_bandwidth import paired_ratios  # noqa: E402  (bench/report/)
from real_scale_report import LayerCosts, full_schedule  # noqa: E402

VARIANTS = ["bf16", "fp8"]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
ACCURACY = [("trained", "bundled trained model (models/glm-tiny-mtp), held-out text"),
            ("glm_a", "golden glm_a (random weights), random ids"),
            ("dsv32_b", "golden dsv32_b (random weights), random ids")]

INTRO = """`--index-keys bf16|fp8` (C++ `LoadOptions::index_keys`, Python `Model.load(..., index_keys=...)`)
changes how the lightning indexer keeps its keys and computes its scores; the ReLU, the head weights,
the top-k and everything else stay f32, and the default is f32, as transformers computes them.

- **bf16**: keys stored in bf16, each query head rounded to bf16. Each (row, head, key) dot product is
  one chain of bf16 pair products summed in f32, the arithmetic of the AVX-512 BF16 instruction
  VDPBF16PS (`kernels/bf16_pairs.h`): 32 multiply-adds per instruction where an f32 multiply-add does
  16, and half the key bytes.
- **fp8**: DeepSeek-V3.2's reference inference code's numerics (`attention/indexer_fp8.h`): keys and
  query heads rotated by the normalised Hadamard transform, then quantised to e4m3 with one
  power-of-two scale each; the e4m3 products summed in f32, the query's scale in its head weight and
  the key's on its score. A key takes one byte per value and a 4-byte scale. The scores use the same
  pair products, on the e4m3 values widened (exactly) to bf16 a 64-key block at a time.

DeepSeek's GPU kernel for these scores (DeepGEMM's `fp8_mqa_logits`) takes FP8 queries and keys: the
releases are served with scores computed below f32 precision. The row-independence rule holds for
every setting, so speculative output stays identical to plain output (tests/spec/lossless_test.cc).
The rounding of q and k moves the scores (bf16: 2^-8 relative per value; e4m3: 2^-4), so near-ties in
the top-k can resolve the other way. The sections below measure what each setting changes, and what
it saves."""

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


class CutRuns:
    """The f32 run of one cut and the runs with reduced-precision keys."""

    def __init__(self, runs: dict[str, dict]):
        self.runs = runs
        self.costs = {keys: LayerCosts(run) for keys, run in runs.items()}
        self.f32 = self.costs["f32"]
        self.variants = [v for v in VARIANTS if v in runs]
        self.contexts = [n for n in self.f32.contexts if all(n in c.contexts for c in self.costs.values())]
        self.kinds = full_schedule(self.f32.cfg)
        self.full_layers = sum(k.endswith("+full") for k in self.kinds)
        self.cut_full = sum(l["kind"].endswith("+full") for l in runs["f32"]["layers"])
        self.step_bytes = cut_bytes(runs["f32"])

    def saved_ms(self, keys: str, n: int) -> float:
        """Indexer + top-k milliseconds the keys save over the cut's layers with an indexer."""
        return indexer_ms(self.f32, n) - indexer_ms(self.costs[keys], n)

    def composed_ratios(self, keys: str, n: int) -> list[float]:
        """Each f32 repetition's step less the saving, as weight bytes per second over the read
        bandwidth measured just before it (keys "f32": the measured ratios)."""
        saved = 0.0 if keys == "f32" else self.saved_ms(keys, n) / 1e3
        bws = self.f32.point(n).get("read_bandwidth_by_rep") or []
        paired = self.f32.row(n, 1).get("paired", [])
        return [self.step_bytes / (p["whole"] - saved) / bw for p, bw in zip(paired, bws)]

    def projected_ms(self, keys: str, n: int) -> float:
        full = 1e3 * self.f32.project(n, 1, self.kinds)["seconds"]
        if keys == "f32":
            return full
        return full - self.saved_ms(keys, n) / self.cut_full * self.full_layers


def speed_section(name: str, cut: CutRuns) -> list[str]:
    """The indexer's time with each key storage (measured in each run), and the step without the time
    reduced-precision keys save: the f32 run's measured steps less the saving (composed; the runs are
    minutes apart and the memory's speed moves between them, so their whole steps are not compared)."""
    runs = cut.runs
    layers = len(runs["f32"]["layers"])
    lines = [f"### {name}", "",
             f"The cut has {layers} layers ({cut.cut_full} with their own indexer) in the release's FP8 format and "
             f"dimensions; one row's decode step reads {cut.step_bytes / 1e9:.2f} GB of weights. The indexer's time is "
             "measured in each run (medians of the repetitions; it is compute, and barely moves with the memory's "
             "speed). The whole steps are not compared run against run: the memory's speed moved between the runs "
             "(see the ranges below) and moves a step by more than the indexer's share. Instead the step with "
             "reduced-precision keys is **composed**: each repetition of the f32 run less the indexer time those keys "
             "save at that N, over the read bandwidth measured just before that repetition. The full release's step "
             f"is a **PROJECTION** as in real-scale.md: its {len(cut.kinds)} layers ({cut.full_layers} with their "
             "own indexer, 256 experts) summed from the f32 run's per-layer costs, less the saving on each layer "
             "with an indexer.", "",
             "| N | indexer + top-k, f32 (ms) | " + " | ".join(f"{v} (ms) | speedup" for v in cut.variants) + " |",
             "|---|---|" + "---|---|" * len(cut.variants)]
    for n in cut.contexts:
        base = indexer_ms(cut.f32, n)
        cells = " | ".join(f"{indexer_ms(cut.costs[v], n):.1f} | {base / indexer_ms(cut.costs[v], n):.2f}"
                           for v in cut.variants)
        lines.append(f"| {n} | {base:.1f} | {cells} |")
    lines += ["", "| N | cut step, f32 (ms) | " + " | ".join(f"composed, {v} (ms)" for v in cut.variants) +
              " | ÷ read bandwidth, f32 | " + " | ".join(f"composed, {v}" for v in cut.variants) +
              " | PROJECTED full step, f32 (ms) | " + " | ".join(f"{v} (ms) | ratio" for v in cut.variants) + " |",
              "|---|---|" + "---|" * len(cut.variants) + "---|" + "---|" * len(cut.variants) + "---|" +
              "---|---|" * len(cut.variants)]
    ratios = {keys: [] for keys in ["f32"] + cut.variants}
    for n in cut.contexts:
        step = whole_ms(cut.f32, n)
        per = {keys: cut.composed_ratios(keys, n) for keys in ratios}
        for keys, values in per.items():
            ratios[keys] += values
        full = cut.projected_ms("f32", n)
        lines.append(f"| {n} | {step:.1f} | " +
                     " | ".join(f"{step - cut.saved_ms(v, n):.1f}" for v in cut.variants) +
                     f" | {median(per['f32']):.2f} | " + " | ".join(f"{median(per[v]):.2f}" for v in cut.variants) +
                     f" | {full:.0f} | " +
                     " | ".join(f"{cut.projected_ms(v, n):.0f} | {full / cut.projected_ms(v, n):.2f}"
                                for v in cut.variants) + " |")
    lines.append("")
    for keys, values in ratios.items():
        if values:
            label = "f32 keys (measured)" if keys == "f32" else f"{keys} keys (composed)"
            overall = median(values)
            lines.append(f"- Decode weight bytes per second ÷ read bandwidth, {label}: median {overall:.2f} over "
                         f"{len(values)} paired repetitions at all contexts.")
    for keys, c in cut.costs.items():
        bws = [b for n in cut.contexts for b in c.point(n).get("read_bandwidth_by_rep", [])]
        if bws:
            lines.append(f"- Read bandwidth in the {keys} run: median {median(bws) / 1e9:.1f} GB/s "
                         f"({min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}).")
    return lines + [""]


def side_by_side_lines(run: dict) -> list[str]:
    """Whole one-row decode steps of the cut with each key storage, alternating within every repetition
    (real_scale_bench --decode-side-by-side), each paired with the read bandwidth measured before it."""
    storages = [s for s in ["f32"] + VARIANTS if s in run["contexts"][0]["storages"]]
    lines = ["Measured side by side: one cache per key storage, filled with the same random values, and in every "
             "repetition one whole decode step with each, in turn (the order rotating), each after its own read "
             "bandwidth measurement. The step ratio is the median over repetitions of f32's step over the other "
             "storage's step in the same repetition.", ""]
    table, pooled = side_by_side_table(run, storages)
    lines += table
    lines.append("")
    reps = len(run["contexts"][0]["storages"][storages[0]]["whole"])
    for s in storages:
        overall = median(pooled[s])
        lines.append(f"- Decode weight bytes per second ÷ read bandwidth with {s} keys, measured side by side: median "
                     f"{overall:.2f} over {len(pooled[s])} paired repetitions ({reps} per context).")
    bws = [b for p in run["contexts"] for s in storages for b in p["storages"][s]["read_bandwidth"]]
    lines.append(f"- Read bandwidth in this run: median {median(bws) / 1e9:.1f} GB/s "
                 f"({min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f}).")
    return lines + [""]


def memory_lines(runs: list[tuple[str, dict]]) -> list[str]:
    lines = ["### Cache bytes per token of the full releases", "",
             "The f32 cache keeps, per layer, the latent (kv_lora_rank values) and the rope key, and on layers with "
             "their own indexer the indexer key (index_head_dim values): 4 bytes a value in f32, 2 in bf16, and 1 "
             "plus a 4-byte scale per key in fp8.", "",
             "| release | layers (with an indexer) | f32 keys (bytes/token) | bf16 keys | saved | fp8 keys | saved |",
             "|---|---|---|---|---|---|---|"]
    for name, run in runs:
        cfg = run["config"]
        kinds = full_schedule(cfg)
        full = sum(k.endswith("+full") for k in kinds)
        base = len(kinds) * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 4
        d = cfg["index_head_dim"]
        f32, bf16, fp8 = base + full * d * 4, base + full * d * 2, base + full * (d + 4)
        lines.append(f"| {name} | {len(kinds)} ({full}) | {f32} | {bf16} | {1 - bf16 / f32:.1%} | {fp8} | "
                     f"{1 - fp8 / f32:.1%} |")
    return lines + [""]


def accuracy_lines(results: dict[tuple[str, str], dict]) -> list[str]:
    lines = ["## What reduced-precision keys change", "",
             "`numerics_bench --variant bf16-index-keys|fp8-index-keys` runs every window twice, with f32 keys (the "
             "reference) and the other keys: teacher-forced decode steps after a one-call prefill (KL(p_f32 ‖ p), "
             "argmax agreement, the held-out loss of the true next token), free-running greedy decoding, and MTP "
             "drafting at k = 2 (sampler-equality, T = 0), each side with its own MTP layer cache. At every "
             "teacher-forced step it also compares the two top-k selections of each layer with its own indexer, "
             "when the step sees more keys than index_topk.", "",
             "| model | keys | windows × steps | mean KL (nats) | p99 KL | argmax agreement | held-out loss f32 → keys | "
             "greedy: first difference, equal share | MTP mean acceptance length f32 → keys |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, label in ACCURACY:
        for v in VARIANTS:
            r = results.get((v, key))
            if r is None:
                continue
            t, g, s = r["teacher_forced"], r["greedy"], r["settings"]
            mtp = r.get("mtp") or {}
            acc = (f"{mtp['mean_acceptance_length_f32']:.3f} → {mtp[f'mean_acceptance_length_{v}_index_keys']:.3f}"
                   if mtp else "—")
            lines.append(f"| {label} | {v} | {s['windows']} × {s['eval_tokens']} | {t['mean_kl_nats']:.2e} | "
                         f"{t['p99_kl_nats']:.2e} | {t['argmax_agreement']:.4f} | {t['mean_nll_f32']:.4f} → "
                         f"{t[f'mean_nll_{v}_index_keys']:.4f} | {g['mean_first_difference']:.1f} of {g['tokens']}, "
                         f"{g['mean_equal_fraction']:.3f} | {acc} |")
    lines += ["", "The share of each decode step's top-k keys that the selection with reduced-precision keys has in "
              "common with f32's, per layer with its own indexer (the first such layer sees the same inputs in both "
              "runs, so it isolates the rounding; later ones also carry the earlier layers' differences):", "",
              "| model | keys | layer: shared share (top-k keys compared) |", "|---|---|---|"]
    for key, label in ACCURACY:
        for v in VARIANTS:
            r = results.get((v, key))
            if r is None or not r.get("selection_overlap"):
                continue
            cells = ", ".join(f"{o['layer']}: {o['shared_fraction']:.4f} ({o['selected_keys']})"
                              for o in r["selection_overlap"])
            lines.append(f"| {label} | {v} | {cells} |")
    lines += ["", GOLDEN_NOTE]
    return lines + [""]


def summary_lines(speed: dict[str, CutRuns], side_by_side: dict[str, dict],
                  accuracy: dict[tuple[str, str], dict]) -> list[str]:
    lines = ["## Summary", ""]
    for v in VARIANTS:
        for name, cut in speed.items():
            if v not in cut.variants:
                continue
            speedups = [indexer_ms(cut.f32, n) / indexer_ms(cut.costs[v], n) for n in cut.contexts]
            projected = [f"{cut.projected_ms('f32', n) / cut.projected_ms(v, n):.2f}x at N = {n}" for n in cut.contexts]
            measured = ""
            if name in side_by_side and v in side_by_side[name]["contexts"][0]["storages"]:
                cells = []
                for point in side_by_side[name]["contexts"]:
                    st = point["storages"]
                    ratio = median(a / b for a, b in zip(st["f32"]["whole"], st[v]["whole"]))
                    cells.append(f"{ratio:.2f}x at N = {point['context']}")
                measured = f"; the cut's whole step, measured side by side: {', '.join(cells)}"
            lines.append(f"- {v} keys, {name}: the indexer and its top-k run {min(speedups):.2f}-{max(speedups):.2f}x "
                         f"as fast as with f32 keys (measured){measured}; the full model's decode step, PROJECTED: "
                         f"{', '.join(projected)}.")
        t = accuracy.get((v, "trained"))
        if t:
            shares = [o["shared_fraction"] for o in t.get("selection_overlap", [])]
            mtp = t.get("mtp") or {}
            lines.append(f"- {v} keys, on the bundled trained model over held-out text: {min(shares):.1%}-"
                         f"{max(shares):.1%} of each decode step's top-k keys are the ones f32 selects; mean KL "
                         f"{t['teacher_forced']['mean_kl_nats']:.1e} nats; held-out loss "
                         f"{t['teacher_forced']['mean_nll_f32']:.4f} → {t['teacher_forced'][f'mean_nll_{v}_index_keys']:.4f}"
                         + (f"; MTP mean acceptance length at k = 2 {mtp['mean_acceptance_length_f32']:.3f} → "
                            f"{mtp[f'mean_acceptance_length_{v}_index_keys']:.3f}." if mtp else "."))
    return lines + [""]


def section(load) -> list[str]:
    """The index-keys section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = {(v, key): r for v in VARIANTS for key, _ in ACCURACY
                if (r := load(f"index_keys_{v}_{key}.json")) is not None}
    speed, side_by_side = {}, {}
    for cut, name in CUTS:
        runs = {keys: r for keys in ["f32"] + VARIANTS if (r := load(f"index_keys_{cut}_{keys}.json")) is not None}
        if "f32" in runs and len(runs) > 1:
            speed[name] = CutRuns(runs)
        if (run := load(f"index_keys_{cut}_side_by_side.json")) is not None:
            side_by_side[name] = run
    if not speed and not accuracy:
        return []
    first = next(iter(speed.values())).runs["f32"] if speed else next(iter(accuracy.values()))
    md = section_heading("The indexer's keys in bf16 and fp8", INTRO, first["run"])
    body = summary_lines(speed, side_by_side, accuracy)
    body += ["## What reduced-precision keys save", ""]
    for name, cut in speed.items():
        body += speed_section(name, cut)
        if name in side_by_side:
            body += side_by_side_lines(side_by_side[name])
    if speed:
        body += memory_lines([(name, cut.runs["f32"]) for name, cut in speed.items()])
    body += accuracy_lines(accuracy)
    return md + demoted(body)
