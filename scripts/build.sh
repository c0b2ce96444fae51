#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release): every target, or only the ones named.
# Usage: scripts/build.sh [PRESET [TARGET ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
scripts/install_deps.sh
cmake --preset "$preset" >/dev/null
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "build/$preset" -j"$(nproc)" "${targets[@]}"
