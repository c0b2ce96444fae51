#!/usr/bin/env bash
# Runs every benchmark that docs/results/ reports and rewrites the reports from their JSON:
#   docs/results/decode.md      decode_bench     (about 5 min)
#   docs/results/acceptance.md  accept_bench     (about 5 min on 2 cores)
#   docs/results/numerics.md    every cache and precision variant against f32 (numerics): the int8
#                               latent cache (kv-int8, under a minute), the indexer keys in bf16 and
#                               fp8 (index-keys, ~15 min), the FP8 matrices' input rows in bf16 and fp8
#                               (activations, ~15 min) and the fp8 latent cache as DeepSeek-V3.2 is
#                               served (kv-fp8, ~20 min); each part runs numerics_bench --variant,
#                               linear_bench and real_scale_bench on the GLM-5.2 and DeepSeek-V3.2
#                               cuts, and the page has a section for each part it finds
#   docs/results/tradeoff.md    tradeoff_bench   (15-40 min on 2 cores)
#   docs/results/real-scale.md  real_scale_bench and memory_bench on checkpoints cut from GLM-5.2 and
#                               DeepSeek-V3.2 (about 30 min, 30 GB of disk under build/rs)
#   docs/results/soak.md        2,000 requests through one model, CLI and Python (tests/soak/soak.py)
#   docs/results/tree.md        trees against chains on the trained model (bench/report/tree_report.py, ~5 min)
#   docs/results/batch.md       batch_bench: batched verify costs and MTP per batch size, on the bench
#                               model (batch, ~15 min) and on the 7-layer GLM-5.2 cut with a projection
#                               of the full release (batch-real, ~30 min; the cut as real-scale writes
#                               it); the page has a section for each run it finds
#   docs/results/serving.md     mtpspec-serve against GenerateBatch in process, and Poisson arrivals for plain
#                               decoding and MTP k = 1..3 (bench/serving_bench.py, ~10 min)
#   docs/results/prompt-sets.md acceptance per category of MT-Bench and HumanEval on the trained model, k = 1..4,
#                               greedy and T = 0.7 (scripts/fetch_prompt_sets.sh, bench/prompt_sets_bench.py, ~40 min)
# The held-out text of the trained model comes from research/train/corpus.py (Debian packages it
# downloads with apt-get) and research/train/make_heldout.py. JSON goes to build/results/.
#
# Usage: scripts/reproduce_results.sh [decode|acceptance|numerics|kv-int8|index-keys|activations|kv-fp8|tradeoff|
#        real-scale|soak|tree|batch|batch-real|serving|prompt-sets ...]   (default: all; numerics = its
#        four parts kv-int8, index-keys, activations and kv-fp8)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
python=$(scripts/python_env.sh | tail -n 1)
"$python" -m pip install -q tokenizers
mkdir -p build/results
targets=()
for target in "$@"; do
  if [ "$target" = numerics ]; then targets+=(kv-int8 index-keys activations kv-fp8); else targets+=("$target"); fi
done
[ ${#targets[@]} -eq 0 ] && targets=(decode acceptance kv-int8 tradeoff real-scale index-keys activations kv-fp8 soak tree batch batch-real serving prompt-sets)
bench=build/release/bench

heldout() {
  if [ ! -f build/heldout/prose.npy ]; then
    "$python" research/train/corpus.py
    "$python" research/train/make_heldout.py
  fi
}

# The checkpoints cut from the releases, written once under build/rs: glm7, glm2 (GLM-5.2, 7 and 2
# layers) and dsv4 (DeepSeek-V3.2, 4 layers), each with 32 experts per MoE layer.
cuts() {
  mkdir -p build/rs
  for name in "$@"; do
    case "$name" in
      glm7) like=glm-5.2 layers=7 ;;
      glm2) like=glm-5.2 layers=2 ;;
      dsv4) like=deepseek-v3.2 layers=4 ;;
    esac
    [ -f "build/rs/$name/model.safetensors.index.json" ] || \
      build/release/cli/mtpspec make-checkpoint "build/rs/$name" --like "$like" --layers "$layers" --experts 32
  done
}

# The numerics page, from whichever of its parts' JSON build/results holds.
numerics_report() {
  "$python" bench/report/numerics_report.py --results build/results --command "scripts/reproduce_results.sh numerics"
}

for target in "${targets[@]}"; do
  case "$target" in
    decode)
      runs=()
      for i in 1 2 3; do
        $bench/decode_bench --benchmark_filter='StreamRead/1024|BM_Decode/' --benchmark_format=json \
          >build/results/decode_$i.json
        runs+=(build/results/decode_$i.json)
      done
      "$python" bench/report/decode_report.py --runs "${runs[@]}" ;;
    acceptance)
      heldout
      $bench/accept_bench --model models/glm-tiny-mtp --json build/results/accept.json --csv build/results/accept.csv
      "$python" bench/report/report.py --accept build/results/accept.json --out docs/results \
        --accept-cmd "$bench/accept_bench --model models/glm-tiny-mtp --json build/results/accept.json --csv build/results/accept.csv" ;;
    kv-int8)
      heldout
      [ -f build/bench_model/config.json ] || $bench/decode_bench --benchmark_filter='StreamRead/256' >/dev/null
      $bench/numerics_bench --model models/glm-tiny-mtp --windows 8 --context 512 --eval-tokens 256 --new-tokens 128 \
        --k 2 --memory-configs build/bench_model/config.json,model/release_configs/glm-5.2-fp8.json \
        --json build/results/kv_int8_trained.json
      for m in glm_a dsv32_b; do
        $bench/numerics_bench --model tests/golden/$m --random-tokens 4000 --windows 8 --context 64 --eval-tokens 48 \
          --new-tokens 12 --json build/results/kv_int8_$m.json
      done
      numerics_report ;;
    tradeoff)
      heldout
      cmd=(--contexts 512,2048,8192,32768 --dense-context 0 --new-tokens 256 --reps 11 --e2e-reps 5 --g5-reps 9
           --trained-dir models/glm-tiny-mtp --json build/results/tradeoff.json --csv build/results/tradeoff.csv)
      if [ -f build/results/accept.json ]; then cmd+=(--accept-json build/results/accept.json); fi
      $bench/tradeoff_bench "${cmd[@]}"
      "$python" bench/report/report.py --tradeoff build/results/tradeoff.json --out docs/results \
        --tradeoff-cmd "$bench/tradeoff_bench ${cmd[*]}" ;;
    real-scale)
      cuts glm7 glm2 dsv4
      $bench/memory_bench --model build/rs/glm7 --json build/results/memory_glm7_huge.json
      $bench/memory_bench --model build/rs/glm7 --file-memory mapped --json build/results/memory_glm7_mapped.json
      $bench/memory_bench --model build/rs/glm2 --weights bf16 --json build/results/memory_glm2_bf16.json
      $bench/real_scale_bench --model build/rs/glm7 --reps 9 --check-reps 16 --e2e 4096,16384 --json build/results/real_scale_glm7.json
      $bench/real_scale_bench --model build/rs/dsv4 --reps 9 --check-reps 16 --e2e 4096,16384 --json build/results/real_scale_dsv4.json
      "$python" bench/report/real_scale_report.py --release glm-5.2 --layers build/results/real_scale_glm7.json \
        --release-2 deepseek-v3.2 \
        --layers-2 build/results/real_scale_dsv4.json \
        --memory build/results/memory_glm7_huge.json build/results/memory_glm7_mapped.json \
                 build/results/memory_glm2_bf16.json \
        --command "scripts/reproduce_results.sh real-scale" ;;
    index-keys)
      heldout
      for keys in bf16 fp8; do
        $bench/numerics_bench --model models/glm-tiny-mtp --variant $keys-index-keys --windows 8 --context 512 \
          --eval-tokens 256 --new-tokens 128 --k 2 --json build/results/index_keys_${keys}_trained.json
        for m in glm_a dsv32_b; do
          $bench/numerics_bench --model tests/golden/$m --variant $keys-index-keys --random-tokens 4000 --windows 8 \
            --context 64 --eval-tokens 48 --new-tokens 12 --json build/results/index_keys_${keys}_$m.json
        done
      done
      cuts glm7 dsv4
      # Per cut: the per-layer costs with each key storage, one run after the other (the indexer's time,
      # the projection), then whole decode steps with all three alternating in every repetition; each
      # repetition pairs its step with the read bandwidth measured just before it.
      for cut in glm7 dsv4; do
        for keys in f32 bf16 fp8; do
          $bench/real_scale_bench --model build/rs/$cut --max-rows 1 --reps 7 --prefix-layers 2 --index-keys $keys \
            --json build/results/index_keys_${cut}_$keys.json
        done
        $bench/real_scale_bench --model build/rs/$cut --reps 9 --decode-side-by-side f32,bf16,fp8 \
          --json build/results/index_keys_${cut}_side_by_side.json
      done
      numerics_report ;;
    activations)
      heldout
      for acts in bf16 fp8; do
        $bench/numerics_bench --model models/glm-tiny-mtp --variant $acts-activations --windows 8 --context 512 \
          --eval-tokens 256 --new-tokens 128 --k 2 --json build/results/activations_${acts}_trained.json
      done
      $bench/linear_bench --benchmark_filter='BM_StreamRead|BM_Linear/fp8:[345]/' --benchmark_format=json \
        >build/results/activations_linear.json
      cuts glm7 dsv4
      # Per cut: one-row decode steps and verifies of 3 and 5 rows with the FP8 matrices' rows in f32,
      # bf16 and fp8 (and fp8 with bf16 indexer keys), alternating within every repetition, each step
      # paired with the read bandwidth measured just before it.
      for cut in glm7 dsv4; do
        $bench/real_scale_bench --model build/rs/$cut --reps 7 --decode-side-by-side f32,f32:bf16,f32:fp8,bf16:fp8 \
          --side-by-side-rows 3,5 --json build/results/activations_${cut}_side_by_side.json
      done
      numerics_report ;;
    kv-fp8)
      heldout
      $bench/numerics_bench --model models/glm-tiny-mtp --variant fp8-latent --windows 8 --context 512 \
        --eval-tokens 256 --new-tokens 128 --k 2 \
        --memory-configs build/bench_model/config.json,model/release_configs/glm-5.2-fp8.json,model/release_configs/deepseek-v3.2.json \
        --json build/results/kv_fp8_trained.json
      for m in glm_a dsv32_b; do
        $bench/numerics_bench --model tests/golden/$m --variant fp8-latent --random-tokens 4000 --windows 8 \
          --context 64 --eval-tokens 48 --new-tokens 12 --json build/results/kv_fp8_$m.json
      done
      # The attention core in 6 separate processes: its speed with the fp8 cache differs from process to
      # process on this host, so the page gives every process's pair.
      for i in 1 2 3 4 5 6; do
        $bench/linear_bench --benchmark_filter='BM_AttentionCore' --benchmark_repetitions=3 --benchmark_format=json \
          >build/results/kv_fp8_attention_$i.json
      done
      cuts glm7 dsv4
      # Per cut: one-row decode steps and verifies of 3 rows with the f32 cache, the fp8 cache, and the
      # release's served numerics (fp8 indexer keys, fp8 input rows, fp8 cache), alternating within every
      # repetition, each step paired with the read bandwidth measured just before it.
      for cut in glm7 dsv4; do
        $bench/real_scale_bench --model build/rs/$cut --reps 7 --decode-side-by-side f32,f32:f32:fp8,fp8:fp8:fp8 \
          --side-by-side-rows 3 --json build/results/kv_fp8_${cut}_side_by_side.json
      done
      numerics_report ;;
    soak)
      # The bindings, built as scripts/test_python.sh builds them.
      "$python" -m pip install -q --no-build-isolation ./python -C build-dir="$PWD/build/pybuild"
      "$python" tests/soak/soak.py --requests 2000 --out docs/results ;;
    batch)
      $bench/batch_bench --contexts 512,4096 --batches 1,2,4,8,16 --max-k 4 --reps 5 --e2e-contexts 512,4096 \
        --new-tokens 48 --e2e-reps 5 --e2e-cost-reps 3 --json build/results/batch.json
      "$python" bench/report/batch_report.py --out docs/results ;;
    serving)
      # The bindings and the server, built as scripts/test_python.sh builds them; the bench model as
      # decode_bench writes it.
      "$python" -m pip install -q --no-build-isolation ./python -C build-dir="$PWD/build/pybuild"
      $bench/decode_bench --benchmark_filter=NONE >/dev/null
      "$python" bench/serving_bench.py --model build/bench_model --json build/results/serving.json
      "$python" bench/report/serving_report.py --results build/results --command "scripts/reproduce_results.sh serving" ;;
    prompt-sets)
      "$python" -m pip install -q --no-build-isolation ./python -C build-dir="$PWD/build/pybuild"
      scripts/fetch_prompt_sets.sh build/prompt-sets
      "$python" bench/prompt_sets_bench.py --model models/glm-tiny-mtp \
        --sets build/prompt-sets/mt_bench.jsonl build/prompt-sets/humaneval.jsonl --json build/results/prompt_sets.json
      "$python" bench/report/prompt_sets_report.py --results build/results \
        --command "scripts/reproduce_results.sh prompt-sets" ;;
    batch-real)
      cuts glm7
      $bench/batch_bench --model build/rs/glm7 --prefix-layers 3 --rates 0.88,0.75,0.58 --contexts 512,4096 \
        --batches 1,2,4,8,16 --max-k 4 --reps 3 --e2e-contexts 512,4096 --new-tokens 12 --e2e-reps 2 \
        --json build/results/batch_glm7.json
      "$python" bench/report/batch_report.py --out docs/results ;;
    tree)
      heldout
      $bench/tree_bench --contexts 512,2048,8192 --json build/results/tree_costs.json
      "$python" -m pip install -q --no-build-isolation ./python -C build-dir="$PWD/build/pybuild"
      "$python" bench/report/tree_report.py --out docs/results ;;
    *)
      echo "reproduce_results.sh: unknown report '$target' (decode, acceptance, numerics, kv-int8, tradeoff, real-scale, index-keys, activations, kv-fp8, soak, tree, batch, batch-real, serving, prompt-sets)" >&2
      exit 2 ;;
  esac
done
