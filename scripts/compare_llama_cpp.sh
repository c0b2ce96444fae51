#!/usr/bin/env bash
# mtpspec and llama.cpp side by side on the CPU, on the same weights, in one run, alternating:
# plain decode tok/s at 1K and 8K context, 256-token prefill tok/s at context 0 and 1K, and a
# 4096-token prompt, with 2 threads each, on
#   - the bench model (bf16, 1.15 GB; build/bench_model): bf16 for both engines, and mtpspec once
#     more with --activations bf16 (its input rows rounded to bf16, as llama.cpp's bf16 path does);
#   - a checkpoint cut from GLM-5.2 at its real dimensions (3 dense layers + 1 MoE layer with 32 of
#     its experts, the MTP layer and the head; build/rs/glm4): FP8 E4M3 with 128 x 128 block scales
#     for mtpspec, Q8_0 for llama.cpp (the nearest format it has; its converter dequantises the FP8
#     weights and requantises them), and mtpspec once more with --weights fp8 (its bf16 head and
#     eh_proj quantised to FP8 at load, so both engines read about one byte per weight);
#   - a checkpoint cut from GLM-4.7-Flash at its real dimensions (1 dense + 3 MoE layers with all 64
#     experts, the MTP layer and the head; build/rs/glm47): bf16 for both engines, as the release
#     ships, and mtpspec once more with --activations bf16.
# llama.cpp is not a dependency: give the path of a llama.cpp source tree. Its benchmark program is
# built there (build-mtpspec/, CPU only, native), and its own convert_hf_to_gguf.py converts, in a
# Python environment of its own (build/llama-cpp-venv: torch, transformers, numpy). GGUF files go to build/gguf/,
# JSON to build/results/llama-cpp/ (copied to docs/results/llama-cpp-data/), the report to docs/results/llama-cpp.md.
#
# Each round runs mtpspec's decode_bench, then llama-bench (3 repetitions on the bench model, 1 at
# the real dimensions, where every repetition prefills its 1K and 8K contexts again). After the
# rounds, decode_bench breaks a 4K and a 16K prompt on the cut down by component, and linear_bench
# times the prefill GEMM alone (about 8 minutes together).
# Usage: scripts/compare_llama_cpp.sh LLAMA_CPP_DIR [ROUNDS]   (default 3 rounds on the bench
#        model, of which at most 2 also run the real-dimension cuts)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/llama_cpp_lib.sh
llama_cpp_tree "usage: scripts/compare_llama_cpp.sh LLAMA_CPP_DIR [ROUNDS]" "${1:-}"
rounds="${2:-3}"
real_rounds=$(( rounds < 2 ? rounds : 2 ))
scripts/build.sh release
cli=build/release/cli/mtpspec
decode_bench=build/release/bench/decode_bench

llama_cpp_build llama-bench
llama_bench="$llama/build-mtpspec/bin/llama-bench"

# The checkpoints: the bench model (written by decode_bench on first use) and the two cuts.
$decode_bench --benchmark_filter=NONE >/dev/null 2>&1 || true
[ -f build/rs/glm4/model.safetensors.index.json ] ||
  $cli make-checkpoint build/rs/glm4 --like glm-5.2 --layers 4 --experts 32
[ -f build/rs/glm47/model.safetensors.index.json ] ||
  $cli make-checkpoint build/rs/glm47 --like glm-4.7-flash --layers 4
mkdir -p build/gguf build/results/llama-cpp
llama_cpp_convert build/bench_model build/gguf/bench-bf16.gguf bf16
llama_cpp_convert build/rs/glm4 build/gguf/glm4-q8_0.gguf q8_0
llama_cpp_convert build/rs/glm47 build/gguf/glm47-bf16.gguf bf16

out=build/results/llama-cpp
rm -f "$out"/*.json
ours() {  # NAME MODEL_DIR ROUND WEIGHTS [ACTIVATIONS]
  $decode_bench --model_dir="$2" --weights="$4" --activations="${5:-f32}" \
    --benchmark_filter='StreamRead/1024|BM_Prefill/|BM_Decode/|BM_PrefillPrompt/' \
    --benchmark_format=json >"$out/mtpspec_$1_$3.json"
}
theirs() {  # NAME GGUF ROUND REPETITIONS
  "$llama_bench" -m "$2" -t 2 -p 0 -n 32 -d 1024,8192 -r "$4" -o json >"$out/llama_decode_$1_$3.json"
  "$llama_bench" -m "$2" -t 2 -p 256 -n 0 -d 0,1024 -r "$4" -o json >"$out/llama_prefill_$1_$3.json"
  "$llama_bench" -m "$2" -t 2 -p 4096 -n 0 -d 0 -r 1 -o json >"$out/llama_prompt_$1_$3.json"
}
# On the cut, mtpspec runs three times around llama.cpp: as the release ships (FP8 with its bf16 head,
# f32 input rows: the exact path), with --activations fp8 (the input rows of the FP8 matrices
# quantised as DeepSeek-V3.2's reference code serves them, as llama.cpp's Q8_0 quantises its own),
# and with --weights fp8 (the head quantised at load too, about as many bytes as Q8_0); every row is
# compared with the llama.cpp run between them.
for round in $(seq 1 "$rounds"); do
  ours bench build/bench_model "$round" stored
  theirs bench build/gguf/bench-bf16.gguf "$round" 3
  ours benchrows build/bench_model "$round" stored bf16
  if [ "$round" -le "$real_rounds" ]; then
    ours glm4 build/rs/glm4 "$round" stored
    ours glm4rows build/rs/glm4 "$round" stored fp8
    theirs glm4 build/gguf/glm4-q8_0.gguf "$round" 1
    ours glm4fp8 build/rs/glm4 "$round" fp8
    ours glm47 build/rs/glm47 "$round" stored
    theirs glm47 build/gguf/glm47-bf16.gguf "$round" 1
    ours glm47rows build/rs/glm47 "$round" stored bf16
  fi
done
# Once, after the rounds: where a long prompt's prefill goes on the cut at the release's numerics
# (4096 and 16384 tokens, by component), and the prefill GEMM alone against the cores' bf16
# dot-product rate.
$decode_bench --model_dir=build/rs/glm4 --activations=fp8 --benchmark_filter=BM_PrefillPromptBreakdown \
  --breakdown_prompts=4096,16384 --benchmark_format=json >"$out/breakdown_glm4rows.json"
build/release/bench/linear_bench --benchmark_filter=BM_LinearPrefill --benchmark_format=json \
  >"$out/linear_prefill.json"
python=$(scripts/python_env.sh | tail -n 1)
"$python" -m pip install -q pyyaml  # llama.cpp's gguf-py reader, which counts the GGUF's bytes per step
"$python" bench/report/llama_cpp_report.py --dir "$out" --bench-model build/bench_model --cut build/rs/glm4 \
  --bench-gguf build/gguf/bench-bf16.gguf --cut-gguf build/gguf/glm4-q8_0.gguf \
  --flash-cut build/rs/glm47 --flash-cut-gguf build/gguf/glm47-bf16.gguf \
  --command "scripts/compare_llama_cpp.sh LLAMA_CPP_DIR $rounds" --llama-dir "$llama" --out docs/results/llama-cpp.md
mkdir -p docs/results/llama-cpp-data
rm -f docs/results/llama-cpp-data/*.json  # the page's data is this run's alone
cp "$out"/*.json docs/results/llama-cpp-data/
