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
from tests.support.builders import NOW, node, pending, plan_summary, policy, pool, snapshot

from hybridgpu.core.decide import JOINING_GRACE_SECONDS, decide
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
