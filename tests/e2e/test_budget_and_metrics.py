"""Scenario 4 (budget) and scenario 7 (Prometheus unreachable)."""

from __future__ import annotations

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import gpu_job
from support.ports import free_port

pytestmark = pytest.mark.e2e


def test_budget_reached_blocks_elastic_scale_up_and_says_why(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy(budget={"maxHourlyCost": 5})
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, max_nodes=4)
    operators.start()
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job("over-budget", gpus=4, labels={"hybridgpu.io/criticality": "standard"})
    )

    def exceeded() -> bool:
        cond = cluster.condition(policy, "BudgetExceeded")
        return bool(cond and cond["status"] == "True")

    wait_for(exceeded, 30, "BudgetExceeded=True")
    cond = cluster.condition(policy, "BudgetExceeded")
    assert cond and "maxHourlyCost" in cond["message"], cond
    events = cluster.events("BudgetExceeded")
    assert events and "budget.maxHourlyCost" in events[0].message
    cluster.wait_ticks(policy)  # ticks that saw the pending pod and the budget: nothing added
    assert cluster.pool_nodes(elastic) == []
    assert all(not p.spec.node_name for p in cluster.job_pods("over-budget"))


def test_without_metrics_nothing_is_released_but_pending_work_gets_capacity(
    cluster: Cluster, operators: Operators
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    policy = cluster.policy(prometheus={"url": dead, "staleAfter": "30s"})
    idle = cluster.pool("idle", tier="elastic", policy=policy, price=10.0, idle_for="1s")
    burst = cluster.pool("burst", tier="elastic", policy=policy, price=10.0, max_nodes=2)
    idle_nodes = cluster.cloud_nodes(idle, 1)
    operators.start()
    cluster.wait_ticking(policy)

    cluster.kube.create_job(
        gpu_job(
            "needs-burst",
            gpus=4,
            pool=burst,
            run_duration="2s",
            labels={"hybridgpu.io/criticality": "standard"},
        )
    )
    wait_for(lambda: cluster.job_done("needs-burst"), 60, "pending work ran on new capacity")
    assert cluster.pool_nodes(burst), "no burst node was added"

    cond = cluster.condition(policy, "MetricsAvailable")
    assert cond and cond["status"] == "False", cond
    assert "unavailable" in cond["message"]
    # idleFor is 1s and the node has been idle since before these ticks: with metrics it
    # would be cordoned by now.
    cluster.wait_ticks(policy)
    assert [n.metadata.name for n in cluster.pool_nodes(idle)] == idle_nodes
    assert not any(n.spec.unschedulable for n in cluster.pool_nodes(idle))
    assert cluster.events("MetricsUnavailable")
