#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) from its Go module, fetched
# through the Go module proxy, into a cache outside the repository, and runs it locally. The
# cache directory name covers the version and a hash of the Go toolchain, so a current cache is
# reused without building again. The oci crate's tests start this binary (ARI_REGISTRY_BIN).
#
# Usage: scripts/registry.sh          # builds if needed, then serves on 127.0.0.1:$ARI_REGISTRY_PORT
#        scripts/registry.sh --print  # builds if needed; prints only the binary's path
# Env:   ARI_CACHE (default ~/.cache/ari), ARI_REGISTRY_PORT (default 5000),
#        ARI_REGISTRY_DATA (storage directory; default a fresh temporary one),
#        GOMODCACHE/GOCACHE (Go defaults, reused between runs)
# Tests: ARI_REGISTRY_BIN="$(scripts/registry.sh --print)" cargo test -p ari-oci
set -euo pipefail

module="github.com/distribution/distribution/v3"
version="v3.0.0"
cache="${ARI_CACHE:-$HOME/.cache/ari}/registry"
# Bump when the build flags below change, so old outputs are not mistaken for current ones.
recipe=1

log() { printf 'registry: %s\n' "$*" >&2; }

mode="serve"
case "${1:-}" in
  "") ;;
  --print) mode="print" ;;
  *) log "unknown argument: $1 (usage: scripts/registry.sh [--print])"; exit 2 ;;
esac

command -v go >/dev/null 2>&1 || { log "Go is required (https://go.dev/dl)"; exit 1; }
hash="$(
  {
    echo "recipe=$recipe module=$module version=$version"
    go env GOVERSION GOOS GOARCH
  } | sha256sum | cut -c1-12
)"
out="$cache/distribution-${version}_${hash}"
bin="$out/registry"

complete() { [ -f "$out/.complete" ] && [ -x "$bin" ]; }

build() {
  mkdir -p "$cache"
  # Two runs at once (a test script and a person) must not build into the same directory.
  exec 9>"$cache/.lock"
  if command -v flock >/dev/null 2>&1; then
    flock 9
  fi
  complete && return 0

  # Only the module proxy: no VCS fetches, no other downloads.
  export GOPROXY="${ARI_GOPROXY:-https://proxy.golang.org}"
  export GOFLAGS="-buildvcs=false -trimpath"
  export CGO_ENABLED=0

  local tmp start
  tmp="$(mktemp -d "$cache/.build-XXXXXX")"
  # shellcheck disable=SC2064 # expand now: $tmp is local
  trap "rm -rf '$tmp'" EXIT
  start=$SECONDS
  log "building $module/cmd/registry@$version into $out"
  log "the first build downloads and compiles the registry: expect 1-2 minutes; later runs reuse it"
  GOBIN="$tmp" go install -ldflags "-s -w" "$module/cmd/registry@$version"
  [ -x "$tmp/registry" ] || { log "missing registry after build"; exit 1; }
  printf 'module=%s version=%s built_in=%ss\n' "$module" "$version" "$((SECONDS - start))" \
    >"$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
  chmod 755 "$out"
  log "built in $((SECONDS - start))s: $bin"
}

if complete; then
  log "cached: $bin"
else
  build
fi

if [ "$mode" = "print" ]; then
  echo "$bin"
  exit 0
fi

port="${ARI_REGISTRY_PORT:-5000}"
config="$(mktemp "${TMPDIR:-/tmp}/ari-registry-XXXXXX.yml")"
cleanup=("$config")
data="${ARI_REGISTRY_DATA:-}"
if [ -z "$data" ]; then
  data="$(mktemp -d "${TMPDIR:-/tmp}/ari-registry-XXXXXX")"
  cleanup+=("$data")
  log "storage: $data (temporary, removed on exit; set ARI_REGISTRY_DATA to keep it)"
fi
trap 'rm -rf "${cleanup[@]}"' EXIT
mkdir -p "$data"
# Plain http on loopback only, filesystem storage, deletes allowed (handy for trying things out).
cat >"$config" <<YAML
version: 0.1
log:
  level: ${REGISTRY_LOG_LEVEL:-info}
storage:
  filesystem:
    rootdirectory: $data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YAML
log "serving on http://127.0.0.1:$port (plain http: list it as an insecure registry; Ctrl-C stops)"
# In the background and waited for, so a TERM or INT to this script stops the registry and the
# EXIT trap still cleans up.
"$bin" serve "$config" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' INT TERM
wait "$pid" || true
wait "$pid" 2>/dev/null || true
