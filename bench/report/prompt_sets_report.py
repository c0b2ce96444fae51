#!/usr/bin/env python3
"""docs/results/prompt-sets.md from bench/prompt_sets_bench.py's JSON (build/results/prompt_sets.json):
MTP acceptance by prompt category on each set, at k = 1..4, greedy and sampled.

  python bench/report/prompt_sets_report.py [--results build/results] [--command "..."] [--out docs/results]
"""

from __future__ import annotations

from results_page import heading_lines, page_run


def set_lines(run: dict, name: str) -> list[str]:
    points = [p for p in run["points"] if p["set"] == name]
    ks = sorted({p["k"] for p in points})
    lines = [f"## {name}", "", f"{points[0]['prompts']} prompts; every turn is a request.", ""]
    for fmt in dict.fromkeys(p["format"] for p in points):
        for temperature in sorted({p["temperature"] for p in points if p["format"] == fmt}):
            chosen = {p["k"]: p for p in points if p["format"] == fmt and p["temperature"] == temperature}
            categories = sorted(c for c in chosen[ks[0]]["categories"] if c != "all") + ["all"]
            lines += [f"### {fmt}, T = {temperature:g}: mean acceptance length (token-weighted)", "",
                      "| category | requests | " + " | ".join(f"k = {k}" for k in ks) + f" | p₁ at k = {ks[0]} |",
                      "|---|---|" + "---|" * (len(ks) + 1)]
            for c in categories:
                cells = [f"{chosen[k]['categories'][c]['mean_acceptance_length_token_weighted']:.3f}" for k in ks]
                p1 = chosen[ks[0]]["categories"][c]["per_position_unconditional"]
                label = "**all**" if c == "all" else c
                lines.append(f"| {label} | {chosen[ks[0]]['categories'][c]['requests']} | " + " | ".join(cells) +
                             f" | {p1[0] if p1 else 0:.3f} |")
            top = chosen[ks[-1]]["categories"]["all"]
            conditional = ", ".join(f"{x:.3f}" for x in top["per_position_conditional"])
            lines += ["", f"All categories at k = {ks[-1]}: conditional acceptance by position {conditional}; "
                      f"accepted drafts per step (0..{ks[-1]}) {top['accepted_histogram']}.", ""]
    return lines


def format_lines(run: dict) -> list[str]:
    """Raw prompts against chat-formatted ones (a checkpoint with a chat template): the whole set's
    acceptance length per format, by set, temperature and k."""
    formats = list(dict.fromkeys(p["format"] for p in run["points"]))
    if len(formats) < 2:
        return []
    point = {(p["set"], p["temperature"], p["k"], p["format"]): p for p in run["points"]}
    lines = ["## Raw against chat-formatted prompts", "",
             "| set | T | k | " + " | ".join(formats) + " | " + " | ".join(f"{f} ÷ raw" for f in formats[1:]) + " |",
             "|---|---|---|" + "---|" * (2 * len(formats) - 1)]
    for (name, temperature, k) in dict.fromkeys((p["set"], p["temperature"], p["k"]) for p in run["points"]):
        lengths = [point[(name, temperature, k, f)]["categories"]["all"]["mean_acceptance_length_token_weighted"]
                   for f in formats]
        lines.append(f"| {name} | {temperature:g} | {k} | " + " | ".join(f"{x:.3f}" for x in lengths) + " | " +
                     " | ".join(f"{x / lengths[0]:.3f}" for x in lengths[1:]) + " |")
    return lines + [""]


def spread_lines(run: dict) -> list[str]:
    """Per set and setting, the categories with the lowest and highest acceptance length at the largest k."""
    lines = ["## Spread across categories", ""]
    k_top = max(p["k"] for p in run["points"])
    for p in run["points"]:
        if p["k"] != k_top:
            continue
        cats = {c: v["mean_acceptance_length_token_weighted"] for c, v in p["categories"].items() if c != "all"}
        if len(cats) < 2:
            continue
        low, high = min(cats, key=cats.get), max(cats, key=cats.get)
        lines.append(f"- {p['set']}, {p['format']}, T = {p['temperature']:g}, k = {k_top}: {low} {cats[low]:.3f} "
                     f"to {high} {cats[high]:.3f} (all {p['categories']['all']['mean_acceptance_length_token_weighted']:.3f}).")
    return lines + [""] if len(lines) > 2 else []


def main() -> None:
    args, run = page_run(__doc__, "prompt-sets-data", "prompt_sets.json", "bench/prompt_sets_bench.py")
    intro = (f"MTP acceptance per prompt category on `{run['model']}`, {run['new_tokens']} new tokens per turn, "
             "stopping at EOS. Multi-turn items put the model's own reply back in before the next turn, as "
             "MT-Bench does. The mean acceptance length is 1 + accepted drafts ÷ verify steps that drafted, "
             "summed over the category (vLLM's `mean_acceptance_length`); p₁ is the share of drafts whose first "
             "token was accepted. Sampled points use seed 1. The sets come from `scripts/fetch_prompt_sets.sh`. "
             "On a checkpoint with a chat template (`chat_template.jinja` or `tokenizer_config.json`) the same "
             "command also runs every set chat-formatted, thinking off and on, and the page compares them with "
             "the raw prompts: `bench/prompt_sets_bench.py --model DIR --sets ...` is the recipe for real "
             "checkpoints. The bundled model ships no template, so this run is raw only.")
    commands = args.command or ["scripts/reproduce_results.sh prompt-sets"]
    lines = heading_lines("Acceptance by prompt category", intro, run, "prompt-sets-data", commands)
    for name in dict.fromkeys(p["set"] for p in run["points"]):
        lines += set_lines(run, name)
    lines += format_lines(run) + spread_lines(run)
    (args.out / "prompt-sets.md").write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {args.out / 'prompt-sets.md'}")


if __name__ == "__main__":
    main()
