#!/usr/bin/env bash
# Kueue for the e2e tests: the controller built from its Go module, its CRDs, and the
# ProvisioningRequest CRD (autoscaling.x-k8s.io) from the cluster-autoscaler apis module at
# the version that Kueue release requires.
#
#   hack/kueue.sh build   build (or reuse) them; print KUEUE_BIN=... and KUEUE_CRDS=... lines
#   hack/kueue.sh crds    only fetch (or reuse) the CRDs
#   hack/kueue.sh paths   print where they are cached, without building
#
# Cached under $HYBRIDGPU_CACHE_DIR/kueue/kueue-<version>/, keyed by version like the control
# plane (hack/control-plane.sh): a binary that exists is not rebuilt; a lock serializes builds.
# How the tests run it (outside the cluster, webhooks unregistered): tests/support/kueue.py.
set -euo pipefail
LOG_TAG=kueue
. "$(dirname "$0")/lib/go-controller.sh"

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
KUEUE_MODULE=sigs.k8s.io/kueue
AUTOSCALER_APIS_MODULE=k8s.io/autoscaler/cluster-autoscaler/apis

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
KUEUE_DIR="$CACHE_DIR/kueue/kueue-$KUEUE_VERSION"
KUEUE_BIN="$KUEUE_DIR/bin/kueue"
KUEUE_CRDS="$KUEUE_DIR/crds"


cmd_paths() {
  echo "KUEUE_VERSION=$KUEUE_VERSION"
  echo "KUEUE_BIN=$KUEUE_BIN"
  echo "KUEUE_CRDS=$KUEUE_CRDS"
}

fetch_crds() {
  [[ -f "$KUEUE_CRDS/.complete" ]] && return 0
  local kueue_dir apis_version apis_dir tmp
  kueue_dir=$(module_dir "$KUEUE_MODULE" "$KUEUE_VERSION")
  # The ProvisioningRequest API version Kueue was built against (its go.mod says which).
  apis_version=$(awk -v m="$AUTOSCALER_APIS_MODULE" '$1 == m { print $2; exit }' "$kueue_dir/go.mod")
  [[ -n "$apis_version" ]] || die "$KUEUE_MODULE@$KUEUE_VERSION's go.mod requires no $AUTOSCALER_APIS_MODULE"
  apis_dir=$(module_dir "$AUTOSCALER_APIS_MODULE" "$apis_version")
  tmp=$(mktemp -d)
  install -m 0644 "$kueue_dir"/config/components/crd/bases/*.yaml "$tmp/"
  install -m 0644 "$apis_dir/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml" "$tmp/"
  printf '%s %s\n%s %s\n' "$KUEUE_MODULE" "$KUEUE_VERSION" "$AUTOSCALER_APIS_MODULE" \
    "$apis_version" >"$tmp/.complete"
  chmod 0755 "$tmp"
  mkdir -p "$KUEUE_DIR"
  rm -rf "$KUEUE_CRDS" && mv "$tmp" "$KUEUE_CRDS"
  log "CRDs of $KUEUE_MODULE@$KUEUE_VERSION and $AUTOSCALER_APIS_MODULE@$apis_version in $KUEUE_CRDS"
}

build_binary() {
  [[ -x "$KUEUE_BIN" ]] && return 0
  local tmp started
  tmp=$(mktemp -d)
  started=$(date +%s)
  log "building $KUEUE_MODULE/cmd/kueue@$KUEUE_VERSION (first time only; ~5-15 min)"
  # No replace directives in Kueue's go.mod, so `go install module@version` builds it as is.
  if ! GOBIN="$tmp" nice go install -trimpath -ldflags "-s -w" \
    "$KUEUE_MODULE/cmd/kueue@$KUEUE_VERSION"; then
    rm -rf "$tmp"
    die "go install $KUEUE_MODULE/cmd/kueue@$KUEUE_VERSION failed"
  fi
  mkdir -p "$KUEUE_DIR/bin"
  mv "$tmp/kueue" "$KUEUE_BIN.tmp" && mv "$KUEUE_BIN.tmp" "$KUEUE_BIN"
  rm -rf "$tmp"
  log "built $KUEUE_BIN in $(($(date +%s) - started)) s"
}

cmd_build() {
  go_env
  mkdir -p "$KUEUE_DIR"
  exec 9>"$KUEUE_DIR/.lock"
  flock 9
  fetch_crds
  build_binary
  cmd_paths
}

cmd_crds() {
  go_env
  mkdir -p "$KUEUE_DIR"
  exec 9>"$KUEUE_DIR/.lock"
  flock 9
  fetch_crds
  cmd_paths
}

case "${1:-}" in
  build) cmd_build ;;
  crds) cmd_crds ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|crds|paths" ;;
esac
