#!/usr/bin/env bash
# Installs the Debian packages mtpspec builds against, if any is missing. Idempotent; needs root
# (or sudo) only when something has to be installed. Nothing is downloaded at build time.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libeigen3-dev libabsl-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev libpcre2-dev
  clang libclang-rt-14-dev   # libFuzzer + sanitizer runtimes for the fuzz targets
  python3 python3-venv
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
