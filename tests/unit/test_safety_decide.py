"""decide() on the money and health of cloud nodes (issue 11, bugs 5 and 6)."""

from __future__ import annotations

import pytest
from tests.support.builders import NOW, node, pending, policy, pool, running, snapshot

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ReleaseNode, ScaleUp

pytestmark = pytest.mark.unit


def test_releasing_interrupted_and_just_released_nodes_are_still_paid_for() -> None:
    pools = [pool("elastic", "elastic", price=24.0, idle_for="10m")]
    nodes = [
        node("busy", "elastic", provider_id="fake:///z/1"),
        node("leaving", "elastic", cordoned=True, releasing=True, provider_id="fake:///z/2"),
        node(
            "reclaimed",
            "elastic",
            cordoned=True,
            interruption_deadline=NOW + 60,
            provider_id="fake:///z/3",
        ),
        node("idle", "elastic", idle_since=NOW - 3600, provider_id="fake:///z/4"),
    ]
    snap = snapshot(pools, nodes, [running("work", "busy", 8)])

    plan = decide(snap, policy(), NOW)

    assert "idle" in {a.node for a in plan.actions if isinstance(a, ReleaseNode)}
    # All four are billed until the provider says they are terminated.
    assert plan.cloud_cost_per_hour == pytest.approx(4 * 24.0)


def test_the_hourly_budget_counts_nodes_on_their_way_out() -> None:
    pools = [pool("elastic", "elastic", price=24.0)]
    nodes = [
        node("leaving", "elastic", cordoned=True, releasing=True, provider_id="fake:///z/2"),
        node(
            "reclaimed",
            "elastic",
            cordoned=True,
            interruption_deadline=NOW + 60,
            provider_id="fake:///z/3",
        ),
    ]
    snap = snapshot(pools, nodes, [pending("train", 8)])

    plan = decide(snap, policy(budget={"maxHourlyCost": 60}), NOW)

    # $48/h is billed already: one more $24/h node would make $72/h.
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)]
    assert [b.cause for b in plan.blocked] == ["budget_hourly"]


def test_broken_cloud_nodes_are_replaced_and_a_person_s_cordon_is_left_alone() -> None:
    pools = [pool("elastic", "elastic", max_nodes=4, idle_for="10m")]
    nodes = [
        node("busy", "elastic", provider_id="fake:///z/1"),
        node("dead", "elastic", ready=False, not_ready_since=NOW - 3600, provider_id="fake:///z/2"),
        node(
            "xid",
            "elastic",
            cordoned=True,
            cordoned_by="xid-errors",
            xid_errors=2,
            provider_id="fake:///z/3",
        ),
        node("held", "elastic", cordoned=True, provider_id="fake:///z/4"),
    ]
    snap = snapshot(pools, nodes, [running("work", "busy", 8), pending("train", 8)])

    plan = decide(snap, policy(), NOW)

    released = {a.node for a in plan.actions if isinstance(a, ReleaseNode)}
    assert released == {"dead", "xid"}
    assert all(getattr(a, "node", None) != "held" for a in plan.actions)
    # The broken nodes no longer hold maxNodes: the pending pod gets a new node.
    assert [(a.pool, a.nodes) for a in plan.actions if isinstance(a, ScaleUp)] == [("elastic", 1)]


def test_a_node_notready_for_a_moment_is_not_replaced_nor_a_whole_pool_at_once() -> None:
    pools = [pool("elastic", "elastic", max_nodes=4)]
    blip = [node("blip", "elastic", ready=False, not_ready_since=NOW - 60, provider_id="p/1")]
    assert not decide(snapshot(pools, blip), policy(), NOW).actions
    # Every node NotReady at once looks like a partition, not broken machines: keep them.
    partition = [
        node(f"n{i}", "elastic", ready=False, not_ready_since=NOW - 3600, provider_id=f"p/{i}")
        for i in range(3)
    ]
    plan = decide(snapshot(pools, partition), policy(), NOW)
    assert not [a for a in plan.actions if isinstance(a, ReleaseNode)]
    assert any("NotReady" in note for note in plan.notes)
