#!/usr/bin/env bash
# Makes (or reuses) the Python environment build/pyenv with the test requirements: numpy and
# safetensors (the C++ tests' reference readers and writers), pytest, and the bindings' build
# requirements. MTPSPEC_PY_FRESH=1 starts it over; PYTHON=python3.11 picks the interpreter it is
# made from. Prints the environment's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=build/pyenv
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p build
if [ "${MTPSPEC_PY_FRESH:-0}" = 1 ] || [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --clear "$venv" >&2
fi
"$venv/bin/python" -m pip install -q -r tests/python/requirements.txt >&2
echo "$PWD/$venv/bin/python"
