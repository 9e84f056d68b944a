#!/usr/bin/env bash
# The Plan benchmark (BENCHMARKS.md, "Plans"): boots the e2e control plane with the operator and
# measures a 10-step chain and a 50-wide fan-out as Plans against the same work as single
# Tasks, in one run. Debug builds, as the e2e suite runs them (the pods run target/debug when it
# exists). Not part of the test suite. Flags go to the benchmark (`--chain`, `--fan`, `--runs`).
set -euo pipefail
ARI_BENCH_PROFILE=debug exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh" plans "$@"
