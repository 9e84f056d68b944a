#!/usr/bin/env bash
# The Plan benchmark (BENCHMARKS.md, "Plans"): boots the e2e control plane with the operator and
# measures a 10-step chain and a 50-wide fan-out as Plans against the same work as single
# Tasks, in one run. Debug builds, as the e2e suite runs them (the pods run target/debug when it
# exists). Not part of the test suite. Flags go to the benchmark (`--chain`, `--fan`, `--runs`).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
ARI_CONTROL_PLANE_BIN="$(scripts/control-plane.sh | tail -n 1)"
export ARI_CONTROL_PLANE_BIN
scripts/build-agents.sh
cargo build --locked --bins
exec "${CARGO_TARGET_DIR:-target}/debug/ari-bench-plans" "$@"
