#!/usr/bin/env bash
# The Python bindings' tests: makes the virtual environment build/pyenv (scripts/python_env.sh:
# reused when it is already there; MTPSPEC_PY_FRESH=1 starts over), installs `./python`
# (which builds mtpspec._ext with the top-level CMakeLists in build/pybuild, incrementally), and
# runs tests/python with pytest inside it.
#
# Usage: scripts/test_python.sh [pytest args]
#   MTPSPEC_PY_BUILD_TYPE=Debug   debug build of the extension (its own build folder)
#   PYTHON=python3.11             the interpreter the environment is made from
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=build/pyenv
build_type=${MTPSPEC_PY_BUILD_TYPE:-Release}
build_dir=$root/build/pybuild
[ "$build_type" = Release ] || build_dir=$root/build/pybuild-$(echo "$build_type" | tr '[:upper:]' '[:lower:]')
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export PIP_DISABLE_PIP_VERSION_CHECK=1

start=$(date +%s)
scripts/python_env.sh >/dev/null
# The build requirements are already in the environment, so pip builds without isolation and the
# CMake tree in $build_dir keeps pointing at the same pybind11: reruns only rebuild what changed.
"$venv/bin/python" -m pip install -q --no-build-isolation ./python \
  -C build-dir="$build_dir" -C cmake.build-type="$build_type"
echo "test_python.sh: environment and build ready in $(( $(date +%s) - start )) s"
# From the repository root, which holds no `mtpspec` package: imports find the installed one.
"$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider "$@"
echo "test_python.sh: done in $(( $(date +%s) - start )) s"
