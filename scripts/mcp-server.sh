#!/usr/bin/env bash
# Installs the official MCP Python SDK (mcp from PyPI, pinned) into a virtualenv cached outside
# the repository, for the tests of the MCP tools capability: they start the small MCPServer (formerly FastMCP) server
# of testkit/mcp/server.py with it, over streamable HTTP on 127.0.0.1. Prints the virtualenv's
# python on its last line.
#
# Usage: scripts/mcp-server.sh            # installs if needed; prints the python path
# Env:   ARI_CACHE (default ~/.cache/ari)
# Tests: ARI_MCP_PYTHON="$(scripts/mcp-server.sh | tail -n 1)" cargo test -p ari-mcp -p ari-runtime --test tools
set -euo pipefail

version="2.3.0"
cache="${ARI_CACHE:-$HOME/.cache/ari}"
venv="$cache/mcp-sdk-$version"

log() { printf 'mcp-server: %s\n' "$*" >&2; }

command -v python3 >/dev/null 2>&1 || { log "python3 is required"; exit 1; }
if [ ! -f "$venv/.complete" ]; then
  log "installing mcp $version from PyPI into $venv (first run only, about a minute)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$version"
  "$venv/bin/python" -c "import mcp.server.mcpserver, uvicorn"
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
