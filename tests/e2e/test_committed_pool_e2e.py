"""Committed cloud capacity on a real control plane (issue 16): a GPUPool with
spec.committed gets its committed node, work goes there before any on-demand node, the node
is never released below the commitment however long it idles, and its idle GPUs are reported
as waste in the pool's status and in hybridgpu_committed_idle_cost_dollars_total."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e


def _idle_cost(metrics: str, pool: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("hybridgpu_committed_idle_cost_dollars_total{") and f'"{pool}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_committed_capacity_is_filled_first_kept_and_its_idle_gpus_reported(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy()
    reserved = cluster.pool(
        "reserved",
        tier="elastic",
        policy=policy,
        per_node=4,
        max_nodes=1,
        price=10.0,
        idle_for="2s",
        committed={"nodes": 1, "termYears": 1, "perNodeHour": 6.0},
    )
    on_demand = cluster.pool("ondemand", tier="elastic", policy=policy, per_node=4, max_nodes=2)
    operator = operators.start()
    # Pending work: the commitment's node, not an on-demand one (the commitment costs
    # nothing more to use).
    cluster.kube.create_job(
        gpu_job(
            "base",
            gpus=4,
            run_duration="4s",
            labels={"hybridgpu.io/criticality": "standard"},
        )
    )
    wait_for(lambda: cluster.job_done("base"), 120, "Job base complete")
    (pod,) = cluster.job_pods("base")
    committed_nodes = {n.metadata.name for n in cluster.pool_nodes(reserved)}
    assert pod.spec.node_name in committed_nodes
    assert cluster.pool_nodes(on_demand) == []
    # Idle for many times its idleFor (2s): an on-demand node would be gone; the committed
    # one stays, and its 4 idle GPUs are waste at $6/h.
    cluster.wait_ticks(policy, ticks=4)
    assert {n.metadata.name for n in cluster.pool_nodes(reserved)} == committed_nodes

    def idle_committed() -> dict[str, Any] | None:
        status = cluster.pool_object(reserved).get("status") or {}
        committed = status.get("committed") or {}
        return committed if committed.get("idleGpus") == 4 else None

    committed = wait_for(idle_committed, 30, "status.committed with 4 idle GPUs")
    assert committed["gpus"] == 4 and committed["nodes"] == 1
    assert committed["wastedPerHour"] == pytest.approx(6.0)
    wait_for(lambda: _idle_cost(operator.metrics(), reserved) > 0, 30, "idle committed cost")
    assert not [e for e in cluster.events("ReleaseNode") if reserved in e.message]
