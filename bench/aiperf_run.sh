#!/usr/bin/env bash
# aiperf (NVIDIA's benchmark client, from PyPI) against mtpspec-serve: a short streamed completions
# run on 127.0.0.1, which reads each response's metrics.speculative_decoding and the server's
# /metrics; fails unless aiperf reports the acceptance and the four vLLM spec-decode counters.
# aiperf lives in a Python environment of its own (build/aiperf-venv); the server is stopped at the
# end. Results: build/results/aiperf/ (aiperf's JSON and CSV exports).
# Usage: bench/aiperf_run.sh [MODEL_DIR] [extra mtpspec-serve flags...]   (default models/glm-tiny-mtp)
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/glm-tiny-mtp}"
shift || true
python=$(scripts/python_env.sh | tail -n 1)
"$python" -m pip install -q --no-build-isolation ./python -C build-dir="$PWD/build/pybuild"
venv=build/aiperf-venv
[ -x "$venv/bin/aiperf" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q aiperf; }
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m mtpspec.serving "$model" --port "$port" --batch 4 --k 3 "$@" >build/aiperf-server.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.5
done
out=build/results/aiperf
rm -rf "$out"
name=$(basename "$(cd "$model" && pwd)")
timeout 600 "$venv/bin/aiperf" profile --model "$name" --url "http://127.0.0.1:$port" --endpoint-type completions \
  --streaming --concurrency 4 --request-count 32 --tokenizer "$model" --synthetic-input-tokens-mean 64 \
  --output-tokens-mean 32 --output-artifact-dir "$out" --ui-type none
"$python" - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
profile = json.loads((out / "profile_export_aiperf.json").read_text())
server = (out / "server_metrics_export.json").read_text()
assert "spec_decode_steps" in profile and "spec_decode_accepted_draft_tokens" in profile, "no per-request acceptance"
for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
    assert f'"vllm:spec_decode_{name}_total"' in server, name
print(f"aiperf read the acceptance of {int(profile['request_count']['avg'])} requests and the server's counters")
EOF
