#!/usr/bin/env bash
# Builds the e2e control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, helm) from Go modules fetched through the Go module proxy, into a cache outside the
# repository. The cache directory name covers the versions and a hash of the wrapper modules, so
# a current cache is reused without running the Go toolchain at all.
#
# Usage: scripts/control-plane.sh          # builds if needed; prints the bin directory last
#        scripts/control-plane.sh --print  # only prints it; fails (exit 3) if not built yet
# Env:   ARI_CACHE (default ~/.cache/ari), GOMODCACHE/GOCACHE (Go defaults, reused between runs)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mods="$repo/e2e/k8s"
cache="${ARI_CACHE:-$HOME/.cache/ari}/control-plane"
# Bump when the build flags below change, so old outputs are not mistaken for current ones.
recipe=1

log() { printf 'control-plane: %s\n' "$*" >&2; }

# The version a wrapper module requires, read from its go.mod.
required() { awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1/go.mod"; }

k8s_version="$(required "$mods" k8s.io/kubernetes)"
etcd_version="$(required "$mods/etcd" go.etcd.io/etcd/server/v3)"
helm_version="$(required "$mods/helm" helm.sh/helm/v3)"
for v in k8s_version etcd_version helm_version; do
  [ -n "${!v}" ] || { log "cannot read $v from $mods"; exit 1; }
done

command -v go >/dev/null 2>&1 || { log "Go is required (https://go.dev/dl)"; exit 1; }
hash="$(
  {
    echo "recipe=$recipe"
    go env GOVERSION GOOS GOARCH
    cat "$mods/go.mod" "$mods/go.sum" "$mods/etcd/go.mod" "$mods/etcd/go.sum" \
      "$mods/helm/go.mod" "$mods/helm/go.sum"
  } | sha256sum | cut -c1-12
)"
stamp="k8s-${k8s_version}_etcd-${etcd_version}_helm-${helm_version}_${hash}"
out="$cache/$stamp"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl helm)

complete() { [ -f "$out/bin/.complete" ]; }
if complete; then
  log "cached: $out/bin"
  echo "$out/bin"
  exit 0
fi
if [ "${1:-}" = "--print" ]; then
  log "not built yet ($out); run scripts/control-plane.sh"
  exit 3
fi

mkdir -p "$cache"
# Two runs at once (a test script and a person) must not build into the same directory.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if complete; then
  echo "$out/bin"
  exit 0
fi

# Only the module proxy: no VCS fetches, no other downloads.
export GOPROXY="${ARI_GOPROXY:-https://proxy.golang.org}"
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export CGO_ENABLED=0

tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"

minor="${k8s_version#v1.}"
minor="${minor%%.*}"
k8s_ldflags="-s -w"
for kv in "gitVersion=$k8s_version" gitMajor=1 "gitMinor=$minor" gitTreeState=clean; do
  k8s_ldflags+=" -X k8s.io/component-base/version.$kv"
  # kubectl reports its client version through client-go's copy of the version variables.
  k8s_ldflags+=" -X k8s.io/client-go/pkg/version.$kv"
done

start=$SECONDS
log "building etcd $etcd_version"
(cd "$mods/etcd" && go build -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3)

log "building kubernetes $k8s_version (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
(cd "$mods" && go build -ldflags "$k8s_ldflags" -o "$tmp/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl)

log "building helm $helm_version"
(cd "$mods/helm" && go build \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version" \
  -o "$tmp/bin/helm" helm.sh/helm/v3/cmd/helm)

for b in "${bins[@]}"; do
  [ -x "$tmp/bin/$b" ] || { log "missing $b after build"; exit 1; }
done
printf 'k8s=%s etcd=%s helm=%s built_in=%ss\n' "$k8s_version" "$etcd_version" "$helm_version" \
  "$((SECONDS - start))" >"$tmp/bin/.complete"
rm -rf "$out"
mkdir -p "$out"
mv "$tmp/bin" "$out/bin"
log "built in $((SECONDS - start))s: $out/bin"
echo "$out/bin"
