#!/usr/bin/env bash
# A local ari cluster for people: a real control plane built from Go modules, a node agent that
# runs pods as host processes, ari's CRDs and the operator. Prints the KUBECONFIG to use and runs
# until Ctrl-C, then removes everything.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
scripts/build-agents.sh >/dev/null
cargo build --locked -q --bins
ARI_REPO="$repo" exec target/debug/ari-cluster "$@"
