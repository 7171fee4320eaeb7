#!/usr/bin/env bash
# The JobSet controller (sigs.k8s.io/jobset) and the CRDs of the other suspendable batch kinds
# hybridgpu moves (KubeRay's RayJob, Kubeflow's PyTorchJob and trainer v2's TrainJob), for tests.
#
#   hack/jobset.sh build   build (or reuse) the JobSet controller and fetch the CRDs and its
#                          webhook manifests; print JOBSET_BIN=..., JOBSET_CRDS=...,
#                          JOBSET_WEBHOOKS=..., WORKLOAD_CRDS=... lines
#   hack/jobset.sh crds    fetch (or reuse) only the RayJob, PyTorchJob and TrainJob CRDs
#   hack/jobset.sh paths   print them without building
#
# Everything comes from Go modules through the Go module proxy and is cached under
# $HYBRIDGPU_CACHE_DIR/jobset/<version>/ and $HYBRIDGPU_CACHE_DIR/workload-crds/<versions>/,
# keyed by version like the control plane. The adapter tests use these CRDs alone (no
# controller); the RayJob and PyTorchJob e2e tests run the real controllers
# (hack/kuberay.sh, hack/training-operator.sh): see docs/workloads.md.
set -euo pipefail
LOG_TAG=jobset
. "$(dirname "$0")/lib/go-controller.sh"

JOBSET_VERSION=${JOBSET_VERSION:-v0.11.1}
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.5.0}
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.3}
TRAINER_VERSION=${TRAINER_VERSION:-v2.0.0}

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
JOBSET_DIR="$CACHE_DIR/jobset/$JOBSET_VERSION"
JOBSET_BIN="$JOBSET_DIR/bin/jobset-controller"
JOBSET_CRDS="$JOBSET_DIR/crds"
JOBSET_WEBHOOKS="$JOBSET_DIR/webhooks/manifests.yaml"
WORKLOAD_CRDS="$CACHE_DIR/workload-crds/kuberay-${KUBERAY_VERSION}_training-operator-${TRAINING_OPERATOR_VERSION}_trainer-${TRAINER_VERSION}"

build_jobset() {
  local dir
  mkdir -p "$JOBSET_CRDS"
  dir=$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")
  install -m 0644 "$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$JOBSET_CRDS/"
  build_main "$JOBSET_DIR" sigs.k8s.io/jobset "$JOBSET_VERSION" 1.25.0 sigs.k8s.io/jobset \
    "$JOBSET_BIN" "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
}

fetch_jobset_webhooks() {
  local dir
  dir=$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")
  mkdir -p "$(dirname "$JOBSET_WEBHOOKS")"
  install -m 0644 "$dir/config/components/webhook/manifests.yaml" "$JOBSET_WEBHOOKS.tmp"
  mv "$JOBSET_WEBHOOKS.tmp" "$JOBSET_WEBHOOKS"
}

jobset_complete() {
  [[ -x "$JOBSET_BIN" && -f "$JOBSET_CRDS/jobset.x-k8s.io_jobsets.yaml" ]]
}

fetch_workload_crds() {
  local tmp dir
  tmp=$(mktemp -d)
  dir=$(module_dir github.com/ray-project/kuberay/ray-operator "$KUBERAY_VERSION")
  install -m 0644 "$dir/config/crd/bases/ray.io_rayjobs.yaml" "$tmp/"
  dir=$(module_dir github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION")
  install -m 0644 "$dir/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$tmp/"
  dir=$(module_dir github.com/kubeflow/trainer/v2 "$TRAINER_VERSION")
  install -m 0644 "$dir/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml" "$tmp/"
  printf 'kuberay %s training-operator %s trainer %s\n' "$KUBERAY_VERSION" \
    "$TRAINING_OPERATOR_VERSION" "$TRAINER_VERSION" >"$tmp/.complete"
  chmod 0755 "$tmp"
  mkdir -p "$(dirname "$WORKLOAD_CRDS")"
  rm -rf "$WORKLOAD_CRDS" && mv "$tmp" "$WORKLOAD_CRDS"
  log "RayJob, PyTorchJob and TrainJob CRDs cached in $WORKLOAD_CRDS"
}

cmd_paths() {
  echo "JOBSET_BIN=$JOBSET_BIN"
  echo "JOBSET_CRDS=$JOBSET_CRDS"
  echo "JOBSET_WEBHOOKS=$JOBSET_WEBHOOKS"
  echo "WORKLOAD_CRDS=$WORKLOAD_CRDS"
}

cmd_build() {
  go_env
  build_locked "$JOBSET_DIR" "the JobSet controller $JOBSET_VERSION" jobset_complete build_jobset
  [[ -f "$JOBSET_WEBHOOKS" ]] || fetch_jobset_webhooks
  cmd_crds
}

cmd_crds() {
  go_env
  mkdir -p "$(dirname "$WORKLOAD_CRDS")"
  exec 9>"$WORKLOAD_CRDS.lock"
  flock 9
  [[ -f "$WORKLOAD_CRDS/.complete" ]] || fetch_workload_crds
  flock -u 9
  exec 9>&-
  cmd_paths
}

case "${1:-}" in
  build) cmd_build ;;
  crds) cmd_crds ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|crds|paths" ;;
esac
