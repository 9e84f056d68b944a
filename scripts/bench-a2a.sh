#!/usr/bin/env bash
# The A2A gateway benchmark (BENCHMARKS.md, "A2A gateway"): SendMessage round trip and sustained
# rate against plain Task creates, and the gateway's memory with open streams, in one run on the
# e2e control plane. Release builds, as users run them.
# Flags go to the benchmark, e.g. `scripts/bench-a2a.sh --streams 1000`.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh" a2a "$@"
