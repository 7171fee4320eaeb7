#!/usr/bin/env bash
# The KubeRay operator (github.com/ray-project/kuberay/ray-operator) built from its Go module,
# and its CRDs (RayCluster, RayJob, RayService), for the RayJob e2e tests.
#
#   hack/kuberay.sh build   build (or reuse) the KubeRay operator; print KUBERAY_BIN=...,
#                           KUBERAY_CRDS=... lines
#   hack/kuberay.sh paths   print them without building
#
# Everything comes from the Go module through the Go module proxy and is cached under
# $HYBRIDGPU_CACHE_DIR/kuberay/<version>/, keyed by version like the control plane and JobSet
# (hack/lib/go-controller.sh). See docs/workloads.md#rayjob.
set -euo pipefail
LOG_TAG=kuberay
. "$(dirname "$0")/lib/go-controller.sh"

KUBERAY_VERSION=${KUBERAY_VERSION:-v1.5.0}
MODULE=github.com/ray-project/kuberay/ray-operator

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
KUBERAY_DIR="$CACHE_DIR/kuberay/$KUBERAY_VERSION"
KUBERAY_BIN="$KUBERAY_DIR/bin/kuberay-operator"
KUBERAY_CRDS="$KUBERAY_DIR/crds"
CRDS=(ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml)

complete() {
  local crd
  [[ -x "$KUBERAY_BIN" ]] || return 1
  for crd in "${CRDS[@]}"; do [[ -f "$KUBERAY_CRDS/$crd" ]] || return 1; done
}

build_kuberay() {
  local dir crd
  mkdir -p "$KUBERAY_CRDS"
  dir=$(module_dir "$MODULE" "$KUBERAY_VERSION")
  for crd in "${CRDS[@]}"; do
    install -m 0644 "$dir/config/crd/bases/$crd" "$KUBERAY_CRDS/"
  done
  # ray-operator's go.mod has no replace directives: its main package builds as it is.
  build_main "$KUBERAY_DIR" "$MODULE" "$KUBERAY_VERSION" 1.24.0 "$MODULE" "$KUBERAY_BIN"
}

cmd_paths() {
  echo "KUBERAY_BIN=$KUBERAY_BIN"
  echo "KUBERAY_CRDS=$KUBERAY_CRDS"
}

case "${1:-}" in
  build)
    go_env
    build_locked "$KUBERAY_DIR" "the KubeRay operator $KUBERAY_VERSION" complete build_kuberay
    cmd_paths
    ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|paths" ;;
esac
