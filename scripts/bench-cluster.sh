#!/usr/bin/env bash
# The cluster benchmark (BENCHMARKS.md): boots the e2e control plane, installs the operator, and
# measures Task latency/throughput against a Job-per-task baseline, then the scale run.
# Release builds, as users run them. Not part of the test suite. Flags go to the benchmark
# (`scripts/bench-cluster.sh --help`); e.g. `--tasks 500 --scale-agents 0` for a quick run.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh" cluster "$@"
