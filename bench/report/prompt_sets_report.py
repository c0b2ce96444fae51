#!/usr/bin/env python3
"""docs/results/prompt-sets.md from bench/prompt_sets_bench.py's JSON (build/results/prompt_sets.json):
MTP acceptance by prompt category on each set, at k = 1..4, greedy and sampled.

  python bench/report/prompt_sets_report.py [--results build/results] [--command "..."] [--out docs/results]
"""

from __future__ import annotations

from results_page import page_run, render, write_page


def set_tables(run: dict, name: str) -> dict:
    """One set's tables, one per format and temperature: each category's requests, mean acceptance
    length per k and p₁ at the smallest k; and the whole set's acceptance at the largest k."""
    points = [p for p in run["points"] if p["set"] == name]
    ks = sorted({p["k"] for p in points})
    tables = []
    for fmt in dict.fromkeys(p["format"] for p in points):
        for temperature in sorted({p["temperature"] for p in points if p["format"] == fmt}):
            chosen = {p["k"]: p for p in points if p["format"] == fmt and p["temperature"] == temperature}
            first = chosen[ks[0]]["categories"]
            categories = [{"name": c, "requests": first[c]["requests"],
                           "lengths": [chosen[k]["categories"][c]["mean_acceptance_length_token_weighted"] for k in ks],
                           "p1": (first[c]["per_position_unconditional"] or [0])[0]}
                          for c in sorted(c for c in first if c != "all") + ["all"]]
            tables.append({"format": fmt, "temperature": temperature, "categories": categories,
                           "top": chosen[ks[-1]]["categories"]["all"]})
    return {"name": name, "prompts": points[0]["prompts"], "ks": ks, "tables": tables}


def main() -> None:
    args, run = page_run(__doc__, "prompt-sets-data", "prompt_sets.json", "bench/prompt_sets_bench.py")
    # Raw prompts against chat-formatted ones (a checkpoint with a chat template): the whole set's
    # acceptance length per format, by set, temperature and k.
    formats = list(dict.fromkeys(p["format"] for p in run["points"]))
    point = {(p["set"], p["temperature"], p["k"], p["format"]): p for p in run["points"]}
    by_format = [(name, t, k, [point[(name, t, k, f)]["categories"]["all"]["mean_acceptance_length_token_weighted"]
                               for f in formats])
                 for (name, t, k) in dict.fromkeys((p["set"], p["temperature"], p["k"]) for p in run["points"])]
    # Per set and setting, the categories with the lowest and highest acceptance length at the largest k.
    spread = []
    k_top = max(p["k"] for p in run["points"])
    for p in run["points"]:
        cats = {c: v["mean_acceptance_length_token_weighted"] for c, v in p["categories"].items() if c != "all"}
        if p["k"] == k_top and len(cats) >= 2:
            spread.append((p, min(cats, key=cats.get), max(cats, key=cats.get)))
    write_page(args.out / "prompt-sets.md", render(
        "prompt-sets.md.j2", run=run, commands=args.command or ["scripts/reproduce_results.sh prompt-sets"],
        sets=[set_tables(run, name) for name in dict.fromkeys(p["set"] for p in run["points"])],
        formats=formats, by_format=by_format if len(formats) > 1 else [], spread=spread))


if __name__ == "__main__":
    main()
