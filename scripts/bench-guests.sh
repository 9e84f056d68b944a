#!/usr/bin/env bash
# Guests by language: for each conformance agent (Rust, Python, JavaScript, C) and one and the
# same input, prints one Markdown table row of component size, cold compile, cached load,
# per-task time, fuel and peak memory, then each figure as a ratio to Rust's from the same run
# (on a shared machine the ratios hold better than the absolute times).
#
#   scripts/bench-guests.sh [INPUT]          (default input: `hash sha256 abc`)
#
# cold compile = wall time of `ari inspect` with an empty artifact cache (compile + validate),
#                one run (a compile is long enough not to need more);
# cached load  = the same with the artifact now cached (process start + load, no compile),
#                median of ARI_BENCH_RUNS (default 5);
# per task     = the report's resourcesUsed.wallMillis of `ari run … --json` with a warm cache,
#                median of ARI_BENCH_RUNS;
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

runs="${ARI_BENCH_RUNS:-5}"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

ms() { # wall milliseconds of a command, its output discarded
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1 || true
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
echo "ari: $ari; input: \`$input\`; $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(load) at the start"
echo
echo "| language | component | cold compile | cached load | per task | fuel | peak memory |"
echo "|---|---:|---:|---:|---:|---:|---:|"
declare -A row
for pair in rust:conformance python:python-conformance javascript:js-conformance c:c-conformance; do
  lang="${pair%%:*}"
  wasm="$root/agents/${pair#*:}.wasm"
  if [ ! -f "$wasm" ]; then
    echo "| $lang | not built ($wasm) | | | | | |"
    continue
  fi
  dir="$cache/$lang"
  size=$(stat -L -c %s "$wasm")
  cold=$(ms "$ari" --cache-dir "$dir" inspect "$wasm")
  warm=$(for _ in $(seq "$runs"); do ms "$ari" --cache-dir "$dir" inspect "$wasm"; done | median)
  walls=()
  for _ in $(seq "$runs"); do
    report="$("$ari" --cache-dir "$dir" run "$wasm" --input "$input" --json || true)"
    read -r wall fuel mem < <(printf '%s' "$report" | python3 -c \
      'import json,sys; u=json.load(sys.stdin)["resourcesUsed"]; print(u["wallMillis"], u["fuel"], u["memoryBytes"])')
    walls+=("$wall")
  done
  wall=$(printf '%s\n' "${walls[@]}" | median)
  row[$lang]="$size $cold $warm $wall $fuel $mem"
  printf '| %s | %s KiB | %s ms | %s ms | %s ms | %s | %s MiB |\n' "$lang" "$((size / 1024))" \
    "$cold" "$warm" "$wall" "$fuel" "$(python3 -c "print(round($mem / 1048576, 1))")"
done
echo
echo "Load average $(load) at the end. Ratios to Rust, same run (per task: ms resolution, a 0 ms"
echo "figure counts as 1 ms):"
echo
echo "| language | component | cold compile | cached load | per task | fuel | peak memory |"
echo "|---|---:|---:|---:|---:|---:|---:|"
if [ -n "${row[rust]:-}" ]; then
  for lang in python javascript c; do
    [ -n "${row[$lang]:-}" ] || continue
    python3 - "${row[rust]}" "${row[$lang]}" "$lang" <<'PY'
import sys
base = [max(int(x), 1) for x in sys.argv[1].split()]
mine = [max(int(x), 1) for x in sys.argv[2].split()]
r = [m / b for m, b in zip(mine, base)]
fmt = lambda x: f"{x:,.0f}×" if x >= 10 else f"{x:.1f}×"
print(f"| {sys.argv[3]} | " + " | ".join(fmt(x) for x in r) + " |")
PY
  done
fi
