#!/usr/bin/env bash
# The A2A gateway benchmark (BENCHMARKS.md, "A2A gateway"): SendMessage round trip and sustained
# rate against plain Task creates, and the gateway's memory with open streams, in one run on the
# e2e control plane. Release builds, as users run them.
# Flags go to the benchmark, e.g. `scripts/bench-a2a.sh --streams 1000`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
ARI_CONTROL_PLANE_BIN="$(scripts/control-plane.sh | tail -n 1)"
export ARI_CONTROL_PLANE_BIN
scripts/build-agents.sh
cargo build --locked --release --bins
exec target/release/ari-bench-a2a "$@"
