#!/usr/bin/env python3
"""torch.topk against our CUDA indexer top-k (bench/README_cuda.md).

Usage (after the C++ benchmark has written its JSON):
    build/<dir>/bench/cuda_indexer_bench                      # writes $OUT/cuda_indexer_bench.json
    python3 bench/cuda_indexer_vs_torch.py [--json PATH] [--out PATH] [--reps 50] [--warmup 10]

For every (N keys, L rows, K) entry of the C++ JSON this times torch.topk on a CUDA f32 tensor of
the same [L, N] shape with the same causal pattern (row r finite for j <= N - L + r, -inf after),
k = min(K, N), with CUDA events (warm-up, median of --reps), once with sorted=False and once with
sorted=True. It prints torch / ours for our select alone and for our scoring + select (goal >= 3),
and writes the merged table to --out (default $OUT/cuda_indexer_vs_torch.json, else next to the
input). torch is imported only here, so the rest of the project never needs it; without torch or
without a CUDA device the script exits with status 2 and says why.
"""
import argparse
import json
import os
import statistics
import sys


def time_topk(torch, scores, k, sorted_output, warmup, reps):
    for _ in range(warmup):
        torch.topk(scores, k, dim=-1, sorted=sorted_output)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.topk(scores, k, dim=-1, sorted=sorted_output)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)  # ms -> us
    return statistics.median(times)


def main():
    out_dir = os.environ.get("OUT", "")
    default_in = os.path.join(out_dir, "cuda_indexer_bench.json") if out_dir else "cuda_indexer_bench.json"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=default_in, help="JSON written by cuda_indexer_bench")
    parser.add_argument("--out", default="", help="merged output JSON")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    try:
        import torch  # lazily: only this script needs PyTorch
    except ImportError as error:
        print(f"error: PyTorch is not importable ({error}); install torch with CUDA to run this comparison",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: torch.cuda.is_available() is False: this comparison needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        with open(args.json) as f:
            ours = json.load(f)
    except OSError as error:
        print(f"error: cannot read {args.json} ({error}); run cuda_indexer_bench first", file=sys.stderr)
        return 2

    rows_out = []
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'N':>8} {'L':>3} {'K':>5} {'torch_us':>9} {'torch_sorted_us':>15} {'ours_select':>11} "
          f"{'ours_total':>10} {'x_select':>8} {'x_total':>8}")
    for entry in ours["results"]:
        n, rows, k = entry["keys"], entry["rows"], entry["topk"]
        k = min(k, n)
        scores = torch.randn(rows, n, device="cuda", dtype=torch.float32)
        causal_end = torch.arange(rows, device="cuda").unsqueeze(1) + (n - rows)  # [L, 1]
        future = torch.arange(n, device="cuda").unsqueeze(0) > causal_end        # [L, N]
        scores.masked_fill_(future, float("-inf"))
        torch_us = time_topk(torch, scores, k, False, args.warmup, args.reps)
        torch_sorted_us = time_topk(torch, scores, k, True, args.warmup, args.reps)
        x_select = torch_us / entry["select_us"]
        x_total = torch_us / entry["total_us"]
        print(f"{n:>8} {rows:>3} {k:>5} {torch_us:>9.1f} {torch_sorted_us:>15.1f} {entry['select_us']:>11.1f} "
              f"{entry['total_us']:>10.1f} {x_select:>8.2f} {x_total:>8.2f}")
        rows_out.append({**entry, "torch_topk_us": torch_us, "torch_topk_sorted_us": torch_sorted_us,
                         "torch_over_ours_select": x_select, "torch_over_ours_total": x_total})
    goal = ours.get("goal_torch_over_ours", 3.0)
    met = all(r["torch_over_ours_select"] >= goal for r in rows_out)
    print(f"goal: torch.topk / ours (select) >= {goal}: {'met' if met else 'not met'} on every shape")
    out_path = args.out or (os.path.join(out_dir, "cuda_indexer_vs_torch.json") if out_dir
                            else os.path.join(os.path.dirname(os.path.abspath(args.json)),
                                              "cuda_indexer_vs_torch.json"))
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "goal": goal,
                   "results": rows_out}, f, indent=2)
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
