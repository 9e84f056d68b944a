#!/usr/bin/env bash
# The stock agent component's own cost per turn (BENCHMARKS.md, "Declarative agents"): a declared
# agent whose model (a stub on 127.0.0.1 that answers at once) calls the wordcount Agent N times
# before answering, run with `ari run --declaration` for N = 0, 1, 2, 4, 16. Fuel is exact and the
# same on every build; the marginal fuel per turn minus the host's documented charges (chat
# 500,000, start-child 1,000,000, await-child 10,000, plus 2 per byte) is the component's work.
# Each run is then replayed with `ari verify` (the model's answers and the child's outputs come
# from the recording, so the replay's time is the component's and the host's, without the
# model's or the tool's); the marginal replay time per turn is the overhead a turn adds.
# Also the component's cold compile and cached load (`ari inspect`).
# Usage: scripts/build-agents.sh && cargo build --release --bin ari && scripts/bench-declarative.sh [ARI]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ari="${1:-$repo/target/release/ari}"
agents="${ARI_TARGET_DIR:-$repo/target}/agents"
work="$(mktemp -d)"
trap 'kill "${stub:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cat >"$work/stub.py" <<'PY'
import http.server, json, sys
TURNS = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        seen = sum(1 for m in body["messages"] if m["role"] == "tool")
        if seen < TURNS:
            msg = {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{seen}",
                   "type": "function", "function": {"name": "wordcount", "arguments": "{\"input\":\"a b c\"}"}}]}
            fin = "tool_calls"
        else:
            msg, fin = {"role": "assistant", "content": "done"}, "stop"
        out = json.dumps({"id": "x", "model": "stub", "choices": [{"index": 0, "message": msg,
                          "finish_reason": fin}], "usage": {"prompt_tokens": 10, "completion_tokens": 2,
                          "total_tokens": 12}}).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out))); self.end_headers(); self.wfile.write(out)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
cat >"$work/agent.yaml" <<'YAML'
instructions: You count words with the wordcount tool.
model: stub
tools:
  - agent: {name: wordcount, description: counts the words of a text}
maxTurns: 32
YAML
for turns in 0 1 2 4 16; do
  python3 "$work/stub.py" "$turns" >"$work/port" &
  stub=$!
  until [ -s "$work/port" ]; do sleep 0.1; done
  port="$(head -n 1 "$work/port")"
  for _ in 1 2 3; do
    "$ari" --cache-dir "$work/cache" run "$agents/declarative.wasm" --declaration "$work/agent.yaml" \
      --input count --grant models=stub --model "stub=http://127.0.0.1:$port/v1" \
      --grant delegation=wordcount --agent "wordcount=$agents/wordcount.wasm" --json >"$work/r.json"
    start=$(date +%s.%N)
    "$ari" --cache-dir "$work/cache" verify "$work/r.json" --module "$agents/declarative.wasm" \
      --declaration "$work/agent.yaml" --agent "wordcount=$agents/wordcount.wasm" \
      --accept-embedded-key >/dev/null 2>&1
    end=$(date +%s.%N)
    python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['resourcesUsed']
print('tool turns', sys.argv[2], '| fuel', u['fuel'], '| cpuMillis', u['cpuMillis'], '| wallMillis', u['wallMillis'],
      '| replay ms', round((float(sys.argv[4]) - float(sys.argv[3])) * 1000))" \
      "$work/r.json" "$turns" "$start" "$end"
  done
  kill "$stub"; wait "$stub" 2>/dev/null || true
  : >"$work/port"
done
rm -rf "$work/cold"
start=$(date +%s.%N); "$ari" --cache-dir "$work/cold" inspect "$agents/declarative.wasm" >/dev/null
mid=$(date +%s.%N); "$ari" --cache-dir "$work/cold" inspect "$agents/declarative.wasm" >/dev/null
end=$(date +%s.%N)
python3 -c "import sys; a,b,c=map(float,sys.argv[1:]); print(f'cold compile {b-a:.2f} s, cached load {c-b:.3f} s')" "$start" "$mid" "$end"
