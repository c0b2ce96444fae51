#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release). Usage: scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/install_deps.sh
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j"$(nproc)"
