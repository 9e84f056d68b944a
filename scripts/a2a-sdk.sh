#!/usr/bin/env bash
# Installs the official A2A Python SDK (a2a-sdk from PyPI, pinned) into a virtualenv cached
# outside the repository, for the A2A e2e trials and the docs' Python example. Prints the
# virtualenv's python on its last line.
#
# Usage: scripts/a2a-sdk.sh            # installs if needed; prints the python path
# Env:   ARI_CACHE (default ~/.cache/ari)
# Tests: ARI_A2A_PYTHON="$(scripts/a2a-sdk.sh | tail -1)" cargo test -p ari-e2e --test a2a
set -euo pipefail

version="1.3.0"
cache="${ARI_CACHE:-$HOME/.cache/ari}"
# With the `signing` extra (PyJWT; cryptography for EdDSA): the e2e suite verifies signed
# agent cards with the SDK's own verifier.
venv="$cache/a2a-sdk-$version-signing"

log() { printf 'a2a-sdk: %s\n' "$*" >&2; }

command -v python3 >/dev/null 2>&1 || { log "python3 is required"; exit 1; }
if [ ! -f "$venv/.complete" ]; then
  log "installing a2a-sdk $version from PyPI into $venv (first run only, about a minute)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "a2a-sdk[signing]==$version" "httpx>=0.28" "cryptography>=43"
  "$venv/bin/python" -c "import a2a.client, a2a.utils.signing, httpx, cryptography"
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
