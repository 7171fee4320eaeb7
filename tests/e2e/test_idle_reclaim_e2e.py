"""Idle reclaim on the real control plane: a Job that opted in (hybridgpu.io/idle-timeout)
and whose GPU stays below the idle threshold in Prometheus (DCGM, per pod) past its timeout
is suspended, with an Event naming the idle time and the dollars it held; a busy Job with the
same opt-in is left alone; the reclaimed GPU-hours are counted."""

from __future__ import annotations

import re

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import gpu_job
from support.prometheus import FakeDCGM, Prometheus, dcgm, prometheus

__all__ = ["dcgm", "prometheus"]  # fixtures used by name

pytestmark = pytest.mark.e2e


def opted_in(name: str, timeout: str) -> dict[str, object]:
    body = gpu_job(
        name, gpus=1, run_duration="30m", labels={"hybridgpu.io/criticality": "standard"}
    )
    body["metadata"]["annotations"] = {"hybridgpu.io/idle-timeout": timeout}
    return body


def running_pod(cluster: Cluster, job: str) -> str:
    def found() -> str | None:
        pods = [p for p in cluster.job_pods(job) if p.status.phase == "Running"]
        return pods[0].metadata.name if pods else None

    return str(wait_for(found, 60, f"a running pod of {job}"))


def reclaimed_gpu_hours(metrics_text: str, namespace: str) -> float:
    pattern = (
        r'^hybridgpu_reclaimed_gpu_hours_total\{namespace="' + re.escape(namespace) + r'",'
        r'tier="core"\} (\S+)$'
    )
    match = re.search(pattern, metrics_text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_job_idle_past_its_timeout_is_suspended_with_an_event(
    cluster: Cluster, operators: Operators, prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    policy = cluster.policy(prometheus={"url": prometheus.url, "window": "5s", "staleAfter": "30s"})
    core = cluster.pool("core", tier="core", policy=policy, per_node=4, max_nodes=1)
    (node,) = cluster.core_nodes(core, 1, gpus=4)
    namespace = cluster.kube.namespace
    cluster.kube.create_job(opted_in("idle-nb", "8s"))
    cluster.kube.create_job(opted_in("busy-nb", "8s"))
    idle_pod = running_pod(cluster, "idle-nb")
    busy_pod = running_pod(cluster, "busy-nb")
    # The node's other GPUs report too (the policy's utilization is read per node).
    dcgm.set_utilization(node, [0.0, 0.0])
    dcgm.set_pod_utilization(node, namespace, idle_pod, 1.0, gpu=2)
    dcgm.set_pod_utilization(node, namespace, busy_pod, 85.0, gpu=3, engine_active=True)
    prometheus.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}', lambda r: len(r) == 1)

    op = operators.start()
    cluster.wait_ticking(policy)
    wait_for(lambda: cluster.job("idle-nb").spec.suspend, 90, "the idle Job suspended")

    (event,) = [e for e in cluster.events("IdleReclaimed") if e.involved_object.name == "idle-nb"]
    assert event.involved_object.kind == "Job"
    assert "past its idle-timeout 8s" in event.message, event.message
    held = re.search(r"\$(\d+\.\d\d) of GPU time held idle", event.message)
    assert held, event.message
    assert re.search(r"for (\d+s|\d+m)", event.message), event.message
    notes = cluster.job("idle-nb").metadata.annotations or {}
    assert "hybridgpu.io/reclaimed" in notes
    # Its pod goes (the Job controller ends the pods of a suspended Job).
    wait_for(lambda: not cluster.job_pods("idle-nb"), 60, "the idle Job's pod gone")
    wait_for(
        lambda: reclaimed_gpu_hours(op.metrics(), namespace) > 0,
        30,
        "hybridgpu_reclaimed_gpu_hours_total counted",
    )

    # Ticks that saw the busy Job past its timeout too: it is kept.
    cluster.wait_ticks(policy, 2)
    assert not cluster.job("busy-nb").spec.suspend
    assert [p.metadata.name for p in cluster.job_pods("busy-nb")] == [busy_pod]
    assert not [e for e in cluster.events("IdleReclaimed") if e.involved_object.name == "busy-nb"]
