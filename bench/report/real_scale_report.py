#!/usr/bin/env python3
"""The real-dimension trade-off report: real_scale_bench JSON (per-layer costs on checkpoints cut from
a release) → a PROJECTION of the full model's decode and verify costs, r_k, the draft cost c and the
predicted speedup E[L] / (r_k + h + (k - 1) c + e), checked against truncated forwards, plus memory_bench
results.

  python bench/report/real_scale_report.py --release glm-5.2 --layers glm7.json \
      [--memory mem1.json ...] [--release-2 deepseek-v3.2 --layers-2 dsv4.json] \
      [--command "..."] [--out docs/results]

Writes <out>/real-scale.md and <out>/real-scale-data/ (the JSON, CSV tables and PNG plots).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from real_scale_bandwidth import bandwidth_lines, moe_stream_line  # noqa: E402  (bench/report/)

# Published acceptance per draft position for GLM-5.2's MTP head, in the form each source gives it:
# conditional (position i accepted given positions 0..i-1 were) or unconditional (the fraction of
# drafts accepted up to position i; 1 + their sum is the mean accepted length the source reports).
PUBLISHED_RATES = {
    "mlx-lm #1419 (GLM-5.2)": ("conditional", [0.88, 0.75, 0.58]),
    "llama.cpp #25980 (GLM-5.2)": ("unconditional", [0.834, 0.653, 0.494]),
}


def conditional_rates(form: str, rates: list[float]) -> list[float]:
    """The conditional rates of a published list (verify/acceptance.h, SyntheticRatesFromUnconditional)."""
    if form == "conditional":
        return list(rates)
    out, previous = [], 1.0
    for u in rates:
        if u > previous:
            raise ValueError(f"unconditional rates must not rise: {rates}")
        out.append(u / previous if previous > 0 else 0.0)
        previous = u
    return out


RATE_SETS = {name: conditional_rates(form, rates) for name, (form, rates) in PUBLISHED_RATES.items()}
KINDS = ["dense+full", "dense+shared", "moe+full", "moe+shared"]


def expected_length(rates: list[float], k: int) -> float:
    """1 + sum over i <= k of prod_{j<=i} a_j (positions past the list reuse its last rate)."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= rates[min(i, len(rates) - 1)]
        total += run
    return total


def median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])


def union(experts: int, per_token: int, rows: int) -> float:
    """Expected distinct experts of `rows` rows routing to `per_token` of `experts` independently."""
    return experts * (1.0 - (1.0 - per_token / experts) ** rows)


def full_schedule(cfg: dict) -> list[str]:
    """Layer kinds of the full release, from its config (the cut config records what it came from)."""
    layers = cfg.get("mtpspec_cut_from", {}).get("num_hidden_layers", cfg["num_hidden_layers"])
    mlp = cfg.get("mlp_layer_types")
    idx = cfg.get("indexer_types")
    kinds = []
    for layer in range(layers):
        dense = (mlp[layer] == "dense") if mlp and layer < len(mlp) else layer < cfg.get("first_k_dense_replace", 0)
        if idx and layer < len(idx):
            full = idx[layer] == "full"
        elif idx:  # the cut kept only the first layers' list: the release's rule gives the rest
            freq, offset = max(cfg.get("index_topk_freq", 1), 1), cfg.get("index_skip_topk_offset", 2)
            full = max(layer - offset + 1, 0) % freq == 0
        else:
            full = True
        kinds.append(("dense" if dense else "moe") + ("+full" if full else "+shared"))
    return kinds


class LayerCosts:
    """Per-layer costs of one real_scale_bench run, with the MoE scaled to the release's expert count."""

    def __init__(self, data: dict):
        self.data = data
        cfg = data["config"]
        self.cfg = cfg
        self.experts_cut = cfg["n_routed_experts"]
        cut = cfg.get("mtpspec_cut_from", {})
        self.experts_full = cut.get("n_routed_experts", self.experts_cut)
        self.per_token = cut.get("num_experts_per_tok", cfg["num_experts_per_tok"])
        self.contexts = [p["context"] for p in data["contexts"]]
        self.max_rows = len(data["contexts"][0]["rows"])

    def point(self, n: int) -> dict:
        return next(p for p in self.data["contexts"] if p["context"] == n)

    def row(self, n: int, rows: int) -> dict:
        return self.point(n)["rows"][rows - 1]

    def ffn_scale(self, rows: int, ffn: float, touched: float) -> float:
        """The MoE's time with the release's experts: the time per expert the layer read (the union
        its rows routed to, measured, and the shared expert) times the expected union for the full
        expert count."""
        per_expert = ffn / (touched + 1.0)
        return per_expert * (union(self.experts_full, self.per_token, rows) + 1.0)

    def kind_cost(self, n: int, rows: int, kind: str, scaled: bool = True) -> dict | None:
        """Mean seconds (and components) of the cut model's layers of one kind; with `scaled`, each
        MoE layer's FFN priced for the release's expert count."""
        layers = [l for l in self.row(n, rows)["layers"] if l["kind"] == kind]
        if not layers:
            return None
        seconds = sum(l["seconds"] for l in layers) / len(layers)
        comps = {c: sum(l["components"][c] for l in layers) / len(layers) for c in layers[0]["components"]}
        if scaled and kind.startswith("moe") and self.experts_full != self.experts_cut:
            fallback = union(self.experts_cut, self.per_token, rows)
            new_ffn = sum(self.ffn_scale(rows, l["components"]["moe_mlp"], l.get("experts_used", fallback))
                          for l in layers) / len(layers)
            seconds += new_ffn - comps["moe_mlp"]
            comps["moe_mlp"] = new_ffn
        return {"seconds": seconds, "components": comps}

    def composed(self, n: int, rows: int, kind: str, scaled: bool = True) -> dict:
        """A kind the cut model lacks, composed from the attention of one kind and the FFN of another."""
        got = self.kind_cost(n, rows, kind, scaled)
        if got is not None:
            return got
        attention_kind = ("dense" if kind.startswith("moe") else "moe") + kind[kind.index("+"):]
        ffn_kind = kind[: kind.index("+")] + ("+shared" if kind.endswith("full") else "+full")
        a, f = self.kind_cost(n, rows, attention_kind, scaled), self.kind_cost(n, rows, ffn_kind, scaled)
        comps = dict(a["components"])
        comps["moe_mlp"] = f["components"]["moe_mlp"]
        return {"seconds": sum(comps.values()), "components": comps}

    def project(self, n: int, rows: int, kinds: list[str], scaled: bool = True) -> dict:
        """Seconds of a forward of `rows` rows through layers of these kinds, plus the head; with
        `scaled`, each MoE layer's FFN is priced for the release's expert count, else as measured."""
        total, parts = 0.0, {}
        for kind in kinds:
            cost = self.composed(n, rows, kind, scaled)
            total += cost["seconds"]
            for c, v in cost["components"].items():
                parts[c] = parts.get(c, 0.0) + v
        head = self.row(n, rows)["head_seconds"]
        parts["head"] = parts.get("head", 0.0) + head
        return {"seconds": total + head, "parts": parts}

    def mtp_step(self, n: int) -> float:
        return self.point(n)["mtp_step_seconds"]

    def mtp_extend(self, n: int, committed: float) -> float:
        """Seconds of the MTP layer's extend over a cycle's committed rows (about E[L] of them; linear
        between the measured row counts)."""
        rows = [r["mtp_extend_seconds"] for r in self.point(n)["rows"]]
        x = min(max(committed, 1.0), float(len(rows)))
        lo = int(x)
        hi = min(lo + 1, len(rows))
        return rows[lo - 1] + (x - lo) * (rows[hi - 1] - rows[lo - 1])

    def head_row(self, n: int) -> float:
        """Seconds of the head over one row."""
        return self.row(n, 1)["head_seconds"]

    def draft_cost(self, n: int, k: int) -> float:
        """Seconds of k drafts: the first is the head over the extend's newest row (the extend ran
        the MTP layer over it), each later one an MTP step with the head (c)."""
        return self.head_row(n) + (k - 1) * self.mtp_step(n) if k > 0 else 0.0

    def speedup(self, n: int, t1: float, rk: float, k: int, rates: list[float]) -> float:
        """E[L] / (r_k + (h + (k - 1) c) + e): a cycle verifies k + 1 rows, drafts k tokens (h, the
        head, for the first; c, an MTP step with the head, for each later one) and extends the MTP
        cache over the E[L] rows it commits, all in units of one plain step t1."""
        el = expected_length(rates, k)
        return el / (rk + self.draft_cost(n, k) / t1 + self.mtp_extend(n, el) / t1)


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def macs_per_row(cfg: dict, n: int, kind: str) -> dict:
    """Multiply-adds of one query row in one layer of this kind at context n, by part."""
    h, heads, rq, rkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ni, di, k_top = cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"]
    proj = h * rq + rq * heads * (dn + dr) + h * (rkv + dr) + heads * (dn + dv) * rkv + heads * dv * h
    attended = min(n + 1, k_top)
    attention = heads * attended * (rkv + dr + rkv)
    indexer = (rq * ni * di + h * di + h * ni + (n + 1) * ni * di) if kind.endswith("full") else 0
    if kind.startswith("dense"):
        ffn = 3 * h * cfg["intermediate_size"]
    else:
        ffn = 3 * h * cfg["moe_intermediate_size"] * (cfg["num_experts_per_tok"] + cfg.get("n_shared_experts", 1))
    return {"attn_proj": proj, "attention": attention, "indexer": indexer, "ffn": ffn}


def step_traffic(cfg: dict, n: int, kinds: list[str], rows: int, experts: int) -> dict:
    """(bytes read, multiply-adds) of one forward of `rows` rows at context n through layers of these
    kinds plus the head, by part: FP8 weights at 1 byte (read once for all rows), the bf16 head at 2,
    the f32 cache rows (each row's selected latents and rope keys; the indexer keys once), and the
    MoE's expected union of routed experts for `experts` experts plus the shared ones."""
    h, heads, rkv, dr = cfg["hidden_size"], cfg["num_attention_heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    ni, di, k_top = cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"]
    shared, per_token = cfg.get("n_shared_experts", 1), cfg["num_experts_per_tok"]
    expert = 3 * h * cfg["moe_intermediate_size"]
    out: dict = {}

    def add(part: str, nbytes: float, macs: float) -> None:
        b, m = out.get(part, (0.0, 0.0))
        out[part] = (b + nbytes, m + macs)

    for kind in kinds:
        macs = macs_per_row(cfg, n, kind)
        add("attn_proj", macs["attn_proj"], rows * macs["attn_proj"])
        add("attention", rows * min(n + 1, k_top) * (rkv + dr) * 4, rows * macs["attention"])
        if kind.endswith("full"):
            weights = cfg["q_lora_rank"] * ni * di + h * di + h * ni
            add("indexer", weights + (n + 1) * di * 4, rows * macs["indexer"])
        if kind.startswith("dense"):
            add("moe_mlp", 3 * h * cfg["intermediate_size"], rows * macs["ffn"])
        else:
            add("moe_mlp", (union(experts, per_token, rows) + shared) * expert, rows * (per_token + shared) * expert)
    add("head", 2 * cfg["vocab_size"] * h, rows * cfg["vocab_size"] * h)
    return out


def plots(out: Path, release: str, table: dict, contexts: list[int], ks: list[int]) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in ks:
        ax.plot(contexts, [table[n]["r"][k] for n in contexts], marker="o", label=f"k={k}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context N")
    ax.set_ylabel("r_k = T_verify(k+1) / T_plain")
    ax.set_title(f"{release}: r_k (PROJECTION, 256 experts)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{release}-rk_vs_n.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    name = list(RATE_SETS)[0]
    for n in contexts:
        ax.plot(ks, [table[n]["speedup"][name][k] for k in ks], marker="o", label=f"N={n}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.axhline(1.2, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("k")
    ax.set_ylabel("predicted speedup over plain")
    ax.set_title(f"{release}: E[L] / (r_k + h + (k-1) c + e), {name} (PROJECTION)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{release}-speedup.png", dpi=120)
    plt.close(fig)


def bytes_plot(out: Path, parts_real: dict, release: str) -> None:
    # The old bench model's decode step (bench/README.md, DecodeStepTraffic): MB per step by part.
    bench = {"head": 67.1, "attention + indexer": 57.1 + 2.2, "dense MLP": 17.3, "MoE": 142.0}
    total_bench, total_real = sum(bench.values()), sum(parts_real.values())
    labels = list(bench)
    fig, ax = plt.subplots(figsize=(6, 4))
    left_b = left_r = 0.0
    for label in labels:
        b, r = bench[label] / total_bench, parts_real.get(label, 0.0) / total_real
        ax.barh(["bench model", release], [b, r], left=[left_b, left_r], label=label)
        left_b += b
        left_r += r
    ax.set_xlabel("share of the weight bytes one decode step reads")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{release}-bytes_by_part.png", dpi=120)
    plt.close(fig)


def release_section(release: str, layers_json: dict, data_dir: Path) -> list[str]:
    costs = LayerCosts(layers_json)
    cfg = costs.cfg
    kinds = full_schedule(cfg)
    counts = {k: kinds.count(k) for k in KINDS if kinds.count(k)}
    # The run's read bandwidth: the median of the measurements before each repetition (the memory's
    # speed moves from minute to minute), or the one at the start of a run without them.
    by_rep = [b for p in layers_json["contexts"] for b in p.get("read_bandwidth_by_rep", [])]
    bw = median(by_rep) if by_rep else layers_json["read_bandwidth_start"]["bytes_per_second"]
    contexts, ks = costs.contexts, [k for k in range(1, min(5, costs.max_rows))]
    k_top = cfg["index_topk"]
    table, rows_csv = {}, []
    for n in contexts:
        t = {r: costs.project(n, r, kinds) for r in range(1, costs.max_rows + 1)}
        t1 = t[1]["seconds"]
        c = costs.mtp_step(n) / t1
        entry = {"t1": t1, "c": c, "h": costs.head_row(n) / t1, "r": {k: t[k + 1]["seconds"] / t1 for k in ks},
                 "parts": t[1]["parts"],
                 "speedup": {}}
        for name, rates in RATE_SETS.items():
            entry["speedup"][name] = {k: costs.speedup(n, t1, entry["r"][k], k, rates) for k in ks}
        table[n] = entry
        for k in ks:
            rows_csv.append([n, k, t1, entry["r"][k], c, entry["h"]] + [entry["speedup"][name][k] for name in RATE_SETS])
    write_csv(data_dir / f"{release}-projection.csv", ["context", "k", "t_plain_s", "r_k", "c", "h"] + list(RATE_SETS),
              rows_csv)
    plots(data_dir, release, table, contexts, ks)

    # Weight bytes of one decode step, by part, for the full release.
    layer_bytes = {l["kind"]: l["row_weight_bytes"] for l in layers_json["layers"]}
    row_bytes = sum(layer_bytes.get(k, layer_bytes.get(k.replace("shared", "full"), 0)) for k in kinds)
    step_bytes = row_bytes + layers_json["head_bytes"]
    lines = [f"## {release} (PROJECTION from a cut checkpoint)", ""]
    cut = cfg.get("mtpspec_cut_from", {})
    lines += [f"- Measured on `mtpspec make-checkpoint --like {release} --layers {cfg['num_hidden_layers']} "
              f"--experts {cfg['n_routed_experts']}` (random FP8 weights at the real dimensions, used as stored): "
              f"layer kinds {', '.join(sorted({l['kind'] for l in layers_json['layers']}))}, its MTP layer and head.",
              f"- Projected to the full release: {len(kinds)} layers ({', '.join(f'{v} {k}' for k, v in counts.items())}) "
              f"with {cut.get('n_routed_experts', costs.experts_full)} routed experts, top-{costs.per_token}. The MoE time "
              f"is scaled from the {costs.experts_cut} experts measured to {costs.experts_full}: time per touched expert "
              f"× (the expected union of L rows routing independently + the shared expert), "
              f"{' / '.join(f'{union(costs.experts_full, costs.per_token, r):.1f}' for r in (1, 2, 3, 5, 9))} experts "
              f"for L = 1 / 2 / 3 / 5 / 9 (trained routers pick correlated experts, so real unions are smaller).",
              f"- Read bandwidth {bw / 1e9:.1f} GB/s (StreamSum, the median of {len(by_rep) or 1} measurements in the "
              f"same run, {min(by_rep or [bw]) / 1e9:.1f}-{max(by_rep or [bw]) / 1e9:.1f}); one decode step of the full model reads "
              f"{step_bytes / 1e9:.1f} GB of weights (FP8, bf16 head and router); at the projected plain step that is "
              f"{step_bytes / table[contexts[0]]['t1'] / bw:.2f} of the read bandwidth at N = {contexts[0]}.",
              moe_stream_line(layers_json, costs, contexts[0], bw),
              "- A cycle of k drafts costs, in plain steps: r_k (the verify of k + 1 rows), the drafts and e (the MTP "
              "layer's extend over the E[L] rows the cycle commits). The extend runs the MTP layer over the newest "
              "committed row, so the first draft is only the head over its output (h); each later draft is one MTP "
              "step with the head (c). The speedup is E[L] / (r_k + h + (k − 1) c + e). c and e are measured on the "
              "cut model's MTP layer (its experts, not scaled).",
              "- Acceptance: the published per-position rates, each in the form its source gives: "
              + "; ".join(f"{n}: {', '.join(str(a) for a in r)} ({form}"
                          + (f", i.e. conditional {', '.join(f'{c:.3f}' for c in RATE_SETS[n])}"
                             if form == "unconditional" else "") + ")"
                          for n, (form, r) in PUBLISHED_RATES.items())
              + ". Positions past a list reuse its last conditional rate.", ""]
    lines += [f"![r_k](real-scale-data/{release}-rk_vs_n.png)", "", f"![speedup](real-scale-data/{release}-speedup.png)",
              "", f"![bytes](real-scale-data/{release}-bytes_by_part.png)", ""]
    header = "| N | T_plain (s) | h | c | " + " | ".join(f"r_{k}" for k in ks) + " | " + " | ".join(
        f"speedup k={k}" for k in ks) + " |"
    lines += [f"### Projected costs and speedups ({list(RATE_SETS)[0]})", "", header,
              "|---|---|---|---|" + "---|" * (2 * len(ks))]
    for n in contexts:
        e = table[n]
        sp = e["speedup"][list(RATE_SETS)[0]]
        lines.append(f"| {n} | {e['t1']:.2f} | {e['h']:.3f} | {e['c']:.3f} | "
                     + " | ".join(f"{e['r'][k]:.2f}" for k in ks) + " | "
                     + " | ".join(f"{sp[k]:.2f}" for k in ks) + " |")
    name2 = list(RATE_SETS)[1]
    lines += ["", f"With {name2}: " + "; ".join(
        f"N={n}: " + ", ".join(f"k={k} {table[n]['speedup'][name2][k]:.2f}" for k in ks) for n in contexts) + ".", ""]

    # MTP k = 2 at N = 8 x index_topk, and why.
    n_mid = min(contexts, key=lambda n: abs(n - 8 * k_top))
    s2 = table[n_mid]["speedup"][list(RATE_SETS)[0]][2]
    lines += [f"**MTP k = 2 at N = 8 × index_topk = {8 * k_top}:** projected {s2:.2f}× plain at N = {n_mid} "
              f"(r_2 = {table[n_mid]['r'][2]:.2f}, c = {table[n_mid]['c']:.3f}, "
              f"E[L] = {expected_length(RATE_SETS[list(RATE_SETS)[0]], 2):.2f}).", ""]

    # Why: the parts of a verify of 3 rows against one row, with their bytes and multiply-adds.
    n = n_mid
    one, three = costs.project(n, 1, kinds)["parts"], costs.project(n, 3, kinds)["parts"]
    traffic = {rows: step_traffic(cfg, n, kinds, rows, costs.experts_full) for rows in (1, 3)}
    lines += [f"#### Where a verify of 3 rows spends its time at N = {n}, against a plain step (PROJECTION)", "",
              "Seconds projected from the measured parts; bytes read and multiply-adds counted from the release's "
              "dimensions (FP8 weights at 1 byte, the bf16 head at 2, the f32 cache rows the attention and the indexer "
              f"read, and the MoE's expected expert union for {costs.experts_full} experts).", "",
              "| part | seconds, 1 row | seconds, 3 rows | ratio | GB read, 1 row | GB read, 3 rows | "
              "multiply-adds, 1 row | multiply-adds, 3 rows |", "|---|---|---|---|---|---|---|---|"]
    for part in ["attn_proj", "indexer", "topk", "attention", "moe_mlp", "norms", "head"]:
        a, b = one.get(part, 0.0), three.get(part, 0.0)
        if a == 0 and b == 0:
            continue
        t1p, t3p = traffic[1].get(part, (0.0, 0.0)), traffic[3].get(part, (0.0, 0.0))
        lines.append(f"| {part} | {a:.3f} | {b:.3f} | {b / a if a else float('nan'):.2f} | {t1p[0] / 1e9:.2f} | "
                     f"{t3p[0] / 1e9:.2f} | {t1p[1] / 1e9:.1f} G | {t3p[1] / 1e9:.1f} G |")
    bytes1 = sum(v[0] for v in traffic[1].values())
    bytes3 = sum(v[0] for v in traffic[3].values())
    e = table[n]
    el2 = expected_length(RATE_SETS[list(RATE_SETS)[0]], 2)
    drafts = (costs.draft_cost(n, 2) + costs.mtp_extend(n, el2)) / e["t1"]
    bound = el2 / (bytes3 / bytes1 + drafts)
    attn_rate = traffic[3]["attention"][1] / three["attention"] if three.get("attention") else 0.0
    lines += ["", f"A verify of 3 rows reads {bytes3 / 1e9:.1f} GB against one row's {bytes1 / 1e9:.1f} GB "
              f"({bytes3 / bytes1:.2f}x): the MoE's expert union grows from "
              f"{union(costs.experts_full, costs.per_token, 1):.1f} to {union(costs.experts_full, costs.per_token, 3):.1f} "
              "routed experts per layer. If every part cost only its bytes at the read bandwidth, r_2 would be "
              f"{bytes3 / bytes1:.2f} and k = 2 would give at most {bound:.2f}x with the measured drafts and extend "
              f"({drafts:.3f} plain steps); the projected r_2 is {e['r'][2]:.2f}. The attention over the selected "
              f"keys is compute: {traffic[1]['attention'][1] / 1e9:.1f} G multiply-adds per row over the model, at "
              f"{attn_rate / 1e9:.0f} G/s on this machine's {layers_json['run'].get('threads', 2)} threads, so it grows "
              "with every row verified."
              + (f" The projections (attn_proj) read the same {traffic[3]['attn_proj'][0] / 1e9:.1f} GB for 3 rows as for one "
                 f"and take {three['attn_proj'] / one['attn_proj']:.2f}x the time: with each FP8 weight widened in registers "
                 f"and multiplied in f32 for every row, 3 rows run at {traffic[3]['attn_proj'][1] / three['attn_proj'] / 1e9:.0f} G "
                 "multiply-adds/s, bound by the cores rather than the memory; the MoE's experts, each read for about one "
                 "row, grow with the union."
                 if one.get("attn_proj") and three.get("attn_proj") else ""), ""]

    def cache_macs(n: int) -> float:  # one row's attention and indexer multiply-adds through the cut model
        return sum(m["attention"] + m["indexer"] for m in (macs_per_row(cfg, n, l["kind"]) for l in layers_json["layers"]))

    lines += bandwidth_lines(layers_json, costs, contexts, cache_macs)

    # The projection against forwards of the cut model truncated to 2, 3, 4 layers and of all of it,
    # measured in the same run: each repetition times the parts and the forwards on the same tokens.
    checked = any("check" in costs.row(n, rows) for n in contexts for rows in (1, 3, 5) if rows <= costs.max_rows)
    how = ("Each of the check's repetitions (`--check-reps`) runs the parts, the forwards, the forwards again and "
           "the parts again on the same random tokens, so both sides route the same experts, and takes the mean of "
           "each side's two passes, so a drift of the machine's speed within the repetition cancels to first order"
           if checked else
           "Each repetition runs the parts and the forwards on the same random tokens, so both route the same "
           "experts, and which of the two runs first alternates between repetitions")
    lines += ["### The projection against truncated forwards (measured Model::Forward, same run)", "",
              "The per-layer sums (each layer timed on its own, plus the head) against one Model::Forward of the "
              "cut model's first n layers and the head (`ForwardOptions::trunk_layers`), and of all its layers. "
              + how + "; measured / sum is the median over the repetitions of that repetition's forward over its sum "
              "of the parts (the seconds columns are medians).", "",
              "| N | L | layers | measured (s) | sum of the parts (s) | measured / sum |", "|---|---|---|---|---|---|"]
    worst, deviations = 0.0, []
    n_cut = cfg["num_hidden_layers"]
    for n in contexts:
        for rows in (1, 3, 5):
            if rows > costs.max_rows:
                continue
            r = costs.row(n, rows)
            paired = r.get("check", r.get("paired", []))
            checks = [(p["layers"], i) for i, p in enumerate(r.get("prefix_seconds", []))] + [(n_cut, -1)]
            for layers, i in checks:
                seconds = r["whole_seconds"] if i < 0 else r["prefix_seconds"][i]["seconds"]
                parts = sum(l["seconds"] for l in r["layers"] if l["layer"] < layers) + r["head_seconds"]
                if paired:
                    measured = [p["whole"] if i < 0 else p["prefix"][i] for p in paired]
                    sums = [sum(p["layers"][:layers]) + p["head"] for p in paired]
                    ratio = median([m / total for m, total in zip(measured, sums)])
                    seconds, parts = median(measured), median(sums)
                else:
                    ratio = seconds / parts
                worst = max(worst, abs(ratio - 1))
                deviations.append(abs(ratio - 1))
                lines.append(f"| {n} | {rows} | {layers} | {seconds:.3f} | {parts:.3f} | {ratio:.3f} |")
    deviations.sort()
    within = sum(d <= 0.05 for d in deviations)
    lines += ["", f"Deviation: median {100 * deviations[len(deviations) // 2]:.1f}%, worst {100 * worst:.1f}%; "
              f"{within} of {len(deviations)} within 5%.", ""]
    e2e = layers_json.get("e2e")
    if isinstance(e2e, dict):
        e2e = [e2e]
    cut_kinds = [l["kind"] for l in layers_json["layers"]]
    for point in e2e or []:
        runs = point["runs"]
        plain = runs[0]["tokens_per_second"]
        lines += [f"### Measured end to end on the cut model ({cfg['num_hidden_layers']} layers, N = {point['context']}, "
                  f"SYNTHETIC acceptance at {point['rates']})", "",
                  "| | tok/s | speedup | mean acceptance length | predicted for this cut model | measured / predicted |",
                  "|---|---|---|---|---|---|"]
        n = min(contexts, key=lambda x: abs(x - point["context"]))
        # The cut model itself: its own experts' unions, not the release's.
        t1_cut = costs.project(n, 1, cut_kinds, scaled=False)["seconds"]
        for k, r in enumerate(runs):
            pred, ratio = "", ""
            if k > 0:
                rk = costs.project(n, k + 1, cut_kinds, scaled=False)["seconds"] / t1_cut
                predicted = costs.speedup(n, t1_cut, rk, k, point["rates"])
                pred, ratio = f"{predicted:.2f}", f"{r['tokens_per_second'] / plain / predicted:.2f}"
            lines.append(f"| {r['label']} | {r['tokens_per_second']:.3f} | {r['tokens_per_second'] / plain:.2f} | "
                         f"{r.get('mean_acceptance_length', 1.0):.2f} | {pred} | {ratio} |")
        spread = [f"{r['label']} {min(r['run_tokens_per_second']):.2f}-{max(r['run_tokens_per_second']):.2f}"
                  for r in runs if r.get("run_tokens_per_second")]
        lines += ["", f"tok/s is over all {len(runs[0].get('run_tokens_per_second', [1]))} interleaved repetitions; "
                  "the range of single runs: " + ", ".join(spread) + ". The prediction uses the per-layer parts "
                  f"measured at N = {n} with this cut model's {costs.experts_cut} experts. The cut model's MTP layer "
                  "and head are a large share of its few layers, so its speedups are far below the full model's "
                  "projection; they check the loop and the cost model at real dimensions.", ""]

    parts_real = {"head": layers_json["head_bytes"] / 1e6}
    for kind in kinds:
        b = layer_bytes.get(kind, layer_bytes.get(kind.replace("shared", "full"), 0)) / 1e6
        key = "dense MLP" if kind.startswith("dense") else "MoE"
        parts_real[key] = parts_real.get(key, 0.0) + b
    bytes_plot(data_dir, parts_real, release)
    return lines


def memory_section(memory: list[dict]) -> list[str]:
    lines = ["## Memory: loading and decoding FP8 as stored", "",
             "| checkpoint | file memory | weights | files (GB) | peak RSS over start (GB) | cache (GB) | "
             "(peak − start − cache) / files |", "|---|---|---|---|---|---|---|"]
    for m in memory:
        lines.append(f"| `{m['model']}` | {m['file_memory']} | {m['weights']} | {m['file_bytes'] / 1e9:.2f} | "
                     f"{(m['peak_rss_bytes'] - m['rss_start_bytes']) / 1e9:.2f} | {m['cache_bytes'] / 1e9:.3f} | "
                     f"{m['peak_over_file_bytes']:.3f} |")
    lines += ["", "Goal: at most 1.1 × the file bytes plus the caches for an FP8 checkpoint. With the files mapped, "
              "only the pages a step touches become resident (here: the routed experts the random tokens chose), so a "
              "checkpoint larger than memory loads and decodes from the page cache.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="glm-5.2")
    parser.add_argument("--layers", type=Path, required=True)
    parser.add_argument("--release-2")
    parser.add_argument("--layers-2", type=Path)
    parser.add_argument("--memory", type=Path, nargs="*", default=[])
    parser.add_argument("--command", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()
    data_dir = args.out / "real-scale-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    sources = [args.layers, *( [args.layers_2] if args.layers_2 else []), *args.memory]
    for p in sources:
        if p.resolve() != (data_dir / p.name).resolve():
            shutil.copyfile(p, data_dir / p.name)
    main_run = json.loads(args.layers.read_text())
    run = main_run["run"]
    md = [f"# Real dimensions: what MTP buys on GLM-5.2 and DeepSeek-V3.2 (run of {run['date_utc'][:10]})", "",
          "Every number below is a **PROJECTION** of the full model from per-layer costs measured on checkpoints cut "
          "from the releases (the real FP8 format, hidden size, heads, latent, indexer and expert shapes; fewer layers "
          "and experts), except where a table says measured.", "",
          f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
          f"{run.get('threads', '?')} mtpspec threads; date (UTC) {run['date_utc']}",
          f"- Data: `real-scale-data/` (the JSON of every run, the projection as CSV).", "", "Commands:", "", "```"]
    md += args.command + ["```", ""]
    md += release_section(args.release, main_run, data_dir)
    if args.release_2 and args.layers_2:
        md += release_section(args.release_2, json.loads(args.layers_2.read_text()), data_dir)
    if args.memory:
        md += memory_section([json.loads(p.read_text()) for p in args.memory])
    (args.out / "real-scale.md").write_text("\n".join(md))
    print(f"wrote {args.out / 'real-scale.md'}")


if __name__ == "__main__":
    main()
