"""Owned (core) nodes are never interrupted, released, terminated or deleted: a property of
decide() over random snapshots and notices, and of the executor over any plan."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.builders import NOW, node, pending, policy, pool, running, snapshot
from tests.support.fake_cluster import FakeCluster, gpu_node

from hybridgpu.core.decide import decide
from hybridgpu.kube.errors import KubeError
from hybridgpu.kube.executor import Execution, PlanExecutor
from hybridgpu.models.actions import (
    CordonUnhealthy,
    HandleInterruption,
    MoveJob,
    Plan,
    RebalanceReplica,
    ReleaseNode,
)
from hybridgpu.models.snapshot import ClusterSnapshot, MetricsHealth

pytestmark = pytest.mark.unit

CRITS = st.sampled_from(["critical", "standard", "preemptible"])


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSnapshot:
    """Core, elastic and spot nodes in any state, notices on any of them (owned ones too,
    as a notice without a provider ID once matched them), work anywhere."""
    pools = [
        pool("core", "core", max_nodes=4, min_nodes=0, idle_for="1m"),
        pool("elastic", "elastic", max_nodes=6, idle_for="1m"),
        pool("spot", "spot", max_nodes=6, idle_for="1m"),
    ]
    nodes = []
    for tier, count in (("core", draw(st.integers(1, 4))), ("elastic", 2), ("spot", 2)):
        for i in range(count):
            nodes.append(
                node(
                    f"{tier}-{i}",
                    tier,
                    ready=draw(st.booleans()),
                    cordoned=draw(st.booleans()),
                    releasing=draw(st.booleans()),
                    idle_since=draw(st.sampled_from([None, NOW - 30, NOW - 86400])),
                    utilization_percent=draw(st.sampled_from([None, 0.0, 90.0])),
                    interruption_deadline=draw(st.sampled_from([None, NOW - 10, NOW + 100])),
                    xid_errors=draw(st.sampled_from([0, 0, 3])),
                    provider_id=None if tier == "core" else f"fake:///z/{tier}-{i}",
                )
            )
    workloads = []
    for n in nodes:
        if draw(st.booleans()):
            workloads.append(
                running(
                    f"w-{n.name}",
                    n.name,
                    draw(st.integers(1, 8)),
                    draw(CRITS),
                    job=draw(st.integers(0, 4)) > 0,
                )
            )
    for i in range(draw(st.integers(0, 4))):
        workloads.append(pending(f"p{i}", draw(st.integers(1, 8)), draw(CRITS), since=NOW - 600))
    return snapshot(
        pools,
        nodes,
        workloads,
        metrics=MetricsHealth(available=draw(st.booleans())),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans(), st.booleans())
def test_no_action_targets_a_core_node_but_a_health_cordon(
    snap: ClusterSnapshot, consolidate: bool, move_to_spot: bool
) -> None:
    core = {n.name for n in snap.nodes if n.pool == "core"}
    plan = decide(
        snap,
        policy(
            consolidation={"enabled": consolidate},
            preemption={"moveToSpot": move_to_spot},
            disruption={"maxNodesPerTick": 10, "maxPercent": 100},
        ),
        NOW,
    )
    for action in plan.actions:
        if isinstance(action, MoveJob):
            continue  # moves Jobs, not nodes (preemption on core is the design)
        if isinstance(action, CordonUnhealthy):
            assert action.reason and "XID" in action.reason
            continue
        if isinstance(action, RebalanceReplica):
            # It empties a cloud node onto owned GPUs; the node it cordons is the cloud one.
            assert action.from_pool != "core" and action.node not in core, action
            continue
        assert action.pool != "core", action
        assert getattr(action, "node", None) not in core, action


def test_the_executor_refuses_to_release_or_drain_a_core_node_whatever_the_plan_says() -> None:
    cluster = FakeCluster()
    cluster.add_node(gpu_node("core-1", "core"))
    core = pool("core", "core").spec

    class NoCapacity:
        def scale_up(self, pool: str, nodes: int) -> None:
            raise AssertionError("no scale-up here")

        def terminate(self, pool: str, node: str, provider_id: str | None) -> bool:
            raise AssertionError(f"terminate called for {node}")

        def known_provider_ids(self, pool: str) -> set[str] | None:
            return None

    executor = PlanExecutor(cluster, NoCapacity(), lambda: NOW)  # type: ignore[arg-type]
    with pytest.raises(KubeError, match="not a cloud pool"):
        executor.release_node("core", "core-1", {"core": core}, Execution())
    for action in (
        ReleaseNode(pool="core", node="core-1", reason="forged"),
        HandleInterruption(pool="core", node="core-1", reason="forged"),
    ):
        snap = snapshot([pool("core", "core")], [node("core-1", "core")])
        result = executor.execute(
            Plan(decided_at=NOW, actions=(action,)), snap, {"core": core}, policy="p", dry_run=False
        )
        assert result.errors, action
    assert cluster.writes_to("core-1") == []
    assert "core-1" in cluster.nodes
