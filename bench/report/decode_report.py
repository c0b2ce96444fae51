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
from pathlib import Path
from statistics import median

from results_page import render, write_page

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


def series(label: str, runs: list[dict]) -> dict | None:
    """One build's runs: tok/s and bw_ratio per context (a value per run), and each run's read bandwidth."""
    if not runs:
        return None
    return {"label": label, "read": [r["read"] for r in runs],
            "tok": {c: [r[c]["tok"] for r in runs] for c in CONTEXTS},
            "ratio": {c: [r[c]["ratio"] for r in runs] for c in CONTEXTS}}


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
    ours, theirs = series(args.label, runs), series(args.baseline_label, base)
    speedup = {c: median(ours["tok"][c]) / median(theirs["tok"][c]) for c in CONTEXTS} if theirs else {}
    machine = runs[0]["context"]
    write_page(args.out / "decode.md", render(
        "decode.md.j2", machine=machine, trunk_gb=float(machine["trunk_weight_GB"]), command=args.command,
        weight_mb=runs[0][CONTEXTS[0]]["weight_mb"], contexts=CONTEXTS, ours=ours, base=theirs, speedup=speedup))


if __name__ == "__main__":
    main()
