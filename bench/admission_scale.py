"""Issue 17's scenario at scale, on the real control plane: capacity scaled for critical pods
goes to them, not to the preemptible backlog.

About ``--nodes`` kwok GPU nodes (8 GPUs each) in a core pool and a tainted spot pool (spot at
its maxNodes), all busy with one preemptible 8-GPU pod each; ``--pending`` preemptible 8-GPU
pods pending behind them; then ``--critical`` critical 8-GPU pods arrive. The operator runs
as a ``hybridgpu run`` subprocess with its admission webhook on (HYBRIDGPU_WEBHOOK_PORT=0, one
PriorityClass per criticality as the chart ships them) and the kwok provider for an empty
elastic pool (boot delay ``--boot-delay``). Prints JSON: seconds until every critical pod is
Running (target <= 60), how many new elastic nodes ran a preemptible pod (target 0), the
operator's reaction time (critical pods created -> its first ScaleUp Event seen), where the
critical pods ran. Exits 1 when a target is missed.

    .venv/bin/python bench/admission_scale.py --nodes 1000 --pending 274 --critical 20

Brings up its own control plane (hack/control-plane.sh; built on first use) unless
$HYBRIDGPU_KUBECONFIG names a running one, and stops everything it started, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(ROOT / "bench"),
    str(ROOT / "tests" / "e2e"),
    str(ROOT / "tests"),
    str(ROOT / "operator"),
]

from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from test_admission_webhook import (  # noqa: E402
    CRITICALITY,
    MANAGED_CONFIGURATION,
    PRIORITIES,
    WEBHOOK_ENV,
    webhook_urls,
)

from conftest import (  # noqa: E402
    SPOT_TAINT,
    SPOT_TOLERATION,
    Cluster,
    Operators,
    delete_workloads,
    release_custom_objects,
)
from hybridgpu.cloud.kwok import kwok_node  # noqa: E402
from hybridgpu.models.pool import GPUPoolSpec  # noqa: E402
from kwok_scale import parallel  # noqa: E402
from support.controlplane import (  # noqa: E402
    LIFECYCLE_TAINTS,
    ControlPlane,
    KubeTest,
    create_test_namespace,
    delete_namespace,
    gpu_job,
    gpu_node,
    install_crds,
    start_control_plane,
    stop_control_plane,
    wait_until,
)

GPUS = 8
WORKERS = 16
GROUP_LABEL = "bench.hybridgpu.io/group"


def cached_list(plane: ControlPlane, path: str, **query: str) -> list[dict[str, Any]]:
    """A list call answered from the apiserver's watch cache (resourceVersion=0), as dicts."""
    response = plane.api.call_api(
        path,
        "GET",
        query_params=[*query.items(), ("resourceVersion", "0")],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return list(json.loads(response.data)["items"])


def usable(node: dict[str, Any]) -> bool:
    """Ready, and the lifecycle taints put on at registration are gone."""
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )
    taints = node.get("spec", {}).get("taints") or []
    return ready and not any(t["key"] in LIFECYCLE_TAINTS for t in taints)


def job_pods(plane: ControlPlane, namespace: str, group: str) -> list[dict[str, Any]]:
    """Pods of the bench's Jobs of ``group`` (fleet, backlog, urgent)."""
    return cached_list(
        plane, f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{GROUP_LABEL}={group}"
    )


def jobs(
    group: str, count: int, criticality: str, *, spot: bool, name: str | None = None
) -> list[dict[str, Any]]:
    """``count`` Jobs of one 8-GPU pod each; a pod preempted by the scheduler is replaced
    (backoffLimit 1000) instead of failing its Job."""
    out = []
    for i in range(count):
        body = gpu_job(
            f"{name or group}-{i}",
            gpus=GPUS,
            run_duration="24h",
            labels={CRITICALITY: criticality, GROUP_LABEL: group},
            tolerations=[SPOT_TOLERATION] if spot else [],
        )
        # Counted as a failure, so the Job controller lifts its finalizer at once (kwok
        # only deletes the pod; with a podFailurePolicy it would wait for a terminal phase).
        body["spec"]["backoffLimit"] = 1000
        out.append(body)
    return out


def running(pods: list[dict[str, Any]]) -> int:
    return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")


@dataclass
class Watch:
    """Polls the cluster while the critical pods are waiting: elastic nodes, who runs on
    them, the operator's first ScaleUp Event for the elastic pool, the critical pods."""

    plane: ControlPlane
    namespace: str
    elastic: str
    critical_group: str
    started: float
    first_scale_up_event: float | None = None
    first_elastic_node: float | None = None
    first_critical_running: float | None = None
    all_critical_running: float | None = None
    elastic_nodes: set[str] = field(default_factory=set)
    taken_by_others: dict[str, list[str]] = field(default_factory=dict)
    """Elastic node -> pods of other Jobs (preemptible) ever seen on it."""
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def poll(self, critical: int) -> None:
        nodes = cached_list(
            self.plane, "/api/v1/nodes", labelSelector=f"hybridgpu.io/pool={self.elastic}"
        )
        self.elastic_nodes |= {n["metadata"]["name"] for n in nodes}
        if nodes and self.first_elastic_node is None:
            self.first_elastic_node = self.elapsed()
        for name in sorted(self.elastic_nodes):
            for pod in cached_list(
                self.plane, "/api/v1/pods", fieldSelector=f"spec.nodeName={name}"
            ):
                group = pod["metadata"].get("labels", {}).get(GROUP_LABEL)
                if group != self.critical_group:
                    seen = self.taken_by_others.setdefault(name, [])
                    if pod["metadata"]["name"] not in seen:
                        seen.append(pod["metadata"]["name"])
        if self.first_scale_up_event is None:
            events = cached_list(self.plane, "/api/v1/events", fieldSelector="reason=ScaleUp")
            if any(e["involvedObject"].get("name") == self.elastic for e in events):
                self.first_scale_up_event = self.elapsed()
        up = running(job_pods(self.plane, self.namespace, self.critical_group))
        if up and self.first_critical_running is None:
            self.first_critical_running = self.elapsed()
        if up >= critical and self.all_critical_running is None:
            self.all_critical_running = self.elapsed()

    def run(self, critical: int) -> None:
        while not self.stop.is_set():
            try:
                self.poll(critical)
            except Exception as exc:
                self.errors.append(repr(exc))
            self.stop.wait(0.25)


def priority_classes(plane: ControlPlane, cluster: Cluster) -> list[str]:
    """One PriorityClass per criticality, labelled as the chart ships them."""
    scheduling = client.SchedulingV1Api(plane.api)
    names = []
    for criticality, (value, preemption) in PRIORITIES.items():
        name = cluster.name(criticality)
        scheduling.create_priority_class(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name, "labels": {CRITICALITY: criticality}},
                "value": value,
                "preemptionPolicy": preemption,
            }
        )
        names.append(name)
    return names


def wait_running(plane: ControlPlane, ns: str, job: str, want: int, timeout: float) -> None:
    wait_until(
        lambda: running(job_pods(plane, ns, job)) >= want,
        timeout_seconds=timeout,
        interval_seconds=1,
        what=f"{want} pods of {job} Running",
    )


def scenario(
    plane: ControlPlane,
    cluster: Cluster,
    operators: Operators,
    args: argparse.Namespace,
    result: dict[str, Any],
) -> None:
    kube = cluster.kube
    ns = kube.namespace
    n_core = round(args.nodes * args.core_share)
    n_spot = args.nodes - n_core
    result.update(
        nodes=args.nodes,
        core_nodes=n_core,
        spot_nodes=n_spot,
        gpus_per_node=GPUS,
        pending_preemptible=args.pending,
        critical=args.critical,
        elastic_max_nodes=args.elastic_max,
        boot_delay_seconds=args.boot_delay,
        interval=args.interval,
        core_work=args.core_work,
        load_average_at_start=[round(x, 2) for x in os.getloadavg()],
    )
    policy = cluster.policy(interval=args.interval)
    core = cluster.pool("core", tier="core", policy=policy, per_node=GPUS, max_nodes=n_core)
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=GPUS,
        max_nodes=n_spot,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="10m",
    )
    elastic = cluster.pool(
        "elastic",
        tier="elastic",
        policy=policy,
        per_node=GPUS,
        max_nodes=args.elastic_max,
        price=10.0,
        idle_for="10m",
    )
    spot_spec = GPUPoolSpec.model_validate(cluster.pool_object(spot)["spec"])
    bodies = [gpu_node(f"{core}-{i}", pool=core, tier="core", gpus=GPUS) for i in range(n_core)]
    bodies += [kwok_node(f"{spot}-{i}", spot, spot_spec) for i in range(n_spot)]
    t0 = time.monotonic()
    parallel(plane.core.create_node, bodies, WORKERS)
    wait_until(
        lambda: (
            sum(usable(n) for n in cached_list(plane, "/api/v1/nodes", labelSelector="type=kwok"))
            >= args.nodes
        ),
        timeout_seconds=600,
        interval_seconds=1,
        what=f"{args.nodes} nodes Ready",
    )
    result["nodes_ready_seconds"] = round(time.monotonic() - t0, 1)

    priority_classes(plane, cluster)
    t0 = time.monotonic()
    operators.start(kwok_delay_seconds=args.boot_delay, extra_env=WEBHOOK_ENV)
    cluster.wait_ticking(policy, timeout_seconds=180)
    wait_until(lambda: webhook_urls(kube), timeout_seconds=60, what="the webhook registered")
    result["operator_up_seconds"] = round(time.monotonic() - t0, 1)

    # The fleet: one 8-GPU Job (one pod) on every core node (--core-work) and on every spot
    # node (preemptible). A pod the scheduler preempts is replaced.
    t0 = time.monotonic()
    on_core = jobs("fleet", n_core, args.core_work, spot=False, name="core")
    parallel(kube.create_job, on_core, WORKERS)
    wait_running(plane, ns, "fleet", n_core, timeout=900)
    on_spot = jobs("fleet", n_spot, "preemptible", spot=True, name="spot")
    parallel(kube.create_job, on_spot, WORKERS)
    wait_running(plane, ns, "fleet", n_core + n_spot, timeout=900)
    result["fleet_running_seconds"] = round(time.monotonic() - t0, 1)

    t0 = time.monotonic()
    parallel(kube.create_job, jobs("backlog", args.pending, "preemptible", spot=True), WORKERS)

    def backlog_pending() -> bool:
        pods = job_pods(plane, ns, "backlog")
        return len(pods) >= args.pending and all(
            not p["spec"].get("nodeName")
            and any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p.get("status", {}).get("conditions", [])
            )
            for p in pods
        )

    wait_until(backlog_pending, timeout_seconds=600, interval_seconds=1, what="backlog pending")
    result["backlog_pending_seconds"] = round(time.monotonic() - t0, 1)
    cluster.wait_ticks(policy, ticks=2, timeout_seconds=180)
    backlog_pods = job_pods(plane, ns, "backlog")
    sample = backlog_pods[0]["spec"]
    result["backlog_priority_class"] = sample.get("priorityClassName")
    result["backlog_has_tier_affinity"] = bool((sample.get("affinity") or {}).get("nodeAffinity"))
    result["elastic_nodes_before_critical"] = len(cluster.pool_nodes(elastic))

    # The critical pods arrive.
    watch = Watch(plane, ns, elastic, "urgent", started=time.monotonic())
    result["load_average_at_critical"] = [round(x, 2) for x in os.getloadavg()]
    parallel(kube.create_job, jobs("urgent", args.critical, "critical", spot=False), WORKERS)
    thread = threading.Thread(target=watch.run, args=(args.critical,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + args.timeout
        while watch.all_critical_running is None and time.monotonic() < deadline:
            time.sleep(0.5)
        # A few ticks more: a preemptible pod taking a new node late is counted too.
        cluster.wait_ticks(policy, ticks=2, timeout_seconds=180)
        time.sleep(2 * args.boot_delay)
    finally:
        watch.stop.set()
        thread.join(timeout=30)
    watch.poll(args.critical)

    urgent = job_pods(plane, ns, "urgent")
    tiers = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("hybridgpu.io/tier")
        for n in cached_list(plane, "/api/v1/nodes", labelSelector="type=kwok")
    }
    placement: dict[str, int] = {}
    for pod in urgent:
        where = tiers.get(pod["spec"].get("nodeName") or "", "pending")
        placement[where] = placement.get(where, 0) + 1
    result.update(
        critical_all_running_seconds=watch.all_critical_running,
        critical_first_running_seconds=watch.first_critical_running,
        critical_running_at_end=running(urgent),
        critical_placement_by_tier=placement,
        critical_priority_classes=sorted({p["spec"].get("priorityClassName") for p in urgent}),
        operator_reaction_seconds=watch.first_scale_up_event,
        first_elastic_node_seconds=watch.first_elastic_node,
        new_elastic_nodes=len(watch.elastic_nodes),
        new_elastic_nodes_running_preemptible=len(watch.taken_by_others),
        elastic_nodes_taken=watch.taken_by_others,
        backlog_running_at_end=running(job_pods(plane, ns, "backlog")),
        fleet_running_at_end=running(job_pods(plane, ns, "fleet")),
        watch_errors=watch.errors[:5],
        load_average_at_end=[round(x, 2) for x in os.getloadavg()],
    )


def clean_up(plane: ControlPlane, cluster: Cluster) -> None:
    """What the bench created on a control plane it did not start."""
    kube = cluster.kube
    delete_workloads(kube)
    release_custom_objects(kube, cluster.created)
    scheduling = client.SchedulingV1Api(plane.api)
    for criticality in PRIORITIES:
        try:
            scheduling.delete_priority_class(cluster.name(criticality))
        except ApiException as exc:
            if exc.status != 404:
                raise
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        kube.kubectl("delete", kind, MANAGED_CONFIGURATION, "--ignore-not-found")
    names = [
        n.metadata.name
        for n in kube.core.list_node().items
        if n.metadata.name.startswith(cluster.prefix)
    ]
    parallel(kube.core.delete_node, names, WORKERS)
    delete_namespace(plane, kube.namespace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="core + spot nodes")
    parser.add_argument("--core-share", type=float, default=0.4, help="share of core nodes")
    parser.add_argument(
        "--core-work",
        choices=sorted(PRIORITIES),
        default="preemptible",
        help="criticality of the pods filling core (spot is always preemptible work)",
    )
    parser.add_argument("--pending", type=int, default=274, help="preemptible pods pending")
    parser.add_argument("--critical", type=int, default=20, help="critical pods arriving")
    parser.add_argument("--elastic-max", type=int, default=40, help="elastic pool maxNodes")
    parser.add_argument("--boot-delay", type=float, default=2.0, help="kwok boot delay, s")
    parser.add_argument("--interval", default="10s", help="the ScalingPolicy's interval")
    parser.add_argument("--timeout", type=float, default=180, help="wait for critical, s")
    parser.add_argument("--operator-log", help="copy the operator's log to this file")
    args = parser.parse_args(argv)

    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    result: dict[str, Any] = {}
    t0 = time.monotonic()
    plane = (
        ControlPlane(kubeconfig=Path(reuse)) if reuse else start_control_plane("bench-admission")
    )
    result["control_plane_start_seconds"] = round(time.monotonic() - t0, 1)
    try:
        install_crds(plane)
        kube = KubeTest(plane=plane, namespace=create_test_namespace(plane, "admission"))
        cluster = Cluster(kube)
        with tempfile.TemporaryDirectory(prefix="hybridgpu-admission-") as logs:
            operators = Operators(kube=kube, log_dir=Path(logs))
            try:
                scenario(plane, cluster, operators, args, result)
            except Exception as exc:
                result["error"] = repr(exc)
            finally:
                operators.stop_all()
                for op in operators.started:
                    result["operator_log_tail"] = op.log()[-1500:]
                    if args.operator_log:
                        Path(args.operator_log).write_text(op.log())
                if reuse:
                    clean_up(plane, cluster)
    finally:
        if reuse:
            plane.close()
        else:
            stop_control_plane(plane)
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    tail = result.pop("operator_log_tail", "")
    met = (
        result.get("critical_all_running_seconds") is not None
        and result["critical_all_running_seconds"] <= 60
        and result.get("new_elastic_nodes_running_preemptible") == 0
    )
    result["targets_met"] = met
    if not met:
        sys.stderr.write(f"--- operator log (tail) ---\n{tail}\n")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
