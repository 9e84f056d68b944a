#!/usr/bin/env bash
# The delegation benchmark (BENCHMARKS.md, "Delegation in the cluster"): one delegation hop
# against a plain Task, in one run on the e2e control plane. Release builds, as users run them.
# Flags go to the benchmark, e.g. `scripts/bench-delegation.sh --tasks 100`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
ARI_CONTROL_PLANE_BIN="$(scripts/control-plane.sh | tail -n 1)"
export ARI_CONTROL_PLANE_BIN
scripts/build-agents.sh
cargo build --locked --release --bins
exec target/release/ari-bench-delegation "$@"
