#!/usr/bin/env bash
# Guests by language: for each conformance agent (Rust, Python, JavaScript, C) and one and the
# same input, prints one Markdown table row of component size, cold compile, cached load,
# per-task time, fuel and peak memory, from one run each (no repetition: ratios, not statistics).
#
#   scripts/bench-guests.sh [INPUT]          (default input: `hash sha256 abc`)
#
# cold compile = wall time of `ari inspect` with an empty artifact cache (compile + validate);
# cached load  = the same with the artifact now cached (process start + load, no compile);
# per task     = the report's resourcesUsed.wallMillis of `ari run … --json` with a warm cache;
# fuel, memory = the report's resourcesUsed.fuel and .memoryBytes (peak) for that task.
# The ari binary is ARI_BIN, else target/release/ari, else target/debug/ari (the table says which).
# Build the components first: scripts/build-agents.sh && scripts/build-guests.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${ARI_TARGET_DIR:-$repo/target}"
input="${1:-hash sha256 abc}"
ari="${ARI_BIN:-}"
if [ -z "$ari" ]; then
  if [ -x "$root/release/ari" ]; then ari="$root/release/ari"; else ari="$root/debug/ari"; fi
fi
[ -x "$ari" ] || { echo "bench-guests: no ari binary at $ari (cargo build --release -p ari-executor)" >&2; exit 1; }

ms() { # wall milliseconds of a command, its output discarded
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1 || true
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
echo "ari: $ari; input: \`$input\`; $(date -u +%Y-%m-%d), $(nproc) cores"
echo
echo "| language | component | cold compile | cached load | per task | fuel | peak memory |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for pair in rust:conformance python:python-conformance javascript:js-conformance c:c-conformance; do
  lang="${pair%%:*}"
  wasm="$root/agents/${pair#*:}.wasm"
  if [ ! -f "$wasm" ]; then
    echo "| $lang | not built ($wasm) | | | | | |"
    continue
  fi
  dir="$cache/$lang"
  size=$(stat -c %s "$wasm")
  cold=$(ms "$ari" --cache-dir "$dir" inspect "$wasm")
  warm=$(ms "$ari" --cache-dir "$dir" inspect "$wasm")
  report="$("$ari" --cache-dir "$dir" run "$wasm" --input "$input" --json || true)"
  read -r wall fuel mem < <(printf '%s' "$report" | python3 -c \
    'import json,sys; u=json.load(sys.stdin)["resourcesUsed"]; print(u["wallMillis"], u["fuel"], u["memoryBytes"])')
  printf '| %s | %s KiB | %s ms | %s ms | %s ms | %s | %s MiB |\n' "$lang" "$((size / 1024))" \
    "$cold" "$warm" "$wall" "$fuel" "$(python3 -c "print(round($mem / 1048576, 1))")"
done
