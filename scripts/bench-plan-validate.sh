#!/usr/bin/env bash
# Peak memory and time of `ari plan validate` on the worst proposals a planner can output (at
# most 1 MiB): the figures in BENCHMARKS.md ("Plans"). Needs GNU time (/usr/bin/time -v).
# Usage: scripts/bench-plan-validate.sh [path/to/ari]   (default: $CARGO_TARGET_DIR/debug/ari)
set -euo pipefail
ari=${1:-${CARGO_TARGET_DIR:-target}/debug/ari}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/agents.yaml" <<'YAML'
apiVersion: ari.dev/v1alpha1
kind: Agent
metadata: {name: echo}
spec: {module: {configMap: {name: m, key: k}}}
YAML
# 1. The issue's case: a chain of 12,000 steps, each also waiting for s0 (a ring at every depth).
awk 'BEGIN { printf "{\"steps\":["; for (i = 0; i < 12000; i++) {
  if (i) printf ","; printf "{\"name\":\"s%d\",\"agentRef\":{\"name\":\"echo\"},\"dependsOn\":[", i;
  sep = ""; if (i > 0) { printf "\"s0\""; sep = "," } if (i < 11999) printf "%s\"s%d\"", sep, i + 1;
  printf "]}" } printf "]}" }' >"$dir/chain-12000.json"
# 2. The same shape within the step cap: 128 steps with 63-byte names.
awk 'BEGIN { pad = sprintf("%058d", 0); printf "{\"steps\":["; for (i = 0; i < 128; i++) {
  if (i) printf ","; printf "{\"name\":\"s%04d%s\",\"agentRef\":{\"name\":\"echo\"},\"dependsOn\":[", i, pad;
  sep = ""; if (i > 0) { printf "\"s%04d%s\"", 0, pad; sep = "," }
  if (i < 127) printf "%s\"s%04d%s\"", sep, i + 1, pad; printf "]}" } printf "]}" }' >"$dir/ring-128.json"
# 3. One step waiting for ~200,000 one-letter steps (1 MiB).
awk 'BEGIN { printf "{\"steps\":[{\"name\":\"a\",\"agentRef\":{\"name\":\"echo\"},\"dependsOn\":[";
  for (i = 0; i < 200000; i++) { if (i) printf ","; printf "\"x\"" } printf "]}]}" }' >"$dir/deps-200000.json"
# 4. 28,000 minimal steps (1 MiB).
awk 'BEGIN { printf "{\"steps\":["; for (i = 0; i < 28000; i++) { if (i) printf ",";
  printf "{\"name\":\"a\",\"agentRef\":{\"name\":\"e\"}}" } printf "]}" }' >"$dir/steps-28000.json"
# 5. One step named with 1,000,000 bytes.
awk 'BEGIN { printf "{\"steps\":[{\"name\":\""; for (i = 0; i < 100000; i++) printf "nnnnnnnnnn";
  printf "\",\"agentRef\":{\"name\":\"echo\"}}]}" }' >"$dir/name-1mb.json"
printf '%-18s %10s %10s %12s %s\n' input bytes seconds "peak RSS" verdict
for f in "$dir"/*.json; do
  out=$( { /usr/bin/time -v "$ari" plan validate --agents "$dir/agents.yaml" "$f" >"$dir/stdout" ; } 2>&1 || true)
  rss=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' <<<"$out")
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' <<<"$out")
  printf '%-18s %10s %10s %9s KiB %s\n' "$(basename "$f" .json)" "$(stat -c %s "$f")" "$secs" "$rss" \
    "$(head -c 100 "$dir/stdout" | head -n 1)"
done
