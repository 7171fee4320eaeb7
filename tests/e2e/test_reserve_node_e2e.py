"""A node kept for the Job the deadline rule moved to on-demand, on the real control plane
(etcd, kube-apiserver, kube-scheduler with its PrioritySort queue, the Job controller, kwok
nodes): a standard pod that starts to wait in the pool after the move outranks the
preemptible Job's pod there, yet the first node that comes up goes to the Job, because the
operator tainted it for the Job when it registered, before it reported its GPUs (as a real
node's device plugin reports them a while after its kubelet registered it:
$HYBRIDGPU_KWOK_GPU_REPORT_SECONDS). The taint stays while the Job's pod runs there (else
kube-scheduler would preempt it for the standard pod) and is taken off once the Job is gone.
docs/concepts.md, "Deadlines".

The operator is an in-process Reconciler ticked by the test (test_deadline_return_e2e.py's).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from test_deadline_return_e2e import ON_DEMAND_TAINT, PREEMPTIBLE, Clock, Operator

from conftest import KUBE_SECONDS, Cluster, wait_for
from hybridgpu.cloud.kwok import GPU_REPORT_ENV
from hybridgpu.core.deadline import BOOT_ALLOWANCE_SECONDS
from hybridgpu.kube.names import (
    DEADLINE_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    POOL_LABEL,
    RESERVED_TAINT,
)
from hybridgpu.models.timestamps import format_rfc3339
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e

RESTART = 300.0
WORK = 3600.0
ON_DEMAND_TOLERATION = {
    "key": ON_DEMAND_TAINT["key"],
    "operator": "Equal",
    "value": ON_DEMAND_TAINT["value"],
    "effect": "NoSchedule",
}
GPU_REPORT_SECONDS = 8.0
"""How long a new kwok node reports no GPUs: ticks every fraction of a second see it first."""


@pytest.fixture
def operator_clock(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Operator, str]]:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kube.plane.kubeconfig))
    monkeypatch.setenv(GPU_REPORT_ENV, f"{GPU_REPORT_SECONDS:g}")
    policy = cluster.policy(
        interval="2s",
        preemption={"minRuntime": "0s", "checkpointGracePeriod": "5s", "restartOverhead": "5m"},
    )
    operator = Operator(cluster, policy, Clock())
    try:
        yield operator, policy
    finally:
        operator.close()


@pytest.fixture
def low_priority(cluster: Cluster) -> Iterator[str]:
    """A PriorityClass below the default (0), never preempting: what the chart gives
    preemptible pods (no admission webhook runs here, so the Job names it itself)."""
    name = f"{cluster.kube.namespace}-preemptible"
    body = client.V1PriorityClass(
        metadata=client.V1ObjectMeta(name=name), value=-100000, preemption_policy="Never"
    )
    scheduling = client.SchedulingV1Api(cluster.kube.core.api_client)
    scheduling.create_priority_class(body)
    try:
        yield name
    finally:
        scheduling.delete_priority_class(name)


def on_node(cluster: Cluster, job: str) -> str | None:
    """The node the Job's (one) pod is bound to, if any."""
    for pod in cluster.job_pods(job):
        if pod.spec.node_name:
            return str(pod.spec.node_name)
    return None


def pool_nodes(cluster: Cluster, pool: str) -> list[Any]:
    """The pool's nodes, oldest first."""
    nodes = cluster.kube.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items
    return sorted(nodes, key=lambda n: (n.metadata.creation_timestamp, n.metadata.name))


def state(cluster: Cluster, operator: Operator, pool: str) -> str:
    """What a failed wait saw: the pool's nodes, the Jobs' pods, the operator's last plan."""
    lines = []
    for node in pool_nodes(cluster, pool):
        lines.append(
            f"node {node.metadata.name} created {node.metadata.creation_timestamp} "
            f"taints {[(t.key, t.value) for t in node.spec.taints or []]} "
            f"allocatable {node.status.allocatable} "
            f"notes {node.metadata.annotations}"
        )
    for job in ("late", "svc"):
        for pod in cluster.job_pods(job):
            conditions = [(c.type, c.status, c.reason) for c in pod.status.conditions or []]
            lines.append(
                f"pod {pod.metadata.name} node {pod.spec.node_name} phase {pod.status.phase} "
                f"{conditions} tolerations {[(t.key, t.value) for t in pod.spec.tolerations or []]}"
            )
    last = operator.reconciler.last
    plan = last.plan if last is not None else None
    lines += [f"plan: {line}" for line in (plan.explain() if plan is not None else [])]
    return "\n".join(lines)


def kept_for(node: Any) -> bool:
    return any(t.key == RESERVED_TAINT for t in node.spec.taints or [])


def test_the_first_on_demand_node_goes_to_the_job_moved_there_not_to_a_standard_pod(
    cluster: Cluster, operator_clock: tuple[Operator, str], low_priority: str
) -> None:
    operator, policy = operator_clock
    elastic = cluster.pool(
        "od",
        tier="elastic",
        policy=policy,
        per_node=1,
        max_nodes=4,
        idle_for="24h",
        taints=[ON_DEMAND_TAINT],
        provider={"type": "kwok", "kwok": {"bootDelay": "6s"}},
    )
    # A Job with a minute of slack beyond an on-demand switch: it must move at once.
    body = gpu_job("late", gpus=1, run_duration="10h", labels=PREEMPTIBLE)
    body["spec"]["template"]["spec"]["priorityClassName"] = low_priority
    created = operator.clock()
    body["metadata"]["annotations"] = {
        DEADLINE_ANNOTATION: format_rfc3339(created + WORK + BOOT_ALLOWANCE_SECONDS + RESTART + 60),
        EXPECTED_DURATION_ANNOTATION: f"{WORK:.0f}s",
    }
    cluster.kube.create_job(body)
    wait_for(lambda: cluster.job_pods("late"), KUBE_SECONDS, "late's pod")
    operator.tick_until(
        lambda: (
            (cluster.job("late").spec.template.spec.node_selector or {}).get(POOL_LABEL) == elastic
        ),
        "late moved to on-demand",
    )
    # A standard Job (priority 0, above late's) starts to wait in the pool.
    cluster.kube.create_job(
        gpu_job("svc", gpus=1, run_duration="10h", tolerations=[ON_DEMAND_TOLERATION])
    )
    wait_for(lambda: cluster.job_pods("svc"), KUBE_SECONDS, "svc's pod")

    # The pool's nodes register without GPUs; when they report them, the pods land. The first
    # is kept for late when it registers, before it reports its GPUs, and late's pod lands
    # there, not svc's (which outranks it in the scheduler's queue). The test finds that node
    # by the operator's Event, not by creation time: svc's own node, bought a tick later,
    # often registers within the same second, and creation times have whole seconds.
    def kept_for_late() -> str | None:
        for e in cluster.events("NodeReserved"):
            if e.involved_object.kind == "Node" and "/late" in (e.message or ""):
                return str(e.involved_object.name)
        return None

    try:
        name = operator.tick_until(kept_for_late, "a node kept for late")
        operator.tick_until(lambda: on_node(cluster, "late"), "late's pod on a node")
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{state(cluster, operator, elastic)}") from err
    assert on_node(cluster, "late") == name, state(cluster, operator, elastic)
    assert on_node(cluster, "svc") != name
    oldest = pool_nodes(cluster, elastic)[0]
    assert (
        oldest.metadata.creation_timestamp
        == cluster.kube.core.read_node(name).metadata.creation_timestamp
    ), "the node kept is not the pool's first"
    late_pod = next(p.metadata.uid for p in cluster.job_pods("late") if p.spec.node_name)
    # The node stays kept while late runs there: svc (priority 0, above late's -100000) gets a
    # node of its own, and kube-scheduler, which preempts only on nodes whose taints the
    # waiting pod tolerates, never takes late's node for it.
    try:
        operator.tick_until(lambda: on_node(cluster, "svc"), "svc's pod on a node")
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{state(cluster, operator, elastic)}") from err
    assert on_node(cluster, "svc") != name

    def late_still_there() -> bool:
        pods = [p for p in cluster.job_pods("late") if p.metadata.deletion_timestamp is None]
        return [(p.metadata.uid, p.spec.node_name) for p in pods] == [(late_pod, name)]

    for _ in range(3):  # the operator's progress, not a sleep
        operator.tick()
        assert kept_for(cluster.kube.core.read_node(name)), state(cluster, operator, elastic)
        assert late_still_there(), state(cluster, operator, elastic)
    # Two pods, two nodes: a node that registered before reporting its GPUs was counted as
    # the whole node on its way, not launched again tick after tick (it used to be, 4 nodes).
    counts = (cluster.pool_object(elastic).get("status") or {}).get("nodes") or {}
    assert counts.get("total", 0) + counts.get("provisioning", 0) == 2, (
        f"{counts}\n{state(cluster, operator, elastic)}"
    )
    # Once late is gone, the node is anyone's again.
    ns = cluster.kube.namespace
    cluster.kube.batch.delete_namespaced_job("late", ns, propagation_policy="Foreground")
    operator.tick_until(
        lambda: not kept_for(cluster.kube.core.read_node(name)), "the reservation taken off"
    )
