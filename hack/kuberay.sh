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
# (hack/jobset.sh). See docs/workloads.md#rayjob.
set -euo pipefail

KUBERAY_VERSION=${KUBERAY_VERSION:-v1.5.0}
MODULE=github.com/ray-project/kuberay/ray-operator

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
KUBERAY_DIR="$CACHE_DIR/kuberay/$KUBERAY_VERSION"
KUBERAY_BIN="$KUBERAY_DIR/bin/kuberay-operator"
KUBERAY_CRDS="$KUBERAY_DIR/crds"
CRDS=(ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml)

log() { printf '[kuberay] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

go_env() {
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local GOWORK=off
  export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
}

# module_dir MODULE VERSION: the module's source directory in the Go module cache.
module_dir() {
  local json dir
  json=$(cd "$(mktemp -d)" && go mod download -json "$1@$2" 2>&1) || true
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "go mod download $1@$2 gave no module directory: $json"
  printf '%s\n' "$dir"
}

complete() {
  local crd
  [[ -x "$KUBERAY_BIN" ]] || return 1
  for crd in "${CRDS[@]}"; do [[ -f "$KUBERAY_CRDS/$crd" ]] || return 1; done
}

build_kuberay() {
  local src="$KUBERAY_DIR/src" dir crd
  mkdir -p "$src" "$KUBERAY_DIR/bin" "$KUBERAY_CRDS"
  # As for JobSet: the proxy refuses `go install module@version`'s version list, so a wrapper
  # module that requires the exact version builds the module's main package. ray-operator's
  # go.mod has no replace directives, so nothing else is needed.
  cat >"$src/go.mod" <<MOD
module hybridgpu.local/kuberay-build

go 1.24.0

require $MODULE $KUBERAY_VERSION
MOD
  dir=$(module_dir "$MODULE" "$KUBERAY_VERSION")
  for crd in "${CRDS[@]}"; do
    install -m 0644 "$dir/config/crd/bases/$crd" "$KUBERAY_CRDS/"
  done
  (cd "$src" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$KUBERAY_BIN.tmp" "$MODULE")
  mv "$KUBERAY_BIN.tmp" "$KUBERAY_BIN"
}

cmd_paths() {
  echo "KUBERAY_BIN=$KUBERAY_BIN"
  echo "KUBERAY_CRDS=$KUBERAY_CRDS"
}

cmd_build() {
  command -v go >/dev/null || die "go is required to build the KubeRay operator"
  go_env
  mkdir -p "$KUBERAY_DIR"
  # One build at a time per version: a second `make test` waits for the first.
  exec 9>"$KUBERAY_DIR/.build.lock"
  flock 9
  if ! complete; then
    local start=$SECONDS
    log "building the KubeRay operator $KUBERAY_VERSION"
    build_kuberay
    log "built in $((SECONDS - start))s: $KUBERAY_BIN"
  fi
  flock -u 9
  exec 9>&-
  cmd_paths
}

case "${1:-}" in
  build) cmd_build ;;
  paths) cmd_paths ;;
  *) die "usage: $0 build|paths" ;;
esac
