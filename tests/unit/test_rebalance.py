"""decide(): serving replicas move from cloud nodes to free owned GPUs by surge (rule 3c,
core/rebalance.py), only when that empties a cloud node, never for a workload an HPA scales
or that is short of Ready replicas, and never with owned GPUs that pending work needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.builders import (
    NOW,
    STANDARD_POOLS,
    node,
    pending,
    policy,
    pool,
    running,
    snapshot,
)

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ActionKind, RebalanceReplica, ReleaseNode
from hybridgpu.models.snapshot import (
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    RebalanceIntent,
    ServingState,
)

pytestmark = pytest.mark.unit


def replica(
    name: str, node_name: str | None, gpus: int = 4, workload: str = "web", **kw: object
) -> tuple[GPUPod, JobState | None]:
    pod = GPUPod(
        namespace="team",
        name=name,
        gpus=gpus,
        criticality=Criticality.CRITICAL,
        node=node_name,
        pending_since=NOW - 86400,
        started_at=None if node_name is None else NOW - 86000,
        serving=f"team/{workload}",
        **kw,  # type: ignore[arg-type]
    )
    return pod, None


def deployment(name: str = "web", replicas: int = 2, **kw: Any) -> ServingState:
    ready = kw.pop("ready", replicas)
    return ServingState("team", name, replicas=replicas, ready=ready, **kw)


def with_serving(snap: ClusterSnapshot, *workloads: ServingState) -> ClusterSnapshot:
    return replace(snap, serving=workloads)


def rebalances(snap: ClusterSnapshot, **spec: object) -> list[RebalanceReplica]:
    plan = decide(snap, policy(**spec), NOW)
    return [a for a in plan.actions if isinstance(a, RebalanceReplica)]


def one_replica_on_elastic(core_busy: int = 0, **kw: Any) -> ClusterSnapshot:
    """Replica web-a on core-1 (full), web-b alone on elastic node e1; core-2 has
    8 - core_busy GPUs free."""
    workloads = [replica("web-a", "core-1"), running("fill", "core-1", 4), replica("web-b", "e1")]
    if core_busy:
        workloads.append(running("batch", "core-2", core_busy))
    snap = snapshot(
        STANDARD_POOLS,
        [node("core-1", "core"), node("core-2", "core"), node("e1", "elastic")],
        workloads,
    )
    return with_serving(snap, deployment(**kw))


def test_a_replica_alone_on_a_cloud_node_surges_to_free_owned_gpus() -> None:
    [move] = rebalances(one_replica_on_elastic())
    assert (move.namespace, move.workload, move.pods, move.node) == (
        "team",
        "web",
        ("web-b",),
        "e1",
    )
    assert (move.from_pool, move.to_pool, move.gpus, move.replicas) == ("elastic", "core", 4, 2)
    assert move.kind == ActionKind.REBALANCE
    assert "surge Deployment team/web to 3 replicas" in move.reason
    assert "$" in move.reason


def test_no_rebalance_without_owned_gpus_that_fit() -> None:
    assert rebalances(one_replica_on_elastic(core_busy=5)) == []
    assert len(rebalances(one_replica_on_elastic(core_busy=4))) == 1


def test_pending_work_takes_the_owned_gpus_first() -> None:
    snap = one_replica_on_elastic()
    pod, job = pending("urgent", 8, "critical")
    snap = replace(snap, pods=(*snap.pods, pod), jobs=(*snap.jobs, job))  # type: ignore[arg-type]
    assert rebalances(snap) == []


def test_an_autoscaled_workload_is_not_rebalanced_and_the_plan_says_why() -> None:
    snap = one_replica_on_elastic(autoscaled=True)
    plan = decide(snap, policy(), NOW)
    assert not [a for a in plan.actions if a.kind == ActionKind.REBALANCE]
    assert any("HorizontalPodAutoscaler" in n and "team/web" in n for n in plan.notes)


@pytest.mark.parametrize("state", [{"ready": 1}, {"stable": False}])
def test_a_workload_short_of_ready_replicas_or_mid_rollout_is_left_alone(state: dict) -> None:
    plan = decide(one_replica_on_elastic(**state), policy(), NOW)
    assert not [a for a in plan.actions if a.kind == ActionKind.REBALANCE]
    assert any("rollout" in n for n in plan.notes)


def test_a_node_that_also_runs_other_work_is_not_emptied_by_rebalance() -> None:
    snap = one_replica_on_elastic()
    other, job = running("train", "e1", 2)
    snap = replace(snap, pods=(*snap.pods, other), jobs=(job,))  # type: ignore[arg-type]
    assert rebalances(snap) == []


@pytest.mark.parametrize("owner", ["StatefulSet team/db", "LeaderWorkerSet team/llm"])
def test_a_statefulset_replica_on_a_cloud_node_stays_and_the_plan_says_why(owner: str) -> None:
    pod = GPUPod(
        namespace="team",
        name="db-0",
        gpus=4,
        criticality=Criticality.CRITICAL,
        node="e1",
        started_at=NOW - 86000,
        stateful=owner,
    )
    on_core = replace(pod, name="db-1", node="core-1")
    snap = snapshot(
        STANDARD_POOLS,
        [node("core-1", "core"), node("core-2", "core"), node("e1", "elastic")],
        [],
    )
    plan = decide(replace(snap, pods=(pod, on_core)), policy(), NOW)
    # Owned GPUs are free for it, but a StatefulSet cannot surge: no action touches e1.
    assert [a for a in plan.actions if getattr(a, "node", None) == "e1"] == []
    assert [n for n in plan.notes if owner in n] == [
        f"{owner} has a replica on elastic node e1 and is not rebalanced: it cannot surge "
        "(a new replica is a new ordinal), and moving the replica would take it down"
    ]
    # Only the replica on a cloud node is noted; with rebalance off, nothing is.
    assert not any(owner in n for n in decide(replace(snap, pods=(on_core,)), policy(), NOW).notes)
    off = decide(replace(snap, pods=(pod,)), policy(rebalance={"enabled": False}), NOW)
    assert not any(owner in n for n in off.notes)


def test_every_replica_of_a_node_moves_together_one_surge_per_workload() -> None:
    snap = snapshot(
        STANDARD_POOLS,
        [node("core-1", "core"), node("core-2", "core"), node("e1", "elastic")],
        [
            replica("web-b", "e1", 2),
            replica("web-c", "e1", 2),
            replica("web-a", "core-1", 2),
            replica("api-a", "e1", 2, workload="api"),
        ],
    )
    snap = with_serving(snap, deployment(replicas=3), deployment("api", replicas=1))
    moves = rebalances(snap)
    assert sorted((m.workload, m.pods, m.gpus, m.replicas) for m in moves) == [
        ("api", ("api-a",), 2, 1),
        ("web", ("web-b", "web-c"), 4, 3),
    ]
    assert all(m.node == "e1" for m in moves)
    web = next(m for m in moves if m.workload == "web")
    assert "surge Deployment team/web to 5 replicas" in web.reason


def test_switched_off_pinned_or_not_worth_it_means_no_rebalance() -> None:
    assert rebalances(one_replica_on_elastic(), rebalance={"enabled": False}) == []
    assert rebalances(one_replica_on_elastic(), consolidation={"minSavingsPerHour": 1000}) == []
    snap = one_replica_on_elastic()
    pods = tuple(replace(p, pool="elastic") if p.name == "web-b" else p for p in snap.pods)
    assert rebalances(replace(snap, pods=pods)) == []
    pods = tuple(replace(p, pool="core") if p.name == "web-b" else p for p in snap.pods)
    assert len(rebalances(replace(snap, pods=pods))) == 1


def test_moves_in_flight_count_against_max_per_tick_and_their_node_is_not_released() -> None:
    snap = snapshot(
        STANDARD_POOLS,
        [
            node("core-1", "core"),
            node("core-2", "core"),
            node("e1", "elastic", cordoned=True, cordoned_by="rebalance", idle_since=NOW - 7200),
            node("e2", "elastic"),
        ],
        [
            replica("web-b", "e1"),
            replica("web-c", "core-1"),
            replica("api-a", "e2", workload="api"),
        ],
    )
    intent = RebalanceIntent(node="e1", pods=("web-b",), step="surge", since=NOW - 30)
    snap = with_serving(snap, deployment(rebalance=intent), deployment("api", replicas=1))
    plan = decide(snap, policy(rebalance={"maxPerTick": 1}), NOW)
    assert not [a for a in plan.actions if isinstance(a, RebalanceReplica | ReleaseNode)]
    moves = rebalances(snap, rebalance={"maxPerTick": 2})
    assert [(m.workload, m.node) for m in moves] == [("api", "e2")]


def test_the_dearest_cloud_node_is_emptied_first_within_max_per_tick() -> None:
    pools = [*STANDARD_POOLS]
    snap = snapshot(
        pools,
        [node("core-1", "core"), node("core-2", "core"), node("e1", "elastic"), node("s1", "spot")],
        [replica("a-1", "s1", workload="a"), replica("b-1", "e1", workload="b")],
    )
    snap = with_serving(snap, deployment("a", replicas=1), deployment("b", replicas=1))
    [move] = rebalances(snap, rebalance={"maxPerTick": 1})
    assert move.node == "e1"  # elastic $24/h before spot $8/h
    assert len(rebalances(snap, rebalance={"maxPerTick": 2})) == 2


@settings(max_examples=150, deadline=None)
@given(
    core_free=st.lists(st.integers(0, 8), min_size=1, max_size=3),
    replicas=st.lists(st.tuples(st.integers(1, 8), st.booleans(), st.booleans()), max_size=6),
    max_per_tick=st.integers(0, 3),
)
def test_rebalance_never_takes_more_owned_gpus_than_are_free(
    core_free: list[int], replicas: list[tuple[int, bool, bool]], max_per_tick: int
) -> None:
    nodes = [node(f"core-{i}", "core") for i in range(len(core_free))]
    workloads: list[tuple[GPUPod, JobState | None]] = []
    for i, free in enumerate(core_free):
        if free < 8:
            workloads.append(running(f"fill{i}", f"core-{i}", 8 - free, "critical"))
    serving = []
    for i, (gpus, autoscaled, ready) in enumerate(replicas):
        nodes.append(node(f"e{i}", "elastic"))
        workloads.append(replica(f"w{i}-0", f"e{i}", gpus, workload=f"w{i}"))
        serving.append(
            deployment(f"w{i}", replicas=1, ready=1 if ready else 0, autoscaled=autoscaled)
        )
    pools = [replace(STANDARD_POOLS[0]), *STANDARD_POOLS[1:]]
    snap = with_serving(snapshot(pools, nodes, workloads), *serving)
    moves = rebalances(snap, rebalance={"maxPerTick": max_per_tick})
    by_name = {s.name: s for s in serving}
    assert sum(m.gpus for m in moves) <= sum(core_free[: len(nodes)])
    assert len({m.node for m in moves}) <= max_per_tick
    for m in moves:
        state = by_name[m.workload]
        assert not state.autoscaled and state.ready >= state.replicas
        assert m.to_pool == "core" and m.from_pool == "elastic"


def test_a_workload_whose_last_rebalance_was_given_up_waits_an_hour() -> None:
    recent = one_replica_on_elastic(given_up_at=NOW - 600)
    plan = decide(recent, policy(), NOW)
    assert not [a for a in plan.actions if a.kind == ActionKind.REBALANCE]
    assert any("given up; tried again in 50 min" in n for n in plan.notes), plan.notes
    assert len(rebalances(one_replica_on_elastic(given_up_at=NOW - 3600))) == 1


COMMITTED_POOL = pool(
    "reserved",
    "elastic",
    max_nodes=1,
    price=24.0,
    committed={"nodes": 1, "termYears": 3, "perNodeHour": 10.0},
)


def test_a_replica_on_demand_surges_to_free_committed_gpus() -> None:
    """Owned GPUs full, a committed node half free: the on-demand replica moves to the
    commitment, paid whether used or not (the DLRM plan-vs-simulation gap of issue 16: the
    replicas stayed on demand for weeks beside idle committed GPUs)."""
    snap = snapshot(
        [*STANDARD_POOLS, COMMITTED_POOL],
        [node("core-1", "core"), node("r1", "reserved"), node("e1", "elastic")],
        [
            running("fill", "core-1", 8),
            replica("web-a", "r1"),
            replica("web-b", "e1"),
        ],
    )
    [move] = rebalances(with_serving(snap, deployment()))
    assert (move.node, move.from_pool, move.to_pool, move.pods) == (
        "e1",
        "elastic",
        "reserved",
        ("web-b",),
    )
    assert move.reason.startswith("committed GPUs of reserved are free")


def test_committed_gpus_are_used_before_owned_ones() -> None:
    """Both free: the committed GPUs cost nothing more to use, owned ones their power."""
    snap = snapshot(
        [*STANDARD_POOLS, COMMITTED_POOL],
        [node("core-1", "core"), node("r1", "reserved"), node("e1", "elastic")],
        [replica("web-a", "r1"), replica("web-b", "e1")],
    )
    [move] = rebalances(with_serving(snap, deployment()))
    assert move.to_pool == "reserved"


def test_a_replica_on_a_committed_node_is_not_moved_to_owned_gpus() -> None:
    """Moving off capacity paid whether used or not saves nothing: no surge, however free
    the owned GPUs are."""
    snap = snapshot(
        [*STANDARD_POOLS, COMMITTED_POOL],
        [node("core-1", "core"), node("core-2", "core"), node("r1", "reserved")],
        [replica("web-a", "core-1"), replica("web-b", "r1")],
    )
    assert rebalances(with_serving(snap, deployment())) == []


def test_a_headroom_of_owned_gpus_is_left_free_for_new_arrivals() -> None:
    # 16 owned GPUs, 8 free on core-2: a 4-GPU replica on e1 could take 4 of them.
    snap = one_replica_on_elastic()
    assert rebalances(snap, rebalance={"headroomPercent": 50}) == []  # keeps 8: none spare
    plan = decide(snap, policy(rebalance={"headroomPercent": 50}), NOW)
    assert any(
        "the 8 kept free for new arrivals (rebalance.headroomPercent 50%)" in n for n in plan.notes
    )
    [move] = rebalances(snap, rebalance={"headroomPercent": 25})  # keeps 4: 4 spare
    assert move.node == "e1"
    assert len(rebalances(snap, rebalance={"headroomPercent": 0})) == 1
    # The default (1%) keeps no GPU of 16 (rounded down): a small fleet rebalances as before.
    assert len(rebalances(snap)) == 1


def two_replicas_beside_12_free_owned_gpus() -> ClusterSnapshot:
    """Two 4-GPU replicas alone on elastic nodes e1 and e2 (Deployments a and b); 16 owned
    GPUs, 12 free (4 on core-1, 8 on core-2)."""
    snap = snapshot(
        STANDARD_POOLS,
        [
            node("core-1", "core"),
            node("core-2", "core"),
            node("e1", "elastic"),
            node("e2", "elastic"),
        ],
        [
            running("fill", "core-1", 4),
            replica("a-1", "e1", workload="a"),
            replica("b-1", "e2", workload="b"),
        ],
    )
    return with_serving(snap, deployment("a", replicas=1), deployment("b", replicas=1))


def test_the_headroom_counts_gpus_free_on_every_owned_node_and_each_move_spends_them() -> None:
    # Two 4-GPU replicas on two elastic nodes; 16 owned GPUs, 12 free (4 on core-1, 8 on
    # core-2). Keeping 4 (25%) leaves 8 spare: both move; keeping 5 (the 31.25% of 16) one.
    snap = two_replicas_beside_12_free_owned_gpus()
    assert len(rebalances(snap, rebalance={"headroomPercent": 25})) == 2
    assert len(rebalances(snap, rebalance={"headroomPercent": 31.25})) == 1
    assert rebalances(snap, rebalance={"headroomPercent": 75}) == []


def test_gpus_promised_to_a_waiting_pod_are_not_counted_as_free_for_the_headroom() -> None:
    # core-2 has 8 free; a 4-GPU replica on e1; keeping 4 (25%) leaves 4 spare, unless a
    # pending pod takes some of the free owned GPUs first.
    snap = one_replica_on_elastic()
    assert len(rebalances(snap, rebalance={"headroomPercent": 25})) == 1
    pod, job = pending("urgent", 2, "critical")
    snap = replace(snap, pods=(*snap.pods, pod), jobs=(*snap.jobs, job))  # type: ignore[arg-type]
    assert rebalances(snap, rebalance={"headroomPercent": 25}) == []
    assert len(rebalances(snap, rebalance={"headroomPercent": 0})) == 1


@settings(max_examples=150, deadline=None)
@given(
    core_free=st.lists(st.integers(0, 8), min_size=1, max_size=3),
    gpus=st.lists(st.integers(1, 8), max_size=6),
    percent=st.sampled_from([0.0, 0.5, 10.0, 12.5, 25.0, 40.0, 100.0]),
    max_per_tick=st.integers(0, 5),
)
def test_a_rebalance_never_takes_the_headroom(
    core_free: list[int], gpus: list[int], percent: float, max_per_tick: int
) -> None:
    nodes = [node(f"core-{i}", "core") for i in range(len(core_free))]
    workloads: list[tuple[GPUPod, JobState | None]] = [
        running(f"fill{i}", f"core-{i}", 8 - free, "critical")
        for i, free in enumerate(core_free)
        if free < 8
    ]
    for i, g in enumerate(gpus):
        nodes.append(node(f"e{i}", "elastic"))
        workloads.append(replica(f"w{i}-0", f"e{i}", g, workload=f"w{i}"))
    serving = [deployment(f"w{i}", replicas=1) for i in range(len(gpus))]
    snap = with_serving(snapshot(STANDARD_POOLS, nodes, workloads), *serving)
    spec = {"headroomPercent": percent, "maxPerTick": max_per_tick}
    moves = rebalances(snap, rebalance=spec)
    headroom = int(8 * len(core_free) * percent / 100)
    assert sum(m.gpus for m in moves) <= max(0, sum(core_free) - headroom)
    # Without a headroom at least as many GPUs move (the dearest node first either way).
    unkept = rebalances(snap, rebalance={"headroomPercent": 0, "maxPerTick": max_per_tick})
    assert sum(m.gpus for m in unkept) >= sum(m.gpus for m in moves) or percent == 0


@pytest.mark.parametrize(
    ("headroom_percent", "moved", "kept"),
    [(25, 2, 0), (31.25, 1, 1), (75, 0, 2)],
)
def test_the_note_counts_each_cloud_node_the_headroom_keeps(
    headroom_percent: float, moved: int, kept: int
) -> None:
    # As above: 12 owned GPUs free, two 4-GPU replicas alone on e1 and e2. Keeping 12 (75%)
    # no node can move (both counted without a move tried); keeping 5, e2 is counted after
    # e1 moved.
    snap = two_replicas_beside_12_free_owned_gpus()
    plan = decide(snap, policy(rebalance={"headroomPercent": headroom_percent}), NOW)
    assert len([a for a in plan.actions if isinstance(a, RebalanceReplica)]) == moved
    notes = [n for n in plan.notes if "kept free for new arrivals" in n]
    if kept:
        assert notes == [
            f"{kept} cloud node(s) of serving replicas not rebalanced: the owned and committed "
            f"GPUs free beyond the {int(16 * headroom_percent / 100)} kept free for new "
            f"arrivals (rebalance.headroomPercent {headroom_percent:g}%) do not hold them"
        ]
    else:
        assert notes == []
