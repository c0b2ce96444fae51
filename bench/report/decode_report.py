#!/usr/bin/env python3
"""Writes docs/results/decode.md from decode_bench's Google Benchmark JSON: plain decode speed of the
bench model against the read bandwidth measured in the same run.

  python bench/report/decode_report.py --runs A.json [B.json ...] [--baseline X.json ...] \
      [--baseline-label TEXT] [--command "..."] [--out docs/results]

Each --runs file is one decode_bench run (`--benchmark_format=json`); with --baseline the runs of
another build, interleaved with these in the same session, are shown beside them as an A/B.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

CONTEXTS = (1024, 8192)


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    out = {"context": data["context"]}
    for b in data["benchmarks"]:
        name = b["name"]
        if name.startswith("BM_StreamRead/1024"):
            out["read"] = b["GB/s"]
        for c in CONTEXTS:
            if name.startswith(f"BM_Decode/ctx:{c}/"):
                out[c] = {"tok": b["tok/s"], "ratio": b["bw_ratio"], "weight_mb": b["weight_MB/step"],
                          "cache_mb": b["cache_MB/step"]}
    return out


def fmt(values: list[float], digits: int) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--baseline", type=Path, nargs="*", default=[])
    parser.add_argument("--baseline-label", default="baseline")
    parser.add_argument("--label", default="this build")
    parser.add_argument("--command", default="build/release/bench/decode_bench --benchmark_filter='StreamRead/1024|BM_Decode/' "
                                             "--benchmark_format=json")
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args()
    data_dir = args.out / "decode-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    runs = [load(p) for p in args.runs]
    base = [load(p) for p in args.baseline]
    for i, p in enumerate(args.runs):
        shutil.copyfile(p, data_dir / f"decode_{i + 1}.json")
    for i, p in enumerate(args.baseline):
        shutil.copyfile(p, data_dir / f"baseline_{i + 1}.json")
    ctx = runs[0]["context"]
    date = ctx["date"][:10]
    weight_mb = runs[0][CONTEXTS[0]]["weight_mb"]
    md = [f"# Plain decode against the read bandwidth (run of {date})", "",
          f"- Machine: {ctx['num_cpus']} CPUs at {ctx['mhz_per_cpu']} MHz, {ctx['pool_threads']} mtpspec threads; "
          f"load average at the start {fmt(ctx['load_avg'], 2)}",
          f"- Model: the bench model (`bench/bench_model.cc`: hidden 1024, 10 layers, 32 experts top-4 plus one "
          f"shared, bf16, {float(ctx['trunk_weight_GB']):.3f} GB of trunk weights); one decode step reads "
          f"{weight_mb:.1f} MB of them",
          f"- Runs: {len(runs)}" + (f", alternating with {len(base)} runs of {args.baseline_label}" if base else ""),
          "", "Command (each run):", "", "```", args.command, "```", "",
          "`bw_ratio` is the weight bytes a step streams per second over the read bandwidth "
          "(`BM_StreamRead/1024`) measured in the same run.", ""]
    header = "| | " + " | ".join(f"context {c}" for c in CONTEXTS) + " |"
    md += [header, "|---|" + "---|" * len(CONTEXTS)]
    for label, rs in ((args.label, runs), (args.baseline_label, base)):
        if not rs:
            continue
        md.append(f"| tok/s, {label} | " + " | ".join(fmt([r[c]["tok"] for r in rs], 1) for c in CONTEXTS) + " |")
        md.append(f"| ÷ read bandwidth, {label} | " + " | ".join(fmt([r[c]["ratio"] for r in rs], 2) for c in CONTEXTS)
                  + " |")
    md += ["", f"Read bandwidth: {fmt([r['read'] for r in runs], 1)} GB/s"
           + (f" ({args.baseline_label}'s runs: {fmt([r['read'] for r in base], 1)})" if base else "") + "."]
    if base:
        md += ["", f"Median tok/s, {args.label} ÷ {args.baseline_label}: " + ", ".join(
            f"{statistics.median([r[c]['tok'] for r in runs]) / statistics.median([r[c]['tok'] for r in base]):.3f} "
            f"at context {c}" for c in CONTEXTS) + "."]
    md.append("")
    out = args.out / "decode.md"
    out.write_text("\n".join(md))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
