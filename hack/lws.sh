#!/usr/bin/env bash
# The LeaderWorkerSet controller (sigs.k8s.io/lws) built from its Go module, its CRD and its
# webhook manifests, for the LeaderWorkerSet e2e tests.
#
#   hack/lws.sh build   build (or reuse) it; print LWS_BIN=..., LWS_CRDS=..., LWS_WEBHOOKS=...
#   hack/lws.sh paths   print them without building
#
# Cached under $HYBRIDGPU_CACHE_DIR/lws/<version>/, keyed by version like the control plane
# (hack/lib/go-controller.sh). The tests register its webhooks with the apiserver (its pod
# webhook labels each leader pod with its group index, without which no worker is created):
# tests/support/lws.py. See docs/workloads.md#leaderworkerset.
set -euo pipefail
LOG_TAG=lws
. "$(dirname "$0")/lib/go-controller.sh"

LWS_VERSION=${LWS_VERSION:-v0.8.0}
MODULE=sigs.k8s.io/lws

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
LWS_DIR="$CACHE_DIR/lws/$LWS_VERSION"
LWS_BIN="$LWS_DIR/bin/lws-controller"
LWS_CRDS="$LWS_DIR/crds"
LWS_WEBHOOKS="$LWS_DIR/webhooks/manifests.yaml"
CRD=leaderworkerset.x-k8s.io_leaderworkersets.yaml

complete() {
  [[ -x "$LWS_BIN" && -f "$LWS_CRDS/$CRD" && -f "$LWS_WEBHOOKS" ]]
}

build() {
  local dir
  mkdir -p "$LWS_CRDS" "$(dirname "$LWS_WEBHOOKS")"
  dir=$(module_dir "$MODULE" "$LWS_VERSION")
  install -m 0644 "$dir/config/crd/bases/$CRD" "$LWS_CRDS/"
  install -m 0644 "$dir/config/webhook/manifests.yaml" "$LWS_WEBHOOKS"
  build_main "$LWS_DIR" "$MODULE" "$LWS_VERSION" 1.25.0 "$MODULE/cmd" "$LWS_BIN" \
    "-X $MODULE/pkg/version.GitVersion=$LWS_VERSION"
}

cmd_paths() {
  echo "LWS_BIN=$LWS_BIN"
  echo "LWS_CRDS=$LWS_CRDS"
  echo "LWS_WEBHOOKS=$LWS_WEBHOOKS"
}

case "${1:-}" in
  build)
    go_env
    build_locked "$LWS_DIR" "the LeaderWorkerSet controller $LWS_VERSION" complete build
    cmd_paths
    ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|paths" ;;
esac
