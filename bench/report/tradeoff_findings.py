"""Trade-off report for bench/report/report.py: the numbers of its tables and findings, and its plots,
from tradeoff_bench JSON. The page's text is templates/tradeoff.md.j2; the findings' wording that
the tests read is in templates/tradeoff-parts.md.j2.

Findings (each with its numbers):
  - the gather-path attention time against N beyond index_topk (its max/min); top-k and indexer
    scoring reported separately (the indexer scores all N keys by design: O(N));
  - r_k against the bytes-touched bound ratio r_k^bound (default path, every N > K and k), and against
    r_k^bound+compute (the bytes plus the extra rows' multiply-adds at the measured Linear MAC rate);
  - measured / predicted speedup (bench model, SYNTHETIC acceptance);
  - the trained model's MTP k = 2 at N = 8 x index_topk against plain (REAL acceptance, T = 0), and
    the most k = 2 could give with a free verify and with one at its bytes bound;
  - --k auto against plain (bench model every N, and trained model), read against the run's A/A
    control (plain decoding run twice, interleaved): the median over paired repetitions of
    auto / mean(plain, A/A), next to the median |A/A / plain - 1| (the noise). JSON without
    per-run lists: auto / plain over the totals, next to max |A/A / plain - 1|.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from results_page import render

COMPONENTS = ["embed", "attn_proj", "indexer", "topk", "attention", "moe_mlp", "norms", "head"]
PATHS = ["gather", "mask", "dense"]
# The end-to-end A/A control (bench/tradeoff_point.h kPlainControlLabel).
PLAIN_CONTROL = "plain (A/A)"
AUTO_CARRIED = "auto (carried)"  # one adaptive-k controller carried across a context's runs
# spec/adaptive_k.h kExplorationBudget: the share of a request's decode time adaptive k may spend on probes.
EXPLORATION_BUDGET = 0.01


def paired_auto_runs(points: list, trained: dict | None, label: str = "auto") -> list:
    """(N, auto / mean(plain, A/A) per repetition, A/A / plain per repetition) for every point whose
    plain, `label` and A/A entries carry equally long run_tokens_per_second lists (>= 5 runs); [] when
    any point lacks them (older JSON)."""
    sets = [(p["context"], p["e2e"]) for p in points]
    if trained:
        sets.append((f"trained {trained['context']}", trained["e2e_merged"]))
    out = []
    for n, entries in sets:
        runs = {e["label"]: e.get("run_tokens_per_second") or [] for e in entries}
        plain, auto, aa = runs.get("plain", []), runs.get(label, []), runs.get(PLAIN_CONTROL, [])
        if label not in runs:
            continue
        if len(plain) < 5 or not (len(plain) == len(auto) == len(aa)):
            return []
        out.append((n, [a / ((p + c) / 2) for p, a, c in zip(plain, auto, aa)], [c / p for p, c in zip(plain, aa)]))
    return out


def paired_summary(paired: list) -> list[dict]:
    """Per N of paired_auto_runs' output: the median ratio, the median A/A deviation (the noise), the
    number of repetitions and the range."""
    return [{"n": n, "median": float(np.median(ratios)), "noise": float(np.median(np.abs(np.asarray(aa) - 1.0))),
             "count": len(ratios), "low": min(ratios), "high": max(ratios)} for n, ratios, aa in paired]


def compute_floor(data: dict, sparse: list[dict]) -> dict | None:
    """The verify cost's floor on this machine: the arithmetic of an extra verify row that the bytes bound does
    not see (it counts the keys' reads, shared by the rows, not the work on them): the absorbed
    attention over its K keys (scores and values, H·K·(2 r_kv + d_r) per layer) and the indexer's
    scoring of all N keys on the full layers, at the measured MAC rate. Even if every weight product
    of the extra rows hid under the memory stream, (L - 1) times that is added to the bytes bound; the
    points where it exceeds 0.1 · r_k^bound · T1 (`over`) cannot come within 1.1x of the bytes bound here."""
    config = data.get("bench_model", {}).get("config")
    rate = data.get("mac_rate", {}).get("macs_per_second")
    if not config or not rate or not sparse:
        return None
    heads, k_top, layers = config["num_attention_heads"], config["index_topk"], config["num_hidden_layers"]
    attention = heads * k_top * (2 * config["kv_lora_rank"] + config["qk_rope_head_dim"]) * layers
    full = sum(1 for t in config.get("indexer_types", ["full"] * layers) if t == "full")
    over, floors, checked = [], [], 0
    for p in sparse:
        per_row = (attention + full * p["context"] * config["index_n_heads"] * config["index_head_dim"]) / rate
        floors.append((p["context"], per_row))
        for k in range(1, 8):
            e = by_rows(p, default_path(p, k + 1)).get(k + 1)
            if e is None:
                continue
            checked += 1
            if k * per_row > 0.1 * e["r_bound"] * p["t1_seconds"]:
                over.append((p["context"], k))
    return {"rate": rate, "floors": floors, "over": over, "checked": checked}


def bench_model_k2(points: list[dict], k_top: int) -> dict | None:
    """The k = 2 reading on the bench model (SYNTHETIC acceptance at the rates) at the measured contexts nearest
    8 x K: the measured k = 2 speedup, and the most k = 2 could give if its verify cost only the
    bytes it touches, E[L] / (r_2^bound + draft). The bound is a ratio of bytes, so it holds on any
    hardware where the verify is memory-bound."""
    target = 8 * k_top
    distance = lambda q: round(abs(np.log2(q["context"] / target)), 6)  # noqa: E731
    cands = [p for p in points if p["context"] > k_top and any(e["k"] == 2 for e in p["predicted"])]
    if not cands:
        return None
    nearest = min(distance(p) for p in cands)
    rows = []
    for p in (q for q in cands if distance(q) == nearest):
        pred = next(e for e in p["predicted"] if e["k"] == 2)
        bound = by_rows(p, default_path(p, 3)).get(3)
        measured = next((e["speedup"] for e in p["e2e"] if e["label"] == "k=2"), None)
        if bound is None or measured is None:
            continue
        draft = pred.get("draft_cost", 2 * pred["c"])
        rows.append({"n": p["context"], "measured": measured, "length": pred["expected_length"],
                     "r_bound": bound["r_bound"], "draft": draft,
                     "ceiling": pred["expected_length"] / (bound["r_bound"] + draft)})
    return {"target": target, "rows": rows} if rows else None


def speedup_ceiling(mean_acceptance_length: float, k: int, c: float, r_k: float = 1.0) -> float:
    """The most k drafts can give at this acceptance and draft cost c (in plain steps) if the verify
    cost r_k plain steps; by default free beyond a plain step (r_k = 1): E[L] / (r_k + k c)."""
    return mean_acceptance_length / (r_k + k * c)


def bandwidth_change(start: float, end: float) -> float | None:
    """How far the host's read bandwidth moved during the run (end / start - 1) when that is more than
    10%: the bytes bound (and so r_k against it) and every absolute time are then suspect."""
    if start <= 0 or abs(end / start - 1) <= 0.10:
        return None
    return end / start - 1


def memory(points: list[dict]) -> dict | None:
    """The process's memory while every context's caches were alive (absent from older JSON)."""
    memory = points[0].get("memory_after_cost_rounds") if points else None
    if not memory or "rss_mib" not in memory:
        return None
    huge = memory.get("anon_huge_mib", 0.0)
    return {"rss": memory["rss_mib"], "huge": huge, "share": huge / max(memory["rss_mib"], 1e-9)}


def by_rows(point: dict, path: str) -> dict:
    return {e["rows"]: e for e in point["paths"].get(path, [])}


def default_path(point: dict, rows: int) -> str:
    return "dense" if point["context"] + rows <= point["index_topk"] else "gather"


def plots(points: list[dict], data_dir: Path) -> None:
    ns = [p["context"] for p in points]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=True)
    for ax, path in zip(axes, PATHS):
        max_rows = max((e["rows"] for p in points for e in p["paths"].get(path, [])), default=0)
        for rows in range(2, max_rows + 1):
            xs = [p["context"] for p in points if rows in by_rows(p, path)]
            if xs:
                ys = [by_rows(p, path)[rows]["r"] for p in points if rows in by_rows(p, path)]
                line, = ax.plot(xs, ys, marker="o", label=f"k={rows - 1}")
                yb = [by_rows(p, path)[rows]["r_bound"] for p in points if rows in by_rows(p, path)]
                ax.plot(xs, yb, ls=":", color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_title(f"{path}: r_k = Tv(k+1,N)/T1(N) (dotted: bytes bound)", fontsize=9)
        ax.set_xlabel("context N")
        if path == "gather":
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(data_dir / "rk_vs_n.png", dpi=110)
    plt.close(fig)

    labels = [e["label"] for e in points[0]["e2e"]] if points else []
    grid = np.array([[next(e["speedup"] for e in p["e2e"] if e["label"] == lab) for p in points] for lab in labels])
    fig, ax = plt.subplots(figsize=(1.6 * len(ns) + 3, 0.6 * len(labels) + 2))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_yticks(range(len(labels)), labels)
    for i, lab in enumerate(labels):
        for j, p in enumerate(points):
            pred = predicted_for(p, lab)
            text = f"{grid[i, j]:.2f}" + (f"\n/{pred:.2f}" if pred else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.set_xlabel("context N")
    ax.set_title("measured speedup vs plain (SYNTHETIC acceptance); /predicted", fontsize=9)
    fig.colorbar(im)
    fig.tight_layout()
    fig.savefig(data_dir / "speedup_heatmap.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(ns) * 3), 4.5))
    x, ticks = 0, []
    for p in points:
        path = "gather" if p["context"] >= p["index_topk"] else "dense"
        rows_map = by_rows(p, path) or by_rows(p, "gather")
        for rows in (1, 3, 5):
            if rows not in rows_map:
                continue
            bottom = 0.0
            for i, comp in enumerate(COMPONENTS):
                v = 1e3 * rows_map[rows]["components"][comp]
                ax.bar(x, v, bottom=bottom, color=f"C{i}", label=comp if x == 0 else None)
                bottom += v
            rest = max(0.0, 1e3 * rows_map[rows]["seconds"] - bottom)
            ax.bar(x, rest, bottom=bottom, color="lightgray", label="unprofiled" if x == 0 else None)
            ticks.append((x, f"N={p['context']}\nL={rows}"))
            x += 1
        mtp = p["mtp_step"]["components"]
        bottom = 0.0
        for i, comp in enumerate(COMPONENTS):
            ax.bar(x, 1e3 * mtp[comp], bottom=bottom, color=f"C{i}", hatch="//")
            bottom += 1e3 * mtp[comp]
        # The MTP module profiles its decoder block only: eh_proj, the embedding and its head are the rest.
        ax.bar(x, max(0.0, 1e3 * p["mtp_step"]["seconds"] - bottom), bottom=bottom, color="lightgray", hatch="//")
        ticks.append((x, "MTP\nstep"))
        x += 1.5
    ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=7)
    ax.set_ylabel("ms (component medians)")
    ax.set_title("forward components: verify of L rows on the default path, and one MTP step (hatched; gray: "
                 "unprofiled, for MTP its eh_proj + head)", fontsize=9)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(data_dir / "components.png", dpi=110)
    plt.close(fig)


def predicted_for(point: dict, label: str) -> float | None:
    if label.startswith("k="):
        k = int(label[2:])
        for e in point["predicted"]:
            if e["k"] == k:
                return e["speedup"]
    if label.startswith("auto") and point["predicted"]:
        return max(1.0, max(e["speedup"] for e in point["predicted"]))
    return None


def tradeoff_report(data: dict, out: Path, data_dir: Path, date: str, command: str, write_csv) -> str:
    """The trade-off page's text (templates/tradeoff.md.j2), its CSV tables and its plots."""
    points = data["points"]
    k_top = data["bench_model"]["config"]["index_topk"]
    rows = []
    for p in points:
        for path in PATHS:
            for e in p["paths"].get(path, []):
                rows.append([p["context"], path, e["rows"], e["seconds"], e["bound_seconds"], e["r"], e["r_bound"],
                             e["attended_rows"], e["bytes"]["total_actual"]] + [e["components"][c] for c in COMPONENTS])
    write_csv(data_dir / "verify_cost.csv", ["context", "path", "rows", "seconds", "bound_seconds", "r", "r_bound",
                                             "attended_rows", "bytes"] + COMPONENTS, rows)
    write_csv(data_dir / "e2e.csv", ["context", "label", "tokens_per_second", "speedup", "predicted",
                                     "mean_acceptance_length", "steady_tokens"],
              [[p["context"], e["label"], e["tokens_per_second"], e["speedup"], predicted_for(p, e["label"]),
                e["mean_acceptance_length"], e["steady_tokens"]] for p in points for e in p["e2e"]])
    plots(points, data_dir)
    bw, bw_end = (data[k]["bytes_per_second"] for k in ("read_bandwidth_start", "read_bandwidth_end"))
    max_rows = max(e["rows"] for p in points for e in p["paths"]["gather"])
    return render("tradeoff.md.j2", data=data, date=date, command=command or data["run"]["command"],
                  folder=data_dir.relative_to(out), cfg=data["bench_model"]["config"], k_top=k_top, bw=bw, bw_end=bw_end,
                  bw_change=bandwidth_change(bw, bw_end), memory=memory(points), components=COMPONENTS, paths=PATHS,
                  t1=[(p, by_rows(p, p["t1_path"])[1]["components"]) for p in points],
                  dense_at=[p["context"] for p in points if p["paths"].get("dense")], max_rows=max_rows,
                  rk=[(p["context"], path, by_rows(p, path)) for p in points for path in PATHS
                      if len(by_rows(p, path)) >= 2],
                  verify=verify_findings(data, points, k_top), predictions=prediction_findings(points),
                  trained=trained_findings(data, points, k_top), auto=auto_findings(points, data.get("trained")),
                  e2e=[(p["context"], [(e, predicted_for(p, e["label"])) for e in p["e2e"]]) for p in points],
                  probes=probe_findings(points), budget=EXPLORATION_BUDGET)


def verify_findings(data: dict, points: list[dict], k_top: int) -> dict:
    """The verify's findings: the gather path's attention against N beyond K, r_k against its bytes
    bound (and with the extra rows' multiply-adds) on the default path, the compute floor, and the cost
    of each extra verify row by component at the largest L."""
    sparse = [p for p in points if p["context"] > k_top]
    att = {p["context"]: by_rows(p, "gather")[1]["components"] for p in sparse}
    by_L = [(L, {p["context"]: by_rows(p, "gather")[L]["components"]["attention"] for p in sparse
                 if L in by_rows(p, "gather")}) for L in (3, 5)]
    checked, fails = [], []
    for p in sparse:
        for k in range(1, 8):
            e = by_rows(p, default_path(p, k + 1)).get(k + 1)
            if e is not None:
                checked.append(e["r"] / e["r_bound"])
                if e["r"] / e["r_bound"] > 1.1:
                    fails.append((p["context"], k, e))
    with_compute = [by_rows(p, default_path(p, k + 1)).get(k + 1) for p in sparse for k in range(1, 8)]
    per_row = []
    for p in points:
        m = by_rows(p, "gather" if p["context"] >= k_top else "dense")
        L = max(m)
        if L >= 2:
            one = by_rows(p, p["t1_path"])[1]
            per = lambda a, b: 1e3 * (a - b) / (L - 1)  # noqa: E731
            per_row.append((p["context"], L, per(m[L]["seconds"], one["seconds"]),
                            per(m[L]["bound_seconds"], one["bound_seconds"]),
                            [per(m[L]["components"][c], one["components"][c]) for c in COMPONENTS]))
    return {"attention": att, "by_L": [(L, a) for L, a in by_L if a], "checked": len(checked),
            "worst": max(checked, default=0.0), "fails": fails, "floor": compute_floor(data, sparse),
            "with_compute": [e["r"] / e["r_bound_with_compute"] for e in with_compute
                             if e is not None and "r_bound_with_compute" in e], "per_row": per_row}


def prediction_findings(points: list[dict]) -> dict:
    """Measured against predicted speedup (SYNTHETIC acceptance) for every fixed k: against the
    prediction from the rates, against the cost model with the acceptance length the run realised, and
    against the simpler E[L] / (r_k + k c) where the run recorded it."""
    ratios = []
    for p in points:
        # The cycle cost the prediction charges: r_k plus the draft as the engine runs it (extend of
        # m + 1 rows, head, k - 1 chained steps); older JSON has only k * c.
        cost = {e["k"]: e["r_k"] + e.get("draft_cost", e["k"] * e["c"]) for e in p["predicted"]}
        simple = {e["k"]: e.get("speedup_k_c") for e in p["predicted"]}
        for e in p["e2e"]:
            pred = predicted_for(p, e["label"])
            if e["label"].startswith("k=") and pred:
                k = int(e["label"][2:])
                ratios.append({"n": p["context"], "label": e["label"], "measured": e["speedup"], "predicted": pred,
                               "rates": e["speedup"] / pred,
                               "realised": e["speedup"] / (e["mean_acceptance_length"] / cost[k]),
                               "simple": e["speedup"] / simple[k] if simple.get(k) else None})
    return {"ratios": ratios, "simple": [r["simple"] for r in ratios if r["simple"] is not None]}


def trained_findings(data: dict, points: list[dict], k_top: int) -> dict | None:
    """The trained model's end-to-end runs (REAL acceptance) with its median costs over windows: MTP
    k = 2 against plain and the most k = 2 could give with a free verify and one at its bytes bound;
    each k's speedup as E[L] / (r_k + k c) predicts it; and the bench model's k = 2 reading."""
    trained = data.get("trained")
    if not trained:
        return None
    tp = trained["points"]
    c = float(np.median([p["mtp_step"]["c"] for p in tp]))
    ks = [k for k in range(1, 6) if all(k + 1 in by_rows(p, "gather") for p in tp)]
    rk = {k: float(np.median([by_rows(p, "gather")[k + 1]["r"] for p in tp])) for k in ks}
    rb = {k: float(np.median([by_rows(p, "gather")[k + 1]["r_bound"] for p in tp])) for k in ks}
    merged = {e["label"]: e for e in trained["e2e_merged"]}
    k2 = merged.get("k=2")
    rows = []
    for e in trained["e2e_merged"]:
        k = int(e["label"][2:]) if e["label"].startswith("k=") else None
        rows.append((e, e["mean_acceptance_length"] / (rk[k] + k * c) if k in rk else None))
    return {"run": trained, "k2": k2, "plain": merged.get("plain"), "c": c, "rk": rk, "rb": rb, "rows": rows,
            "free": speedup_ceiling(k2["mean_acceptance_length"], 2, c) if k2 else None,
            "at_bound": speedup_ceiling(k2["mean_acceptance_length"], 2, c, rb[2]) if k2 and 2 in rb else None,
            "t1": float(np.median([p["t1_seconds"] for p in tp])), "bench_k2": bench_model_k2(points, k_top)}


def auto_findings(points: list[dict], trained: dict | None) -> dict:
    """--k auto against plain: per N (and the trained model) the totals with the A/A control, and where
    the runs are paired, the paired reading of a fresh and of a carried controller."""
    def speedup_of(entries: list, label: str) -> float | None:
        return next((e["speedup"] for e in entries if e["label"] == label), None)

    autos = [(p["context"], speedup_of(p["e2e"], "auto"), speedup_of(p["e2e"], PLAIN_CONTROL)) for p in points
             if speedup_of(p["e2e"], "auto") is not None]
    if trained and speedup_of(trained["e2e_merged"], "auto") is not None:
        autos.append((f"trained {trained['context']}", speedup_of(trained["e2e_merged"], "auto"),
                      speedup_of(trained["e2e_merged"], PLAIN_CONTROL)))
    controls = [c for _, _, c in autos if c is not None]
    return {"totals": autos, "noise": max((abs(c - 1.0) for c in controls), default=None),
            "paired": paired_summary(paired_auto_runs(points, trained)),
            "carried": paired_summary(paired_auto_runs(points, trained, AUTO_CARRIED))}


def probe_findings(points: list[dict]) -> list[dict]:
    """Adaptive k's decisions per N and controller, with its plain steps' verify time against plain's
    and the A/A control's where the run recorded them."""
    out = []
    for p in points:
        for e in p["e2e"]:
            if e["label"] in ("auto", AUTO_CARRIED) and "probe_decisions" in e:
                steps = {x["label"]: plain_step_ms(x) for x in p["e2e"]
                         if x["label"] in ("plain", PLAIN_CONTROL, e["label"])}
                complete = all(v is not None for v in steps.values()) and len(steps) == 3
                out.append({"n": p["context"], "entry": e, "steps": steps if complete else None})
    return out


def plain_step_ms(entry: dict) -> float | None:
    """Mean milliseconds of the target forward of the entry's plain (k = 0) steps; None without the
    per-k seconds (older JSON) or without plain steps."""
    seconds, counts = entry.get("verify_seconds_by_k") or [], entry.get("k_decisions") or []
    if not seconds or not counts or counts[0] == 0:
        return None
    return 1e3 * seconds[0] / counts[0]
