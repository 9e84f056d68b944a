#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: set-up, lint, unit and runtime tests,
# then the end-to-end suite on a real control plane built from Go modules.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# Waits for background build $1 (log $2, named $3), printing its latest log line each minute so
# a long first build is never silent; on failure prints the log and stops.
wait_for() {
  local pid="$1" log="$2" what="$3" ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    ticks=$((ticks + 1))
    if [ $((ticks % 12)) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "  $what still running ($(date -u +%H:%M:%S)): $(tail -n 1 "$log" 2>/dev/null | cut -c1-160)"
    fi
  done
  if ! wait "$pid"; then
    cat "$log" >&2
    echo "$what failed" >&2
    exit 1
  fi
}

# CI builds from a fresh clone into the shared cache; incremental data there only fills the disk.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

step "set-up"
scripts/setup.sh

step "control plane (Go modules, cached)"
# Started first: it is the longest build and runs beside the Rust build.
cp_log="$(mktemp)"
scripts/control-plane.sh >"$cp_log" 2>&1 &
cp_pid=$!

step "OCI registry (Go module, cached)"
# The CNCF distribution registry, for the oci crate's tests against a real registry; built beside
# the rest like the control plane.
reg_log="$(mktemp)"
scripts/registry.sh --print >"$reg_log" 2>&1 &
reg_pid=$!

step "model server (llama-cpp-python from PyPI, cached)"
# llama.cpp's OpenAI-compatible server and a tiny generated model, for the model client's tests
# against a real server (llm/tests/real_server.rs). The first run builds llama.cpp from the
# sdist (about 25 minutes on 2 busy cores), beside the rest like the control plane.
ms_log="$(mktemp)"
scripts/model-server.sh >"$ms_log" 2>&1 &
ms_pid=$!

step "guest agents (wasm32-wasip2)"
scripts/build-agents.sh

step "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "guest agents' own unit tests (native)"
for guests in examples/agents fixtures/agents stock; do
  (cd "$guests" && cargo test --locked --target-dir "$repo/target/agents-native")
done

step "binaries for the e2e suite"
cargo build --locked --bins

step "waiting for the control plane build"
scripts/control-plane.sh --print >/dev/null 2>&1 ||
  echo "building etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and helm from Go modules: the first run takes 10-20 minutes on 2 cores (log: $cp_log)"
wait_for "$cp_pid" "$cp_log" "control plane build"
ARI_CONTROL_PLANE_BIN="$(tail -n 1 "$cp_log")"
export ARI_CONTROL_PLANE_BIN
echo "control plane: $ARI_CONTROL_PLANE_BIN"

step "waiting for the registry build"
grep -q "^registry: building" "$reg_log" 2>/dev/null &&
  echo "building the CNCF distribution registry from its Go module: the first run takes 2-3 minutes (log: $reg_log)"
wait_for "$reg_pid" "$reg_log" "registry build"
ARI_REGISTRY_BIN="$(tail -n 1 "$reg_log")"
export ARI_REGISTRY_BIN
echo "registry: $ARI_REGISTRY_BIN"

step "guest agents in Python, JavaScript and C (toolchains cached)"
# The conformance suite (executor/tests/conformance.rs) runs each one that is built, and
# executor/tests/python_assistant.rs the Python assistant; a toolchain that cannot be installed is
# reported and its language skipped, a guest that fails to build fails.
scripts/build-guests.sh

step "A2A Python SDK (a2a-sdk from PyPI, cached)"
# The e2e A2A trials judge the gateway with the official client; first run about a minute.
ARI_A2A_PYTHON="$(scripts/a2a-sdk.sh | tail -n 1)"
export ARI_A2A_PYTHON

step "MCP Python SDK (mcp from PyPI, cached)"
# The tools capability's tests (ari-mcp, runtime/tests/tools.rs, executor/tests/tools.rs) call a
# real MCP server built with the official SDK (testkit/mcp/server.py); first run about a minute.
ARI_MCP_PYTHON="$(scripts/mcp-server.sh | tail -n 1)"
export ARI_MCP_PYTHON

step "in-toto verifiers (securesystemslib and in-toto-attestation from PyPI, cached)"
# The e2e kubectl plugin trial checks a Task's attestation envelope with them (e2e/intoto/check.py).
ARI_INTOTO_PYTHON="$(scripts/intoto.sh | tail -n 1)"
export ARI_INTOTO_PYTHON

step "waiting for the model server install"
wait_for "$ms_pid" "$ms_log" "model server install"
ARI_MODEL_SERVER="$(tail -n 1 "$ms_log")"
export ARI_MODEL_SERVER
echo "model server: $ARI_MODEL_SERVER"

step "tests"
cargo test --workspace --locked
