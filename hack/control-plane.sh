#!/usr/bin/env bash
# A real Kubernetes control plane for tests and local development, built from Go modules.
#
#   hack/control-plane.sh build            build (or reuse) the pinned binaries
#   hack/control-plane.sh up|down|status   start / stop / inspect the control plane
#   hack/control-plane.sh env              print `export KUBECONFIG=...` for the running one
#   hack/control-plane.sh paths            print the binary and state directories
#   hack/control-plane.sh stop-component|start-component|restart COMPONENT
#                                          one component alone (fault tests), state kept
#
# Everything listens on 127.0.0.1 on free ports. Binaries are cached under
# $HYBRIDGPU_CACHE_DIR/control-plane/<version key>/bin, state under $HYBRIDGPU_CACHE_DIR/run/<name>.
# See docs/development.md.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}

CACHE_DIR=${HYBRIDGPU_CACHE_DIR:-$HOME/.cache/hybridgpu}
VERSION_KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
CP_DIR="$CACHE_DIR/control-plane/$VERSION_KEY"
BIN_DIR="$CP_DIR/bin"
CLUSTER_NAME=${HYBRIDGPU_CLUSTER_NAME:-dev}
RUN_DIR=${HYBRIDGPU_RUN_DIR:-$CACHE_DIR/run/$CLUSTER_NAME}
KWOK_LEASE_SECONDS=${HYBRIDGPU_KWOK_LEASE_SECONDS:-40}
# HYBRIDGPU_AUDIT_LOG=1: the apiserver writes an audit log of every LIST (one JSON line per
# request at Metadata level: user, userAgent, resource, stage) to $RUN_DIR/logs/audit.log, to
# find who lists in a benchmark's steady state. Off by default.
AUDIT_LOG=${HYBRIDGPU_AUDIT_LOG:-}
NODE_GRACE_ARGS=()
if [[ "$KWOK_LEASE_SECONDS" != 40 ]]; then
  NODE_GRACE_ARGS=(--node-monitor-grace-period="$((KWOK_LEASE_SECONDS + 30))s")
fi
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

log() { printf '[control-plane] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------
go_env() {
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local GOWORK=off
  export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
}

build_etcd() {
  local src="$CP_DIR/src/etcd"
  mkdir -p "$src"
  # server/v3's go.mod replaces its sibling modules with ../ paths, so `go install @version` refuses
  # it; a wrapper module that requires it builds the same main package with published siblings.
  cat >"$src/go.mod" <<MOD
module hybridgpu.local/etcd-build

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
  (cd "$src" && go mod download go.etcd.io/etcd/server/v3 && \
    nice -n 10 go build -trimpath -o "$BIN_DIR/etcd.tmp" \
      -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
      go.etcd.io/etcd/server/v3)
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
}

build_kubernetes() {
  local src="$CP_DIR/src/kubernetes" staging_version upstream_mod minor
  staging_version="v0.${K8S_VERSION#v1.}"
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  mkdir -p "$src"
  upstream_mod=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$upstream_mod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
  # k8s.io/kubernetes requires its staging modules as v0.0.0 and points them at ./staging/...;
  # replace directives of a dependency are ignored, so pin every one to its published tag.
  {
    printf 'module hybridgpu.local/kubernetes-build\n\ngo 1.24.0\n\ngodebug default=go1.24\n\n'
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$upstream_mod" \
      | while read -r module; do printf '\t%s => %s %s\n' "$module" "$module" "$staging_version"; done
    printf ')\n'
  } >"$src/go.mod"
  # What `make release` stamps, so `--version` and /version report the real release.
  local build_date p ldflags="-s -w"
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$build_date"
  done
  (cd "$src" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/.k8s-tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler)
  mv "$BIN_DIR"/.k8s-tmp/* "$BIN_DIR/"
  rmdir "$BIN_DIR/.k8s-tmp"
}

build_kwok() {
  GOBIN="$BIN_DIR/.kwok-tmp" nice -n 10 go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$BIN_DIR/.kwok-tmp/kwok" "$BIN_DIR/kwok"
  rmdir "$BIN_DIR/.kwok-tmp"
}

binaries_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

cmd_build() {
  if binaries_present; then
    log "binaries present in $BIN_DIR"
    return 0
  fi
  command -v go >/dev/null || die "go is required to build the control plane"
  mkdir -p "$BIN_DIR"
  # One build at a time per version key: a second `make test` waits for the first build.
  exec 9>"$CP_DIR/.build.lock"
  flock 9
  go_env
  local start=$SECONDS
  [[ -x "$BIN_DIR/etcd" ]] || { log "building etcd $ETCD_VERSION"; build_etcd; }
  [[ -x "$BIN_DIR/kwok" ]] || { log "building kwok $KWOK_VERSION"; build_kwok; }
  if [[ ! -x "$BIN_DIR/kube-apiserver" || ! -x "$BIN_DIR/kube-controller-manager" \
        || ! -x "$BIN_DIR/kube-scheduler" ]]; then
    log "building kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION"
    build_kubernetes
  fi
  log "built in $((SECONDS - start))s into $BIN_DIR"
  flock -u 9
  exec 9>&-
}

# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------
# Order matters: started in this order, stopped in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
PKI="$RUN_DIR/pki"
LOGS="$RUN_DIR/logs"
KUBECONFIG_PATH="$RUN_DIR/kubeconfig"

pid_of() { cat "$RUN_DIR/$1.pid" 2>/dev/null || true; }
alive() { local pid; pid=$(pid_of "$1"); [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; }

free_ports() {
  # n distinct free ports on 127.0.0.1, drawn from below the ephemeral range so that no
  # client connection can take one before its server binds it (tests/support/ports.py).
  python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/support/ports.py" "$1"
}

gen_pki() {
  mkdir -p "$PKI"
  local o="$PKI"
  # Throwaway CA: lives and dies with this state directory.
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hybridgpu-dev-ca" \
    -keyout "$o/ca.key" -out "$o/ca.crt" 2>/dev/null
  cat >"$o/apiserver.ext" <<EXT
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyEncipherment
EXT
  sign_cert apiserver "/CN=kube-apiserver" "$o/apiserver.ext"
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >"$o/client.ext"
  sign_cert admin "/O=system:masters/CN=hybridgpu-admin" "$o/client.ext"
  sign_cert kube-controller-manager "/CN=system:kube-controller-manager" "$o/client.ext"
  sign_cert kube-scheduler "/CN=system:kube-scheduler" "$o/client.ext"
  sign_cert kwok "/O=system:masters/CN=kwok" "$o/client.ext"
  # ServiceAccount token signing key pair.
  openssl genrsa -out "$o/sa.key" 2048 2>/dev/null
  openssl rsa -in "$o/sa.key" -pubout -out "$o/sa.pub" 2>/dev/null
}

sign_cert() {
  local name=$1 subj=$2 ext=$3 o="$PKI"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$o/$name.key" -out "$o/$name.csr" \
    2>/dev/null
  openssl x509 -req -in "$o/$name.csr" -CA "$o/ca.crt" -CAkey "$o/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$o/$name.crt" 2>/dev/null
  rm -f "$o/$name.csr"
}

write_kubeconfig() {
  local path=$1 user=$2
  cat >"$path" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$user.crt")
    client-key-data: $(base64 -w0 <"$PKI/$user.key")
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $user
current-context: $CLUSTER_NAME
KC
  chmod 600 "$path"
}

write_kwok_config() {
  # Stages: nodes become Ready at once and keep a lease; pods go Running at once; pods owned by a
  # Job finish (Succeeded) after the duration in the annotation hybridgpu.io/run-duration
  # (a Go duration such as "30s" or "2h"; default 1s); deleted pods go away at once.
  cat >"$RUN_DIR/kwok.yaml" <<'KWOK'
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: 8
  nodePlayStageParallelism: 8
  podPlayStageParallelism: 16
  podsOnNodeSyncParallelism: 4
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type  | Quote}}
      {{ end }}
      addresses:
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
      allocatable:
      {{ with .status.allocatable }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      capacity:
      {{ with .status.capacity }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      {{ $kwokVersion := printf "kwok-%s" Version }}
      nodeInfo:
        architecture: amd64
        bootID: ""
        containerRuntimeVersion: {{ $kwokVersion }}
        kernelVersion: {{ $kwokVersion }}
        kubeProxyVersion: {{ $kwokVersion }}
        kubeletVersion: {{ $kwokVersion }}
        machineID: ""
        operatingSystem: linux
        osImage: ""
        systemUUID: ""
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ with NodeIPWith .spec.nodeName }}
      hostIP: {{ . | Quote }}
      {{ end }}
      {{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ . | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: hybridgpu-job-pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values: ['Job']
  delay:
    durationMilliseconds: 1000
    durationFrom:
      expressionFrom: '.metadata.annotations["hybridgpu.io/run-duration"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
KWOK
  # A fleet of thousands of kwok nodes renews a lease per node every quarter of its duration
  # (500 writes/s for 5,000 nodes at 40 s): HYBRIDGPU_KWOK_LEASE_SECONDS lengthens it for scale
  # benchmarks, with the node controller's grace period to match (start_kube-controller-manager).
  sed -i "s/^  nodeLeaseDurationSeconds: 40\$/  nodeLeaseDurationSeconds: $KWOK_LEASE_SECONDS/" \
    "$RUN_DIR/kwok.yaml"
}

write_scheduler_config() {
  # Higher client QPS than the default 50 so thousands of pods bind quickly.
  cat >"$RUN_DIR/kube-scheduler.yaml" <<SCHED
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $RUN_DIR/kube-scheduler.kubeconfig
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
SCHED
}

start_component() {
  local name=$1; shift
  # setsid: each component leads its own process group, so `down` can kill the whole group.
  # The lock descriptors (8, 9) are closed so a running component never holds the up/down lock.
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 8>&- 9>&- &
  echo $! >"$RUN_DIR/$name.pid"
}

https_ok() {
  # https_ok URL [client cert name] -> 0 when the endpoint answers 200 "ok".
  local url=$1 user=${2:-}
  local args=(-fsS --max-time 3 --cacert "$PKI/ca.crt")
  [[ -n "$user" ]] && args+=(--cert "$PKI/$user.crt" --key "$PKI/$user.key")
  [[ "$url" == *:"$KCM_PORT"/* || "$url" == *:"$SCHEDULER_PORT"/* ]] && args+=(-k)
  curl "${args[@]}" "$url" >/dev/null 2>&1
}

wait_for() {
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    if ((SECONDS >= deadline)); then
      log "$what did not become ready within ${timeout}s; last log lines:"
      tail -n 30 "$LOGS/$what.log" >&2 || true
      return 1
    fi
    local c
    for c in "${COMPONENTS[@]}"; do
      if [[ -f "$RUN_DIR/$c.pid" ]] && ! alive "$c"; then
        log "$c exited; last log lines:"
        tail -n 30 "$LOGS/$c.log" >&2 || true
        return 1
      fi
    done
    sleep 0.3
  done
}

etcd_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ok() { https_ok "https://127.0.0.1:$APISERVER_PORT/readyz" admin; }
kcm_ok() { https_ok "https://127.0.0.1:$KCM_PORT/healthz"; }
scheduler_ok() { https_ok "https://127.0.0.1:$SCHEDULER_PORT/healthz"; }
kwok_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz" >/dev/null 2>&1; }
default_sa_ok() {
  https_ok "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default" admin
}

load_ports() {
  [[ -f "$RUN_DIR/ports.env" ]] || return 1
  # shellcheck disable=SC1091
  source "$RUN_DIR/ports.env"
}

all_alive() {
  local c
  for c in "${COMPONENTS[@]}"; do alive "$c" || return 1; done
}

# One function per component (`up` starts them in order; `restart` one of them alone), with the
# ports of ports.env and the files of the state directory.
start_etcd() {
  # etcd: loopback only; fsync off because this data is thrown away after the session.
  start_component etcd "$BIN_DIR/etcd" --name=default --data-dir="$RUN_DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes=8589934592 --log-level=warn
}

audit_args() {
  [[ -n "$AUDIT_LOG" && "$AUDIT_LOG" != 0 ]] || return 0
  cat >"$RUN_DIR/audit-policy.yaml" <<'AUDIT'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [list]
- level: None
AUDIT
  printf '%s\n' --audit-policy-file="$RUN_DIR/audit-policy.yaml" \
    --audit-log-path="$LOGS/audit.log" --audit-log-maxsize=500 --audit-log-maxbackup=2
}

start_kube-apiserver() {
  local audit=()
  mapfile -t audit < <(audit_args)
  start_component kube-apiserver "$BIN_DIR/kube-apiserver" \
    "${audit[@]}" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --allow-privileged=true --profiling=false \
    --max-requests-inflight=1000 --max-mutating-requests-inflight=500 \
    --v=1
}

start_kube-controller-manager() {
  start_component kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$RUN_DIR/kcm-certs" \
    --kubeconfig="$RUN_DIR/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$RUN_DIR/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$RUN_DIR/kube-controller-manager.kubeconfig" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false \
    --kube-api-qps=500 --kube-api-burst=1000 --concurrent-job-syncs=20 \
    "${NODE_GRACE_ARGS[@]}" --v=1
}

start_kube-scheduler() {
  start_component kube-scheduler "$BIN_DIR/kube-scheduler" \
    --config="$RUN_DIR/kube-scheduler.yaml" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$RUN_DIR/scheduler-certs" \
    --authentication-kubeconfig="$RUN_DIR/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$RUN_DIR/kube-scheduler.kubeconfig" \
    --v=1
}

start_kwok() {
  start_component kwok "$BIN_DIR/kwok" \
    --kubeconfig="$RUN_DIR/kwok.kubeconfig" --config="$RUN_DIR/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.1/16 --node-ip=10.240.0.1 \
    --server-address="127.0.0.1:$KWOK_PORT"
}

healthy() {
  case "$1" in
    etcd) etcd_ok ;;
    kube-apiserver) apiserver_ok ;;
    kube-controller-manager) kcm_ok ;;
    kube-scheduler) scheduler_ok ;;
    kwok) kwok_ok ;;
  esac
}

cmd_stop_component() {
  # Stop one component of a running control plane (fault tests: an apiserver or etcd outage);
  # its state stays, `start-component` brings it back on the same port.
  local c=${1:-}
  [[ " ${COMPONENTS[*]} " == *" $c "* ]] || die "usage: $0 stop-component|start-component|restart ${COMPONENTS[*]// /|}"
  load_ports || die "$CLUSTER_NAME is not up"
  exec 8>"$RUN_DIR/.lock"
  flock -w 60 8 || die "another up/down of $CLUSTER_NAME holds $RUN_DIR/.lock"
  stop_pid_group "$c"
  log "$c stopped ($CLUSTER_NAME)"
}

cmd_start_component() {
  local c=${1:-}
  [[ " ${COMPONENTS[*]} " == *" $c "* ]] || die "usage: $0 stop-component|start-component|restart ${COMPONENTS[*]// /|}"
  load_ports || die "$CLUSTER_NAME is not up"
  exec 8>"$RUN_DIR/.lock"
  flock -w 60 8 || die "another up/down of $CLUSTER_NAME holds $RUN_DIR/.lock"
  if alive "$c"; then
    log "$c already running ($CLUSTER_NAME)"
  else
    "start_$c"
  fi
  wait_for "$c" 120 healthy "$c" || die "$c did not come back"
  log "$c started ($CLUSTER_NAME)"
}

cmd_restart() {
  cmd_stop_component "$@"
  exec 8>&-
  cmd_start_component "$@"
}

cmd_up() {
  mkdir -p "$RUN_DIR"
  exec 8>"$RUN_DIR/.lock"
  flock -w 600 8 || die "another up/down of $CLUSTER_NAME holds $RUN_DIR/.lock"
  if load_ports && all_alive && apiserver_ok; then
    log "already up ($CLUSTER_NAME)"
    print_usage
    return 0
  fi
  stop_all  # leftovers of a half-started or crashed cluster
  cmd_build
  local start=$SECONDS
  rm -rf "$RUN_DIR/etcd-data" "$PKI" "$LOGS" "$RUN_DIR"/*.kubeconfig "$KUBECONFIG_PATH"
  mkdir -p "$LOGS"
  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT \
    < <(free_ports 6)
  cat >"$RUN_DIR/ports.env" <<PORTS
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
PORTS
  gen_pki
  write_kubeconfig "$KUBECONFIG_PATH" admin
  write_kubeconfig "$RUN_DIR/kube-controller-manager.kubeconfig" kube-controller-manager
  write_kubeconfig "$RUN_DIR/kube-scheduler.kubeconfig" kube-scheduler
  write_kubeconfig "$RUN_DIR/kwok.kubeconfig" kwok
  write_kwok_config
  write_scheduler_config

  if [[ -n "${HYBRIDGPU_CP_OWNER_PID:-}" ]]; then
    # Watchdog: when the owner (e.g. a pytest session) dies without calling `down`, stop anyway.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; exec "$2" down' \
      watchdog "$HYBRIDGPU_CP_OWNER_PID" "$(realpath "$0")" </dev/null >>"$LOGS/watchdog.log" 2>&1 \
      8>&- 9>&- &
    echo $! >"$RUN_DIR/watchdog.pid"
  fi

  start_etcd
  wait_for etcd 60 etcd_ok || { stop_all; die "etcd failed to start"; }
  start_kube-apiserver
  wait_for kube-apiserver 120 apiserver_ok || { stop_all; die "kube-apiserver failed to start"; }
  start_kube-controller-manager
  start_kube-scheduler
  start_kwok
  wait_for kube-controller-manager 90 kcm_ok || { stop_all; die "kube-controller-manager failed"; }
  wait_for kube-scheduler 90 scheduler_ok || { stop_all; die "kube-scheduler failed"; }
  wait_for kwok 90 kwok_ok || { stop_all; die "kwok failed to start"; }
  # Pods can only be admitted once the ServiceAccount controller made the default account.
  wait_for kube-controller-manager 90 default_sa_ok || { stop_all; die "no default ServiceAccount"; }
  log "up in $((SECONDS - start))s ($CLUSTER_NAME, apiserver https://127.0.0.1:$APISERVER_PORT)"
  print_usage
}

print_usage() {
  log "kubeconfig: $KUBECONFIG_PATH"
  log "use it with: export KUBECONFIG=$KUBECONFIG_PATH"
}

stop_pid_group() {
  local name=$1 pid
  pid=$(pid_of "$name")
  [[ -n "$pid" ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    local t0=$SECONDS
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop on SIGTERM; killing"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    ((SECONDS - t0 < 3)) || log "$name took $((SECONDS - t0))s to stop"
  fi
  rm -f "$RUN_DIR/$name.pid"
}

stop_all() {
  # Clients of the apiserver first (together, they do not depend on each other), then the
  # apiserver, then etcd.
  local c pid
  for c in kwok kube-scheduler kube-controller-manager; do
    pid=$(pid_of "$c")
    [[ -n "$pid" ]] && kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_pid_group "$c"
  done
}

cmd_down() {
  [[ -d "$RUN_DIR" ]] || { log "nothing to stop ($CLUSTER_NAME)"; return 0; }
  # The watchdog calls `down` itself; never let it kill its own process group.
  local watchdog
  watchdog=$(pid_of watchdog)
  if [[ -n "$watchdog" && "$(ps -o pgid= -p $$ 2>/dev/null | tr -d ' ')" != "$watchdog" ]]; then
    stop_pid_group watchdog
  fi
  exec 8>"$RUN_DIR/.lock"
  # Bounded wait: stopping must never hang, even if a stray process still holds the lock.
  flock -w 30 8 || log "lock busy for 30s; stopping anyway"
  stop_all
  rm -f "$RUN_DIR/watchdog.pid"
  rm -rf "$RUN_DIR/etcd-data"
  log "down ($CLUSTER_NAME)"
}

cmd_status() {
  local c rc=0
  load_ports || { echo "$CLUSTER_NAME: not up"; return 1; }
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then echo "$c: running (pid $(pid_of "$c"))"; else echo "$c: stopped"; rc=1; fi
  done
  if ((rc == 0)) && apiserver_ok; then
    echo "apiserver: https://127.0.0.1:$APISERVER_PORT ready"
    echo "kubeconfig: $KUBECONFIG_PATH"
  else
    rc=1
  fi
  return $rc
}

cmd_env() {
  load_ports && all_alive || die "$CLUSTER_NAME is not up; run: $0 up"
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
}

cmd_paths() {
  echo "BIN_DIR=$BIN_DIR"
  echo "RUN_DIR=$RUN_DIR"
  echo "KUBECONFIG=$KUBECONFIG_PATH"
}

main() {
  local cmd=${1:-}
  shift || true
  case "$cmd" in
    build) cmd_build "$@" ;;
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    env) cmd_env "$@" ;;
    paths) cmd_paths "$@" ;;
    stop-component) cmd_stop_component "$@" ;;
    start-component) cmd_start_component "$@" ;;
    restart) cmd_restart "$@" ;;
    *) die "usage: $0 build|up|down|status|env|paths|stop-component|start-component|restart" ;;
  esac
}

main "$@"
