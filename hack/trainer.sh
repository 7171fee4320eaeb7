#!/usr/bin/env bash
# The Kubeflow Trainer v2 controller manager (github.com/kubeflow/trainer/v2) built from its Go
# module, with its CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime), its webhook
# manifests and its torch-distributed ClusterTrainingRuntime, for the TrainJob e2e test
# (tests/e2e/test_trainjob_controller.py).
#
#   hack/trainer.sh build   build (or reuse) it; print TRAINER_BIN=..., TRAINER_CRDS=...,
#                           TRAINER_WEBHOOKS=..., TRAINER_RUNTIMES=... lines
#   hack/trainer.sh paths   print them without building
#
# Only the controller manager's main package is built (upstream's own main: a Configuration
# file turns its certificate management, leader election, metrics and probes off and binds its
# webhook server to 127.0.0.1; tests/support/gocontroller.py). Cached under
# $HYBRIDGPU_CACHE_DIR/trainer/<version>/, keyed by version like the control plane
# (hack/lib/go-controller.sh). See docs/workloads.md#trainjob.
set -euo pipefail
LOG_TAG=trainer
. "$(dirname "$0")/lib/go-controller.sh"

TRAINER_VERSION=${TRAINER_VERSION:-v2.2.0}
MODULE=github.com/kubeflow/trainer/v2

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
TRAINER_DIR="$CACHE_DIR/trainer/$TRAINER_VERSION"
TRAINER_BIN="$TRAINER_DIR/bin/trainer-controller-manager"
TRAINER_CRDS="$TRAINER_DIR/crds"
TRAINER_WEBHOOKS="$TRAINER_DIR/webhooks/manifests.yaml"
TRAINER_RUNTIMES="$TRAINER_DIR/runtimes"
CRDS=(trainer.kubeflow.org_trainjobs.yaml trainer.kubeflow.org_trainingruntimes.yaml
  trainer.kubeflow.org_clustertrainingruntimes.yaml)

complete() {
  local crd
  [[ -x "$TRAINER_BIN" && -f "$TRAINER_WEBHOOKS" && -f "$TRAINER_RUNTIMES/torch_distributed.yaml" ]] ||
    return 1
  for crd in "${CRDS[@]}"; do [[ -f "$TRAINER_CRDS/$crd" ]] || return 1; done
}

build_trainer() {
  local dir crd
  mkdir -p "$TRAINER_CRDS" "$(dirname "$TRAINER_WEBHOOKS")" "$TRAINER_RUNTIMES"
  dir=$(module_dir "$MODULE" "$TRAINER_VERSION")
  for crd in "${CRDS[@]}"; do
    install -m 0644 "$dir/manifests/base/crds/$crd" "$TRAINER_CRDS/"
  done
  install -m 0644 "$dir/manifests/base/webhook/manifests.yaml" "$TRAINER_WEBHOOKS"
  install -m 0644 "$dir/manifests/base/runtimes/torch_distributed.yaml" "$TRAINER_RUNTIMES/"
  # The module's go.mod has no replace directives: its main package builds as it is.
  build_main "$TRAINER_DIR" "$MODULE" "$TRAINER_VERSION" 1.25.0 \
    "$MODULE/cmd/trainer-controller-manager" "$TRAINER_BIN"
}

cmd_paths() {
  echo "TRAINER_BIN=$TRAINER_BIN"
  echo "TRAINER_CRDS=$TRAINER_CRDS"
  echo "TRAINER_WEBHOOKS=$TRAINER_WEBHOOKS"
  echo "TRAINER_RUNTIMES=$TRAINER_RUNTIMES"
}

case "${1:-}" in
  build)
    go_env
    build_locked "$TRAINER_DIR" "the Trainer controller manager $TRAINER_VERSION" complete \
      build_trainer
    cmd_paths
    ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|paths" ;;
esac
