#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every C++ unit test (with the
# reference Python environment build/pyenv for the cross-checks), the Python bindings' tests in
# that environment, the bad-input and loader tests again under ASan + UBSan (scripts/test_asan.sh),
# the fuzzers for a bounded time, and last the README's demo (scripts/demo.sh), which fails unless
# MTP speculative output equals plain output.
# Usage: scripts/test.sh   (FUZZ_SECONDS=N to change the fuzz budget, 0 skips; ASAN=0 skips the sanitizer run)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
# The reference Python (numpy, safetensors) exists before ctest, so its cross-checks run, never skip.
reference_python=$(scripts/python_env.sh | tail -n 1)
MTPSPEC_PYTHON=$reference_python ctest --preset release -j"$(nproc)"
scripts/test_python.sh
if [ "${ASAN:-1}" != 0 ]; then
  scripts/test_asan.sh
fi
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
if [ "$FUZZ_SECONDS" -gt 0 ]; then
  scripts/run_fuzz.sh "$FUZZ_SECONDS"
fi
scripts/demo.sh >build/demo.log
tail -n 1 build/demo.log
