#!/usr/bin/env bash
# The local demo: a hybrid GPU cluster on this machine, telling its story within two minutes.
#
#   hack/demo.sh up      control plane + CRDs + owned kwok GPU nodes + example pools + the
#                        operator in the background + a mixed workload (`make demo`)
#   hack/demo.sh down    stop the operator and the control plane; no process is left (`make demo-down`)
#   hack/demo.sh status  what is running
#
# Cloud pools (examples/demo.yaml) use the kwok provider: their capacity appears as kwok Nodes.
# The cluster is $HYBRIDGPU_CLUSTER_NAME (default demo), so it never touches a dev cluster or a
# test session's; its state, the operator's pid file and log live in its run directory
# (~/.cache/hybridgpu/run/demo). See docs/development.md.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
export HYBRIDGPU_CLUSTER_NAME=${HYBRIDGPU_CLUSTER_NAME:-demo}
CONTROL_PLANE="$REPO/hack/control-plane.sh"
HYBRIDGPU=${HYBRIDGPU_BIN:-$REPO/.venv/bin/hybridgpu}
POLICY=default
TICK_TIMEOUT_SECONDS=90

log() { printf '[demo] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

RUN_DIR= KUBECONFIG_FILE=
while IFS='=' read -r key value; do
  case $key in
    RUN_DIR) RUN_DIR=$value ;;
    KUBECONFIG) KUBECONFIG_FILE=$value ;;
  esac
done < <("$CONTROL_PLANE" paths)
OPERATOR_PID_FILE="$RUN_DIR/operator.pid"
OPERATOR_LOG="$RUN_DIR/logs/operator.log"
WATCHDOG_PID_FILE="$RUN_DIR/demo-watchdog.pid"

kubectl_bin() {
  local found=${HYBRIDGPU_KUBECTL:-}
  [[ -n "$found" && -x "$found" ]] || found=$(command -v kubectl || true)
  [[ -n "$found" ]] || die "kubectl not found: run \`make tools\` (or set HYBRIDGPU_KUBECTL)"
  echo "$found"
}

k() { "$(kubectl_bin)" --kubeconfig="$KUBECONFIG_FILE" "$@"; }

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }
operator_pid() { cat "$OPERATOR_PID_FILE" 2>/dev/null || true; }

free_ports() {
  # n distinct free ports on 127.0.0.1, drawn from below the ephemeral range so that no
  # client connection can take one before its server binds it (tests/support/ports.py).
  python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/support/ports.py" "$1"
}

wait_for() {
  # wait_for WHAT TIMEOUT_SECONDS COMMAND...: poll until COMMAND succeeds; the operator must live.
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ -f "$OPERATOR_PID_FILE" ]] && ! pid_alive "$(operator_pid)"; then
      log "the operator exited; last lines of $OPERATOR_LOG:"
      tail -n 30 "$OPERATOR_LOG" >&2 || true
      die "$what: the operator is not running (make demo-down cleans up)"
    fi
    ((SECONDS < deadline)) || die "$what: not within ${timeout}s (make demo-down cleans up)"
    sleep 1
  done
}

ticked() { [[ -n "$(k get scalingpolicy "$POLICY" -o jsonpath='{.status.lastTick}')" ]]; }

start_operator() {
  local liveness_port metrics_port
  read -r liveness_port metrics_port < <(free_ports 2)
  mkdir -p "$(dirname "$OPERATOR_LOG")"
  # setsid: the operator leads its own process group, so `down` stops everything it started.
  setsid "$HYBRIDGPU" run --kubeconfig "$KUBECONFIG_FILE" --identity demo \
    --liveness "http://127.0.0.1:$liveness_port/healthz" \
    --metrics-port "$metrics_port" </dev/null >>"$OPERATOR_LOG" 2>&1 &
  echo $! >"$OPERATOR_PID_FILE"
  echo "METRICS_URL=http://127.0.0.1:$metrics_port/metrics" >"$RUN_DIR/operator.env"
  log "operator started (pid $(operator_pid)), log $OPERATOR_LOG"
}

start_watchdog() {
  # When the owner (a test) dies without calling `down`, the watchdog calls it.
  [[ -n "${HYBRIDGPU_CP_OWNER_PID:-}" ]] || return 0
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; exec "$2" down' \
    demo-watchdog "$HYBRIDGPU_CP_OWNER_PID" "$REPO/hack/demo.sh" </dev/null >/dev/null 2>&1 &
  echo $! >"$WATCHDOG_PID_FILE"
}

submit_workload() {
  local step=demo.hybridgpu.io/step
  if k get job render-frames >/dev/null 2>&1; then
    log "workload already submitted"
    return 0
  fi
  log "step 1: a preemptible and a critical Job fill the two core nodes"
  k apply -f "$REPO/examples/demo-workload.yaml" -l "$step=1" >&2
  wait_for "step 1 Jobs running" 90 \
    k wait --for=jsonpath='{.status.ready}'=1 job/render-frames job/train-llm --timeout=2s
  log "step 2: a critical and a standard Job arrive while core is full"
  k apply -f "$REPO/examples/demo-workload.yaml" -l "$step=2" >&2
}

print_usage() {
  local tools_dir metrics_url
  tools_dir=$(dirname "$(kubectl_bin)")
  metrics_url=$(sed -n 's/^METRICS_URL=//p' "$RUN_DIR/operator.env" 2>/dev/null || true)
  cat <<USAGE

The demo runs. In another terminal:

  export KUBECONFIG=$KUBECONFIG_FILE; export PATH=$tools_dir:\$PATH
  watch -n 2 kubectl get gpupools,nodes,jobs

(kubectl -w follows one kind at a time: kubectl get jobs -w, kubectl get nodes -w, kubectl get events -w)

Within about two minutes you see:
  - render-frames (preemptible) suspended on core and moved to the spot pool: a spot-* node
    appears after its boot delay and the Job runs there (kubectl get pods -o wide);
  - an elastic-* node bought for the work core could not take, then released once idle;
  - why, action by action: kubectl get events, and
    $HYBRIDGPU explain --kubeconfig $KUBECONFIG_FILE
Operator log: $OPERATOR_LOG${metrics_url:+
Operator metrics: curl -s $metrics_url | grep ^hybridgpu_}
Stop everything: make demo-down (or hack/demo.sh down)
USAGE
}

cmd_up() {
  if pid_alive "$(operator_pid)"; then
    log "already running ($HYBRIDGPU_CLUSTER_NAME); make demo-down first to start over"
    print_usage
    return 0
  fi
  [[ -x "$HYBRIDGPU" ]] || die "$HYBRIDGPU not found: run \`make install\`"
  local start=$SECONDS
  "$CONTROL_PLANE" up
  start_watchdog
  log "CRDs"
  k apply --server-side --field-manager=hybridgpu-demo -f "$REPO/crds/" >&2
  k wait --for=condition=Established --timeout=60s -f "$REPO/crds/" >&2
  log "owned GPU nodes core-0 and core-1 (examples/demo-nodes.yaml)"
  # Client-side apply: a create keeps the status (nvidia.com/gpu capacity) given in the file.
  k apply -f "$REPO/examples/demo-nodes.yaml" >&2
  k wait --for=condition=Ready --timeout=60s node/core-0 node/core-1 >&2
  log "pools core, elastic, spot and ScalingPolicy $POLICY (examples/demo.yaml)"
  k apply --server-side --field-manager=hybridgpu-demo -f "$REPO/examples/demo.yaml" >&2
  start_operator
  wait_for "first tick of ScalingPolicy $POLICY" "$TICK_TIMEOUT_SECONDS" ticked
  submit_workload
  log "up in $((SECONDS - start))s"
  print_usage
}

stop_operator() {
  local pid
  pid=$(operator_pid)
  if pid_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    if pid_alive "$pid"; then
      log "operator did not stop on SIGTERM; killing"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      while pid_alive "$pid"; do sleep 0.1; done
    fi
    log "operator stopped"
  fi
  rm -f "$OPERATOR_PID_FILE" "$RUN_DIR/operator.env"
}

cmd_down() {
  local watchdog
  watchdog=$(cat "$WATCHDOG_PID_FILE" 2>/dev/null || true)
  # The watchdog calls `down` itself; it must not kill its own process group.
  if pid_alive "$watchdog" && [[ "$(ps -o pgid= -p $$ | tr -d ' ')" != "$watchdog" ]]; then
    kill -TERM -- "-$watchdog" 2>/dev/null || true
  fi
  rm -f "$WATCHDOG_PID_FILE"
  stop_operator
  "$CONTROL_PLANE" down
}

cmd_status() {
  local pid
  pid=$(operator_pid)
  if pid_alive "$pid"; then echo "operator: running (pid $pid)"; else echo "operator: stopped"; fi
  "$CONTROL_PLANE" status
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) die "usage: $0 up|down|status" ;;
esac
