#!/usr/bin/env bash
# The cluster benchmark (BENCHMARKS.md): boots the e2e control plane, installs the operator, and
# measures Task latency/throughput against a Job-per-task baseline, then the scale run.
# Release builds, as users run them. Not part of the test suite. Flags go to the benchmark
# (`scripts/bench-cluster.sh --help`); e.g. `--tasks 500 --scale-agents 0` for a quick run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
ARI_CONTROL_PLANE_BIN="$(scripts/control-plane.sh | tail -n 1)"
export ARI_CONTROL_PLANE_BIN
scripts/build-agents.sh
cargo build --locked --release --bins
exec target/release/ari-bench-cluster "$@"
