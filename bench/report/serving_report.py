#!/usr/bin/env python3
"""docs/results/serving.md from bench/serving_bench.py's JSON (build/results/serving.json): the
server's overhead against GenerateBatch in process, and the latency and throughput curve of plain
decoding and MTP under Poisson arrivals.

  python bench/report/serving_report.py [--results build/results] [--command "..."] [--out docs/results]
"""

from __future__ import annotations

from statistics import median

from results_page import heading_lines, page_run


def overhead_lines(run: dict) -> list[str]:
    lines = ["## Overhead: HTTP against GenerateBatch in process", "",
             f"{len(run['overhead'][0]['rounds'])} rounds per B after a warm-up of each, alternating which goes first; "
             "output tokens per "
             "second of the same requests, streamed through `mtpspec-serve` at concurrency B and run by "
             "`Model.generate(prompts, batch=B)` in the bench's process. MTP k = 3 with the acceptance imposed.", "",
             "| B | in process (tok/s) | HTTP, streamed (tok/s) | HTTP ÷ in process |", "|---|---|---|---|"]
    for entry in run["overhead"]:
        http = [r["http"] for r in entry["rounds"]]
        process = [r["process"] for r in entry["rounds"]]
        lines.append(f"| {entry['batch']} | {median(process):.1f} | {median(http):.1f} | "
                     f"{sum(http) / sum(process):.2f} |")
    return lines + [""]


def curve_lines(run: dict) -> list[str]:
    configs = list(dict.fromkeys(p["config"] for p in run["curve"]))
    rates = sorted({p["rate"] for p in run["curve"]})
    point = {(p["config"], p["rate"]): p for p in run["curve"]}
    lines = ["## Poisson arrivals: plain decoding against MTP", "",
             f"{run['curve'][0]['requests']} requests per point, each {run['prompt_tokens']} prompt tokens and "
             f"{run['new_tokens']} new ones, at T = 1; MTP drafts with the acceptance imposed (SYNTHETIC) at the "
             f"conditional rates {', '.join(str(r) for r in run['conditional_rates'])}. TPOT is (latency − TTFT) ÷ "
             "(output tokens − 1); ITL is the gap between streamed chunks, and a chunk holds what one verify step "
             "committed.", ""]
    for measure, title in (("output_throughput", "output throughput (tok/s)"), ("ttft_ms", "TTFT median (ms)"),
                           ("tpot_ms", "TPOT median (ms)"), ("itl_ms", "ITL median (ms)"),
                           ("itl_p99", "ITL p99 (ms)")):
        lines += [f"### {title}", "", "| rate (req/s) | " + " | ".join(configs) + " |",
                  "|---|" + "---|" * len(configs)]
        for rate in rates:
            cells = []
            for c in configs:
                p = point[(c, rate)]
                value = (p[measure] if measure == "output_throughput" else
                         p["itl_ms"]["p99"] if measure == "itl_p99" else p[measure]["median"])
                cells.append(f"{value:.1f}")
            lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
        lines.append("")
    # Where MTP stops paying: per MTP setting, the rates at which its median TPOT beats plain's.
    lines += ["### Where MTP pays", ""]
    for c in configs[1:]:
        better = [r for r in rates if point[(c, r)]["tpot_ms"]["median"] < point[(configs[0], r)]["tpot_ms"]["median"]]
        ratio = ", ".join(f"{r:g}: {point[(configs[0], r)]['tpot_ms']['median'] / point[(c, r)]['tpot_ms']['median']:.2f}"
                          for r in rates)
        lines.append(f"- {c}: plain's median TPOT ÷ its own, by rate: {ratio}; below plain's at "
                     f"{', '.join(f'{r:g}' for r in better) or 'no rate'} req/s.")
    return lines + [""]


def main() -> None:
    args, run = page_run(__doc__, "serving-data", "serving.json", "bench/serving_bench.py")
    intro = ("`mtpspec-serve` on the bench model (`bench/bench_model.cc`, random weights, so acceptance is imposed), "
             "driven the way `vllm bench serve` drives an engine: streamed OpenAI completions from concurrent clients.")
    commands = args.command or ["scripts/reproduce_results.sh serving"]
    lines = heading_lines("Serving", intro, run, "serving-data", commands)
    lines += overhead_lines(run) + curve_lines(run)
    (args.out / "serving.md").write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {args.out / 'serving.md'}")


if __name__ == "__main__":
    main()
