#!/usr/bin/env bash
# The main job: speculative decoding with the MTP head of the bundled trained model.
# Installs what is missing, builds, then runs plain and MTP decoding on the same prompt and seed and
# prints the text, the acceptance summary and whether the two outputs are identical.
# Usage: scripts/demo.sh ["PROMPT"]
set -euo pipefail
cd "$(dirname "$0")/.."
# The one program the demo runs, from the CPU-only preset (no CUDA, tests or benchmarks to compile).
# MTPSPEC_DEMO_PRESET=release runs it from the full build instead, as scripts/test.sh does.
preset="${MTPSPEC_DEMO_PRESET:-cpu}"
scripts/build.sh "$preset" mtpspec
BIN=build/$preset/cli/mtpspec
MODEL="${MTPSPEC_DEMO_MODEL:-models/glm-tiny-mtp}"
PROMPT="${1:-It is a truth universally acknowledged, that a single man in possession of a good fortune}"
mkdir -p build/demo

echo "== mtpspec info $MODEL"
"$BIN" info "$MODEL"
for draft in none mtp; do
  echo
  echo "== mtpspec generate $MODEL --prompt \"$PROMPT\" --max-new 64 --draft $draft --k 3"
  "$BIN" generate "$MODEL" --prompt "$PROMPT" --max-new 64 --draft "$draft" --k 3 \
      --stats-json "build/demo/$draft.json" | tee "build/demo/$draft.txt"
done
echo
# The first "tokens:" line holds the generated ids (the summary's "tokens: prompt ..." line differs).
if [ "$(grep -m1 '^tokens:' build/demo/none.txt)" = "$(grep -m1 '^tokens:' build/demo/mtp.txt)" ]; then
  echo "MTP speculative output is identical to plain decoding (sampler-equality, greedy)."
else
  echo "ERROR: MTP speculative output differs from plain decoding" >&2
  exit 1
fi
