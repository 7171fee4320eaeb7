"""Status bodies written after a tick, and what `hybridgpu explain` prints from them."""

from __future__ import annotations

import pytest

from hybridgpu.kube.status import (
    NO_PROMETHEUS,
    condition,
    gpus_allocated_by_node,
    merge_conditions,
    policy_status,
    pool_status,
)
from hybridgpu.models.actions import Blocked, Plan, ScaleUp
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import (
    ClusterSnapshot,
    Criticality,
    GPUPod,
    NodeState,
    PoolState,
)
from hybridgpu.operator_cli import format_explain

pytestmark = pytest.mark.unit


def snapshot() -> ClusterSnapshot:
    spec = GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 4},
            "minNodes": 0,
            "maxNodes": 2,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 10},
        }
    )
    return ClusterSnapshot(
        taken_at=1000.0,
        pools=(PoolState(name="el", spec=spec, provisioning_nodes=1),),
        nodes=(
            NodeState(name="n1", pool="el", gpus=4),
            NodeState(name="n2", pool="el", gpus=4, cordoned=True),
        ),
        pods=(GPUPod("ns", "p", 3, Criticality.STANDARD, node="n1"),),
    )


def test_pool_status_counts_and_conditions_carry_the_generation() -> None:
    plan = Plan(
        decided_at=1000.0,
        actions=(ScaleUp(pool="el", nodes=1, reason="need more"),),
        blocked=(Blocked(pool="el", nodes=1, reason="el is at maxNodes=2", cause="max_nodes"),),
    )
    status = pool_status("el", snapshot(), plan, generation=7)
    assert status["nodes"] == {"total": 2, "ready": 2, "cordoned": 1, "provisioning": 1}
    assert status["gpus"] == {"total": 8, "allocated": 3, "idle": 5}
    assert status["costPerHour"] == 30.0  # 2 nodes + 1 on its way, billed from launch
    assert status["observedGeneration"] == 7
    assert status["lastScaleTime"] == "1970-01-01T00:16:40Z"
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["ScalingBlocked"]["status"] == "True"
    assert "maxNodes=2" in conds["ScalingBlocked"]["message"]
    assert conds["BudgetLimited"]["status"] == "False"
    assert all(c["observedGeneration"] == 7 for c in conds.values())


def test_transition_time_changes_only_when_the_status_does() -> None:
    old = merge_conditions([], [condition("Ready", True, "A", "", 1)], now=10.0)
    same = merge_conditions(old, [condition("Ready", True, "B", "", 2)], now=20.0)
    flipped = merge_conditions(same, [condition("Ready", False, "C", "", 2)], now=30.0)
    assert same[0]["lastTransitionTime"] == old[0]["lastTransitionTime"]
    assert flipped[0]["lastTransitionTime"] != old[0]["lastTransitionTime"]


def test_policy_status_says_budget_and_metrics_and_explain_prints_it() -> None:
    plan = Plan(
        decided_at=1000.0,
        blocked=(
            Blocked(
                pool="el",
                nodes=1,
                reason="over budget.maxHourlyCost $5.00/h",
                cause="budget_hourly",
            ),
        ),
        budget_exceeded=True,
        metrics_available=False,
        cloud_cost_per_hour=2.0,
    )
    status = policy_status(
        plan,
        generation=3,
        spent_this_month=1.5,
        hours_left_in_month=10,
        metrics_reason="connection refused",
        dry_run=True,
    )
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["BudgetExceeded"]["status"] == "True"
    assert "maxHourlyCost" in conds["BudgetExceeded"]["message"]
    assert conds["MetricsAvailable"]["status"] == "False"
    assert "connection refused" in conds["MetricsAvailable"]["message"]
    assert status["budget"]["projectedMonth"] == 21.5
    assert status["lastPlan"][0] == "dry run: nothing was changed"
    text = format_explain("default", status)
    assert "blocked (budget_hourly) el: over budget.maxHourlyCost" in text
    assert "BudgetExceeded=True" in text
    assert "no tick yet" in format_explain("default", {})


def test_pool_status_with_the_allocation_counted_once_for_all_pools_is_the_same() -> None:
    """The tick counts the GPUs on each node once (gpus_allocated_by_node) and hands it to
    every pool's status; pods on another pool's node and pending pods do not count."""
    base = snapshot()
    other = PoolState(name="other", spec=base.pools[0].spec)
    snap = ClusterSnapshot(
        taken_at=base.taken_at,
        pools=(*base.pools, other),
        nodes=(*base.nodes, NodeState(name="m1", pool="other", gpus=4)),
        pods=(
            *base.pods,
            GPUPod("ns", "q", 1, Criticality.STANDARD, node="n2"),
            GPUPod("ns", "r", 2, Criticality.STANDARD, node="m1"),
            GPUPod("ns", "s", 4, Criticality.STANDARD),
        ),
    )
    plan = Plan(decided_at=1000.0)
    allocated = gpus_allocated_by_node(snap)
    assert allocated == {"n1": 3, "n2": 1, "m1": 2}
    for name in ("el", "other"):
        once = pool_status(name, snap, plan, generation=1, allocated_by_node=allocated)
        assert once == pool_status(name, snap, plan, generation=1)
    assert pool_status("el", snap, plan, generation=1)["gpus"]["allocated"] == 4


def _pool_with_nodes(tier: str, max_nodes: int, nodes: int, **extra: object) -> ClusterSnapshot:
    spec = GPUPoolSpec.model_validate(
        {
            "tier": tier,
            "gpu": {"model": "A100", "perNode": 4},
            "maxNodes": max_nodes,
            "provider": {"type": "fake"},
            "pricing": {"capexPerNode": 1000} if tier == "core" else {"perNodeHour": 10},
            **extra,
        }
    )
    return ClusterSnapshot(
        taken_at=1000.0,
        pools=(PoolState(name="p", spec=spec),),
        nodes=tuple(NodeState(name=f"n{i}", pool="p", gpus=4) for i in range(nodes)),
        pods=(),
    )


@pytest.mark.parametrize(
    ("tier", "extra", "then"),
    [
        ("elastic", {}, "idle ones are released as scaleDown allows"),
        ("spot", {}, "busy ones are left alone"),
        ("core", {}, "owned (core) nodes are never removed"),
        (
            "core",
            {"provider": {"type": "kwok"}, "power": {"minPoweredOn": 0}},
            "only powered off when idle",
        ),
    ],
)
def test_a_pool_whose_max_nodes_was_lowered_below_its_nodes_says_so_in_ready(
    tier: str, extra: dict[str, object], then: str
) -> None:
    """maxNodes edited below the nodes a pool has: `kubectl describe` must say the pool is
    above it, that nothing is added, and what happens to the nodes (owned ones stay)."""
    snap = _pool_with_nodes(tier, max_nodes=1, nodes=3, **extra)
    status = pool_status("p", snap, Plan(decided_at=1000.0), generation=2)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert ready["reason"] == "AboveMaxNodes"
    assert "3 node(s) observed, 2 above maxNodes=1: no node is added" in ready["message"]
    assert then in ready["message"]
    within = pool_status(
        "p", _pool_with_nodes(tier, 3, 3, **extra), Plan(decided_at=1.0), generation=2
    )
    assert next(c for c in within["conditions"] if c["type"] == "Ready")["reason"] == "Reconciled"


def test_a_policy_without_prometheus_does_not_claim_fresh_utilization() -> None:
    """`kubectl describe scalingpolicy` said "utilization data is fresh" with no Prometheus
    configured: nothing was read at all, and idle meant only "no GPU pod on the node"."""
    conds = {
        c["type"]: c
        for c in policy_status(
            Plan(decided_at=1000.0),
            generation=1,
            spent_this_month=0.0,
            hours_left_in_month=10,
            metrics_reason=NO_PROMETHEUS,
        )["conditions"]
    }
    metrics = conds["MetricsAvailable"]
    assert (metrics["status"], metrics["reason"]) == ("True", "NoPrometheus")
    assert "spec.prometheus.url" in metrics["message"]
    assert "fresh" not in metrics["message"]
    fresh = policy_status(
        Plan(decided_at=1000.0), generation=1, spent_this_month=0.0, hours_left_in_month=10
    )["conditions"][0]
    assert (fresh["reason"], fresh["message"]) == ("MetricsFresh", "utilization data is fresh")
