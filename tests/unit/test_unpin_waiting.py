"""A preemptible Job the operator pinned to a cloud pool, whose pods all wait again, moves
to owned nodes idle for their idleFor (core/decide.py ``_unpin_to_owned``).

Found by hypothesis (tests/unit/test_sim_truth.py, the work-conservation property) on main at
5cf15dd: an 8-GPU preemptible Job without checkpoints, moved off core to spot by critical
work, stayed pinned to spot after core freed and, interrupted about twice an hour, never
finished its 2.6 h run."""

from __future__ import annotations

from dataclasses import replace

from tests.support.builders import (
    NOW,
    STANDARD_POOLS,
    node,
    pending,
    policy,
    running,
    snapshot,
)
from tests.support.sim import BUNDLED_CLUSTER

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ActionKind, MoveJob
from hybridgpu.models.snapshot import ClusterSnapshot, Criticality
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

IDLE_CORE = [
    node("c1", "core", idle_since=NOW - 3600),
    node("c2", "core", idle_since=NOW - 3600),
]


def _waiting_on_spot(**job_fields: object) -> ClusterSnapshot:
    pod, job = pending("batch", 8, "preemptible", pool_pin="spot", since=NOW - 120)
    assert job is not None
    job = replace(job, **{"pinned_by_operator": True, **job_fields})  # type: ignore[arg-type]
    return snapshot(list(STANDARD_POOLS), IDLE_CORE, [(pod, job)])


def _moves(snap: ClusterSnapshot) -> list[tuple[str | None, str | None, ActionKind]]:
    plan = decide(snap, policy(), NOW)
    return [(a.from_pool, a.to_pool, a.kind) for a in plan.actions if isinstance(a, MoveJob)]


def test_a_waiting_job_the_operator_pinned_to_spot_moves_to_idle_owned_nodes() -> None:
    snap = _waiting_on_spot()
    plan = decide(snap, policy(), NOW)
    moves = [a for a in plan.actions if isinstance(a, MoveJob)]
    assert [(m.from_pool, m.to_pool, m.kind) for m in moves] == [
        ("spot", "core", ActionKind.CONSOLIDATE)
    ], plan.explain()
    assert "throws nothing away" in moves[0].reason
    # Its pod is placed on the owned node: no spot node is bought for it.
    assert not [a for a in plan.actions if a.kind == ActionKind.SCALE_UP], plan.explain()


def test_it_stays_when_its_owner_pinned_it_or_no_owned_node_has_settled_idle() -> None:
    assert _moves(_waiting_on_spot(pinned_by_operator=False)) == []
    busy = snapshot(
        list(STANDARD_POOLS),
        [node("c1", "core", idle_since=NOW - 60), node("c2", "core")],
        [
            (p, replace(j, pinned_by_operator=True) if j and j.name == "batch" else j)
            for p, j in [
                pending("batch", 8, "preemptible", pool_pin="spot", since=NOW - 120),
                running("firm", "c2", 8, "critical"),
            ]
        ],
    )
    assert _moves(busy) == []  # c1 freed a minute ago: likely wanted by the next firm pod


def test_the_deadline_rule_keeps_its_own_jobs() -> None:
    assert _moves(_waiting_on_spot(deadline_at=NOW + 86400)) == []


def test_a_job_with_a_pod_still_running_is_not_moved_by_this_rule() -> None:
    pod, job = pending("batch", 8, "preemptible", pool_pin="spot", since=NOW - 120)
    # Started a minute ago: consolidation would not move it either (its restart costs more).
    other, _ = running("batch", "s1", 8, "preemptible", pool_pin="spot", started=NOW - 60)
    assert job is not None
    job = replace(job, pinned_by_operator=True, parallelism=2, started_at=NOW - 60)
    snap = snapshot(
        list(STANDARD_POOLS),
        [*IDLE_CORE, node("s1", "spot")],
        [(pod, job), (replace(other, name="batch-pod-2"), None)],
    )
    assert [m for m in _moves(snap) if m[0] == "spot" and m[1] == "core"] == []


def test_a_job_moved_to_spot_without_checkpoints_is_not_left_there_to_restart_forever() -> None:
    rows = [(0.0, 300.0, 1, Criticality.CRITICAL)] * 9 + [
        (0.0, 300.0, 8, Criticality.CRITICAL),
        (0.0, 9211.0, 8, Criticality.PREEMPTIBLE),
        (1.0, 300.0, 8, Criticality.CRITICAL),
    ]
    jobs = [TraceJob(f"j{n}", *row) for n, row in enumerate(rows)]
    config = load_cluster(BUNDLED_CLUSTER)
    physics = SimSettings(spot_hazard_per_hour=2.0, checkpoint_interval_seconds=0, seed=3)
    result = Simulation("h", config.pools, config.policy.spec, jobs, physics).run()
    assert result.unfinished_jobs == 0
