#!/usr/bin/env python3
"""Turns accept_bench / tradeoff_bench JSON into CSV tables, PNG plots and two Markdown reports.

  python bench/report/report.py --accept build/results/accept.json --tradeoff build/results/tradeoff.json \
      [--out docs/results] [--date YYYY-MM-DD] [--accept-cmd "..."] [--tradeoff-cmd "..."]

Writes <out>/acceptance.md and <out>/tradeoff.md, the current report of each benchmark, and under
<out>/acceptance-data/ and <out>/tradeoff-data/ their JSON, CSV tables and PNG plots (acceptance vs
context per position, r_k vs N per path, k x N speedup heat map, component stacks). Either input may be
omitted. The trade-off findings are computed in tradeoff_findings.py; the pages' text is
templates/acceptance.md.j2 and templates/tradeoff.md.j2.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import tradeoff_findings  # noqa: E402  (bench/report/tradeoff_findings.py)
from results_page import render, write_page  # noqa: E402

BASE = "normed/post/exact"


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


# ------------------------------------------------------------------------------------------------
# Acceptance


def pick(cells, **want):
    return [c for c in cells if all(c.get(k) == v for k, v in want.items())]


def acceptance_plot(cells: list, ref: dict, contexts: list, ks: list, topk: int, main_corpus: str,
                    data_dir: Path) -> None:
    """acceptance_vs_context.png: conditional and unconditional acceptance per position at the largest k
    (`ref`, per context), and the mean acceptance length per k, against the context."""
    k_max = ks[-1]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, key, title in ((axes[0], "conditional", "conditional P(i | 1..i-1 accepted)"),
                           (axes[1], "unconditional", "unconditional P(1..i accepted)")):
        for i in range(k_max):
            xs = [n for n in contexts if n in ref and ref[n][key][i]["mean"] is not None]
            ys = [ref[n][key][i]["mean"] for n in xs]
            lo = [ref[n][key][i]["mean"] - (ref[n][key][i]["lo"] or ref[n][key][i]["mean"]) for n in xs]
            hi = [(ref[n][key][i]["hi"] or ref[n][key][i]["mean"]) - ref[n][key][i]["mean"] for n in xs]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=f"position {i + 1}")
        ax.axvline(topk, color="gray", ls="--", lw=1)
        ax.set_xlabel("context N (prompt tokens)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=8)
    for k in ks:
        series = {c["context"]: c for c in pick(cells, variant=BASE, rule="sampler-equality", temperature=0.0,
                                                corpus=main_corpus, k=k)}
        xs = sorted(series)
        axes[2].plot(xs, [series[n]["mean_acceptance_length"]["mean"] for n in xs], marker="o", label=f"k={k}")
    axes[2].axvline(topk, color="gray", ls="--", lw=1)
    axes[2].set_title("mean acceptance length (bonus incl.)", fontsize=10)
    axes[2].set_xlabel("context N")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"MTP acceptance, {BASE}, sampler-equality T=0, corpus {main_corpus} (dashed: index_topk={topk})")
    fig.tight_layout()
    fig.savefig(data_dir / "acceptance_vs_context.png", dpi=110)
    plt.close(fig)


def value_range(values) -> dict | None:
    """{"lo", "hi"} of the values that exist, or None when none does."""
    values = [v for v in values if v is not None]
    return {"lo": min(values), "hi": max(values)} if values else None


def intervals_overlap(intervals: list[dict]) -> bool:
    """Whether the 95% intervals share a common point (each has lo and hi)."""
    return max(iv["lo"] for iv in intervals) <= min(iv["hi"] for iv in intervals)


def acceptance_findings(cells: list, contexts: list, ks: list, topk: int, main_corpus: str) -> dict:
    """The numbers the page's findings state, each from the run's cells (base variant, main corpus)."""
    k_max, k_mid = ks[-1], min(ks, key=lambda k: abs(k - 3))
    se0 = dict(rule="sampler-equality", temperature=0.0)

    def cell(**want):
        return next(iter(pick(cells, **{"variant": BASE, "corpus": main_corpus, **want})), None)

    def lengths(**want):  # the mean acceptance length interval per context, where the run has it
        found = [cell(context=n, **want) for n in contexts]
        return [c["mean_acceptance_length"] for c in found if c and c["mean_acceptance_length"]["mean"] is not None]

    ref = [c for c in (cell(context=n, k=k_max, **se0) for n in contexts) if c]
    found = {"k_max": k_max, "k_mid": k_mid,
             "a1": value_range(c["conditional"][0]["mean"] for c in ref),
             "later": value_range(iv["mean"] for c in ref for iv in c["conditional"][1:]),
             "lengths": [(k, value_range(iv["mean"] for iv in lengths(k=k, **se0)))
                         for k in sorted({ks[0], k_mid, k_max})]}
    found["contexts_overlap"] = intervals_overlap([iv for iv in lengths(k=k_max, **se0) if iv["lo"] is not None])
    by_regime = {"dense": [], "sparse": []}
    for c in ref:
        by_regime["dense" if c["context"] <= topk else "sparse"].append(c["mean_acceptance_length"]["mean"])
    found["regime_means"] = {r: sum(v) / len(v) for r, v in by_regime.items() if v}

    variants = sorted({c["variant"] for c in cells})
    spreads, widths = [], []
    for n in contexts:
        ivs = [c["mean_acceptance_length"] for c in pick(cells, corpus=main_corpus, context=n, k=k_max, **se0)]
        if len(ivs) > 1:
            spreads.append(max(iv["mean"] for iv in ivs) - min(iv["mean"] for iv in ivs))
            widths.extend(iv["hi"] - iv["lo"] for iv in ivs if iv["lo"] is not None)
    found["variants"] = {"count": len(variants), "spread": max(spreads), "narrowest": min(widths)} if spreads else None

    rules = {}
    for rule, t in sorted({(c["rule"], c["temperature"]) for c in cells}):
        rules[(rule, t)] = value_range(iv["mean"] for iv in lengths(k=k_mid, rule=rule, temperature=t))
    found["rules"] = [{"rule": r, "temperature": t, "range": v} for (r, t), v in rules.items()]

    corpora = sorted({c["corpus"] for c in cells} - {main_corpus})
    if len(corpora) > 1:
        overlapping = 0
        for n in contexts:
            ivs = [c["mean_acceptance_length"] for name in corpora
                   for c in pick(cells, variant=BASE, corpus=name, context=n, k=k_max, **se0)]
            overlapping += len(ivs) == len(corpora) and intervals_overlap(ivs)
        found["corpora"] = {"names": corpora, "overlapping": overlapping, "contexts": len(contexts)}
    else:
        found["corpora"] = None
    return found


def acceptance_report(data: dict, out: Path, data_dir: Path, date: str, command: str) -> str:
    """The acceptance page's text (templates/acceptance.md.j2), its CSV and its plot."""
    cells = data["cells"]
    corpora = sorted({c["corpus"] for c in cells})
    main_corpus = "all" if "all" in corpora else corpora[0]
    contexts = sorted({c["context"] for c in cells})
    ks = sorted({c["k"] for c in cells})
    k_max = ks[-1]
    topk = data["model"]["index_topk"]

    rows = []
    r4 = lambda v: None if v is None else round(v, 4)  # noqa: E731
    for c in cells:
        if c["corpus"] != main_corpus:
            continue  # per-corpus rows stay in accept_bench's own CSV
        for i in range(c["k"]):
            u, q, al = c["unconditional"][i], c["conditional"][i], c["mean_acceptance_length"]
            rows.append([c["context"], c["regime"], c["k"], c["variant"], c["rule"], c["temperature"], c["corpus"],
                         c["windows"], c["cycles"], i + 1, r4(u["mean"]), r4(u["lo"]), r4(u["hi"]), r4(q["mean"]),
                         r4(q["lo"]), r4(q["hi"]), r4(al["mean"]), r4(al["lo"]), r4(al["hi"])])
    write_csv(data_dir / "acceptance.csv",
              ["context", "regime", "k", "variant", "rule", "temperature", "corpus", "windows", "cycles", "position",
               "uncond", "uncond_lo", "uncond_hi", "cond", "cond_lo", "cond_hi", "mean_len", "mean_len_lo",
               "mean_len_hi"], rows)

    # Plot: conditional and unconditional acceptance vs context, one line per position.
    ref = {c["context"]: c for c in pick(cells, variant=BASE, rule="sampler-equality", temperature=0.0,
                                         corpus=main_corpus, k=k_max)}
    acceptance_plot(cells, ref, contexts, ks, topk, main_corpus, data_dir)

    one = lambda **want: next(iter(pick(cells, corpus=main_corpus, **want)), None)  # noqa: E731
    se0 = dict(rule="sampler-equality", temperature=0.0)
    k_mid = min(ks, key=lambda k: abs(k - 3))
    combos = sorted({(c["rule"], c["temperature"]) for c in cells})
    variants = sorted({c["variant"] for c in cells})
    by_k = []
    for n in contexts:
        row = [one(variant=BASE, k=k, context=n, **se0) for k in ks]
        by_k.append((n, row, str(row[0]["cycles"]) if row[0] else ""))
    return render("acceptance.md.j2", data=data, date=date, topk=topk, command=command or data["run"]["command"],
                  folder=data_dir.relative_to(out), base=BASE, corpus=main_corpus, ks=ks, k_max=k_max, by_k=by_k,
                  per_position=[(n, ref[n]["conditional"]) for n in contexts if n in ref], combos=combos,
                  by_rule=[(n, [one(variant=BASE, rule=r, temperature=t, k=k_mid, context=n) for r, t in combos])
                           for n in contexts],
                  variants=variants, by_variant=[(n, [one(variant=v, k=k_max, context=n, **se0) for v in variants])
                                                 for n in contexts],
                  corpora=corpora, by_corpus=[(n, [next(iter(pick(cells, variant=BASE, corpus=name, k=k_max, context=n,
                                                                  **se0)), None) for name in corpora])
                                              for n in contexts],
                  findings=acceptance_findings(cells, contexts, ks, topk, main_corpus))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accept", type=Path)
    parser.add_argument("--tradeoff", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--date", help="the page's date (default: the run's)")
    parser.add_argument("--accept-cmd", default="")
    parser.add_argument("--tradeoff-cmd", default="")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, source in (("acceptance", args.accept), ("tradeoff", args.tradeoff)):
        if source is None:
            continue
        data_dir = args.out / f"{name}-data"
        data_dir.mkdir(exist_ok=True)
        data = json.loads(source.read_text())
        date = args.date or data["run"]["date_utc"][:10]
        if source.resolve() != (data_dir / f"{name}.json").resolve():
            (data_dir / f"{name}.json").write_text(source.read_text())
        if name == "acceptance":
            text = acceptance_report(data, args.out, data_dir, date, args.accept_cmd)
        else:
            text = tradeoff_findings.tradeoff_report(data, args.out, data_dir, date, args.tradeoff_cmd, write_csv)
        write_page(args.out / f"{name}.md", text)


if __name__ == "__main__":
    main()
