#!/usr/bin/env python3
"""MTP acceptance by prompt category, the way the field reports it: every prompt of each set (MT-Bench's
two turns with the model's reply in between, HumanEval's one) at k = 1..4, greedy and at T = 0.7,
with the per-category statistics of mtpspec.prompts. On a checkpoint with a chat template it also runs
the prompts chat-formatted, with thinking on and off, beside the raw ones.

  python bench/prompt_sets_bench.py --model models/glm-tiny-mtp --sets build/prompt-sets/mt_bench.jsonl \
      build/prompt-sets/humaneval.jsonl --json build/results/prompt_sets.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List

import mtpspec
from mtpspec._chat import load_chat_template
from mtpspec.prompts import category_stats, load_prompt_set, run_prompt_set
from machine import cpu_model


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("models/glm-tiny-mtp"))
    p.add_argument("--sets", type=Path, nargs="+", required=True)
    p.add_argument("--json", type=Path, default=Path("build/results/prompt_sets.json"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ks", default="1,2,3,4")
    p.add_argument("--temperatures", default="0,0.7")
    p.add_argument("--new-tokens", type=int, default=64)
    args = p.parse_args()
    model = mtpspec.Model.load(args.model, threads=args.threads)
    formats: List[Dict[str, Any]] = [{"name": "raw", "chat": False}]
    if load_chat_template(args.model) is not None:
        formats += [{"name": "chat, thinking off", "chat": True, "kwargs": {"enable_thinking": False}},
                    {"name": "chat, thinking on", "chat": True, "kwargs": {"enable_thinking": True}}]
    run: Dict[str, Any] = {"date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                           "cpu_model": cpu_model(), "logical_cpus": os.cpu_count(), "threads": args.threads,
                           "model": str(args.model), "new_tokens": args.new_tokens, "points": []}
    for path in args.sets:
        items = load_prompt_set(path)
        for fmt in formats:
            for temperature in [float(t) for t in args.temperatures.split(",")]:
                for k in [int(x) for x in args.ks.split(",")]:
                    results = run_prompt_set(model, items, args.new_tokens, chat=fmt["chat"],
                                             chat_template_kwargs=fmt.get("kwargs"), k=k, temperature=temperature,
                                             seed=1, stop_at_eos=True)
                    run["points"].append({"set": path.name, "format": fmt["name"], "temperature": temperature, "k": k,
                                          "prompts": len(items), "categories": category_stats(results)})
                    print(f"{path.name} {fmt['name']} T={temperature} k={k}: AL "
                          f"{run['points'][-1]['categories']['all']['mean_acceptance_length_token_weighted']:.3f}",
                          flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(run, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
