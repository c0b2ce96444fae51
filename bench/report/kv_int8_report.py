#!/usr/bin/env python3
"""The int8-latent section of docs/results/numerics.md (bench/report/numerics_report.py), from
numerics_bench's JSON: kv_int8_trained.json (the trained model) and kv_int8_glm_a.json,
kv_int8_dsv32_b.json (the golden models).
"""

from __future__ import annotations

from pathlib import Path

from results_page import demoted, section_heading

INTRO = """`--kv-cache int8` (C++ `LatentStorage::kInt8`, CLI `mtpspec generate|logits --kv-cache int8`) stores
each token's normalised MLA latent (r_kv values per layer) as int8 with one symmetric f32 scale
(max|c| / 127). The rope key and, on full layers, the indexer key stay f32. Everything else
(weights, activations, the MTP layer's own cache) is unchanged.

`build/release/bench/numerics_bench` (source: `bench/numerics_bench.cc`, maths in
`bench/logit_compare.cc`, unit-tested in `tests/bench/`) runs every window twice, once with an f32
cache (the reference) and once with int8:

- **Teacher-forced decoding.** The first N tokens go in as one prefill call, then the next E true
  tokens one decode call each. Each step's logits are compared with the f32 run's: KL(p_f32 ‖ p_int8),
  the largest logit error relative to the row's logit range, whether the argmax agrees, and the
  held-out loss of the true next token under each cache.
- **Free-running greedy decoding** of G tokens from the same prompt with each cache: where the two
  outputs first differ, and the share of positions that are equal.
- **MTP drafting**, k = 2, sampler-equality, T = 0: the mean acceptance length with each target cache.
"""

GOLDEN_NOTE = """The golden models were built to be sharp, so that the C++/transformers comparison catches small
errors: random weights at initializer_range 0.02 with a 32-value latent and index_topk 8. A small
change to one latent moves later layers' indexer scores, and one changed top-k entry changes a whole
attention row. The cost there is therefore large, and it says little about trained weights.
`tests/model/golden_test.cc` (`Int8LatentCacheTest`) pins the mechanism on them: the logits do
change, by a bounded amount."""

MEMORY_NOTE = """- int8 stores r_kv + 4 bytes of latent per layer, where f32 stores 4 r_kv and bf16 2 r_kv. The rope
  key and the indexer key stay f32 (4 d_r bytes per layer, plus 4 d_I on full layers). The ctest
  `bench.numerics_smoke` checks the GLM-5.2 figures against a count by hand (docs/models.md,
  "IndexShare": 78 layers, 21 of them full).
- On the tiny trained model int8 saves nothing against bf16: its latent is only 64 values, so the
  f32 rope and indexer keys dominate."""


def command_block(run: dict) -> list[str]:
    return ["```", run["command"], "```"]


def trained_section(d: dict) -> list[str]:
    tf, gr, mtp, s = d["teacher_forced"], d["greedy"], d["mtp"], d["settings"]
    identical = sum(1 for w in d["windows"] if w["greedy"]["equal_fraction"] == 1.0)
    windows = len(d["windows"])
    diff = tf["mean_nll_int8"] - tf["mean_nll_f32"]
    lines = [f"## The trained model (`{d['model']}`, held-out prose and code)", ""]
    lines += command_block(d["run"])
    lines += ["", f"{s['windows']} windows, alternating prose and code, each N = {s['context']} plus E = "
              f"{s['eval_tokens']} teacher-forced steps: {tf['rows']} steps in all. The run took "
              f"{d['elapsed_seconds']:.0f} s ({d['run']['date_utc']}, {d['run']['cpu_model']}).", "",
              "| measure | f32 cache | int8 cache |", "|---|---|---|",
              f"| held-out loss (nats/token) over the {tf['rows']} steps | {tf['mean_nll_f32']:.4f} | "
              f"{tf['mean_nll_int8']:.4f} ({diff:+.4f}) |",
              f"| KL(p_f32 ‖ p_int8), mean / p99 / max (nats) | — | {tf['mean_kl_nats']:.1e} / "
              f"{tf['p99_kl_nats']:.1e} / {tf['max_kl_nats']:.3f} |",
              f"| largest logit error / logit range | — | {tf['max_relative_logit_error']:.3f} "
              f"({tf['max_abs_logit_error']:.2f} logits) |",
              f"| teacher-forced greedy token agreement | — | {100 * tf['argmax_agreement']:.2f}% |",
              f"| free-running greedy, {gr['tokens']} tokens: first difference (mean over windows) | — | "
              f"{gr['mean_first_difference']:.1f}; {identical} of {windows} windows identical throughout |",
              f"| share of equal positions, free-running | — | {100 * gr['mean_equal_fraction']:.1f}% |",
              f"| MTP k = {mtp['k']} mean acceptance length | {mtp['mean_acceptance_length_f32']:.3f} | "
              f"{mtp['mean_acceptance_length_int8']:.3f} |", ""]
    return lines


def golden_section(runs: list[dict]) -> list[str]:
    lines = ["## The golden models (random weights, seeded random ids)", ""]
    for d in runs:
        lines += command_block(d["run"])
    lines += ["", "| model | mean KL (nats) | p99 KL | largest logit error / range | teacher-forced greedy "
              "agreement | free-running: first difference, equal share |", "|---|---|---|---|---|---|"]
    for d in runs:
        tf, gr = d["teacher_forced"], d["greedy"]
        lines.append(f"| `{Path(d['model']).name}` | {tf['mean_kl_nats']:.2f} | {tf['p99_kl_nats']:.1f} | "
                     f"{tf['max_relative_logit_error']:.2f} | {100 * tf['argmax_agreement']:.1f}% | "
                     f"{gr['mean_first_difference']:.1f} of {gr['tokens']}, {100 * gr['mean_equal_fraction']:.0f}% |")
    return lines + ["", GOLDEN_NOTE, ""]


def memory_section(d: dict) -> list[str]:
    lines = ["## Memory (bytes per token, all layers)", "",
             "The same run prints the cache size of each config alone (`CacheShapeFor`, no weights needed):", "",
             "| config | layers | f32 | bf16 | int8 | int8 / bf16 | GiB at the context (f32 / bf16 / int8) |",
             "|---|---|---|---|---|---|---|"]
    for m in d["memory"]:
        b, g = m["bytes_per_token"], m["gib_at_context"]
        lines.append(f"| `{m['source']}` | {m['layers']} | {b['f32']} | {b['bf16']} | {b['int8']} | "
                     f"{b['int8'] / b['bf16']:.2f} | {g['f32']:.2f} / {g['bf16']:.2f} / {g['int8']:.2f} at "
                     f"{m['context']} |")
    return lines + ["", MEMORY_NOTE, ""]


def section(load) -> list[str]:
    """The int8-latent section of the numerics page, from the runs `load` finds (empty without any)."""
    trained = load("kv_int8_trained.json")
    if trained is None:
        return []
    golden = [r for m in ("glm_a", "dsv32_b") if (r := load(f"kv_int8_{m}.json")) is not None]
    md = section_heading("The int8 latent KV cache: accuracy cost and memory saving", INTRO, trained["run"])
    body = trained_section(trained)
    if golden:
        body += golden_section(golden)
    body += memory_section(trained)
    return md + demoted(body)
