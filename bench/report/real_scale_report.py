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
import shutil
from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from real_scale_bandwidth import bandwidth, moe_stream  # noqa: E402  (bench/report/)
from results_page import render, spread, write_page  # noqa: E402

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


def projection(costs: LayerCosts, kinds: list[str], release: str, data_dir: Path) -> tuple[dict, list[int]]:
    """Per context the projected plain step t1, h and c in plain steps, r_k and the speedup per k for
    each list of rates (written to the CSV beside the page, and plotted); and the k priced."""
    ks = [k for k in range(1, min(5, costs.max_rows))]
    table, rows_csv = {}, []
    for n in costs.contexts:
        t = {r: costs.project(n, r, kinds) for r in range(1, costs.max_rows + 1)}
        t1 = t[1]["seconds"]
        entry = {"t1": t1, "c": costs.mtp_step(n) / t1, "h": costs.head_row(n) / t1,
                 "r": {k: t[k + 1]["seconds"] / t1 for k in ks}, "parts": t[1]["parts"]}
        entry["speedup"] = {name: {k: costs.speedup(n, t1, entry["r"][k], k, rates) for k in ks}
                            for name, rates in RATE_SETS.items()}
        table[n] = entry
        for k in ks:
            rows_csv.append([n, k, t1, entry["r"][k], entry["c"], entry["h"]] +
                            [entry["speedup"][name][k] for name in RATE_SETS])
    write_csv(data_dir / f"{release}-projection.csv", ["context", "k", "t_plain_s", "r_k", "c", "h"] + list(RATE_SETS),
              rows_csv)
    plots(data_dir, release, table, costs.contexts, ks)
    return table, ks


def verify_parts(costs: LayerCosts, layers_json: dict, kinds: list[str], n: int, table: dict) -> dict:
    """Where a verify of 3 rows spends its time at context n against a plain step (PROJECTION): each
    part's seconds and its bytes and multiply-adds for 1 and 3 rows, and the bound the bytes alone set
    on k = 2 with the measured drafts and extend."""
    cfg = costs.cfg
    one, three = costs.project(n, 1, kinds)["parts"], costs.project(n, 3, kinds)["parts"]
    traffic = {rows: step_traffic(cfg, n, kinds, rows, costs.experts_full) for rows in (1, 3)}
    parts = [{"part": part, "one": one.get(part, 0.0), "three": three.get(part, 0.0),
              "ratio": three.get(part, 0.0) / one[part] if one.get(part) else float("nan"),
              "traffic": [traffic[rows].get(part, (0.0, 0.0)) for rows in (1, 3)]}
             for part in ["attn_proj", "indexer", "topk", "attention", "moe_mlp", "norms", "head"]
             if one.get(part, 0.0) or three.get(part, 0.0)]
    bytes1 = sum(v[0] for v in traffic[1].values())
    bytes3 = sum(v[0] for v in traffic[3].values())
    el2 = expected_length(RATE_SETS[list(RATE_SETS)[0]], 2)
    drafts = (costs.draft_cost(n, 2) + costs.mtp_extend(n, el2)) / table[n]["t1"]
    projections = None
    if one.get("attn_proj") and three.get("attn_proj"):
        projections = {"bytes": traffic[3]["attn_proj"][0], "ratio": three["attn_proj"] / one["attn_proj"],
                       "rate": traffic[3]["attn_proj"][1] / three["attn_proj"]}
    return {"n": n, "parts": parts, "bytes1": bytes1, "bytes3": bytes3, "drafts": drafts,
            "bound": el2 / (bytes3 / bytes1 + drafts), "r2": table[n]["r"][2],
            "union": [union(costs.experts_full, costs.per_token, rows) for rows in (1, 3)],
            "attention_macs": traffic[1]["attention"][1],
            "attention_rate": traffic[3]["attention"][1] / three["attention"] if three.get("attention") else 0.0,
            "threads": layers_json["run"].get("threads", 2), "projections": projections}


def truncation_check(costs: LayerCosts) -> dict:
    """The projection against forwards of the cut model truncated to 2, 3, 4 layers and of all of it,
    measured in the same run (each repetition times the parts and the forwards on the same tokens):
    per context, row count and layers the measured and summed seconds and their ratio."""
    rows, deviations = [], []
    n_cut = costs.cfg["num_hidden_layers"]
    for n in costs.contexts:
        for count in (1, 3, 5):
            if count > costs.max_rows:
                continue
            r = costs.row(n, count)
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
                deviations.append(abs(ratio - 1))
                rows.append((n, count, layers, seconds, parts, ratio))
    checked = any("check" in costs.row(n, r) for n in costs.contexts for r in (1, 3, 5) if r <= costs.max_rows)
    return {"rows": rows, "checked": checked, "median": sorted(deviations)[len(deviations) // 2],
            "worst": max(deviations), "within": sum(d <= 0.05 for d in deviations), "count": len(deviations)}


def e2e_points(layers_json: dict, costs: LayerCosts) -> list[dict]:
    """Each end-to-end run on the cut model with the speedup the cut model's own parts predict (its
    own experts' unions, not the release's), at the measured context nearest the run's."""
    e2e = layers_json.get("e2e")
    if isinstance(e2e, dict):
        e2e = [e2e]
    cut_kinds = [l["kind"] for l in layers_json["layers"]]
    points = []
    for point in e2e or []:
        n = min(costs.contexts, key=lambda x: abs(x - point["context"]))
        t1_cut = costs.project(n, 1, cut_kinds, scaled=False)["seconds"]
        predicted = [None] + [costs.speedup(n, t1_cut, costs.project(n, k + 1, cut_kinds, scaled=False)["seconds"] / t1_cut,
                                            k, point["rates"]) for k in range(1, len(point["runs"]))]
        points.append({**point, "n": n, "predicted": predicted})
    return points


def release_section(release: str, layers_json: dict, data_dir: Path) -> str:
    costs = LayerCosts(layers_json)
    cfg = costs.cfg
    kinds = full_schedule(cfg)
    # The run's read bandwidth: the median of the measurements before each repetition (the memory's
    # speed moves from minute to minute), or the one at the start of a run without them.
    by_rep = [b for p in layers_json["contexts"] for b in p.get("read_bandwidth_by_rep", [])]
    bw = median(by_rep) if by_rep else layers_json["read_bandwidth_start"]["bytes_per_second"]
    table, ks = projection(costs, kinds, release, data_dir)
    contexts = costs.contexts
    # Weight bytes of one decode step, by part, for the full release.
    layer_bytes = {l["kind"]: l["row_weight_bytes"] for l in layers_json["layers"]}
    kind_bytes = [layer_bytes.get(k, layer_bytes.get(k.replace("shared", "full"), 0)) for k in kinds]
    step_bytes = sum(kind_bytes) + layers_json["head_bytes"]
    n_mid = min(contexts, key=lambda n: abs(n - 8 * cfg["index_topk"]))

    def cache_macs(n: int) -> float:  # one row's attention and indexer multiply-adds through the cut model
        return sum(m["attention"] + m["indexer"] for m in (macs_per_row(cfg, n, l["kind"]) for l in layers_json["layers"]))

    parts_real = {"head": layers_json["head_bytes"] / 1e6}
    for kind, b in zip(kinds, kind_bytes):
        key = "dense MLP" if kind.startswith("dense") else "MoE"
        parts_real[key] = parts_real.get(key, 0.0) + b / 1e6
    bytes_plot(data_dir, parts_real, release)
    return render("real-scale-release.md.j2", release=release, cfg=cfg, costs=costs, kinds=kinds,
                  counts={k: kinds.count(k) for k in KINDS if kinds.count(k)},
                  cut_kinds=sorted({l["kind"] for l in layers_json["layers"]}),
                  unions=[union(costs.experts_full, costs.per_token, r) for r in (1, 2, 3, 5, 9)],
                  bw=spread(by_rep or [bw]), step_bytes=step_bytes,
                  moe=moe_stream(layers_json, costs, contexts[0], bw), published=PUBLISHED_RATES, rate_sets=RATE_SETS,
                  names=list(RATE_SETS), contexts=contexts, ks=ks, table=table, n_mid=n_mid,
                  el2=expected_length(RATE_SETS[list(RATE_SETS)[0]], 2),
                  verify=verify_parts(costs, layers_json, kinds, n_mid, table),
                  bandwidth=bandwidth(layers_json, costs, contexts, cache_macs), check=truncation_check(costs),
                  e2e=e2e_points(layers_json, costs))


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
    sections = [release_section(args.release, main_run, data_dir)]
    if args.release_2 and args.layers_2:
        sections.append(release_section(args.release_2, json.loads(args.layers_2.read_text()), data_dir))
    write_page(args.out / "real-scale.md", render(
        "real-scale.md.j2", run=main_run["run"], commands=args.command, sections=sections,
        memory=[json.loads(p.read_text()) for p in args.memory]))


if __name__ == "__main__":
    main()
