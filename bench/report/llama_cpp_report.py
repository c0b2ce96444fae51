#!/usr/bin/env python3
"""The side-by-side table of mtpspec and llama.cpp on the CPU (scripts/compare_llama_cpp.sh): decode_bench
JSON (Google Benchmark) and llama-bench JSON of the same rounds → docs/results/llama-cpp.md.

    python bench/report/llama_cpp_report.py --dir build/results/llama-cpp --bench-model build/bench_model \
        --cut build/rs/glm4 --bench-gguf build/gguf/bench-bf16.gguf --cut-gguf build/gguf/glm4-q8_0.gguf \
        --flash-cut build/rs/glm47 --flash-cut-gguf build/gguf/glm47-bf16.gguf \
        --command "..." --out docs/results/llama-cpp.md

The checkpoints and GGUFs give each model's bytes and its matrices' multiply-adds per prompt token,
which the generator keeps in DIR/models.json; without them it reads that file, so the page regenerates
from its data folder alone. DIR/linear_prefill.json (linear_bench's BM_LinearPrefill) and
DIR/breakdown_glm4rows.json (decode_bench's BM_PrefillPromptBreakdown), where present, add the prefill
GEMM's share of the cores' bf16 dot-product rate and a long prompt's time by component.

Each cell is the median over rounds of each engine's tok/s; the ratio column is mtpspec ÷ llama.cpp, and
the last column the ratio of each round (the two engines alternate within a round, so a round's ratio is
the side-by-side measurement). The page's text is templates/llama-cpp.md.j2.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import struct
import sys
from pathlib import Path

from results_page import render, write_page

TESTS = [("decode", 1024), ("decode", 8192), ("prefill", 0), ("prefill", 1024), ("prompt", 4096)]


def quantised_at_load(name: str, info: dict) -> bool:
    """Whether `--weights fp8` quantises this stored tensor: a 2-D f32/bf16/f16 matrix the Linear kernels
    read, which is every such tensor but the embedding, the MoE router and kv_b_proj."""
    return (len(info["shape"]) == 2 and info["dtype"] in ("BF16", "F32", "F16") and "embed_tokens" not in name
            and not name.endswith("mlp.gate.weight") and "kv_b_proj" not in name)


def safetensors_entries(model_dir: Path):
    """(name, header entry) of every tensor in the checkpoint's safetensors shards, from their headers."""
    for shard in sorted(model_dir.glob("*.safetensors")):
        with shard.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        yield from ((name, info) for name, info in header.items() if name != "__metadata__")


def weight_elements(model_dir: Path, fp8_at_load: bool = False) -> tuple[int, int]:
    """(weight elements, bytes of the tensors holding them, block scales included) over the checkpoint's
    safetensors shards, read from their headers; with `fp8_at_load`, the bytes as `--weights fp8` holds
    them (one per weight plus an f32 scale per 128 x 128 block for the matrices it quantises)."""
    elements = stored = 0
    for name, info in safetensors_entries(model_dir):
        begin, end = info["data_offsets"]
        if fp8_at_load and quantised_at_load(name, info):
            rows, cols = info["shape"]
            stored += rows * cols + 4 * (-(-rows // 128)) * (-(-cols // 128))
        else:
            stored += end - begin
        if not name.endswith("_scale_inv"):
            count = 1
            for d in info["shape"]:
                count *= d
            elements += count
    return elements, stored


def matrix_macs_per_token(model_dir: Path, config: dict) -> int:
    """Multiply-adds of weight matrices per prompt token: every 2-D tensor of the trunk but the
    embedding and the head (a prompt takes logits for its last row only) and the MTP layer, with the
    routed experts counted for the k_e of E experts a row routes to."""
    mtp_prefix = f"model.layers.{config['num_hidden_layers']}."
    share = config.get("num_experts_per_tok", 1) / config.get("n_routed_experts", 1)
    total = 0.0
    for name, info in safetensors_entries(model_dir):
        if (len(info["shape"]) != 2 or name.endswith("_scale_inv") or name.startswith(mtp_prefix)
                or "embed_tokens" in name or name.startswith("lm_head")):
            continue
        rows, cols = info["shape"]
        total += rows * cols * (share if ".mlp.experts." in name else 1.0)
    return round(total)


def llama_step_bytes(gguf_path: Path, config: dict, llama_dir: Path | None) -> float | None:
    """Bytes llama.cpp's GGUF must stream per decode step: every tensor but the embedding (one row
    is read) and the MTP layer (blk.<num_hidden_layers>, not run when decoding), with the routed
    experts' tensors counted for the k_e of E experts a row routes to. None without gguf-py (it
    ships in llama.cpp's tree)."""
    if llama_dir is not None:
        sys.path.insert(0, str(llama_dir / "gguf-py"))
    try:
        from gguf import GGUFReader  # type: ignore
    except ImportError:
        return None
    mtp_prefix = f"blk.{config['num_hidden_layers']}."
    share = config["num_experts_per_tok"] / config["n_routed_experts"]
    total = 0.0
    for t in GGUFReader(str(gguf_path)).tensors:
        if t.name.startswith("token_embd") or t.name.startswith(mtp_prefix):
            continue
        total += int(t.n_bytes) * (share if "_exps" in t.name else 1.0)
    return total


def our_decode_counters(path: Path) -> dict[int, dict]:
    """decode_bench's counters per context: weight_MB/step, weight_GB/s, read_GB/s."""
    out = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        m = re.match(r"BM_Decode/ctx:(\d+)", b["name"])
        if m and "weight_MB/step" in b:
            out[int(m.group(1))] = b
    return out


def ours(path: Path) -> dict[tuple[str, int], float]:
    result = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        m = re.match(r"BM_(Decode|Prefill)/ctx:(\d+)", b["name"])
        if m and "tok/s" in b:
            result[(m.group(1).lower(), int(m.group(2)))] = b["tok/s"]
        m = re.match(r"BM_PrefillPrompt/tokens:(\d+)", b["name"])
        if m and "tok/s" in b:
            result[("prompt", int(m.group(1)))] = b["tok/s"]
    return result


def theirs(paths: list[Path]) -> tuple[dict[tuple[str, int], float], dict]:
    result, meta = {}, {}
    for path in paths:
        for entry in json.loads(path.read_text()):
            if entry["n_gen"] > 0:
                result[("decode", entry["n_depth"])] = entry["avg_ts"]
            elif entry["n_prompt"] == 256:
                result[("prefill", entry["n_depth"])] = entry["avg_ts"]
            elif entry["n_depth"] == 0:
                result[("prompt", entry["n_prompt"])] = entry["avg_ts"]
            meta = {k: entry.get(k) for k in ("build_commit", "cpu_info", "n_threads", "type_k", "type_v",
                                              "flash_attn", "model_type", "model_size", "model_n_params")}
    return result, meta


def model_facts(key: str, model_dir: Path | None, gguf: Path | None, fp8_at_load: bool, llama_dir: Path | None,
                kept: dict) -> dict:
    """What the page says of a model besides the timings: its weight elements, mtpspec's bytes for them,
    the GGUF's bytes and llama.cpp's bytes per decode step. Read from the checkpoint and the GGUF when
    both are there, else from the facts kept beside the data (models.json)."""
    if model_dir is not None and gguf is not None and model_dir.is_dir() and gguf.is_file():
        elements, stored = weight_elements(model_dir, fp8_at_load)
        config = json.loads((model_dir / "config.json").read_text())
        return {"elements": elements, "stored": stored, "gguf_bytes": gguf.stat().st_size,
                "theirs_bytes": llama_step_bytes(gguf, config, llama_dir),
                "macs_per_token": matrix_macs_per_token(model_dir, config)}
    if key not in kept:
        raise SystemExit(f"llama_cpp_report: no checkpoint and GGUF for {key}, and no models.json entry")
    return kept[key]


def model_context(directory: Path, key: str, their_key: str, facts: dict) -> tuple[dict | None, dict | None]:
    """One model's rows (templates/llama-cpp.md.j2 names it by `key`): its bytes per weight in each
    engine, each test's median tok/s of both engines and their ratio per round, and its bytes per
    decode step against the read bandwidth. None when mtpspec has no round of it; also llama.cpp's
    build facts from its last round's JSON (None without rounds)."""
    our_runs = [ours(p) for p in sorted(directory.glob(f"mtpspec_{key}_*.json"))]
    rounds = sorted(int(p.stem.rsplit("_", 1)[1]) for p in directory.glob(f"mtpspec_{key}_*.json"))
    their_runs, llama_meta = [], None
    for r in rounds:
        t, llama_meta = theirs([p for p in (directory / f"llama_decode_{their_key}_{r}.json",
                                            directory / f"llama_prefill_{their_key}_{r}.json",
                                            directory / f"llama_prompt_{their_key}_{r}.json") if p.exists()])
        their_runs.append(t)
    if not our_runs:
        return None, llama_meta
    tests = []
    for kind, n in TESTS:
        a = [r[(kind, n)] for r in our_runs if (kind, n) in r]
        b = [r[(kind, n)] for r in their_runs if (kind, n) in r]
        if a and b:
            tests.append({"kind": kind, "n": n, "ours": statistics.median(a), "theirs": statistics.median(b),
                          "ratio": statistics.median(a) / statistics.median(b),
                          "per_round": [x / y for x, y in zip(a, b)]})
    # Bytes per decode step: what each engine must stream, and how fast it streamed them.
    theirs_bytes = facts["theirs_bytes"]
    counters = [our_decode_counters(p) for p in sorted(directory.glob(f"mtpspec_{key}_*.json"))]
    steps = []
    if theirs_bytes is not None and counters and counters[0]:
        for n in sorted(counters[0]):
            c = counters[0][n]
            their_ts = statistics.median([r[("decode", n)] for r in their_runs if ("decode", n) in r])
            steps.append({"n": n, "ours": c["weight_MB/step"] * 1e6, "ours_rate": c["weight_GB/s"],
                          "theirs_rate": their_ts * theirs_bytes / 1e9, "bw": c["read_GB/s"]})
    return {"key": key, "elements": facts["elements"], "stored": facts["stored"], "gguf_bytes": facts["gguf_bytes"],
            "rounds": len(rounds), "tests": tests, "steps": steps, "theirs_bytes": theirs_bytes,
            "macs_per_token": facts.get("macs_per_token")}, llama_meta


def prefill_gemm(directory: Path) -> tuple[list[dict], float | None]:
    """linear_bench's BM_LinearPrefill rows (kind, threads, input rows, G multiply-adds/s, share of the
    bf16 peak) and the cores' bf16 dot-product rate on 2 threads in multiply-adds/s (None without the
    file)."""
    path = directory / "linear_prefill.json"
    if not path.exists():
        return [], None
    rows, peak = [], None
    for b in json.loads(path.read_text())["benchmarks"]:
        m = re.match(r"BM_LinearPrefill/kind:(\d+)/threads:(\d+)/rows:(\d+)", b["name"])
        if not m:
            continue
        row = {"kind": int(m.group(1)), "threads": int(m.group(2)), "rows": int(m.group(3)),
               "gmacs": b["GMAC/s"], "share": b.get("of_bf16_peak")}
        if row["share"] and row["threads"] == 2:
            peak = b["GMAC/s"] * 1e9 / row["share"]
        rows.append(row)
    return rows, peak


def prefill_breakdown(directory: Path) -> list[dict]:
    """decode_bench's BM_PrefillPromptBreakdown rows: prompt tokens, tok/s and each component's share."""
    path = directory / "breakdown_glm4rows.json"
    if not path.exists():
        return []
    out = []
    for b in json.loads(path.read_text())["benchmarks"]:
        m = re.match(r"BM_PrefillPromptBreakdown/tokens:(\d+)", b["name"])
        if m:
            out.append({"tokens": int(m.group(1)), "tok_s": b["tok/s"], "profiled": b["profiled"],
                        "shares": {k[:-len("_share")]: v for k, v in b.items() if k.endswith("_share")}})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    for flag in ("--bench-model", "--cut", "--flash-cut", "--bench-gguf", "--cut-gguf", "--flash-cut-gguf"):
        parser.add_argument(flag, type=Path, default=None, help="absent: the facts kept in DIR/models.json")
    parser.add_argument("--command", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--llama-dir", type=Path, default=None, help="the llama.cpp tree, for its gguf-py reader")
    args = parser.parse_args()
    # (our key, llama.cpp's key, checkpoint, GGUF, whether --weights fp8)
    models = [("bench", "bench", args.bench_model, args.bench_gguf, False),
              ("benchrows", "bench", args.bench_model, args.bench_gguf, False),
              ("glm4", "glm4", args.cut, args.cut_gguf, False),
              ("glm4rows", "glm4", args.cut, args.cut_gguf, False),
              ("glm4fp8", "glm4", args.cut, args.cut_gguf, True),
              ("glm47", "glm47", args.flash_cut, args.flash_cut_gguf, False),
              ("glm47rows", "glm47", args.flash_cut, args.flash_cut_gguf, False)]
    kept_path = args.dir / "models.json"
    kept = json.loads(kept_path.read_text()) if kept_path.exists() else {}
    shown, llama_meta, facts_of = [], {}, {}
    for key, their_key, model_dir, gguf, fp8_at_load in models:
        if not any(args.dir.glob(f"mtpspec_{key}_*.json")):
            continue
        facts_of[key] = model_facts(key, model_dir, gguf, fp8_at_load, args.llama_dir, kept)
        model, meta = model_context(args.dir, key, their_key, facts_of[key])
        llama_meta = llama_meta if meta is None else meta
        if model is not None:
            shown.append(model)
    kept_path.write_text(json.dumps(facts_of, indent=1) + "\n")
    # The date of the runs: mtpspec's first JSON's.
    first = sorted(args.dir.glob("mtpspec_*.json"))[0]
    run_date = json.loads(first.read_text())["context"]["date"][:10]
    gemm, peak = prefill_gemm(args.dir)
    write_page(args.out, render(
        "llama-cpp.md.j2", date=run_date, command=args.command, models=shown, llama=llama_meta,
        gemm=gemm, peak=peak, breakdown=prefill_breakdown(args.dir),
        decode=[(m, t) for m in shown for t in m["tests"] if t["kind"] == "decode"],
        prefill=[(m, t) for m in shown for t in m["tests"] if t["kind"] != "decode"],
        steps=[(m, s) for m in shown for s in m["steps"]]))


if __name__ == "__main__":
    main()
