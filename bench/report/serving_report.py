#!/usr/bin/env python3
"""docs/results/serving.md from bench/serving_bench.py's JSON (build/results/serving.json): the
server's overhead against GenerateBatch in process, and the latency and throughput curve of plain
decoding and MTP under Poisson arrivals.

  python bench/report/serving_report.py [--results build/results] [--command "..."] [--out docs/results]
"""

from __future__ import annotations

from statistics import median

from results_page import page_run, render, write_page


# The curve's tables: title, and each point's value.
MEASURES = [("output throughput (tok/s)", lambda p: p["output_throughput"]),
            ("TTFT median (ms)", lambda p: p["ttft_ms"]["median"]), ("TPOT median (ms)", lambda p: p["tpot_ms"]["median"]),
            ("ITL median (ms)", lambda p: p["itl_ms"]["median"]), ("ITL p99 (ms)", lambda p: p["itl_ms"]["p99"])]


def main() -> None:
    args, run = page_run(__doc__, "serving-data", "serving.json", "bench/serving_bench.py")
    overhead = []
    for entry in run["overhead"]:
        http = [r["http"] for r in entry["rounds"]]
        process = [r["process"] for r in entry["rounds"]]
        overhead.append({"batch": entry["batch"], "process": median(process), "http": median(http),
                         "ratio": sum(http) / sum(process)})
    configs = list(dict.fromkeys(p["config"] for p in run["curve"]))
    rates = sorted({p["rate"] for p in run["curve"]})
    point = {(p["config"], p["rate"]): p for p in run["curve"]}
    measures = [(title, [(rate, [value(point[(c, rate)]) for c in configs]) for rate in rates])
                for title, value in MEASURES]
    # Where MTP stops paying: per MTP setting, plain's median TPOT over its own, and the rates where it is below plain's.
    tpot = {key: p["tpot_ms"]["median"] for key, p in point.items()}
    pays = [{"config": c, "ratios": [(r, tpot[(configs[0], r)] / tpot[(c, r)]) for r in rates],
             "better": [r for r in rates if tpot[(c, r)] < tpot[(configs[0], r)]]} for c in configs[1:]]
    write_page(args.out / "serving.md", render(
        "serving.md.j2", run=run, commands=args.command or ["scripts/reproduce_results.sh serving"],
        rounds=len(run["overhead"][0]["rounds"]), overhead=overhead, configs=configs, measures=measures, pays=pays))


if __name__ == "__main__":
    main()
