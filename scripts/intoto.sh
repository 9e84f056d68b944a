#!/usr/bin/env bash
# Installs the in-toto verifiers no one in ari wrote (securesystemslib with its crypto backend,
# and in-toto-attestation, from PyPI, pinned) into a virtualenv cached outside the repository,
# for the e2e check of Task attestations (e2e/intoto/check.py). Prints the virtualenv's python on
# its last line.
#
# Usage: scripts/intoto.sh            # installs if needed; prints the python path
# Env:   ARI_CACHE (default ~/.cache/ari)
# Tests: ARI_INTOTO_PYTHON="$(scripts/intoto.sh | tail -n 1)" cargo test -p ari-e2e --test operator
set -euo pipefail

sslib="1.6.0"
attestation="0.9.3"
cache="${ARI_CACHE:-$HOME/.cache/ari}"
venv="$cache/intoto-$sslib-$attestation"

log() { printf 'intoto: %s\n' "$*" >&2; }

command -v python3 >/dev/null 2>&1 || { log "python3 is required"; exit 1; }
if [ ! -f "$venv/.complete" ]; then
  log "installing securesystemslib $sslib and in-toto-attestation $attestation from PyPI into $venv (first run only)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "securesystemslib[crypto]==$sslib" "in-toto-attestation==$attestation"
  "$venv/bin/python" -c "import securesystemslib.dsse, in_toto_attestation.v1.statement, cryptography"
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
