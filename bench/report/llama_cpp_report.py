#!/usr/bin/env python3
"""The side-by-side table of mtpspec and llama.cpp on the CPU (scripts/compare_llama_cpp.sh): decode_bench
JSON (Google Benchmark) and llama-bench JSON of the same rounds → docs/results/llama-cpp.md.

    python bench/report/llama_cpp_report.py --dir build/results/llama-cpp --bench-model build/bench_model \
        --cut build/rs/glm4 --bench-gguf build/gguf/bench-bf16.gguf --cut-gguf build/gguf/glm4-q8_0.gguf \
        --command "..." --out docs/results/llama-cpp.md

Each cell is the median over rounds of each engine's tok/s; the ratio column is mtpspec ÷ llama.cpp, and
the last column the ratio of each round (the two engines alternate within a round, so a round's ratio is
the side-by-side measurement).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import struct
import sys
from datetime import date
from pathlib import Path

TESTS = [("decode", 1024), ("decode", 8192), ("prefill", 0), ("prefill", 1024), ("prompt", 4096)]
SHORT = {"bench": "bench model", "glm4": "GLM-5.2 cut as shipped", "glm4rows": "GLM-5.2 cut, --activations fp8",
         "glm4fp8": "GLM-5.2 cut, --weights fp8"}


def quantised_at_load(name: str, info: dict) -> bool:
    """Whether `--weights fp8` quantises this stored tensor: a 2-D f32/bf16/f16 matrix the Linear kernels
    read, which is every such tensor but the embedding, the MoE router and kv_b_proj."""
    return (len(info["shape"]) == 2 and info["dtype"] in ("BF16", "F32", "F16") and "embed_tokens" not in name
            and not name.endswith("mlp.gate.weight") and "kv_b_proj" not in name)


def weight_elements(model_dir: Path, fp8_at_load: bool = False) -> tuple[int, int]:
    """(weight elements, bytes of the tensors holding them, block scales included) over the checkpoint's
    safetensors shards, read from their headers; with `fp8_at_load`, the bytes as `--weights fp8` holds
    them (one per weight plus an f32 scale per 128 x 128 block for the matrices it quantises)."""
    elements = stored = 0
    for shard in sorted(model_dir.glob("*.safetensors")):
        with shard.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--bench-model", type=Path, required=True)
    parser.add_argument("--cut", type=Path, required=True)
    parser.add_argument("--bench-gguf", type=Path, required=True)
    parser.add_argument("--cut-gguf", type=Path, required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--llama-dir", type=Path, default=None, help="the llama.cpp tree, for its gguf-py reader")
    args = parser.parse_args()

    # (our key, llama.cpp's key, title, checkpoint, GGUF, our format, theirs, whether --weights fp8)
    models = [("bench", "bench", "bench model (hidden 1024, 10 layers, 32 experts top-4)", args.bench_model,
               args.bench_gguf, "bf16", "bf16", False),
              ("glm4", "glm4", "GLM-5.2 cut at its real dimensions (3 dense + 1 MoE layer of 32 experts, MTP layer, "
               "head), as the release ships", args.cut, args.cut_gguf,
               "FP8 E4M3 + 128x128 f32 scales (bf16 head, embedding, router, eh_proj as in the release)", "Q8_0", False),
              ("glm4rows", "glm4", "GLM-5.2 cut at its real dimensions, with --activations fp8 (the FP8 matrices' "
               "input rows quantised as DeepSeek-V3.2's reference code serves them; prefill on the pair GEMM)",
               args.cut, args.cut_gguf,
               "FP8 E4M3 + 128x128 f32 scales as the release ships, input rows in fp8 (groups of 128, power-of-two "
               "scales)", "Q8_0 (8-bit activations)", False),
              ("glm4fp8", "glm4", "GLM-5.2 cut at its real dimensions, with --weights fp8", args.cut, args.cut_gguf,
               "FP8 E4M3 + 128x128 f32 scales for every matrix but the router (the release's bf16 head and eh_proj "
               "quantised at load; bf16 embedding and router)", "Q8_0", True)]
    lines = ["# mtpspec and llama.cpp on the CPU, side by side", "",
             f"Measured {date.today().isoformat()} with `{args.command}` (LLAMA_CPP_DIR: a llama.cpp source tree; "
             "the converter wrapper is scripts/llama_cpp_convert.py). Same weights for both engines, 2 threads "
             "each, plain decoding (no drafts): mtpspec's `decode_bench` (BM_Decode: one token at position N; "
             "BM_Prefill: a 256-token chunk after N tokens; BM_PrefillPrompt: a 4096-token prompt from an empty "
             "cache, in prefill passes) and `llama-bench -t 2 -p 0 -n 32 -d 1024,8192` / `-p 256 -n 0 -d 0,1024` / "
             "`-p 4096 -n 0` with its default settings, alternating within each round. mtpspec's rows take their "
             "input rows in f32 (the exact path) unless they say otherwise. Data: "
             "`llama-cpp-data/` (each engine's JSON of each round).", ""]
    decode_rows, prefill_rows = [], []
    byte_notes = []
    llama_meta = {}
    for key, their_key, title, model_dir, gguf, our_format, their_format, fp8_at_load in models:
        our_runs = [ours(p) for p in sorted(args.dir.glob(f"mtpspec_{key}_*.json"))]
        rounds = sorted(int(p.stem.rsplit("_", 1)[1]) for p in args.dir.glob(f"mtpspec_{key}_*.json"))
        their_runs = []
        for r in rounds:
            t, llama_meta = theirs([p for p in (args.dir / f"llama_decode_{their_key}_{r}.json",
                                                args.dir / f"llama_prefill_{their_key}_{r}.json",
                                                args.dir / f"llama_prompt_{their_key}_{r}.json") if p.exists()])
            their_runs.append(t)
        if not our_runs:
            continue
        elements, stored = weight_elements(model_dir, fp8_at_load)
        gguf_bytes = gguf.stat().st_size
        lines += [f"## {title}", "",
                  f"- mtpspec: {our_format}: {stored / 1e9:.2f} GB for {elements / 1e9:.2f} G weights, "
                  f"{stored / elements:.3f} bytes per weight.",
                  f"- llama.cpp: {their_format}: {gguf_bytes / 1e9:.2f} GB GGUF, {gguf_bytes / elements:.3f} bytes per "
                  "weight (all matrices, embedding included).",
                  f"- {len(rounds)} round(s).", "",
                  "| test | mtpspec tok/s | llama.cpp tok/s | mtpspec ÷ llama.cpp | per round |", "|---|---|---|---|---|"]
        for kind, n in TESTS:
            a = [r[(kind, n)] for r in our_runs if (kind, n) in r]
            b = [r[(kind, n)] for r in their_runs if (kind, n) in r]
            if not a or not b:
                continue
            per_round = [x / y for x, y in zip(a, b)]
            ratio = statistics.median(a) / statistics.median(b)
            label = {"decode": f"decode at N = {n}", "prefill": f"prefill 256 at N = {n}",
                     "prompt": f"prompt of {n} tokens"}[kind]
            lines.append(f"| {label} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {ratio:.2f}× | "
                         + ", ".join(f"{x:.2f}" for x in per_round) + " |")
            (decode_rows if kind == "decode" else prefill_rows).append((SHORT[key], label, ratio))
        lines.append("")
        # Bytes per decode step: what each engine must stream, and how fast it streamed them.
        config = json.loads((model_dir / "config.json").read_text())
        theirs_bytes = llama_step_bytes(gguf, config, args.llama_dir)
        counters = [our_decode_counters(p) for p in sorted(args.dir.glob(f"mtpspec_{key}_*.json"))]
        if theirs_bytes is not None and counters and counters[0]:
            lines += ["| decode at N | mtpspec GB per step | its GB/s (÷ read bandwidth) | llama.cpp GB per step | "
                      "its GB/s (÷ read bandwidth) |", "|---|---|---|---|---|"]
            for n in sorted(counters[0]):
                c = counters[0][n]
                ours_gb = c["weight_MB/step"] / 1e3
                bw = c["read_GB/s"]
                their_ts = statistics.median([r[("decode", n)] for r in their_runs if ("decode", n) in r])
                their_gbs = their_ts * theirs_bytes / 1e9
                lines.append(f"| {n} | {ours_gb:.2f} | {c['weight_GB/s']:.1f} ({c['weight_GB/s'] / bw:.2f}) | "
                             f"{theirs_bytes / 1e9:.2f} | {their_gbs:.1f} ({their_gbs / bw:.2f}) |")
                byte_notes.append((SHORT[key], n, ours_gb * 1e9 / theirs_bytes, c["weight_GB/s"] / bw,
                                   their_gbs / bw))
            lines += ["", f"Weight bytes only (the caches are small beside them); read bandwidth {bw:.1f} GB/s, "
                      "measured by decode_bench in the same round. llama.cpp's bytes are its GGUF's tensors less the "
                      "embedding (one row per step) and the MTP layer, with the routed experts' share of k_e / E.", ""]
    if llama_meta:
        lines += ["llama.cpp build: commit " + str(llama_meta.get("build_commit")) + f", CPU {llama_meta.get('cpu_info')}, "
                  f"{llama_meta.get('n_threads')} threads, cache {llama_meta.get('type_k')}/{llama_meta.get('type_v')}, "
                  f"flash attention {llama_meta.get('flash_attn')}.", ""]
    lines += ["## Decode against llama.cpp, every row", "",
              "mtpspec's decode tok/s over llama.cpp's: " + "; ".join(f"{m}, {l}: {r:.2f}×" for m, l, r in decode_rows) + ".", "",
              "## Prefill against llama.cpp, every row", "",
              "mtpspec's prefill tok/s over llama.cpp's: " + "; ".join(f"{m}, {l}: {r:.2f}×" for m, l, r in prefill_rows)
              + ". llama.cpp's Q8_0 quantises its activations to 8 bits; the `--activations fp8` row is mtpspec with "
              "the release's served numerics, the others its exact f32 rows.", ""]
    if byte_notes:
        lines += ["Per decode step, mtpspec streams " + "; ".join(
            f"{m} at N = {n}: {ratio:.2f}× llama.cpp's weight bytes at {ours_frac:.2f} of the read bandwidth "
            f"(llama.cpp {theirs_frac:.2f})" for m, n, ratio, ours_frac, theirs_frac in byte_notes)
            + ". As the release ships, the head, eh_proj and the routers are bf16, which mtpspec keeps, while "
            "llama.cpp's Q8_0 requantises them to about one byte per weight; `--weights fp8` quantises them "
            "(all but the router) to FP8 at load, the same bytes per weight for both engines.", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
