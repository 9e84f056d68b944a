#!/usr/bin/env bash
# Builds the conformance agents written in other languages than Rust into Wasm components:
#   python      componentize-py (PyPI)                         -> <target>/agents/python-conformance.wasm
#                                                                 <target>/agents/python-assistant.wasm
#   js          componentize-js (npm, SpiderMonkey)            -> <target>/agents/js-conformance.wasm
#   c           Debian clang + wasi-libc, wit-bindgen c,
#               wasm-tools component embed/new (crates.io)     -> <target>/agents/c-conformance.wasm
# (the Rust one is built by scripts/build-agents.sh), and Python's tool-using example agent
# (examples/python/assistant, the twin of examples/agents/assistant). Usage:
# scripts/build-guests.sh [python] [js] [c]
#
# Toolchains are pinned below and installed on first use under ${ARI_TOOLCHAINS:-~/.cache/ari/toolchains}
# (a Python venv, an npm prefix, a `cargo install --root`); clang comes from Debian (apt-get, as
# root). The first run is slow (compiling wasm-tools and wit-bindgen-cli takes several minutes on
# 2 cores); later runs reuse the toolchains and only rebuild the components. A toolchain that
# cannot be installed is skipped with its reason, and the script exits non-zero only if a
# toolchain that is installed fails to build its agent.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${ARI_TARGET_DIR:-$repo/target}"
out="$root/agents"
work="$root/guests"
tc="${ARI_TOOLCHAINS:-$HOME/.cache/ari/toolchains}"

COMPONENTIZE_PY_VERSION=0.25.1
COMPONENTIZE_JS_VERSION=0.23.0
WASM_TOOLS_VERSION=1.263.0
WIT_BINDGEN_VERSION=0.63.0

say() { echo "build-guests: $*"; }
skipped=()
failed=()
built=()

# A component's preamble: magic "\0asm", version 0x0d 0x00, layer 0x01 0x00.
is_component() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "0061736d0d000100" ]; }

install_componentize_py() {
  local venv="$tc/venv"
  if [ "$("$venv/bin/componentize-py" --version 2>/dev/null)" = "componentize-py $COMPONENTIZE_PY_VERSION" ]; then
    return 0
  fi
  say "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv (first run only)"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "componentize-py==$COMPONENTIZE_PY_VERSION"
}

install_componentize_js() {
  local prefix="$tc/npm"
  local pkg="$prefix/node_modules/@bytecodealliance/componentize-js/package.json"
  if [ -f "$pkg" ] && grep -q "\"version\": \"$COMPONENTIZE_JS_VERSION\"" "$pkg"; then
    return 0
  fi
  say "installing @bytecodealliance/componentize-js $COMPONENTIZE_JS_VERSION into $prefix (first run only)"
  mkdir -p "$prefix" &&
    npm install --silent --no-fund --no-audit --prefix "$prefix" \
      "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION"
}

install_cargo_tool() { # crate version binary
  local bin="$tc/cargo/bin/$3"
  if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q " $2"; then
    return 0
  fi
  say "compiling $1 $2 into $tc/cargo (first run only: several minutes)"
  cargo install --quiet --locked --root "$tc/cargo" "$1@$2"
}

install_clang() {
  if command -v clang >/dev/null && [ -f /usr/lib/wasm32-wasi/libc.a ] &&
    ls /usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "clang, lld, wasi-libc or libclang-rt-dev-wasm32 is missing and this is not root: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32" >&2
    return 1
  fi
  say "installing Debian's clang, lld, wasi-libc and libclang-rt-dev-wasm32 (first run only)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    clang lld wasi-libc libclang-rt-dev-wasm32 >/dev/null
}

build_python() {
  install_componentize_py || return 2
  local agent
  for agent in conformance assistant; do
    "$tc/venv/bin/componentize-py" -d "$repo/wit" -w ari-agent componentize \
      -p "$repo/sdk/python" -p "$repo/examples/python/$agent" app \
      -o "$work/python-$agent.wasm" >/dev/null || return 1
  done
}

# The components a language's build makes (the first is its conformance agent).
components_of() {
  case "$1" in
    python) echo python-conformance python-assistant ;;
    *) echo "$1-conformance" ;;
  esac
}

build_js() {
  install_componentize_js || return 2
  # No `http` and `fetch-event`: they import wasi:http, which ari does not provide (agents use the
  # host's http-request, which the allow-list governs).
  # From the repository root: componentize-js reads the app's imports (../../../sdk/js/ari.js)
  # through a view of the current directory only.
  (cd "$repo" && "$tc/npm/node_modules/.bin/componentize-js" examples/js/conformance/app.js \
    -w wit -n ari-agent -d http fetch-event -o "$work/js-conformance.wasm" >/dev/null)
}

build_c() {
  install_clang || return 2
  install_cargo_tool wasm-tools "$WASM_TOOLS_VERSION" wasm-tools || return 2
  install_cargo_tool wit-bindgen-cli "$WIT_BINDGEN_VERSION" wit-bindgen || return 2
  local src="$repo/examples/c/conformance" gen="$work/c-bindings"
  rm -rf "$gen" && mkdir -p "$gen"
  "$tc/cargo/bin/wit-bindgen" c "$repo/wit" --world ari-agent --out-dir "$gen" >/dev/null
  # A reactor (no main) against wasi-libc; the agent calls nothing that imports WASI, so the core
  # module imports only ainur:ari/host and becomes a component without the preview1 adapter.
  clang --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Werror -Wno-unused-function \
    -I "$gen" -I "$repo/sdk/c" -o "$work/c-conformance.core.wasm" \
    "$src/conformance.c" "$repo/sdk/c/ari_defaults.c" "$repo/sdk/c/ari_delegation.c" "$repo/sdk/c/ari_model.c" "$repo/sdk/c/ari_tools.c" \
    "$gen/ari_agent.c" "$gen/ari_agent_component_type.o"
  "$tc/cargo/bin/wasm-tools" component embed "$repo/wit" --world ari-agent \
    "$work/c-conformance.core.wasm" -o "$work/c-conformance.embedded.wasm"
  "$tc/cargo/bin/wasm-tools" component new "$work/c-conformance.embedded.wasm" \
    -o "$work/c-conformance.wasm"
}

langs=("$@")
[ "${#langs[@]}" -eq 0 ] && langs=(python js c)
mkdir -p "$out" "$work" "$tc"
for lang in "${langs[@]}"; do
  case "$lang" in
    python | js | c) ;;
    *) echo "build-guests: unknown language $lang (python, js, c)" >&2; exit 2 ;;
  esac
  say "building the $lang agents: $(components_of "$lang")"
  status=0
  "build_$lang" || status=$?
  if [ "$status" -eq 2 ]; then
    say "SKIPPED $lang: its toolchain could not be installed (see above)"
    skipped+=("$lang")
    continue
  fi
  ok=1
  for name in $(components_of "$lang"); do
    wasm="$work/$name.wasm"
    if [ "$status" -ne 0 ] || [ ! -f "$wasm" ] || ! is_component "$wasm"; then
      ok=0
    fi
  done
  for name in $(components_of "$lang"); do
    wasm="$work/$name.wasm"
    if [ "$ok" -eq 0 ]; then
      rm -f "$out/$name.wasm" # never test a stale component
    else
      cmp -s "$wasm" "$out/$name.wasm" 2>/dev/null || cp "$wasm" "$out/$name.wasm"
    fi
  done
  if [ "$ok" -eq 0 ]; then
    echo "build-guests: $lang: the build failed" >&2
    failed+=("$lang")
  else
    built+=("$lang")
  fi
done
say "built: ${built[*]:-none}; skipped: ${skipped[*]:-none}; failed: ${failed[*]:-none} (components in $out)"
[ "${#failed[@]}" -eq 0 ]
