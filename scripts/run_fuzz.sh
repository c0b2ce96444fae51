#!/usr/bin/env bash
# Builds the `fuzz` preset and runs every libFuzzer target (build/fuzz/tests/fuzz/fuzz_*) for
# SECONDS (default 30) over a scratch copy of its seed corpus (tests/fuzz/corpus/<name without
# fuzz_>/), so the checked-in corpus is never modified, with tests/fuzz/<name without fuzz_>.dict as
# the dictionary when present. Exits non-zero if any target crashes,
# leaks, hangs or trips a sanitizer; the reproducer is kept under build/fuzz/artifacts/<target>/.
# With FUZZ_CORPUS_DIR set, each target's corpus lives in FUZZ_CORPUS_DIR/<target>/ instead (seeded
# from the checked-in one) and is kept, so the inputs one run finds start the next.
#
# Usage: scripts/run_fuzz.sh [SECONDS]
# Environment: JOBS (build parallelism, default 2), FUZZ_CORPUS_DIR (keep the grown corpora there)
set -euo pipefail

seconds="${1:-30}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || (( seconds < 1 )); then
  echo "usage: $0 [SECONDS]  (a positive integer, default 30)" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j"${JOBS:-2}" --target mtpspec_fuzzers

work="$(mktemp -d "${TMPDIR:-/tmp}/mtpspec_fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

failed=0
shopt -s nullglob
targets=(build/fuzz/tests/fuzz/fuzz_*)
if (( ${#targets[@]} == 0 )); then
  echo "no fuzz targets found under build/fuzz/tests/fuzz" >&2
  exit 1
fi
for target in "${targets[@]}"; do
  [[ -f "$target" && -x "$target" ]] || continue
  name="$(basename "$target")"
  seeds="tests/fuzz/corpus/${name#fuzz_}"
  corpus="${FUZZ_CORPUS_DIR:+$FUZZ_CORPUS_DIR/$name}"
  corpus="${corpus:-$work/$name/corpus}"
  artifacts="$work/$name/artifacts"
  mkdir -p "$corpus" "$artifacts"
  if [[ -d "$seeds" ]]; then cp -Rn "$seeds"/. "$corpus"/; fi
  options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$artifacts/")
  dictionary="tests/fuzz/${name#fuzz_}.dict"
  if [[ -f "$dictionary" ]]; then options+=(-dict="$dictionary"); fi
  echo "== $name: ${seconds}s over $(ls "$corpus" | wc -l) seeds"
  if "$target" "${options[@]}" "$corpus" >"$work/$name/log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$work/$name/log" || true
    echo "== $name: OK ($(ls "$corpus" | wc -l) corpus files after the run)"
  else
    failed=1
    kept="build/fuzz/artifacts/$name"
    mkdir -p "$kept"
    cp -R "$artifacts"/. "$kept"/ 2>/dev/null || true
    tail -n 60 "$work/$name/log"
    echo "== $name: FAILED; reproducers in $kept" >&2
  fi
done
exit "$failed"
