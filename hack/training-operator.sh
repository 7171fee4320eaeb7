#!/usr/bin/env bash
# The Kubeflow training operator's PyTorchJob controller (github.com/kubeflow/training-operator)
# built from its Go module, and the PyTorchJob CRD, for the PyTorchJob e2e tests.
#
#   hack/training-operator.sh build   build (or reuse) it; print TRAINING_OPERATOR_BIN=...,
#                                     TRAINING_OPERATOR_CRDS=... lines
#   hack/training-operator.sh paths   print them without building
#
# The binary is the module's PyTorchJob reconciler started by a main of our own
# (hack/go/pytorchjob-controller/main.go: no webhooks, no certificate rotation, no server),
# because the upstream main waits for certificates mounted into a pod. Cached under
# $HYBRIDGPU_CACHE_DIR/training-operator/<version>-<hash of that main>/, keyed by version like
# the control plane (hack/lib/go-controller.sh). See docs/workloads.md#pytorchjob.
set -euo pipefail
LOG_TAG=training-operator
HACK=$(cd "$(dirname "$0")" && pwd)
. "$HACK/lib/go-controller.sh"

TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.3}
MODULE=github.com/kubeflow/training-operator
MAIN_DIR="$HACK/go/pytorchjob-controller"
MAIN_HASH=$(cat "$MAIN_DIR"/*.go | sha256sum | cut -c1-12)

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
TRAINING_OPERATOR_DIR="$CACHE_DIR/training-operator/$TRAINING_OPERATOR_VERSION-$MAIN_HASH"
TRAINING_OPERATOR_BIN="$TRAINING_OPERATOR_DIR/bin/pytorchjob-controller"
TRAINING_OPERATOR_CRDS="$TRAINING_OPERATOR_DIR/crds"
CRD=kubeflow.org_pytorchjobs.yaml

complete() {
  [[ -x "$TRAINING_OPERATOR_BIN" && -f "$TRAINING_OPERATOR_CRDS/$CRD" ]]
}

build() {
  local dir
  mkdir -p "$TRAINING_OPERATOR_CRDS"
  dir=$(module_dir "$MODULE" "$TRAINING_OPERATOR_VERSION")
  install -m 0644 "$dir/manifests/base/crds/$CRD" "$TRAINING_OPERATOR_CRDS/"
  build_main "$TRAINING_OPERATOR_DIR" "$MODULE" "$TRAINING_OPERATOR_VERSION" 1.23 . \
    "$TRAINING_OPERATOR_BIN" "" "$MAIN_DIR"
}

cmd_paths() {
  echo "TRAINING_OPERATOR_BIN=$TRAINING_OPERATOR_BIN"
  echo "TRAINING_OPERATOR_CRDS=$TRAINING_OPERATOR_CRDS"
}

case "${1:-}" in
  build)
    go_env
    build_locked "$TRAINING_OPERATOR_DIR" \
      "the PyTorchJob controller of $MODULE $TRAINING_OPERATOR_VERSION" complete build
    cmd_paths
    ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|paths" ;;
esac
