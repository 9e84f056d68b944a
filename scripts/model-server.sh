#!/usr/bin/env bash
# Installs a real OpenAI-compatible model server for the model tests: llama.cpp's, from
# llama-cpp-python (PyPI, pinned; its sdist builds llama.cpp here), into a virtualenv cached
# outside the repository, and generates the tiny model it serves (scripts/tiny-gguf.py, with
# the gguf package: no weights can be downloaded). Prints the install directory on its last
# line: it holds bin/python (run `bin/python -m llama_cpp.server`) and models/tiny.gguf.
#
# Usage: scripts/model-server.sh            # installs if needed; prints the directory
# Env:   ARI_CACHE (default ~/.cache/ari)
# Tests: ARI_MODEL_SERVER="$(scripts/model-server.sh | tail -n 1)" cargo test -p ari-llm
set -euo pipefail

version="0.3.36"
gguf_version="0.19.0"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${ARI_CACHE:-$HOME/.cache/ari}"
dir="$cache/model-server-$version"

log() { printf 'model-server: %s\n' "$*" >&2; }

command -v python3 >/dev/null 2>&1 || { log "python3 is required"; exit 1; }
if [ ! -f "$dir/.complete" ]; then
  for tool in cmake cc c++; do
    command -v "$tool" >/dev/null 2>&1 || { log "$tool is required to build llama.cpp"; exit 1; }
  done
  log "building llama-cpp-python $version (llama.cpp) from PyPI into $dir"
  log "first run only: about 25 minutes on 2 busy cores (build log: $dir.log)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
  start=$(date +%s)
  # Every core; only the library the server loads (no llava/mtmd, tests, examples or tools).
  if ! CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" \
    "$dir/bin/pip" install --disable-pip-version-check -v \
      "llama-cpp-python[server]==$version" "gguf==$gguf_version" >"$dir.log" 2>&1; then
    tail -n 40 "$dir.log" >&2
    log "the build failed (whole log: $dir.log)"
    exit 1
  fi
  log "built in $(( $(date +%s) - start )) s"
  "$dir/bin/python" -c "import llama_cpp, llama_cpp.server.app, gguf"
  touch "$dir/.complete"
fi

# The model is regenerated whenever its generator changes (same generator, same bytes).
generator="$repo/scripts/tiny-gguf.py"
stamp="$(sha256sum "$generator" | cut -d' ' -f1)"
if [ "$(cat "$dir/models/.generator" 2>/dev/null)" != "$stamp" ]; then
  log "generating the tiny model"
  mkdir -p "$dir/models"
  "$dir/bin/python" "$generator" "$dir/models/tiny.gguf.tmp"
  mv "$dir/models/tiny.gguf.tmp" "$dir/models/tiny.gguf"
  echo "$stamp" >"$dir/models/.generator"
fi
echo "$dir"
