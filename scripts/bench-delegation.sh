#!/usr/bin/env bash
# The delegation benchmark (BENCHMARKS.md, "Delegation in the cluster"): one delegation hop
# against a plain Task, in one run on the e2e control plane. Release builds, as users run them.
# Flags go to the benchmark, e.g. `scripts/bench-delegation.sh --tasks 100`.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh" delegation "$@"
