#!/usr/bin/env bash
# Builds the example agents (examples/agents), the hostile test fixtures (fixtures/agents) and the
# stock agent components (stock/: `declarative`, which runs declarative Agents) into
# wasm32-wasip2 components and copies them to ${ARI_TARGET_DIR:-<repo>/target}/agents/<name>.wasm. Cargo's target dir is cached under the same
# root, and files are only copied when they changed, so a second run does almost nothing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${ARI_TARGET_DIR:-$repo/target}"
cargo_target="$root/wasm"
out="$root/agents"

rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

manifests=("$repo/examples/agents/Cargo.toml" "$repo/fixtures/agents/Cargo.toml" "$repo/stock/Cargo.toml")
for manifest in "${manifests[@]}"; do
  cargo build --release --target wasm32-wasip2 --manifest-path "$manifest" \
    --target-dir "$cargo_target" "$@"
done

# The members, in order, as the workspace manifests list them.
members=$(for manifest in "${manifests[@]}"; do
  sed -n '/^members = \[/,/^\]/p' "$manifest" | grep -o '"[^"]*"' | tr -d '"'
done)

mkdir -p "$out"
# A component's preamble: magic "\0asm", version 0x0d 0x00, layer 0x01 0x00 (a core module has
# version 1, layer 0).
component_preamble="0061736d0d000100"
status=0
for name in $members; do
  built="$cargo_target/wasm32-wasip2/release/${name//-/_}.wasm"
  dest="$out/$name.wasm"
  if [ ! -f "$built" ]; then
    echo "build-agents: $built missing" >&2
    status=1
    continue
  fi
  preamble="$(head -c 8 "$built" | od -An -tx1 | tr -d ' \n')"
  if [ "$preamble" != "$component_preamble" ]; then
    echo "build-agents: $built is not a component (preamble $preamble)" >&2
    status=1
    continue
  fi
  cmp -s "$built" "$dest" 2>/dev/null || cp "$built" "$dest"
done
[ "$status" -eq 0 ] && echo "build-agents: components in $out"
exit "$status"
