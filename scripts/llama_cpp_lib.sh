# What the side-by-side scripts share (scripts/compare_llama_cpp.sh, scripts/compare_glm47_flash.sh),
# sourced from the repository root; llama_cpp_tree sets $llama, a llama.cpp source tree (not a
# dependency), which the others use.

# llama_cpp_tree USAGE DIR: sets $llama to DIR, made absolute, when DIR is a llama.cpp source tree (it
# holds convert_hf_to_gguf.py); otherwise prints USAGE and exits 2.
llama_cpp_tree() {
  if [ -z "$2" ] || [ ! -f "$2/convert_hf_to_gguf.py" ]; then
    echo "$1  (a llama.cpp source tree)" >&2
    exit 2
  fi
  llama=$(cd "$2" && pwd)
}

# llama_cpp_build TARGET...: builds llama.cpp's programs in $llama/build-mtpspec (CPU only, native).
llama_cpp_build() {
  cmake -S "$llama" -B "$llama/build-mtpspec" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$llama/build-mtpspec" -j"$(nproc)" --target "$@"
}

# llama_cpp_convert MODEL_DIR OUT.gguf OUTTYPE: llama.cpp's own converter (through
# scripts/llama_cpp_convert.py) in an environment of its own, build/llama-cpp-venv, made on first
# need; nothing to do when OUT.gguf exists.
llama_cpp_convert() {
  [ -f "$2" ] && return 0
  local venv=build/llama-cpp-venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q torch numpy sentencepiece pyyaml transformers
  mkdir -p "$(dirname "$2")"
  "$venv/bin/python" scripts/llama_cpp_convert.py "$llama" "$1" "$2" --outtype "$3" \
    --tokenizer models/glm-tiny-mtp/tokenizer.json
}
