#!/usr/bin/env bash
# Puts an example agent's component into the ConfigMap its Agent in examples/manifests names
# (`<agent>-module`, key `module.wasm`, binaryData). Usage: make-agent-configmap.sh AGENT [NAMESPACE]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
agent="${1:?usage: make-agent-configmap.sh AGENT [NAMESPACE]}"
ns="${2:-}"
wasm="${ARI_TARGET_DIR:-$repo/target}/agents/$agent.wasm"
[ -f "$wasm" ] || { echo "no $wasm: run scripts/build-agents.sh first" >&2; exit 1; }
ns_args=()
[ -n "$ns" ] && ns_args=(-n "$ns")
kubectl create configmap "$agent-module" "${ns_args[@]}" --from-file="module.wasm=$wasm" \
  --dry-run=client -o yaml | kubectl apply "${ns_args[@]}" -f -
