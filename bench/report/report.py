#!/usr/bin/env python3
"""Turns accept_bench / tradeoff_bench JSON into CSV tables, PNG plots and two Markdown reports.

  python bench/report/report.py --accept build/results/accept.json --tradeoff build/results/tradeoff.json \
      [--out docs/results] [--date YYYY-MM-DD] [--accept-cmd "..."] [--tradeoff-cmd "..."]

Writes <out>/acceptance.md and <out>/tradeoff.md, the current report of each benchmark, and under
<out>/acceptance-data/ and <out>/tradeoff-data/ their JSON, CSV tables and PNG plots (acceptance vs context per position, r_k vs N per path, k x N speedup heat
map, component stacks). Either input may be omitted. The trade-off findings live in report_goals.py.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import report_goals  # noqa: E402  (bench/report/report_goals.py)

BASE = "normed/post/exact"
COMPONENTS = ["embed", "attn_proj", "indexer", "topk", "attention", "moe_mlp", "norms", "head"]


def fmt_ci(iv: dict, digits: int = 3) -> str:
    if iv is None or iv.get("mean") is None:
        return "n/a"
    lo, hi = iv.get("lo"), iv.get("hi")
    if lo is None or hi is None:
        return f"{iv['mean']:.{digits}f}"
    return f"{iv['mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def machine_lines(run: dict, extra: list[str] | None = None) -> list[str]:
    load = run.get("loadavg_start", [])
    lines = [f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
             f"{run.get('threads', '?')} mtpspec threads",
             f"- Date (UTC): {run.get('date_utc', '?')}",
             f"- Load average at start (1/5/15 min): {', '.join(f'{x:.2f}' for x in load)}"]
    return lines + (extra or [])


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


# ------------------------------------------------------------------------------------------------
# Acceptance


def pick(cells, **want):
    return [c for c in cells if all(c.get(k) == v for k, v in want.items())]


def acceptance_report(data: dict, out: Path, data_dir: Path, date: str, command: str) -> str:
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

    md = [f"# MTP acceptance on held-out text (run of {date})", ""]
    md += machine_lines(data["run"], [f"- Model: `{data['model']['dir']}` (vocab {data['model']['vocab_size']}, "
                                      f"index_topk {topk}, max_position_embeddings "
                                      f"{data['model']['max_position_embeddings']})",
                                      f"- Held-out corpora: " + ", ".join(f"{c['name']} ({c['tokens']} tokens)"
                                                                          for c in data["corpora"]),
                                      f"- Windows per context: {data['settings']['windows_per_context']} "
                                      f"(alternating corpora); {data['settings']['new_tokens']} generated tokens "
                                      f"per window; {data['generations']} generations in "
                                      f"{data['elapsed_seconds']:.0f} s; load at end "
                                      f"{', '.join(f'{x:.2f}' for x in data.get('loadavg_end', []))}",
                                      f"- Intervals: {data['ci_method']}",
                                      f"- Regime: {data['settings']['regime_rule']}"])
    md += ["", "Command:", "", "```", command or data["run"]["command"], "```", "",
           f"Plots and CSV: `{data_dir.relative_to(out)}/`.", "",
           f"![acceptance]({data_dir.relative_to(out)}/acceptance_vs_context.png)", ""]

    md += [f"## Mean acceptance length by context and k ({BASE}, sampler-equality, T=0, {main_corpus})", "",
           "| N | regime | " + " | ".join(f"k={k}" for k in ks) + " | cycles (k=1) |",
           "|---|---|" + "---|" * (len(ks) + 1)]
    for n in contexts:
        line = [str(n), "dense" if n <= topk else "sparse"]
        cyc = ""
        for k in ks:
            c = pick(cells, variant=BASE, rule="sampler-equality", temperature=0.0, corpus=main_corpus, k=k, context=n)
            line.append(fmt_ci(c[0]["mean_acceptance_length"], 2) if c else "")
            if c and k == ks[0]:
                cyc = str(c[0]["cycles"])
        md.append("| " + " | ".join(line + [cyc]) + " |")

    md += ["", f"## Per-position acceptance at k={k_max} (conditional; unconditional in the CSV)", "",
           "| N | " + " | ".join(f"a_{i + 1}" for i in range(k_max)) + " |", "|---|" + "---|" * k_max]
    for n in contexts:
        if n in ref:
            md.append(f"| {n} | " + " | ".join(fmt_ci(iv, 2) for iv in ref[n]["conditional"]) + " |")

    md += ["", "## Rules and temperatures (mean acceptance length, base variant, k=3 or nearest)", ""]
    k_mid = min(ks, key=lambda k: abs(k - 3))
    combos = sorted({(c["rule"], c["temperature"]) for c in cells})
    md += ["| N | " + " | ".join(f"{r} T={t:g}" for r, t in combos) + " |", "|---|" + "---|" * len(combos)]
    for n in contexts:
        line = [str(n)]
        for r, t in combos:
            c = pick(cells, variant=BASE, rule=r, temperature=t, corpus=main_corpus, k=k_mid, context=n)
            line.append(fmt_ci(c[0]["mean_acceptance_length"], 2) if c else "")
        md.append("| " + " | ".join(line) + " |")

    variants = sorted({c["variant"] for c in cells})
    if len(variants) > 1:
        md += ["", f"## MTP variants (mean acceptance length, sampler-equality T=0, k={k_max})", "",
               "| N | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
        for n in contexts:
            line = [str(n)]
            for v in variants:
                c = pick(cells, variant=v, rule="sampler-equality", temperature=0.0, corpus=main_corpus, k=k_max,
                         context=n)
                line.append(fmt_ci(c[0]["mean_acceptance_length"], 2) if c else "")
            md.append("| " + " | ".join(line) + " |")
    if len(corpora) > 1:
        md += ["", f"## By corpus (mean acceptance length, base, sampler-equality T=0, k={k_max})", "",
               "| N | " + " | ".join(corpora) + " |", "|---|" + "---|" * len(corpora)]
        for n in contexts:
            line = [str(n)]
            for name in corpora:
                c = pick(cells, variant=BASE, rule="sampler-equality", temperature=0.0, corpus=name, k=k_max,
                         context=n)
                line.append(fmt_ci(c[0]["mean_acceptance_length"], 2) if c else "")
            md.append("| " + " | ".join(line) + " |")
    md += ["", "Rejection sampling uses sampled drafts (q = the MTP distribution at the same temperature); at "
           "T=0 it is identical to sampler-equality and is skipped unless `--greedy-rejection` is given.", ""]
    return "\n".join(md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accept", type=Path)
    parser.add_argument("--tradeoff", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--date", default=dt.date.today().isoformat())
    parser.add_argument("--accept-cmd", default="")
    parser.add_argument("--tradeoff-cmd", default="")
    parser.add_argument("--accept-notes", type=Path, help="Markdown file appended to the acceptance report")
    parser.add_argument("--tradeoff-notes", type=Path, help="Markdown file appended to the trade-off report")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, source, notes in (("acceptance", args.accept, args.accept_notes),
                                ("tradeoff", args.tradeoff, args.tradeoff_notes)):
        if source is None:
            continue
        data_dir = args.out / f"{name}-data"
        data_dir.mkdir(exist_ok=True)
        data = json.loads(source.read_text())
        if source.resolve() != (data_dir / f"{name}.json").resolve():
            (data_dir / f"{name}.json").write_text(source.read_text())
        if name == "acceptance":
            text = acceptance_report(data, args.out, data_dir, args.date, args.accept_cmd)
        else:
            text = report_goals.tradeoff_report(data, args.out, data_dir, args.date, args.tradeoff_cmd, machine_lines,
                                                write_csv)
        if notes:
            text += "\n" + notes.read_text()
        (args.out / f"{name}.md").write_text(text)
        print(f"wrote {args.out / f'{name}.md'}")


if __name__ == "__main__":
    main()
