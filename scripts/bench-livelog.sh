#!/usr/bin/env bash
# The live-log benchmark (BENCHMARKS.md, "Live-log writes"): API-server Task writes per second
# for N logging Tasks, unfollowed, annotated as the gateway used to, and followed by a lease.
# Flags go to the benchmark, e.g. `scripts/bench-livelog.sh --tasks 64 --seconds 20`.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh" livelog "$@"
