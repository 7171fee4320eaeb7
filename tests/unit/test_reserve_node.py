"""decide() keeps a new on-demand node for the Job the deadline rule moved there
(core/reserve.py; docs/concepts.md, "Deadlines"): the node is reserved as soon as the
operator sees it, the Job's pods are placed on it, nobody else's, and the reservation ends
once it has served or lasted RESERVATION_SECONDS."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.builders import NOW, node, pending, plan_summary, policy, pool, running, snapshot

from hybridgpu.core.decide import decide
from hybridgpu.core.reserve import RESERVATION_SECONDS
from hybridgpu.models.actions import Plan, ReserveNode
from hybridgpu.models.snapshot import ClusterSnapshot, GPUPod, JobState, NodeState

pytestmark = pytest.mark.unit

H = 3600.0
POOLS = [
    pool("elastic", "elastic", per_node=1),
    replace(pool("spot", "spot", per_node=1), launchable=False),
]


def moved(
    name: str = "t", *, deadline: bool = True, by_operator: bool = True
) -> tuple[GPUPod, JobState | None]:
    """A preemptible Job the deadline rule moved to pool elastic, its pod waiting there."""
    pod, job = pending(name, 1, "preemptible", pool_pin="elastic")
    assert job is not None
    job = replace(
        job,
        created_at=NOW - H,
        deadline_at=NOW + 2 * H if deadline else None,
        expected_duration_seconds=H,
        checkpoint_seconds=1800.0,
        pinned_by_operator=by_operator,
    )
    return pod, job


def new_node(
    name: str = "e1",
    age: float = 60.0,
    *,
    ready: bool = False,
    cordoned: bool = False,
    reserved_for: str | None = None,
) -> NodeState:
    """A node of pool elastic that appeared ``age`` seconds ago, NotReady by default."""
    return replace(
        node(name, "elastic", gpus=1),
        created_at=NOW - age,
        ready=ready,
        cordoned=cordoned,
        reserved_for=reserved_for,
    )


def reservations(plan: Plan) -> list[tuple[str, str, str | None]]:
    return [(a.kind.value, a.node, a.job) for a in plan.actions if isinstance(a, ReserveNode)]


def test_a_new_node_is_kept_for_the_job_moved_there_and_its_pod_placed_on_it() -> None:
    plan = decide(snapshot(POOLS, [new_node()], [moved()]), policy(), NOW)
    assert reservations(plan) == [("reserve_node", "e1", "team/t")]
    assert plan_summary(plan) == []  # the Job needs no other node
    (action,) = [a for a in plan.actions if isinstance(a, ReserveNode)]
    assert "kept for Job team/t" in action.reason


def test_a_node_whose_gpus_are_not_reported_yet_is_kept_all_the_same() -> None:
    # A kubelet registers its node before the device plugin reports its GPUs: that is when
    # the operator must keep it, and the Job needs no other node meanwhile.
    joined = replace(new_node(), gpus=0)
    plan = decide(snapshot(POOLS, [joined], [moved()]), policy(), NOW)
    assert reservations(plan) == [("reserve_node", "e1", "team/t")]
    assert plan_summary(plan) == []
    kept = decide(
        snapshot(POOLS, [replace(joined, reserved_for="team/t")], [moved()]), policy(), NOW
    )
    assert reservations(kept) == [] and plan_summary(kept) == []


def test_a_standard_pod_gets_its_own_node_instead_of_the_one_kept_for_the_job() -> None:
    svc = pending("svc", 1, "standard", since=NOW - 120)
    without = decide(snapshot(POOLS, [new_node()], [svc]), policy(), NOW)
    assert plan_summary(without) == []  # it would wait for e1
    plan = decide(snapshot(POOLS, [new_node()], [moved(), svc]), policy(), NOW)
    assert reservations(plan) == [("reserve_node", "e1", "team/t")]
    assert plan_summary(plan) == [("scale_up", "elastic", 1)]  # for svc
    # Once kept (the taint on the node), the same holds, and nothing new is asked.
    kept = snapshot(POOLS, [new_node(reserved_for="team/t")], [moved(), svc])
    again = decide(kept, policy(), NOW)
    assert reservations(again) == []
    assert plan_summary(again) == [("scale_up", "elastic", 1)]
    assert again.recheck_at == NOW - 60 + RESERVATION_SECONDS


@pytest.mark.parametrize(
    ("why", "workloads", "nodes"),
    [
        ("no deadline", [moved(deadline=False)], [new_node()]),
        ("pinned by its owner", [moved(by_operator=False)], [new_node()]),
        ("too old", [moved()], [new_node(age=RESERVATION_SECONDS)]),
        ("busy", [moved(), running("o", "e1", 1, "standard")], [new_node()]),
        ("cordoned", [moved()], [new_node(cordoned=True)]),
    ],
)
def test_no_node_is_kept(
    why: str, workloads: list[tuple[GPUPod, JobState | None]], nodes: list[NodeState]
) -> None:
    plan = decide(snapshot(POOLS, nodes, workloads), policy(), NOW)
    assert reservations(plan) == [], why


def landed(on: str = "e1", since: float = 5.0) -> tuple[GPUPod, JobState | None]:
    """The Job of ``moved()``, its pod running on node ``on`` for ``since`` seconds."""
    pod, job = moved()
    return replace(pod, node=on, started_at=NOW - since), job


@pytest.mark.parametrize(
    ("why", "snap"),
    [
        (
            "its pod has just landed",
            snapshot(POOLS, [new_node(reserved_for="team/t", ready=True)], [landed()]),
        ),
        (
            "its pod runs there, long after the node appeared",
            snapshot(
                POOLS,
                [new_node(reserved_for="team/t", ready=True, age=10 * RESERVATION_SECONDS)],
                [landed(since=5 * RESERVATION_SECONDS)],
            ),
        ),
        (
            "a critical pod landed beside it",
            snapshot(
                POOLS,
                [replace(new_node(reserved_for="team/t", ready=True), gpus=2)],
                [landed(), running("c", "e1", 1, "critical")],
            ),
        ),
    ],
)
def test_a_node_stays_kept_while_its_job_runs_on_it(why: str, snap: ClusterSnapshot) -> None:
    # kube-scheduler preempts a pod of lower priority (the Job's is preemptible) for a
    # waiting pod on any node whose taints that pod tolerates: the taint keeps the Job there.
    plan = decide(snap, policy(), NOW)
    assert reservations(plan) == [], why
    # Kept past RESERVATION_SECONDS, it asks for no look again in the past (which would push
    # aside the tick a checkpoint asks for).
    assert plan.recheck_at is None or plan.recheck_at > NOW, why


def test_a_standard_pod_waiting_beside_the_job_gets_a_node_of_its_own() -> None:
    # The kept node has a free GPU: it is not the standard pod's (the taint keeps it off).
    svc = pending("svc", 1, "standard", since=NOW - 120)
    wide = replace(new_node(reserved_for="team/t", ready=True), gpus=2)
    plan = decide(snapshot(POOLS, [wide], [landed(), svc]), policy(), NOW)
    assert reservations(plan) == []
    assert plan_summary(plan) == [("scale_up", "elastic", 1)]


def suspended() -> tuple[GPUPod, JobState | None]:
    """The Job of ``landed()``, suspended (its pod not deleted yet)."""
    pod, job = landed()
    assert job is not None
    return pod, replace(job, suspended=True)


@pytest.mark.parametrize(
    ("why", "snap"),
    [
        ("the Job is gone", snapshot(POOLS, [new_node(reserved_for="team/t")], [])),
        (
            "its pod runs on another node",
            snapshot(
                POOLS,
                [new_node(reserved_for="team/t", ready=True), new_node("e2", ready=True)],
                [landed("e2")],
            ),
        ),
        (
            "its Job is suspended",
            snapshot(
                POOLS,
                [new_node(reserved_for="team/t", ready=True)],
                [suspended()],
            ),
        ),
        (
            "a critical pod took it",
            snapshot(
                POOLS,
                [new_node(reserved_for="team/t", ready=True)],
                [moved(), running("c", "e1", 1, "critical")],
            ),
        ),
        (
            "it was cordoned",
            snapshot(POOLS, [new_node(reserved_for="team/t", cordoned=True)], [moved()]),
        ),
        (
            "it lasted",
            snapshot(POOLS, [new_node(reserved_for="team/t", age=RESERVATION_SECONDS)], [moved()]),
        ),
    ],
)
def test_a_reservation_ends(why: str, snap: ClusterSnapshot) -> None:
    plan = decide(snap, policy(), NOW)
    assert ("unreserve_node", "e1", None) in reservations(plan), why
    kept = [a for a in plan.actions if isinstance(a, ReserveNode) and a.job is not None]
    assert all(a.node != "e1" for a in kept)


def applied(snap: ClusterSnapshot, plan: Plan) -> ClusterSnapshot:
    """``snap`` with the plan's reservations on its nodes."""
    keep = {a.node: a.job for a in plan.actions if isinstance(a, ReserveNode)}
    return replace(
        snap,
        nodes=tuple(
            replace(n, reserved_for=keep[n.name]) if n.name in keep else n for n in snap.nodes
        ),
    )


@settings(max_examples=100, deadline=None)
@given(
    ages=st.lists(st.floats(0, 2 * RESERVATION_SECONDS), min_size=0, max_size=3),
    jobs=st.integers(0, 3),
    standard=st.booleans(),
)
def test_reservations_do_not_flap(ages: list[float], jobs: int, standard: bool) -> None:
    """Applied, the next tick keeps what it kept; each Job gets at most one node, each node
    is kept for at most one Job."""
    nodes = [new_node(f"e{i}", age) for i, age in enumerate(ages)]
    workloads = [moved(f"t{i}") for i in range(jobs)]
    if standard:
        workloads.append(pending("svc", 1, "standard", since=NOW - 120))
    snap = snapshot(POOLS, nodes, workloads)
    plan = decide(snap, policy(), NOW)
    kept = [(n, j) for kind, n, j in reservations(plan) if kind == "reserve_node"]
    assert len({n for n, _ in kept}) == len(kept) == len({j for _, j in kept})
    assert all(a < RESERVATION_SECONDS for n, _ in kept for a in [NOW - snap_node(snap, n)])
    after = applied(snap, plan)
    assert reservations(decide(after, policy(), NOW)) == []
    # kube-scheduler puts each Job's pod on the node kept for it (Ready by then): it stays kept.
    on = {j: n for n, j in kept}
    ready = replace(
        after,
        nodes=tuple(replace(n, ready=True) if n.reserved_for else n for n in after.nodes),
    )
    running_there = replace(
        ready,
        pods=tuple(
            replace(p, node=on[p.job], started_at=NOW) if p.job in on else p for p in ready.pods
        ),
    )
    again = decide(running_there, policy(), NOW)
    assert reservations(again) == []
    # A node its Job runs on is kept past RESERVATION_SECONDS: no look again in the past
    # (it would push aside the tick a checkpoint asks for).
    assert again.recheck_at is None or again.recheck_at > NOW


def snap_node(snap: ClusterSnapshot, name: str) -> float:
    return next(n.created_at for n in snap.nodes if n.name == name)
