#!/usr/bin/env bash
# GLM-4.7-Flash at full depth on the CPU: all 47 layers and the MTP layer at the release's real
# dimensions, with 16 of its 64 routed experts (every token still reads the release's active
# weights: 4 routed experts and the shared one). Writes docs/results/glm-4.7-flash.md from:
#   - real_scale_bench, as shipped (bf16) and with --weights fp8: every layer's one-row and verify
#     costs at context 1024 (1..5 rows), and Generate end to end, plain and MTP k = 1..4 with
#     SYNTHETIC acceptance;
#   - decode_bench, bf16 and fp8: plain decode at context 1024, a 256-token prefill, the read bandwidth;
#   - llama.cpp on the same weights (bf16 and Q8_0 GGUFs): llama-bench (decode at 1024, prefill of
#     256 tokens) and llama-speculative-simple with its own MTP drafts (--spec-type draft-mtp);
#   - mtpspec generate with its MTP drafts on the same random weights.
# llama.cpp is not a dependency: give the path of a llama.cpp source tree (as for
# scripts/compare_llama_cpp.sh). The checkpoint is written on first use (19 GB, under a minute);
# the GGUFs go to build/gguf/ (30 GB). Each engine runs on 2 threads, one after the other.
# About 30 minutes on 2 cores, plus the llama.cpp build the first time.
# Usage: scripts/compare_glm47_flash.sh LLAMA_CPP_DIR [CHECKPOINT_DIR]  (default build/rs/glm47f)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/llama_cpp_lib.sh
llama_cpp_tree "usage: scripts/compare_glm47_flash.sh LLAMA_CPP_DIR [CHECKPOINT_DIR]" "${1:-}"
ckpt="${2:-build/rs/glm47f}"
scripts/build.sh release
cli=build/release/cli/mtpspec

llama_cpp_build llama-bench llama-speculative-simple
bin="$llama/build-mtpspec/bin"

[ -f "$ckpt/model.safetensors.index.json" ] || $cli make-checkpoint "$ckpt" --like glm-4.7-flash --experts 16
for type in bf16 q8_0; do
  llama_cpp_convert "$ckpt" build/gguf/glm47f-$type.gguf $type
done

out=build/results/glm47-flash
rm -rf "$out" && mkdir -p "$out"
# Conditional acceptance 0.6 at every draft position: the published k = 1 rate (vLLM, 60%), carried
# to later positions as an assumption; the report prices other published rate lists from the parts.
for weights in stored fp8; do
  build/release/bench/real_scale_bench --model "$ckpt" --weights $weights --contexts 1024 --max-rows 5 \
    --reps 2 --prefix-layers 24 --e2e 1024 --e2e-reps 2 --new-tokens 32 --rates 0.6 \
    --json "$out/real_scale_$weights.json"
  build/release/bench/decode_bench --model_dir="$ckpt" --weights=$weights \
    --benchmark_filter='StreamRead/1024|BM_Prefill/ctx:0/|BM_Decode/ctx:1024/' \
    --benchmark_format=json >"$out/decode_$weights.json"
done
for type in bf16 q8_0; do
  gguf=build/gguf/glm47f-$type.gguf
  "$bin/llama-bench" -m "$gguf" -t 2 -p 0 -n 32 -d 0,1024 -r 2 -o json >"$out/llama_decode_$type.json"
  "$bin/llama-bench" -m "$gguf" -t 2 -p 256 -n 0 -d 0 -r 2 -o json >"$out/llama_prefill_$type.json"
done

# MTP drafts of each engine on the same random weights, greedy, from the same 16-token prompt. On
# random weights the acceptance says nothing about the trained head; these runs show what a draft
# costs each engine, and which acceptance they reached.
prompt="The quick brown fox jumps over the lazy dog and then it runs to the river bank"
for n in 1 2 3; do  # llama-speculative-simple needs a drafter; llama-bench gives the plain rows
  "$bin/llama-speculative-simple" -m build/gguf/glm47f-bf16.gguf -t 2 -c 512 --temp 0 -n 32 -p "$prompt" \
    --spec-type draft-mtp --spec-draft-n-max "$n" --spec-draft-n-min 0 >"$out/llama_spec_bf16_k$n.log" 2>&1
done
ids=$(seq -s, 101 116)
for n in 0 1 2 3; do
  draft=(--k "$n")
  [ "$n" -eq 0 ] && draft=(--draft none)
  $cli generate "$ckpt" --ids "$ids" --max-new 32 --threads 2 "${draft[@]}" --stats-json "$out/mtpspec_spec_k$n.json" \
    >/dev/null
done

python=$(scripts/python_env.sh | tail -n 1)
"$python" bench/report/glm47_flash_report.py --results "$out" \
  --command "scripts/compare_glm47_flash.sh LLAMA_CPP_DIR $ckpt"
