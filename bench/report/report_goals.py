"""Trade-off report for bench/report/report.py: tables, plots and the findings, from tradeoff_bench JSON.

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

COMPONENTS = ["embed", "attn_proj", "indexer", "topk", "attention", "moe_mlp", "norms", "head"]
PATHS = ["gather", "mask", "dense"]
# The end-to-end A/A control (bench/tradeoff_point.h kPlainControlLabel).
PLAIN_CONTROL = "plain (A/A)"
AUTO_CARRIED = "auto (carried)"  # one adaptive-k controller carried across a context's runs
# spec/adaptive_k.h kExplorationBudget: the share of a request's decode time adaptive k may spend on probes.
EXPLORATION_BUDGET = 0.01


def timing_note(trained: dict) -> str:
    """The trained model's run length (absent from older JSON)."""
    if "new_tokens" not in trained:
        return ""
    return f" End-to-end runs of {trained['new_tokens']} tokens from N, {trained['e2e_reps']} per window."


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


def paired_reading(paired: list) -> str:
    """The per-N text over paired_auto_runs' output: the median ratio, the median A/A deviation (the
    noise) and the range."""
    rows = []
    for n, ratios, aa in paired:
        noise = float(np.median(np.abs(np.asarray(aa) - 1.0)))
        rows.append(f"N={n}: {float(np.median(ratios)):.3f}x (A/A noise {100 * noise:.1f}%, {len(ratios)} runs, "
                    f"range {min(ratios):.3f}-{max(ratios):.3f})")
    return "; ".join(rows)


def compute_floor_lines(data: dict, sparse: list[dict]) -> list[str]:
    """The verify cost's floor on this machine: the arithmetic of an extra verify row that the bytes bound does
    not see (it counts the keys' reads, shared by the rows, not the work on them): the absorbed
    attention over its K keys (scores and values, H·K·(2 r_kv + d_r) per layer) and the indexer's
    scoring of all N keys on the full layers, at the measured MAC rate. Even if every weight product
    of the extra rows hid under the memory stream, (L - 1) times that is added to the bytes bound; the
    points where it exceeds 0.1 · r_k^bound · T1 cannot come within 1.1x of the bytes bound here."""
    config = data.get("bench_model", {}).get("config")
    rate = data.get("mac_rate", {}).get("macs_per_second")
    if not config or not rate or not sparse:
        return []
    heads, k_top, layers = config["num_attention_heads"], config["index_topk"], config["num_hidden_layers"]
    attention = heads * k_top * (2 * config["kv_lora_rank"] + config["qk_rope_head_dim"]) * layers
    full = sum(1 for t in config.get("indexer_types", ["full"] * layers) if t == "full")
    out, floors, checked = [], [], 0
    for p in sparse:
        per_row = (attention + full * p["context"] * config["index_n_heads"] * config["index_head_dim"]) / rate
        floors.append(f"N={p['context']}: {1e3 * per_row:.2f} ms")
        for k in range(1, 8):
            e = by_rows(p, default_path(p, k + 1)).get(k + 1)
            if e is None:
                continue
            checked += 1
            if k * per_row > 0.1 * e["r_bound"] * p["t1_seconds"]:
                out.append(f"N={p['context']} k={k}")
    return [f"  - floor on this machine: an extra row's attention and indexer multiply-adds (the bytes bound counts "
            f"the keys they read, not this arithmetic) at the measured {rate / 1e9:.1f} GMAC/s cost "
            + ", ".join(floors) + " per row. Even with every weight product of the extra rows hidden under the "
            f"memory stream, k of them exceed 0.1 r_k^bound T1 at {len(out)} of {checked} points"
            + (": " + ", ".join(out) if out else "") + "."]


def bench_model_k2_lines(points: list[dict], k_top: int) -> list[str]:
    """The k = 2 reading on the bench model (SYNTHETIC acceptance at the rates) at the measured contexts nearest
    8 x K: the measured k = 2 speedup, and the most k = 2 could give if its verify cost only the
    bytes it touches, E[L] / (r_2^bound + draft). The bound is a ratio of bytes, so it holds on any
    hardware where the verify is memory-bound."""
    target = 8 * k_top
    distance = lambda q: round(abs(np.log2(q["context"] / target)), 6)  # noqa: E731
    cands = [p for p in points if p["context"] > k_top and any(e["k"] == 2 for e in p["predicted"])]
    if not cands:
        return []
    nearest = min(distance(p) for p in cands)
    lines, ceilings = [], []
    for p in (q for q in cands if distance(q) == nearest):
        pred = next(e for e in p["predicted"] if e["k"] == 2)
        bound = by_rows(p, default_path(p, 3)).get(3)
        measured = next((e["speedup"] for e in p["e2e"] if e["label"] == "k=2"), None)
        if bound is None or measured is None:
            continue
        draft = pred.get("draft_cost", 2 * pred["c"])
        ceiling = pred["expected_length"] / (bound["r_bound"] + draft)
        ceilings.append(ceiling)
        lines.append(f"N={p['context']}: k=2 measured {measured:.2f}x; at the bytes bound E[L] / (r_2^bound + draft) "
                     f"= {pred['expected_length']:.2f} / ({bound['r_bound']:.2f} + {draft:.2f}) = {ceiling:.2f}x")
    if not lines:
        return []
    return [f"  - read on the bench model instead (SYNTHETIC acceptance at the rates, nearest contexts to 8 x K = "
            f"{target}): " + "; ".join(lines) + "."
            + (f" Even a verify that cost only its bytes (its 3 rows route to more experts than 1 row) gives at most "
               f"{max(ceilings):.2f}x: past that, k = 2 needs a cheaper draft than one MTP layer plus the head."
               if max(ceilings) < 1.2 else "")]


def speedup_ceiling(mean_acceptance_length: float, k: int, c: float, r_k: float = 1.0) -> float:
    """The most k drafts can give at this acceptance and draft cost c (in plain steps) if the verify
    cost r_k plain steps; by default free beyond a plain step (r_k = 1): E[L] / (r_k + k c)."""
    return mean_acceptance_length / (r_k + k * c)


def bandwidth_warning(start: float, end: float) -> str:
    """A warning for the report header when the host's read bandwidth moved by more than 10% during the
    run: the bytes bound (and so r_k against it) and every absolute time are then suspect."""
    if start <= 0 or abs(end / start - 1) <= 0.10:
        return ""
    return (f" **Warning: the bandwidth moved by {100 * (end / start - 1):+.0f}% during the run: the host was "
            "contended, so the bytes bound and the cost comparisons of this run are unreliable.**")


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


def tradeoff_report(data: dict, out: Path, data_dir: Path, date: str, command: str, machine_lines, write_csv) -> str:
    points = data["points"]
    bw = data["read_bandwidth_start"]["bytes_per_second"]
    bw_end = data["read_bandwidth_end"]["bytes_per_second"]
    cfg = data["bench_model"]["config"]
    k_top = cfg["index_topk"]
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

    rel = data_dir.relative_to(out)
    md = [f"# Verify cost, draft cost and speedup vs context (run of {date})", ""]
    md += machine_lines(data["run"], [
        f"- Load average at end: {', '.join(f'{x:.2f}' for x in data.get('loadavg_end', []))} (per-context load: "
        + ", ".join(f"N={p['context']}: {p['loadavg_start'][0]:.2f}-{p['loadavg_end'][0]:.2f}" for p in data["points"])
        + "). Absolute times move with the machine's load; the cost repetitions are "
        "interleaved over every (N, path, L) and reported as medians, so ratios are measured side by side.",
        f"- Read bandwidth (StreamSum over {data['read_bandwidth_start']['buffer_mib']} MiB, "
        f"{data['read_bandwidth_start']['threads']} threads): {bw / 1e9:.2f} GB/s at start, {bw_end / 1e9:.2f} GB/s "
        "at end; the bound uses the start value." + bandwidth_warning(bw, bw_end),
        f"- Bench model: `bench/bench_model.cc`'s checkpoint (written to build/bench_model), run through a view "
        f"with max_position_embeddings raised to {cfg['max_position_embeddings']}: hidden "
        f"{cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, {cfg['n_routed_experts']} experts top-"
        f"{cfg['num_experts_per_tok']}, index_topk K={k_top}, vocab {cfg['vocab_size']}, bf16; f32 cache "
        f"{data['bench_model']['cache_bytes_per_token']} B/token ({data['bench_model']['cache_bytes_per_token'] * 32784 / 2**20:.0f} MiB at 32K+16).",
        f"- Acceptance for predictions and the SYNTHETIC end-to-end runs: {data['acceptance_source']}",
        *memory_lines(data["points"]),
        f"- Timing: {data['points'][0].get('timing', 'the extend and head of the draft after an eviction of the caches')}.",
        f"- Elapsed {data['elapsed_seconds']:.0f} s."])
    md += ["", "Command:", "", "```", command or data["run"]["command"], "```", "",
           f"![r_k]({rel}/rk_vs_n.png)", "", f"![speedup]({rel}/speedup_heatmap.png)", "",
           f"![components]({rel}/components.png)", ""]

    md += ["## Plain step T1(N) and its components (ms, medians)", "",
           "| N | path | T1 | bytes bound | T1/bound | " + " | ".join(COMPONENTS) + " | MTP step | c |",
           "|---|---|---|---|---|" + "---|" * len(COMPONENTS) + "---|---|"]
    for p in points:
        e = by_rows(p, p["t1_path"])[1]
        md.append(f"| {p['context']} | {p['t1_path']} | {1e3 * p['t1_seconds']:.1f} | {1e3 * p['t1_bound_seconds']:.1f} "
                  f"| {p['t1_seconds'] / p['t1_bound_seconds']:.2f} | "
                  + " | ".join(f"{1e3 * e['components'][c]:.2f}" for c in COMPONENTS)
                  + f" | {1e3 * p['mtp_step']['seconds']:.1f} | {p['mtp_step']['c']:.3f} |")
    dense_at = ", ".join(str(p["context"]) for p in points if p["paths"].get("dense"))
    md += ["", f"Dense is valid only while N + L <= K = {k_top}, so it is measured only at N = {dense_at} (rows up to "
           "K - N)." if dense_at else f"Dense is valid only while N + L <= K = {k_top}: not measured in this run "
           "(every N > K).", ""]

    md += ["## r_k = Tv(k+1, N) / T1(N) per path, with the bytes-touched bound ratio", ""]
    max_rows = max(e["rows"] for p in points for e in p["paths"]["gather"])
    md += ["| N | path | " + " | ".join(f"k={k}" for k in range(1, max_rows)) + " |", "|---|---|" + "---|" * (max_rows - 1)]
    for p in points:
        for path in PATHS:
            m = by_rows(p, path)
            if len(m) < 2:
                continue
            md.append(f"| {p['context']} | {path} | " + " | ".join(
                (f"{m[k + 1]['r']:.2f} ({m[k + 1]['r_bound']:.2f}" +
                 (f"; {m[k + 1]['r_bound_with_compute']:.2f}" if "r_bound_with_compute" in m[k + 1] else "") + ")")
                if k + 1 in m else "" for k in range(1, max_rows)) + " |")
    md += ["", "Parenthesised: r_k^bound = bytes(k+1 rows) / bytes(1 row) with the routed experts actually touched "
           "(routing probe); weights + attended latent rows (union of the rows' selections) + indexer keys. "
           "After the semicolon (where measured): r_k^bound+compute, the same bytes plus the k extra rows' "
           "multiply-adds at the measured Linear rate (bytes(L)/BW + (L-1) x MACs per row / MAC rate, over "
           "bytes(1)/BW)" + (f"; MAC rate {data['mac_rate']['macs_per_second'] / 1e9:.1f} GMAC/s"
                             if data.get("mac_rate") else "") + ".", ""]

    md += findings_section(data, points, k_top)
    return "\n".join(md)


def memory_lines(points: list[dict]) -> list[str]:
    """The process's memory while every context's caches were alive (absent from older JSON)."""
    memory = points[0].get("memory_after_cost_rounds") if points else None
    if not memory or "rss_mib" not in memory:
        return []
    huge = memory.get("anon_huge_mib", 0.0)
    return [f"- Memory after the cost rounds (weights and every context's caches): {memory['rss_mib']:.0f} MiB "
            f"resident, {huge:.0f} MiB of it ({100 * huge / max(memory['rss_mib'], 1e-9):.0f}%) on transparent "
            "huge pages (the gather path reads scattered cache rows: on 4 KiB pages each costs a page walk)."]


def findings_section(data: dict, points: list[dict], k_top: int) -> list[str]:
    md = ["## Findings", ""]
    sparse = [p for p in points if p["context"] > k_top]
    att = {p["context"]: by_rows(p, "gather")[1]["components"] for p in sparse}
    if att:
        a = [v["attention"] for v in att.values()]
        ratio = max(a) / min(a)
        md.append("- Gather-path attention against N beyond K (L=1): attention ms " + ", ".join(f"N={n}: {1e3 * v['attention']:.2f}" for n, v in att.items())
                  + f" (max/min {ratio:.2f}).")
        for L in (3, 5):
            aL = {p["context"]: by_rows(p, "gather")[L]["components"]["attention"] for p in sparse
                  if L in by_rows(p, "gather")}
            if aL:
                md.append(f"  - at L={L}: " + ", ".join(f"N={n}: {1e3 * v:.2f}" for n, v in aL.items())
                          + f" ms (max/min {max(aL.values()) / min(aL.values()):.2f}).")
        md.append("  - top-k selection ms: " + ", ".join(f"N={n}: {1e3 * v['topk']:.2f}" for n, v in att.items())
                  + "; indexer scoring ms (O(N) by design): "
                  + ", ".join(f"N={n}: {1e3 * v['indexer']:.2f}" for n, v in att.items()) + ".")
    worst, checked, fails = 0.0, 0, []
    for p in sparse:
        for k in range(1, 8):
            e = by_rows(p, default_path(p, k + 1)).get(k + 1)
            if e is None:
                continue
            q = e["r"] / e["r_bound"]
            checked += 1
            worst = max(worst, q)
            if q > 1.1:
                fails.append(f"N={p['context']} k={k}: {e['r']:.2f} vs {e['r_bound']:.2f}")
    md.append(f"- r_k against the bytes bound r_k^bound (default path, N > K, {checked} points): worst "
              f"r_k / r_k^bound = {worst:.2f}; {checked - len(fails)} of {checked} within 1.1x"
              + (f"; above it: {'; '.join(fails[:8])}" if fails else "") + ".")
    md += compute_floor_lines(data, sparse)
    with_compute = [by_rows(p, default_path(p, k + 1)).get(k + 1) for p in sparse for k in range(1, 8)]
    with_compute = [e for e in with_compute if e is not None and "r_bound_with_compute" in e]
    if with_compute:
        q = [e["r"] / e["r_bound_with_compute"] for e in with_compute]
        md.append(f"  - against bytes plus the extra rows' multiply-adds (r_k^bound+compute, to "
                  f"show where the rest goes): r_k / r_k^bound+compute in [{min(q):.2f}, {max(q):.2f}], "
                  f"{sum(1 for x in q if x <= 1.1)}/{len(q)} points within 1.1x. On this CPU an extra verify row "
                  "costs its multiply-adds (weights, absorbed attention over K keys, indexer scoring) on top of "
                  "the bytes: a bf16 GEMV turns compute-bound after a few rows.")
    md += ["", "  Cost of each extra verify row, (Tv(L) - T1) / (L - 1) at the largest L on the default path, by "
           "component (ms), next to what the bytes bound allows per extra row:", "",
           "  | N | L | total | bytes bound | " + " | ".join(COMPONENTS) + " |",
           "  |---|---|---|---|" + "---|" * len(COMPONENTS)]
    for p in points:
        m = by_rows(p, "gather" if p["context"] >= k_top else "dense")
        L = max(m)
        if L < 2:
            continue
        one = by_rows(p, p["t1_path"])[1]
        per = lambda a, b: 1e3 * (a - b) / (L - 1)  # noqa: E731
        md.append(f"  | {p['context']} | {L} | {per(m[L]['seconds'], one['seconds']):.2f} | "
                  f"{per(m[L]['bound_seconds'], one['bound_seconds']):.2f} | "
                  + " | ".join(f"{per(m[L]['components'][c], one['components'][c]):.2f}" for c in COMPONENTS) + " |")
    md.append("")
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
                realised = e["mean_acceptance_length"] / cost[k]
                ratios.append((p["context"], e["label"], e["speedup"], pred, e["speedup"] / pred,
                               e["speedup"] / realised, simple.get(k)))
    bad = [r for r in ratios if r[4] < 0.9]
    bad_cost = [r for r in ratios if r[5] < 0.9]
    md.append(f"- Measured / predicted speedup (SYNTHETIC acceptance, {len(ratios)} points): with E[L] from the rates "
              f"{len(ratios) - len(bad)}/{len(ratios)} at >= 0.9, worst "
              f"{min(r[4] for r in ratios):.2f}; for the cost model alone, i.e. with the "
              f"acceptance length each run realised, {len(ratios) - len(bad_cost)}/{len(ratios)} at >= 0.9, worst "
              f"{min(r[5] for r in ratios):.2f}. Measured/predicted (rates; realised): "
              + "; ".join(f"N={n} {lab}: {m:.2f}/{pr:.2f} = {q:.2f}; {q2:.2f}" for n, lab, m, pr, q, q2, _ in ratios) + ".")
    with_simple = [r for r in ratios if r[6]]
    if with_simple:
        bad_simple = [r for r in with_simple if r[2] / r[6] < 0.9]
        md.append(f"  - against the simpler formula E[L] / (r_k + k c) (one MTP step per draft): "
                  f"{len(with_simple) - len(bad_simple)}/{len(with_simple)} at >= 0.9, worst "
                  f"{min(r[2] / r[6] for r in with_simple):.2f}.")
    trained = data.get("trained")
    if trained:
        merged = {e["label"]: e for e in trained["e2e_merged"]}
        k2 = merged.get("k=2")
        tp = trained["points"]
        c = np.median([p["mtp_step"]["c"] for p in tp])
        ks = [k for k in range(1, 6) if all(k + 1 in by_rows(p, "gather") for p in tp)]
        rk = {k: float(np.median([by_rows(p, "gather")[k + 1]["r"] for p in tp])) for k in ks}
        rb = {k: float(np.median([by_rows(p, "gather")[k + 1]["r_bound"] for p in tp])) for k in ks}
        if k2:
            el = k2["mean_acceptance_length"]
            md.append(f"- Trained model `{trained['dir']}`, N={trained['context']} (8 x K), REAL acceptance "
                      f"(sampler-equality, T=0), {trained['windows']} windows: MTP k=2 "
                      f"{k2['tokens_per_second']:.1f} tok/s vs plain {merged['plain']['tokens_per_second']:.1f} tok/s "
                      f"= {k2['speedup']:.2f}x; mean acceptance "
                      f"length {el:.2f}. Even a free verify (r_2 = 1) would give at most "
                      f"E[L] / (1 + 2c) = {speedup_ceiling(el, 2, c):.2f}x at this "
                      f"acceptance and draft cost (c = {c:.3f})"
                      + (f"; a verify at its bytes bound (r_2 = {rb[2]:.2f}) would give "
                         f"{speedup_ceiling(el, 2, c, rb[2]):.2f}x" if 2 in rb else "") + ".")
        md += bench_model_k2_lines(points, k_top)
        t1 = np.median([p["t1_seconds"] for p in tp])
        md += ["", f"  Trained model costs (medians over windows): T1 = {1e3 * t1:.2f} ms, c = {c:.3f}, r_k (bound) = "
               + ", ".join(f"k={k}: {rk[k]:.2f} ({rb[k]:.2f})" for k in rk) + "." + timing_note(trained), "",
               "  | trained, N=%d | tok/s | speedup | mean acc. length | predicted E[L]/(r_k+k c) |" % trained["context"],
               "  |---|---|---|---|---|"]
        for e in trained["e2e_merged"]:
            pred = ""
            if e["label"].startswith("k=") and int(e["label"][2:]) in rk:
                k = int(e["label"][2:])
                pred = f"{e['mean_acceptance_length'] / (rk[k] + k * c):.2f}"
            md.append(f"  | {e['label']} | {e['tokens_per_second']:.1f} | {e['speedup']:.2f} | "
                      f"{e['mean_acceptance_length']:.2f} | {pred} |")
        md.append("")
    def speedup_of(entries: list, label: str) -> float | None:
        return next((e["speedup"] for e in entries if e["label"] == label), None)

    autos = [(p["context"], speedup_of(p["e2e"], "auto"), speedup_of(p["e2e"], PLAIN_CONTROL)) for p in points
             if speedup_of(p["e2e"], "auto") is not None]
    if trained and speedup_of(trained["e2e_merged"], "auto") is not None:
        autos.append((f"trained {trained['context']}", speedup_of(trained["e2e_merged"], "auto"),
                      speedup_of(trained["e2e_merged"], PLAIN_CONTROL)))
    controls = [c for _, _, c in autos if c is not None]
    paired = paired_auto_runs(points, trained)
    if paired:
        # Paired repetitions: each one ran plain, auto and the A/A control back to back (rotated), so
        # auto is read against the mean of that repetition's two plain runs, and the typical A/A
        # deviation |A/A / plain - 1| (median over repetitions, capped at 2%) is the noise it may lie
        # below 1. The medians keep one disturbed repetition from deciding.
        md.append("- --k auto against plain (a fresh controller per request; paired repetitions: median of auto / mean "
                  "of the repetition's plain and A/A runs, next to the median A/A deviation): " + paired_reading(paired)
                  + ".")
        carried = paired_auto_runs(points, trained, AUTO_CARRIED)
        if carried:
            md.append("  - with one controller carried across each context's runs (`auto (carried)`, as a server keeps "
                      "it; read the same way): " + paired_reading(carried) + ".")
        md.append("  - totals over the runs of the table below: " + ", ".join(
            f"N={n}: {s:.3f}x (A/A {c:.3f}x)" for n, s, c in autos) + f". The controller may spend "
            f"{100 * EXPLORATION_BUDGET:.0f}% of a request's decode time on probes (spec/adaptive_k.h).")
    elif controls:
        # The A/A control (plain run twice, interleaved) measures the noise: auto passes when it is no
        # further below plain than plain's own second run strays from the first, and at most 2% below.
        noise = max(abs(c - 1.0) for c in controls)
        md.append(f"- --k auto against plain (the A/A noise, the largest |plain (A/A) / plain - 1| in this run, is "
                  f"{100 * noise:.1f}%): " + ", ".join(f"N={n}: {s:.3f}x (A/A {c:.3f}x)" for n, s, c in autos) + ".")
        md.append(f"  - the controller may spend {100 * EXPLORATION_BUDGET:.0f}% of a request's decode time on probes "
                  "(spec/adaptive_k.h): where no draft length pays, auto is by design up to that budget slower "
                  "than plain.")
    else:
        md.append("- --k auto against plain: " + ", ".join(f"N={n}: {s:.2f}x" for n, s, _ in autos) + ".")
    md += ["", "### End-to-end (bench model, SYNTHETIC acceptance): tokens/s and speedup", "",
           "| N | " + " | ".join(e["label"] for e in points[0]["e2e"]) + " |", "|---|" + "---|" * len(points[0]["e2e"])]
    for p in points:
        md.append(f"| {p['context']} | " + " | ".join(
            f"{e['tokens_per_second']:.2f} ({e['speedup']:.2f}x" +
            (f", pred {predicted_for(p, e['label']):.2f}" if predicted_for(p, e['label']) else "") + ")"
            for e in p["e2e"]) + " |")
    md += ["", "Every drafting column uses the MtpDrafter as Generate gets it: it extends its cache over the prompt "
           "at the prefill's Observe (outside the steady-state window) and over each cycle's committed rows at "
           "Observe; `pred` is E[L] / (r_k + draft), with the draft charged as the drafter runs it (extend of m + 1 "
           "rows, head, k - 1 chained steps).", ""]
    probe_lines = []
    for p in points:
        for e in p["e2e"]:
            if e["label"] in ("auto", AUTO_CARRIED) and "probe_decisions" in e:
                label = e["label"]
                line = f"N={p['context']} {label}: k used {e['k_decisions']}, probes {e['probe_decisions']}"
                steps = {x["label"]: plain_step_ms(x) for x in p["e2e"] if x["label"] in ("plain", PLAIN_CONTROL, label)}
                if all(v is not None for v in steps.values()) and len(steps) == 3:
                    line += (f"; a plain step's verify took {steps[label]:.2f} ms in {label} against "
                             f"{steps['plain']:.2f} ms in plain ({steps[PLAIN_CONTROL]:.2f} ms in the A/A control)")
                probe_lines.append(line)
    if probe_lines:
        md += ["Adaptive-k decisions (verify steps by k, summed over repetitions; probes by k): "
               + "; ".join(probe_lines) + ".", ""]
    return md


def plain_step_ms(entry: dict) -> float | None:
    """Mean milliseconds of the target forward of the entry's plain (k = 0) steps; None without the
    per-k seconds (older JSON) or without plain steps."""
    seconds, counts = entry.get("verify_seconds_by_k") or [], entry.get("k_decisions") or []
    if not seconds or not counts or counts[0] == 0:
        return None
    return 1e3 * seconds[0] / counts[0]
