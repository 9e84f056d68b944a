#!/usr/bin/env bash
# Installs what ari's build and tests need on a fresh Debian machine. Idempotent and quiet when
# everything is already there, so every entry point can call it.
set -euo pipefail

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if ((${#need_apt[@]})); then
  echo "setup: installing Debian packages: ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

command -v rustup >/dev/null 2>&1 || { echo "setup: rustup is required (https://rustup.rs)" >&2; exit 1; }
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
for c in clippy rustfmt; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done
command -v go >/dev/null 2>&1 || { echo "setup: Go is required to build the e2e control plane" >&2; exit 1; }

# Build outputs live under ~/.cache so a fresh clone (CI) reuses them; never inside the repo.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -e "$repo/target" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  mkdir -p "${ARI_CACHE:-$HOME/.cache/ari}/target"
  ln -s "${ARI_CACHE:-$HOME/.cache/ari}/target" "$repo/target"
fi
