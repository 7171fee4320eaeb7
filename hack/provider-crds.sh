#!/usr/bin/env bash
# The CRDs of the capacity providers hybridgpu steers (Karpenter, Cluster API), for tests.
#
#   hack/provider-crds.sh fetch   download (or reuse) them; print KARPENTER_CRDS=... lines
#   hack/provider-crds.sh paths   print where they are cached, without downloading
#
# They come from the Go modules that ship them, through the Go module proxy (`go mod download`),
# and are cached under $HYBRIDGPU_CACHE_DIR/provider-crds/<module>@<version>/, keyed by version
# like the control plane. See docs/providers.md.
set -euo pipefail

# The newest sigs.k8s.io/karpenter the pinned Go (1.26.8) extracts: v1.14.3 and v1.15.0 declare
# `go 1.26.9` or later, and `go mod download` refuses them with GOTOOLCHAIN=local.
KARPENTER_VERSION=${KARPENTER_VERSION:-v1.14.1}
CLUSTER_API_VERSION=${CLUSTER_API_VERSION:-v1.14.2}

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
CRD_ROOT="$CACHE_DIR/provider-crds"
KARPENTER_DIR="$CRD_ROOT/sigs.k8s.io/karpenter@$KARPENTER_VERSION"
CLUSTER_API_DIR="$CRD_ROOT/sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION"
KARPENTER_FILES=(pkg/apis/crds/karpenter.sh_nodepools.yaml pkg/apis/crds/karpenter.sh_nodeclaims.yaml)
# cluster-api keeps its core CRDs under core/ since v1.11 (config/crd/bases before).
CLUSTER_API_FILES=(
  core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml
  core/config/crd/bases/cluster.x-k8s.io_machinesets.yaml
  core/config/crd/bases/cluster.x-k8s.io_machines.yaml
)

log() { printf '[provider-crds] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# fetch_module MODULE VERSION DEST FILE...: copy FILEs of MODULE@VERSION into DEST (once).
fetch_module() {
  local module=$1 version=$2 dest=$3 json dir file tmp
  shift 3
  [[ -f "$dest/.complete" ]] && return 0
  command -v go >/dev/null || die "go is not installed (needed to download $module@$version)"
  tmp=$(mktemp -d)
  # Outside any module, with the local toolchain: only the module's files are wanted.
  json=$(cd "$tmp" && GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local \
    GOPROXY=${GOPROXY:-https://proxy.golang.org,direct} \
    go mod download -json "$module@$version" 2>&1) || true
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$json")
  if [[ -z "$dir" || ! -d "$dir" ]]; then
    rm -rf "$tmp"
    die "go mod download $module@$version gave no module directory: $json"
  fi
  for file in "$@"; do
    [[ -f "$dir/$file" ]] || { rm -rf "$tmp"; die "$module@$version has no $file"; }
    install -m 0644 "$dir/$file" "$tmp/$(basename "$file")"
  done
  printf '%s %s\n' "$module" "$version" >"$tmp/.complete"
  chmod 0755 "$tmp"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest" && mv "$tmp" "$dest"
  log "$module@$version: $# CRDs cached in $dest"
}

cmd_paths() {
  echo "KARPENTER_CRDS=$KARPENTER_DIR"
  echo "CLUSTER_API_CRDS=$CLUSTER_API_DIR"
}

cmd_fetch() {
  fetch_module sigs.k8s.io/karpenter "$KARPENTER_VERSION" "$KARPENTER_DIR" "${KARPENTER_FILES[@]}"
  fetch_module sigs.k8s.io/cluster-api "$CLUSTER_API_VERSION" "$CLUSTER_API_DIR" \
    "${CLUSTER_API_FILES[@]}"
  cmd_paths
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  paths) cmd_paths ;;
  *) die "usage: $0 fetch|paths" ;;
esac
