#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every C++ unit test (with the
# reference Python environment build/pyenv for the cross-checks), the Python bindings' tests in
# that environment, the bad-input and loader tests again under ASan + UBSan (scripts/test_asan.sh),
# the fuzzers for a bounded time, and last the README's demo (scripts/demo.sh), which fails unless
# MTP speculative output equals plain output.
# Usage: scripts/test.sh   (FUZZ_SECONDS=N to change the fuzz budget, 0 skips; ASAN=0 skips the sanitizer run)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, so that the whole run's budget can be read off its log.
stage_start=$SECONDS
stage_done() {
  echo "test.sh: $1 done in $((SECONDS - stage_start)) s (total $SECONDS s)"
  stage_start=$SECONDS
}
# The free disk, so that a run that runs out of it says so up front (the whole suite writes ~2 GB).
df -h . | tail -n 1 | awk '{print "test.sh: " $4 " free on " $6 " at the start"}'
scripts/build.sh release
stage_done "release build"
# The reference Python (numpy, safetensors) exists before ctest, so its cross-checks run, never skip.
reference_python=$(scripts/python_env.sh | tail -n 1)
MTPSPEC_PYTHON=$reference_python ctest --preset release -j"$(nproc)"
stage_done "C++ tests"
scripts/test_python.sh
stage_done "Python tests"
if [ "${ASAN:-1}" != 0 ]; then
  scripts/test_asan.sh
  stage_done "ASan + UBSan build and tests"
fi
FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  scripts/run_fuzz.sh "$FUZZ_SECONDS"
  stage_done "fuzz build and ${FUZZ_SECONDS} s per target"
fi
MTPSPEC_DEMO_PRESET=release scripts/demo.sh >build/demo.log
tail -n 1 build/demo.log
stage_done "demo"
