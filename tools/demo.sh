#!/usr/bin/env bash
# The main job on the bundled small model: installs what is missing, builds, and runs mtpspec.
# Usage: tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh release
MODEL=tests/golden/glm_a
BIN=build/release/tools/mtpspec
echo "== mtpspec info $MODEL"
"$BIN" info "$MODEL"
echo
echo "== mtpspec logits $MODEL --ids 1,2,3,4,5 --rows last --out build/demo_logits.npy"
"$BIN" logits "$MODEL" --ids 1,2,3,4,5 --rows last --out build/demo_logits.npy
