#!/usr/bin/env python3
"""The server measured as the field's tools measure an engine (vllm bench serve's definitions):

1. Overhead: the same requests through HTTP (mtpspec-serve, streamed, at concurrency B) and
   through GenerateBatch in this process (Model.generate with batch=B), side by side in one run,
   for each B; output tokens per second of each, alternating which goes first.
2. The curve: Poisson arrivals at rising request rates against plain decoding and MTP with k = 1..3,
   acceptance imposed at set conditional rates (SYNTHETIC), on a server of B seats. Per rate:
   output throughput, TTFT, TPOT ((latency - TTFT) / (output tokens - 1)) and ITL (the gaps between
   streamed chunks; with speculation a chunk holds a verify step's tokens).

  python bench/serving_bench.py --model build/bench_model --json build/results/serving.json

Servers listen on 127.0.0.1 and are stopped at the end; every request has a bounded timeout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from server_util import ServerProcess  # noqa: E402  (tests/python: the same bounded server process)

import mtpspec  # noqa: E402
from machine import cpu_model  # noqa: E402  (bench/machine.py)


def stream_request(port: int, body: Dict[str, Any], timeout: float = 600) -> Dict[str, Any]:
    """One streamed completion: send time, each content chunk's arrival, tokens, end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    payload = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    arrivals: List[float] = []
    tokens = 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices") and event["choices"][0].get("token_ids"):
            arrivals.append(time.perf_counter())  # a chunk with tokens: one verify step's
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    conn.close()
    return {"start": start, "arrivals": arrivals, "end": time.perf_counter(), "tokens": tokens}


def requests_for(n: int, prompt_tokens: int, new_tokens: int, vocab: int, seed: int) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    return [{"prompt": [rng.randrange(3, vocab) for _ in range(prompt_tokens)], "max_tokens": new_tokens,
             "temperature": 1.0, "seed": seed * 1000 + i, "ignore_eos": True} for i in range(n)]


def run_http(port: int, requests: List[Dict[str, Any]], concurrency: int) -> float:
    """Output tokens per second of the requests at `concurrency` streams."""
    queue = list(requests)
    lock = threading.Lock()
    tokens = [0]

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                body = queue.pop(0)
            result = stream_request(port, body)
            with lock:
                tokens[0] += result["tokens"]

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0] / (time.perf_counter() - start)


def run_in_process(model: Any, requests: List[Dict[str, Any]], batch: int, options: Dict[str, Any]) -> float:
    start = time.perf_counter()
    result = model.generate([r["prompt"] for r in requests], requests[0]["max_tokens"], batch=batch,
                            stop_at_eos=False, temperature=1.0,
                            per_request=[{"seed": r["seed"]} for r in requests], **options)
    return sum(len(r.tokens) for r in result) / (time.perf_counter() - start)


def percentile(values: List[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def poisson_run(port: int, requests: List[Dict[str, Any]], rate: float, seed: int) -> Dict[str, Any]:
    """The requests sent at Poisson arrivals of `rate` per second; vllm bench serve's measures."""
    rng = random.Random(seed)
    results: List[Dict[str, Any]] = [{} for _ in requests]
    threads = []
    start = time.perf_counter()
    at = 0.0
    for i, body in enumerate(requests):
        at += rng.expovariate(rate)
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=lambda i=i, body=body: results[i].update(stream_request(port, body)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    duration = max(r["end"] for r in results) - start
    ttft = [r["arrivals"][0] - r["start"] for r in results if r["arrivals"]]
    tpot = [(r["end"] - r["arrivals"][0]) / (r["tokens"] - 1) for r in results if r["tokens"] > 1 and r["arrivals"]]
    itl = [b - a for r in results for a, b in zip(r["arrivals"], r["arrivals"][1:])] or [float("nan")]
    ms = lambda values, q: 1e3 * percentile(values, q)  # noqa: E731
    return {"rate": rate, "requests": len(requests), "duration_s": duration,
            "output_throughput": sum(r["tokens"] for r in results) / duration,
            "ttft_ms": {"mean": 1e3 * statistics.mean(ttft), "median": ms(ttft, 50), "p99": ms(ttft, 99)},
            "tpot_ms": {"mean": 1e3 * statistics.mean(tpot), "median": ms(tpot, 50), "p99": ms(tpot, 99)},
            "itl_ms": {"mean": 1e3 * statistics.mean(itl), "median": ms(itl, 50), "p99": ms(itl, 99)}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=Path("build/bench_model"))
    p.add_argument("--json", type=Path, default=Path("build/results/serving.json"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,4,8")
    p.add_argument("--overhead-requests", type=int, default=16)
    p.add_argument("--curve-batch", type=int, default=8)
    p.add_argument("--curve-rates", default="1,2,4,8,16")
    p.add_argument("--curve-requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rates", default="0.714,0.543,0.589",
                   help="the conditional acceptance imposed per draft position (default: the trained head's)")
    args = p.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    capacity = args.prompt_tokens + args.new_tokens + 32
    model = mtpspec.Model.load(args.model, threads=args.threads)
    vocab = model.config["vocab_size"]
    run: Dict[str, Any] = {"date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                           "cpu_model": cpu_model(), "logical_cpus": os.cpu_count(), "threads": args.threads,
                           "model": str(args.model), "prompt_tokens": args.prompt_tokens,
                           "new_tokens": args.new_tokens, "conditional_rates": rates, "overhead": [], "curve": []}
    spec = {"k": 3, "accept": "synthetic", "synthetic_rates": rates}
    flags = ["--k", "3", "--accept", "synthetic", "--synthetic-rates", args.rates, "--capacity", str(capacity)]
    for b in [int(x) for x in args.batches.split(",")]:
        requests = requests_for(args.overhead_requests, args.prompt_tokens, args.new_tokens, vocab, b)
        server = ServerProcess(args.model, "--batch", str(b), *flags, threads=args.threads)
        try:
            # Warm both paths first (the server's first requests fault its weights in and size its
            # buffers), then measure.
            run_http(server.port, requests[:b], b)
            run_in_process(model, requests[:b], b, spec)
            rounds = []
            for r in range(2):  # alternate which goes first
                order = ["http", "process"] if r % 2 == 0 else ["process", "http"]
                measured = {}
                for mode in order:
                    measured[mode] = (run_http(server.port, requests, b) if mode == "http"
                                      else run_in_process(model, requests, b, spec))
                rounds.append(measured)
        finally:
            server.stop()
        run["overhead"].append({"batch": b, "rounds": rounds})
        print(f"B = {b}: " + "; ".join(f"http {m['http']:.1f} tok/s, in process {m['process']:.1f}" for m in rounds),
              flush=True)
    configs = [("plain", ["--draft", "none"])] + [(f"MTP k={k}", ["--k", str(k), "--accept", "synthetic", "--synthetic-rates",
                                                          ",".join(str(x) for x in rates[:k])]) for k in (1, 2, 3)]
    for name, config_flags in configs:
        server = ServerProcess(args.model, "--batch", str(args.curve_batch), "--capacity", str(capacity),
                               *config_flags, threads=args.threads)
        try:
            for rate in [float(x) for x in args.curve_rates.split(",")]:
                requests = requests_for(args.curve_requests, args.prompt_tokens, args.new_tokens, vocab, int(rate * 10))
                point = poisson_run(server.port, requests, rate, seed=int(rate * 100))
                point["config"] = name
                run["curve"].append(point)
                print(f"{name} at {rate} req/s: {point['output_throughput']:.1f} tok/s, TPOT median "
                      f"{point['tpot_ms']['median']:.1f} ms", flush=True)
        finally:
            server.stop()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(run, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
