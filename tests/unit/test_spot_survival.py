"""kube/survival.py: what the operator counts of its spot nodes' lives, tick by tick."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.support.builders import NOW, node, pool, snapshot

from hybridgpu.core.deadline import WINDOW_AGE_SECONDS
from hybridgpu.kube.survival import SpotSurvival
from hybridgpu.models.snapshot import ClusterSnapshot, NodeState

pytestmark = pytest.mark.unit

A = WINDOW_AGE_SECONDS
POOLS = [pool("elastic", "elastic", per_node=1), pool("spot", "spot", per_node=1)]


def at(now: float, *nodes: NodeState) -> ClusterSnapshot:
    return replace(snapshot(list(POOLS), list(nodes)), taken_at=now)


def spot(name: str, born: float, **kw: object) -> NodeState:
    return replace(node(name, "spot", gpus=1), created_at=born, **kw)  # type: ignore[arg-type]


def counts(snap: ClusterSnapshot) -> dict[str, tuple[int, int]]:
    return {p.name: (p.nodes_lasted, p.nodes_cut_short) for p in snap.pools}


def test_nodes_count_once_as_lasted_or_cut_short_and_others_not_at_all() -> None:
    seen = SpotSurvival()
    t0 = NOW
    # a: lasts two hours. b: noticed at 1.5 h (cut short). c: noticed at 20 min (too young
    # to count). d: released at 1.5 h without a notice (counts for neither).
    first = at(
        t0 + 0.5 * A,
        spot("a", t0),
        spot("b", t0),
        spot("c", t0, interruption_deadline=t0 + 0.5 * A + 120),
        spot("d", t0),
        replace(node("e", "elastic", gpus=1), created_at=t0 - 10 * A),
    )
    assert counts(seen.observe(first)) == {"elastic": (0, 0), "spot": (0, 0)}
    middle = at(
        t0 + 1.5 * A,
        spot("a", t0),
        spot("b", t0, interruption_deadline=t0 + 1.5 * A + 120),
        spot("d", t0, releasing=True),
    )
    assert counts(seen.observe(middle))["spot"] == (0, 1)
    late = at(t0 + 2 * A, spot("a", t0), spot("b", t0, interruption_deadline=t0 + 1.5 * A + 120))
    assert counts(seen.observe(late))["spot"] == (1, 1)
    # Seen again, nothing counts twice; gone, the counts stay.
    assert counts(seen.observe(replace(late, taken_at=t0 + 3 * A)))["spot"] == (1, 1)
    assert counts(seen.observe(at(t0 + 4 * A)))["spot"] == (1, 1)


def test_a_snapshot_without_spot_pools_is_returned_as_it_is() -> None:
    snap = replace(snapshot([pool("elastic", "elastic")]), taken_at=NOW)
    assert SpotSurvival().observe(snap) is snap
