#!/usr/bin/env bash
# Runs one cluster benchmark, `e2e/src/bin/ari-bench-NAME`, on the e2e control plane: set-up, the
# control plane (Go modules, cached), the guest agents, the binaries, then the benchmark with
# the remaining flags. Release builds unless ARI_BENCH_PROFILE=debug. Not part of the test suite.
# Usage: scripts/bench.sh NAME [flags...]   (e.g. scripts/bench.sh a2a --streams 1000)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
name="${1:?usage: scripts/bench.sh NAME [flags...]}"
shift
profile="${ARI_BENCH_PROFILE:-release}"
scripts/setup.sh
ARI_CONTROL_PLANE_BIN="$(scripts/control-plane.sh | tail -n 1)"
export ARI_CONTROL_PLANE_BIN
scripts/build-agents.sh
if [ "$profile" = release ]; then
  cargo build --locked --release --bins
else
  cargo build --locked --bins
fi
exec "${CARGO_TARGET_DIR:-target}/$profile/ari-bench-$name" "$@"
