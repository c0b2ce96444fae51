#!/usr/bin/env bash
# Every GPU check in one call, sized for one H200 (about 8 minutes):
#   1. configure (release, MTPSPEC_ENABLE_CUDA=ON) and build the GPU targets with -j$JOBS;
#   2. run `ctest -L cuda` and count passed / failed / skipped — the GPU is present here, so a
#      skipped test fails the check like a failed one;
#   3. run the GPU benchmarks with short settings: cuda_attention_bench, cuda_indexer_bench
#      + bench/cuda_indexer_vs_torch.py, cuda_e2e_bench (bf16 weights, then FP8 weights kept FP8),
#      and bench/cuda_layer_vs_torch.py
#      (bench/README_cuda.md says what each measures and its goal);
#   4. print a short table last. Every JSON goes to $OUT (default build/device_check).
# It stops at the first error and says which stage failed.
#
# Run it from the repository root on a machine with an NVIDIA GPU. Besides nvcc, CMake, ninja, g++
# and python3 with torch it needs the C++ libraries that scripts/install_deps.sh installs (absl,
# Eigen, nlohmann-json, GTest, Google Benchmark, PCRE2 + pkg-config). On a GPU machine without a
# network, fetch their Debian packages once on a networked machine:
#     scripts/device_check.sh --fetch-deps          # writes .devdeps/*.deb (about 5 MB, git-ignored)
# copy the repository with its .devdeps/ folder to the GPU machine, and run scripts/device_check.sh
# there; it installs the carried packages when the system lacks them.
# The packages are unpacked under $DEPS_DIR (default /tmp/mtpspec-deps), never into /.
#
# Environment: OUT, BUILD_DIR (build/device), JOBS (16), E2E_EXPERTS (32), E2E_CONTEXT (4096),
# SKIP_BENCH=1 (build and tests only), STOP_AFTER=configure (check the environment and the
# dependencies only), FORCE_DEVDEPS=1 (use the carried packages even where the system has them).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DEB_PACKAGES=(libabsl-dev libabsl20220623 libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
              libbenchmark-dev libbenchmark1debian libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
              libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)

if [ "${1:-}" = "--fetch-deps" ]; then
  mkdir -p .devdeps
  (cd .devdeps && apt-get download "${DEB_PACKAGES[@]}")
  ls -l .devdeps
  exit 0
fi

OUT="${OUT:-$ROOT/build/device_check}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/device}"
JOBS="${JOBS:-16}"
DEPS_DIR="${DEPS_DIR:-/tmp/mtpspec-deps}"
E2E_EXPERTS="${E2E_EXPERTS:-32}"
E2E_CONTEXT="${E2E_CONTEXT:-4096}"
mkdir -p "$OUT" "$BUILD_DIR"
LOG="$OUT/device_check.log"
exec > >(tee "$LOG") 2>&1

STAGE="start"
START=$(date +%s)
trap 'echo; echo "device_check: FAILED in stage \"$STAGE\" after $(( $(date +%s) - START )) s (log: $LOG)"' ERR
stage() {
  STAGE="$1"
  echo
  echo "=== [$(( $(date +%s) - START )) s] $STAGE"
}
die() {
  echo "device_check: FAILED in stage \"$STAGE\": $*" >&2
  exit 1
}

stage "environment"
uname -a
[ -r /etc/os-release ] && grep PRETTY_NAME /etc/os-release || true
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || die "nvcc not found (PATH or /usr/local/cuda/bin)"
"$NVCC" --version | tail -2
for tool in cmake g++ python3; do
  command -v "$tool" >/dev/null || die "$tool not found on this machine"
done
GENERATOR="Ninja"
command -v ninja >/dev/null || GENERATOR="Unix Makefiles"
cmake --version | head -1

# The C++ libraries: use the system's when complete, else the carried Debian packages.
CMAKE_DEP_ARGS=()
have_system_deps() {
  [ -f /usr/include/absl/status/status.h ] && [ -d /usr/include/eigen3 ] && [ -f /usr/include/nlohmann/json.hpp ] &&
    [ -f /usr/include/gtest/gtest.h ] && [ -f /usr/include/benchmark/benchmark.h ] && [ -f /usr/include/pcre2.h ] &&
    command -v pkg-config >/dev/null
}
if [ "${FORCE_DEVDEPS:-0}" != "1" ] && have_system_deps; then
  echo "C++ dependencies: system packages"
else
  shopt -s nullglob
  debs=(.devdeps/*.deb)
  shopt -u nullglob
  if [ ${#debs[@]} -eq 0 ]; then
    die "the C++ dependencies (absl, Eigen, nlohmann-json, GTest, benchmark, PCRE2, pkg-config) are not \
installed and no .devdeps/*.deb were carried: run 'scripts/device_check.sh --fetch-deps' on a networked \
machine and copy the repository with its .devdeps/ folder here"
  fi
  echo "C++ dependencies: unpacking ${#debs[@]} carried packages into $DEPS_DIR"
  mkdir -p "$DEPS_DIR"
  # A .deb is an ar archive holding data.tar.*; unpack that (python3 only, no dpkg needed).
  python3 - "$DEPS_DIR" "${debs[@]}" <<'PY'
import io, sys, tarfile
dest = sys.argv[1]
for path in sys.argv[2:]:
    blob = open(path, "rb").read()
    assert blob[:8] == b"!<arch>\n", path + ": not an ar archive"
    pos, found = 8, False
    while pos + 60 <= len(blob):
        name = blob[pos:pos + 16].decode().strip().rstrip("/")
        size = int(blob[pos + 48:pos + 58].decode().strip())
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(blob[pos + 60:pos + 60 + size])) as tar:
                kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
                tar.extractall(dest, **kwargs)
            found = True
        pos += 60 + size + (size & 1)
    assert found, path + ": no data.tar member"
PY
  # pkgconf from the packages, with its library path and the unpacked prefix as sysroot; only this
  # wrapper sees LD_LIBRARY_PATH, so the machine's own programs keep their libraries.
  cat > "$DEPS_DIR/pkg-config" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$DEPS_DIR/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG_LIBDIR="$DEPS_DIR/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS_DIR/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$DEPS_DIR"
exec "$DEPS_DIR/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$DEPS_DIR/pkg-config"
  "$DEPS_DIR/pkg-config" --cflags --libs libpcre2-8 || die "the unpacked pkgconf cannot find libpcre2-8"
  CMAKE_DEP_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS_DIR/usr" -DPKG_CONFIG_EXECUTABLE="$DEPS_DIR/pkg-config")
fi

stage "configure"
cmake -S "$ROOT" -B "$BUILD_DIR" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release -DMTPSPEC_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DMTPSPEC_BUILD_TESTS=ON -DMTPSPEC_BUILD_BENCH=ON "${CMAKE_DEP_ARGS[@]}" \
  > "$BUILD_DIR/configure.log" 2>&1 || { tail -40 "$BUILD_DIR/configure.log"; die "cmake configure failed"; }
grep "mtpspec: CUDA backend" "$BUILD_DIR/configure.log"
grep -E "^absl_DIR|^GTest_DIR|^benchmark_DIR|^Eigen3_DIR|^nlohmann_json_DIR|^PCRE2_LINK_LIBRARIES" \
  "$BUILD_DIR/CMakeCache.txt" || true
if [ "${STOP_AFTER:-}" = "configure" ]; then
  echo "device_check: stopped after configure (STOP_AFTER=configure)"
  exit 0
fi

stage "build"
# Only what the check runs: every cuda_* test, the GPU benchmarks and the CLI (its --device cuda).
# (`--target help` lists "name: phony" with Ninja and "... name" with Makefiles.)
TARGETS=$(cmake --build "$BUILD_DIR" --target help | sed -n -e 's/^\(cuda_[A-Za-z0-9_]*\):.*/\1/p' \
          -e 's/^\.\.\. \(cuda_[A-Za-z0-9_]*\).*/\1/p' | sort -u | tr '\n' ' ')
[ -n "$TARGETS" ] || die "no cuda_* targets found in $BUILD_DIR"
echo "targets: $TARGETS mtpspec"
cmake --build "$BUILD_DIR" -j"$JOBS" --target $TARGETS mtpspec > "$BUILD_DIR/build.log" 2>&1 ||
  { grep -E "error|Error" "$BUILD_DIR/build.log" | head -40; die "build failed (full log: $BUILD_DIR/build.log)"; }

stage "cuda tests"
set +e
ctest --test-dir "$BUILD_DIR" -L cuda -j4 --timeout 600 --output-on-failure \
  --output-junit "$BUILD_DIR/ctest_cuda.xml" > "$BUILD_DIR/ctest.log" 2>&1
CTEST_RC=$?
set -e
grep -E "Test +#|tests passed|Skipped|Failed|Not Run" "$BUILD_DIR/ctest.log" | tail -200
TESTS_TOTAL=$(grep -cE "Test +#[0-9]+:" "$BUILD_DIR/ctest.log" || true)
TESTS_PASSED=$(grep -E "Test +#[0-9]+:" "$BUILD_DIR/ctest.log" | grep -c " Passed " || true)
TESTS_SKIPPED=$(grep -E "Test +#[0-9]+:" "$BUILD_DIR/ctest.log" | grep -c "Skipped" || true)
TESTS_FAILED=$(( TESTS_TOTAL - TESTS_PASSED - TESTS_SKIPPED ))
echo "cuda tests: $TESTS_PASSED passed, $TESTS_FAILED failed, $TESTS_SKIPPED skipped of $TESTS_TOTAL (ctest rc $CTEST_RC)"
if [ "$TESTS_TOTAL" -eq 0 ] || [ "$TESTS_FAILED" -ne 0 ] || [ "$TESTS_SKIPPED" -ne 0 ] || [ "$CTEST_RC" -ne 0 ]; then
  grep -B2 -A30 -E "\*\*\*Failed|Skipped|SKIPPED|FAILED" "$BUILD_DIR/ctest.log" | head -150 || true
  die "cuda tests: $TESTS_FAILED failed and $TESTS_SKIPPED skipped (a skip is a failure on the GPU machine)"
fi

write_summary() {
  python3 - "$OUT" "$TESTS_PASSED" "$TESTS_FAILED" "$TESTS_SKIPPED" "$(( $(date +%s) - START ))" <<'PY'
import json, os, sys
out, passed, failed, skipped, seconds = sys.argv[1], *map(int, sys.argv[2:])
summary = {"tests": {"passed": passed, "failed": failed, "skipped": skipped}, "seconds": seconds}
def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
att = load("cuda_attention_bench.json")
if att:  # gathered attention: L = 1 core GB/s over the copy bandwidth (>= 0.7), L = 4 over L = 1 time (<= 1.3)
    summary["attention"] = {"%s N=%d L=%d" % (r["storage"], r["context"], r["rows"]):
                            "vs_copy %.2f, L/L1 %.2f" % (r["core_ratio_to_copy"], r["core_vs_rows1"])
                            for r in att["results"] if r["rows"] in (1, 4)}
idx = load("cuda_indexer_vs_torch.json")
if idx:  # indexer top-k: torch.topk / our select >= 3
    summary["indexer_vs_torch"] = {"N=%d L=%d" % (r["keys"], r["rows"]):
                                   "select x%.2f, total x%.2f" % (r["torch_over_ours_select"],
                                                                  r["torch_over_ours_total"])
                                   for r in idx["results"]}
for key, name in (("e2e", "cuda_e2e_bench.json"), ("e2e_fp8", "cuda_e2e_bench_fp8.json")):
    e2e = load(name)
    if e2e:  # truncated model end to end (bf16 weights; FP8 weights kept FP8)
        summary[key] = [{k: r.get(k) for k in ("label", "tokens_per_second", "speedup", "predicted_speedup",
                                              "measured_over_predicted")} for r in e2e["runs"]]
        summary[key + "_weight_gb"] = e2e["model"]["weight_bytes_on_gpu"] / 1e9
layer = load("cuda_layer_vs_torch.json")
if layer:  # one layer against PyTorch
    summary["layer_vs_torch"] = layer.get("summary", layer)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
print("\n=== device_check summary (%d s)" % seconds)
print("cuda tests      %d passed, %d failed, %d skipped" % (passed, failed, skipped))
for name, value in summary.items():
    if name in ("tests", "seconds"):
        continue
    if name.endswith("_weight_gb"):
        print("%s %.2f GB of weights on the GPU" % (name[:-len("_weight_gb")], value))
    elif name.startswith("e2e"):
        print(name + " (tok/s, speedup, predicted, measured/predicted):")
        for r in value:
            print("  %-6s %9.1f %6.2f %6s %6s" % (r["label"], r["tokens_per_second"] or 0, r["speedup"] or 0,
                  "%.2f" % r["predicted_speedup"] if r.get("predicted_speedup") else "-",
                  "%.2f" % r["measured_over_predicted"] if r.get("measured_over_predicted") else "-"))
    elif isinstance(value, dict):
        print(name + ":")
        for key, item in value.items():
            print("  %-28s %s" % (key, item))
PY
}

if [ "${SKIP_BENCH:-0}" = "1" ]; then
  STAGE="summary"
  write_summary
  exit 0
fi

export OUT
stage "bench: gathered sparse MLA"
"$BUILD_DIR/bench/cuda_attention_bench" --contexts 8192,131072 --rows 1,4,8 --reps 20 \
  --json "$OUT/cuda_attention_bench.json"

stage "bench: indexer + top-k vs torch.topk"
"$BUILD_DIR/bench/cuda_indexer_bench" --keys 8192,131072 --rows 1,4 --reps 20 --json "$OUT/cuda_indexer_bench.json"
python3 bench/cuda_indexer_vs_torch.py

stage "bench: truncated GLM-5.2, plain vs MTP k=1..3"
df -h "$BUILD_DIR" | tail -1
"$BUILD_DIR/bench/cuda_e2e_bench" --model-dir "$BUILD_DIR/e2e_model" --experts "$E2E_EXPERTS" \
  --context "$E2E_CONTEXT" --new-tokens 64 --reps 2 --json "$OUT/cuda_e2e_bench.json"

stage "bench: the same with FP8 weights kept FP8 on the GPU"
"$BUILD_DIR/bench/cuda_e2e_bench" --model-dir "$BUILD_DIR/e2e_model" --experts "$E2E_EXPERTS" \
  --context "$E2E_CONTEXT" --new-tokens 64 --reps 2 --device-weights fp8 --json "$OUT/cuda_e2e_bench_fp8.json"

stage "bench: one decoder layer vs PyTorch"
python3 bench/cuda_layer_vs_torch.py --model-dir "$BUILD_DIR/e2e_model" \
  --tool "$BUILD_DIR/bench/cuda_layer_dump" --json "$OUT/cuda_layer_vs_torch.json"

STAGE="summary"
write_summary
