#!/usr/bin/env bash
# The bad-input and loader tests under AddressSanitizer and UBSan (the `asan` preset): the file
# parsers (safetensors, the shard index, .npy, tokenizer.json), config validation, the loader's
# checks, the request builder and the loop's argument errors. Builds only those test binaries, with
# line tables only (-g1, set by the preset): enough for the sanitizers' stack traces at half the disk.
# scripts/test.sh runs it; for the whole suite under the sanitizers:
#   cmake --preset asan && cmake --build build/asan && ctest --preset asan
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(io_npy_test io_safetensors_test io_safetensors_errors_test io_safetensors_store_test tokenizer_test
         config_test loader_test pipeline_request_test generator_errors_test stop_and_logprobs_test)
cmake --preset asan >/dev/null
cmake --build build/asan -j"${JOBS:-$(nproc)}" --target "${targets[@]}"
reference_python=$(scripts/python_env.sh | tail -n 1)
# Only the binaries built above have registered tests; the regex keeps ctest to them.
MTPSPEC_PYTHON=$reference_python ctest --preset asan -j"$(nproc)" -R '^(io|tokenizer|model|pipeline|spec)\.'
