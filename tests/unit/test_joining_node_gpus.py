"""A node that has just joined its pool counts as a whole node before its device plugin
reports its GPUs (docs/concepts.md, "the loop": capacity on its way).

A kubelet registers its Node first; the GPU device plugin reports ``nvidia.com/gpu`` later
(tens of seconds to minutes on a real node, $HYBRIDGPU_KWOK_GPU_REPORT_SECONDS with kwok).
Once the Node exists, the provider's launch no longer counts as provisioning (target minus
the pool's Nodes), so if decide() counted the Node's zero GPUs, the capacity on its way would
vanish for that while and every tick would launch the same pod's node again (seen on the real
control plane: four nodes bought for two pods in tests/e2e/test_reserve_node_e2e.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.support.builders import (
    NOW,
    node,
    pending,
    plan_summary,
    policy,
    pool,
    running,
    snapshot,
)

from hybridgpu.core.decide import JOINING_GRACE_SECONDS, NO_GPUS_GRACE_SECONDS, decide
from hybridgpu.models.actions import Plan, ReleaseNode, ScaleUp
from hybridgpu.models.snapshot import NodeState

pytestmark = pytest.mark.unit

POOLS = [pool("elastic", "elastic", per_node=4)]


def joined(age: float, *, ready: bool = True, gpus: int = 0) -> NodeState:
    """A node of pool elastic that registered ``age`` seconds ago."""
    return replace(node("e1", "elastic", gpus=gpus), created_at=NOW - age, ready=ready)


@pytest.mark.parametrize("ready", [False, True])
def test_a_node_not_reporting_its_gpus_yet_is_not_bought_again(ready: bool) -> None:
    waiting = [pending("a", 2), pending("b", 1)]
    plan = decide(snapshot(POOLS, [joined(30, ready=ready)], waiting), policy(), NOW)
    assert plan_summary(plan) == []  # both land there once its GPUs are reported
    # The same with the GPUs reported.
    reported = decide(snapshot(POOLS, [joined(90, gpus=4)], waiting), policy(), NOW)
    assert plan_summary(reported) == []


def test_pods_beyond_the_joining_node_get_another() -> None:
    waiting = [pending("a", 4), pending("b", 1)]
    plan = decide(snapshot(POOLS, [joined(30)], waiting), policy(), NOW)
    assert plan_summary(plan) == [("scale_up", "elastic", 1)]


def test_a_node_that_never_reports_its_gpus_is_capacity_no_longer() -> None:
    # Past the joining grace its device plugin is broken, not late: the pods need a node.
    late = joined(JOINING_GRACE_SECONDS + 1)
    plan = decide(snapshot(POOLS, [late], [pending("a", 1)]), policy(), NOW)
    assert plan_summary(plan) == [("scale_up", "elastic", 1)]


# A node that never reports its GPUs is paid for and serves nothing: it is replaced, as a
# NotReady one is (NO_GPUS_GRACE_SECONDS after it appeared), unless most of its pool shows
# the same (a device plugin missing from the pool's nodes: replacements would fare no better).
REPLACEABLE = [pool("elastic", "elastic", per_node=4, max_nodes=4)]


def released(plan: Plan) -> set[str]:
    return {a.node for a in plan.actions if isinstance(a, ReleaseNode)}


def test_a_cloud_node_without_gpus_past_the_grace_is_replaced() -> None:
    fine = [replace(node(f"ok{i}", "elastic", gpus=4), created_at=NOW - 7200) for i in range(2)]
    broken = joined(NO_GPUS_GRACE_SECONDS + 60)
    pods = [running("w0", "ok0", 4), running("w1", "ok1", 4), pending("a", 4)]
    plan = decide(snapshot(REPLACEABLE, [*fine, broken], pods), policy(), NOW)
    assert released(plan) == {"e1"}
    reasons = [a.reason for a in plan.actions if isinstance(a, ReleaseNode)]
    assert "reports no GPUs 16 min after it appeared" in reasons[0]
    assert [(a.pool, a.nodes) for a in plan.actions if isinstance(a, ScaleUp)] == [("elastic", 1)]
    # Not before the grace is up.
    early = joined(NO_GPUS_GRACE_SECONDS - 60)
    assert not released(decide(snapshot(REPLACEABLE, [*fine, early]), policy(), NOW))


def test_owned_nodes_and_a_pool_mostly_without_gpus_are_not_replaced() -> None:
    owned = [pool("core", "core", per_node=4)]
    core_node = replace(node("c1", "core", gpus=0), created_at=NOW - 7200)
    assert not released(decide(snapshot(owned, [core_node]), policy(), NOW))
    # Every node of the pool without GPUs: the pool's device plugin, not its machines.
    nodes = [
        replace(node(f"e{i}", "elastic", gpus=0), created_at=NOW - 7200, provider_id=f"p/{i}")
        for i in range(3)
    ]
    plan = decide(snapshot(REPLACEABLE, nodes), policy(), NOW)
    assert not released(plan)
    assert any("3 of 3 nodes of elastic report no GPUs" in note for note in plan.notes)
