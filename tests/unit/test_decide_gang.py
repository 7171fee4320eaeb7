"""Gang demand (a JobSet, a PyTorchJob): capacity for all its pods at once, or none."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.builders import NOW, gang, node, pending, policy, pool, running, snapshot

from hybridgpu.core.apply import apply_plan
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import GangState, MoveJob, Plan, ScaleUp
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.snapshot import ClusterSnapshot

pytestmark = pytest.mark.unit


def scaled(plan: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in plan.actions:
        if isinstance(a, ScaleUp):
            out[a.pool] = out.get(a.pool, 0) + a.nodes
    return out


POOLS = [pool("core", "core", max_nodes=2, min_nodes=2), pool("elastic", "elastic")]
BUSY_CORE = [node("c0", "core"), node("c1", "core")]
CORE_WORK = [running("train-a", "c0", 8, "critical"), running("train-b", "c1", 8, "critical")]


@pytest.mark.parametrize(
    ("case", "pools", "pol", "extra", "created", "want_elastic"),
    [
        # The target: a 4-pod JobSet of 8 GPUs each gets 4 nodes in one scale-up.
        ("four nodes at once", POOLS, {}, [], None, 4),
        # Pods the JobSet controller has not created yet count: the gang asks for all.
        ("pods not created yet count", POOLS, {}, [], 1, 4),
        (
            "maxNodes allows three: none",
            [POOLS[0], pool("elastic", "elastic", max_nodes=3)],
            {},
            [],
            None,
            0,
        ),
        ("per-tick cap of three: none", POOLS, {"scaleUp": {"maxNodesPerTick": 3}}, [], None, 0),
        ("budget for three nodes: none", POOLS, {"budget": {"maxHourlyCost": 80.0}}, [], None, 0),
        # A free elastic node takes one pod: three new nodes hold the rest.
        ("a free node counts", POOLS, {}, [node("e0", "elastic")], None, 3),
    ],
)
def test_a_gang_gets_all_its_nodes_in_one_scale_up_or_none(
    case: str, pools: list, pol: dict, extra: list, created: int | None, want_elastic: int
) -> None:
    snap = snapshot(pools, BUSY_CORE + extra, CORE_WORK + gang("jobset", 4, 8, created=created))
    plan = decide(snap, policy(**pol), NOW)
    assert scaled(plan).get("elastic", 0) == want_elastic, (case, plan.explain())
    if want_elastic == 0:
        assert sum(b.nodes for b in plan.blocked) == 4, plan.explain()
        assert any("gang team/jobset" in n for n in plan.notes), plan.explain()


def test_a_blocked_gang_leaves_room_for_the_pods_behind_it() -> None:
    """The nodes a gang could not complete are given back: a smaller pod still gets one."""
    pools = [POOLS[0], pool("elastic", "elastic", max_nodes=3)]
    work = CORE_WORK + gang("big", 4, 8) + [pending("small", 8, "standard", since=NOW - 30)]
    plan = decide(snapshot(pools, BUSY_CORE, work), policy(), NOW)
    assert scaled(plan) == {"elastic": 1}, plan.explain()
    assert [b.nodes for b in plan.blocked] == [4], plan.explain()


def test_a_gang_on_owned_gpus_fits_whole_or_buys_for_all() -> None:
    """One core node free for a two-node gang: it is not split between core and nothing."""
    snap = snapshot(POOLS, [*BUSY_CORE[:1], node("c1", "core")], CORE_WORK[:1] + gang("g", 2, 8))
    plan = decide(snap, policy(), NOW)
    # One pod on the free core node, one new elastic node for the other.
    assert scaled(plan) == {"elastic": 1}, plan.explain()


def test_a_preempted_gang_moves_whole() -> None:
    """A preemptible gang on two core nodes: a critical pod that needs one node moves the
    whole workload (both pods' GPUs), not the pod on that node alone."""
    workers = gang("sweep", 2, 8, "preemptible")
    (pod0, state), (pod1, _) = workers
    from dataclasses import replace

    assert state is not None
    state = replace(state, started_at=NOW - 7200)
    on_core = [
        (replace(pod0, node="c0", started_at=NOW - 7200), state),
        (replace(pod1, node="c1", started_at=NOW - 7200), None),
    ]
    pools = [*POOLS, pool("spot", "spot")]
    snap = snapshot(pools, BUSY_CORE, [*on_core, pending("urgent", 8, "critical")])
    plan = decide(snap, policy(), NOW)
    moves = [a for a in plan.actions if isinstance(a, MoveJob)]
    assert [(m.job_key, m.gpus) for m in moves] == [("team/sweep", 16)], plan.explain()
    # The gang's two pods go to spot together: two nodes, in one scale-up.
    assert scaled(plan) == {"spot": 2}, plan.explain()


# ------------------------------------------------------------------ property


@st.composite
def gang_clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, dict, list[tuple[str, int, int]]]:
    """Clusters with one to three gangs, each pinned to a cloud pool of its own (so each
    pool's scale-up serves one gang), nodes partly taken, and random limits."""
    pools = [pool("core", "core", max_nodes=1)]
    nodes = [node("c0", "core")]
    workloads = [running("core-work", "c0", 8, "critical")]
    gangs: list[tuple[str, int, int]] = []
    j = 0
    for g in range(draw(st.integers(1, 3))):
        per_node = draw(st.sampled_from([4, 8]))
        tier = draw(st.sampled_from(["elastic", "spot"]))
        name = f"pool{g}"
        pools.append(
            pool(
                name,
                tier,
                per_node=per_node,
                max_nodes=draw(st.integers(0, 8)),
                provisioning=draw(st.integers(0, 1)),
            )
        )
        for i in range(draw(st.integers(0, 3))):
            nodes.append(node(f"{name}-n{i}", name, per_node))
            taken = draw(st.integers(0, per_node))
            if taken:
                j += 1
                workloads.append(running(f"r{j}", f"{name}-n{i}", taken, pool_pin=name))
        size = draw(st.integers(1, 6))
        gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= per_node]))
        crit = "preemptible" if tier == "spot" else draw(st.sampled_from(["critical", "standard"]))
        workloads += gang(
            f"gang{g}",
            size,
            gpus,
            crit,
            created=draw(st.integers(1, size)),
            pool_pin=name,
        )
        gangs.append((name, size, gpus))
    pol = {
        "scaleUp": {"maxNodesPerTick": draw(st.integers(1, 6))},
        "budget": draw(st.sampled_from([{}, {"maxHourlyCost": 60.0}, {"maxHourlyCost": 150.0}])),
    }
    return snapshot(pools, nodes, workloads), pol, gangs


def pods_that_fit(free_gpus: list[int], gpus: int) -> int:
    """How many pods of ``gpus`` GPUs fit on nodes with these free GPUs (pods of one size
    pack exactly node by node)."""
    return sum(f // gpus for f in free_gpus)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_clusters())
def test_gang_demand_is_never_partially_placed(cluster) -> None:
    snap, pol, gangs = cluster
    spec = policy(**pol)
    plan = decide(snap, spec, NOW)
    added = scaled(plan)
    pools = {p.name: p for p in snap.pools}
    used: dict[str, int] = {}
    for pod in snap.pods:
        if pod.node is not None:
            used[pod.node] = used.get(pod.node, 0) + pod.gpus
    for name, size, gpus in gangs:
        per_node = pools[name].gpus_per_node
        free = [n.gpus - used.get(n.name, 0) for n in snap.nodes if n.pool == name]
        free += [per_node] * pools[name].provisioning_nodes
        fit_now = pods_that_fit(free, gpus)
        new = added.get(name, 0)
        # New capacity only when the whole gang then fits, and no more than it needs.
        needed = max(0, math.ceil((size - fit_now) / (per_node // gpus)))
        assert new in (0, needed), (name, size, gpus, free, plan.explain())
        if needed and new == 0:
            blocked = sum(b.nodes for b in plan.blocked if b.pool == name)
            assert blocked >= math.ceil(size * gpus / per_node) - 0, plan.explain()
            # Held back only by a limit that really stops that many nodes.
            room = min(
                pools[name].spec.max_nodes
                - sum(1 for n in snap.nodes if n.pool == name)
                - pools[name].provisioning_nodes,
                spec.scale_up.max_nodes_per_tick,
            )
            if spec.budget.max_hourly_cost is None:
                assert needed > room, (name, needed, room, plan.explain())
    # Once the nodes asked for are on their way, the next tick asks for none.
    again = decide(apply_plan(snap, plan, NOW + 30), spec, NOW + 30)
    for name, _, _ in gangs:
        if added.get(name):
            assert name not in scaled(again), (plan.explain(), again.explain())


# ------------------------------------------------------- a gang preempts on owned nodes


def preemptible_on(name: str, node_name: str, hours: float = 2.0) -> list:
    """A preemptible Job of one 8-GPU pod running on ``node_name`` for ``hours``."""
    return [running(name, node_name, 8, "preemptible", started=NOW - hours * 3600)]


def test_a_gang_takes_owned_gpus_from_preemptible_work_instead_of_buying_cloud() -> None:
    """Two core nodes full of preemptible Jobs: a critical two-pod gang moves both (to spot)
    and takes the core nodes; no elastic node is bought for it."""
    pools = [*POOLS, pool("spot", "spot")]
    work = preemptible_on("a", "c0") + preemptible_on("b", "c1") + gang("llm", 2, 8, "critical")
    plan = decide(snapshot(pools, BUSY_CORE, work), policy(), NOW)
    moves = sorted((m.job_key, m.to_pool) for m in plan.actions if isinstance(m, MoveJob))
    assert moves == [("team/a", "spot"), ("team/b", "spot")], plan.explain()
    assert "elastic" not in scaled(plan), plan.explain()
    assert plan.gangs["team/llm"].pools == ("core",), plan.explain()
    assert any("gang team/llm: 2 pod(s) on owned GPUs freed" in n for n in plan.notes)


def test_a_gang_preempts_nothing_when_owned_gpus_cannot_hold_all_of_it() -> None:
    """Three 8-GPU pods and two core nodes: preempting would not make room for all of it,
    so nothing is moved and the gang gets cloud nodes for all three."""
    pools = [*POOLS, pool("spot", "spot")]
    work = preemptible_on("a", "c0") + preemptible_on("b", "c1") + gang("llm", 3, 8, "critical")
    plan = decide(snapshot(pools, BUSY_CORE, work), policy(), NOW)
    assert not [m for m in plan.actions if isinstance(m, MoveJob)], plan.explain()
    assert scaled(plan) == {"elastic": 3}, plan.explain()


def test_a_gang_moves_only_as_much_preemptible_work_as_it_needs_cheapest_first() -> None:
    """One core node free of work, the other running a preemptible Job: a two-pod gang
    moves that one Job, the one started last (least work lost)."""
    pools = [pool("core", "core", max_nodes=3, min_nodes=3), POOLS[1], pool("spot", "spot")]
    nodes = [*BUSY_CORE, node("c2", "core")]
    work = (
        preemptible_on("old", "c0", hours=5)
        + preemptible_on("new", "c1", hours=1)
        + gang("llm", 3, 8, "standard", created=3)
    )
    snap = snapshot(pools, nodes, work)
    plan = decide(snap, policy(), NOW)
    moves = [m.job_key for m in plan.actions if isinstance(m, MoveJob)]
    # c2 is free: the gang needs two more nodes, so both Jobs go; with one pod fewer
    # only the one that lost the least work does.
    assert sorted(moves) == ["team/new", "team/old"], plan.explain()
    two = snapshot(pools, nodes, work[:2] + gang("llm", 2, 8, "standard"))
    plan = decide(two, policy(), NOW)
    assert [m.job_key for m in plan.actions if isinstance(m, MoveJob)] == ["team/new"]
    assert not scaled(plan).get("elastic"), plan.explain()


def test_a_preemptible_gang_or_preemption_off_never_preempts() -> None:
    pools = [*POOLS, pool("spot", "spot")]
    work = preemptible_on("a", "c0") + preemptible_on("b", "c1")
    for extra, pol in [
        (gang("sweep", 2, 8, "preemptible"), {}),
        (gang("llm", 2, 8, "critical"), {"preemption": {"enabled": False}}),
    ]:
        plan = decide(snapshot(pools, BUSY_CORE, work + extra), policy(**pol), NOW)
        assert not [m for m in plan.actions if isinstance(m, MoveJob)], plan.explain()


def test_a_gang_preempts_no_more_workloads_than_max_per_tick() -> None:
    pools = [*POOLS, pool("spot", "spot")]
    work = preemptible_on("a", "c0") + preemptible_on("b", "c1") + gang("llm", 2, 8, "critical")
    plan = decide(snapshot(pools, BUSY_CORE, work), policy(preemption={"maxPerTick": 1}), NOW)
    assert not [m for m in plan.actions if isinstance(m, MoveJob)], plan.explain()
    assert scaled(plan) == {"elastic": 2}, plan.explain()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.sampled_from([2, 4, 8]), max_size=3), min_size=1, max_size=4),
    st.integers(1, 5),
    st.sampled_from([2, 4, 8]),
    st.integers(0, 3),
)
def test_a_gang_preempts_only_when_that_places_all_of_it_on_owned_gpus(
    core_work: list[list[int]], size: int, gpus: int, max_moves: int
) -> None:
    """Random preemptible Jobs on 8-GPU core nodes and a critical gang: work is moved for it
    only when every pod of the gang then has owned GPUs (never for part of it), within
    maxPerTick, and then no cloud node is bought for it."""
    nodes, work = [], []
    for i, jobs in enumerate(core_work):
        nodes.append(node(f"c{i}", "core"))
        used = 0
        for j, job_gpus in enumerate(jobs):
            if used + job_gpus > 8:
                break
            used += job_gpus
            work.append(running(f"p{i}-{j}", f"c{i}", job_gpus, "preemptible"))
    pools = [pool("core", "core", max_nodes=len(nodes), min_nodes=len(nodes)), POOLS[1]]
    pools.append(pool("spot", "spot"))
    snap = snapshot(pools, nodes, work + gang("llm", size, gpus, "critical"))
    plan = decide(snap, policy(preemption={"maxPerTick": max_moves}), NOW)
    moved = {m.job_key for m in plan.actions if isinstance(m, MoveJob)}
    assert len(moved) <= max_moves, plan.explain()
    if moved:
        assert plan.gangs["team/llm"].pools == ("core",), plan.explain()
        assert "elastic" not in scaled(plan), plan.explain()
        # The owned GPUs left after the moves hold every pod of the gang.
        free = {n.name: 8 for n in snap.nodes}
        for pod in snap.pods:
            if pod.node is not None and pod.job not in moved:
                free[pod.node] -= pod.gpus
        assert sum(f // gpus for f in free.values()) >= size, plan.explain()


# ------------------------------------------- a gang waits for owned GPUs that free up soon


def ending(name: str, node_name: str, gpus: int, in_seconds: float, crit: str = "standard"):
    """A Job of one pod on ``node_name`` whose expected duration ends ``in_seconds`` from NOW
    (negative: it is past it)."""
    return running(name, node_name, gpus, crit, started=NOW - 3600, expected=3600 + in_seconds)


@pytest.mark.parametrize(
    ("case", "core_work", "crit", "pol", "want_wait", "want_elastic"),
    [
        # Both owned nodes free up in a minute, within the standard budget (5m): no cloud.
        (
            "both free up soon",
            [ending("a", "c0", 8, 60), ending("b", "c1", 8, 60)],
            "standard",
            {},
            True,
            0,
        ),
        # Jobs past their expected duration give their GPUs back any moment: the gang waits.
        (
            "past their expected duration",
            [ending("a", "c0", 8, -600), ending("b", "c1", 8, -1)],
            "standard",
            {},
            True,
            0,
        ),
        # One node frees up in time, the other after the budget: all of it gets cloud nodes,
        # none of it waits (all or nothing).
        (
            "one of two in time",
            [ending("a", "c0", 8, 60), ending("b", "c1", 8, 3000)],
            "standard",
            {},
            False,
            2,
        ),
        # The critical budget (60s, counted from the pods' pending since NOW-60) is spent.
        (
            "critical budget spent",
            [ending("a", "c0", 8, 30), ending("b", "c1", 8, 30)],
            "critical",
            {},
            False,
            2,
        ),
        (
            "critical budget of 5m",
            [ending("a", "c0", 8, 30), ending("b", "c1", 8, 30)],
            "critical",
            {"waitBudget": {"critical": "5m"}},
            True,
            0,
        ),
        (
            "zero standard budget",
            [ending("a", "c0", 8, 60), ending("b", "c1", 8, 60)],
            "standard",
            {"waitBudget": {"standard": "0s"}},
            False,
            2,
        ),
        # Work whose end nobody states holds its GPUs for good as far as anyone knows.
        ("no expected duration", CORE_WORK, "standard", {}, False, 2),
    ],
)
def test_a_gang_waits_for_owned_gpus_that_free_up_within_its_budget(
    case: str, core_work: list, crit: str, pol: dict, want_wait: bool, want_elastic: int
) -> None:
    snap = snapshot(POOLS, BUSY_CORE, core_work + gang("llm", 2, 8, crit))
    plan = decide(snap, policy(**pol), NOW)
    placement = plan.gangs["team/llm"]
    assert (placement.state == GangState.WAITING) == want_wait, (case, plan.explain())
    assert scaled(plan).get("elastic", 0) == want_elastic, (case, plan.explain())
    if want_wait:
        assert placement.pools == ("core",), plan.explain()
        assert plan.recheck_at is not None and plan.recheck_at <= NOW + 300, plan.explain()
        assert any("gang team/llm: 2 pod(s) needing 16 GPU(s) wait" in n for n in plan.notes)


def test_a_gang_waits_only_for_gpus_no_one_else_was_promised() -> None:
    """Two owned nodes free up soon: a two-pod gang waits for both, so a pod behind it
    counts on neither and gets a cloud node; with one node freeing up, the gang does not
    wait and the pod behind it takes that node's promise."""
    pools = POOLS
    soon = [ending("a", "c0", 8, 60), ending("b", "c1", 8, 60)]
    behind = [pending("next", 8, "standard", since=NOW - 30)]
    plan = decide(snapshot(pools, BUSY_CORE, soon + gang("llm", 2, 8) + behind), policy(), NOW)
    assert plan.gangs["team/llm"].state == GangState.WAITING, plan.explain()
    assert scaled(plan) == {"elastic": 1}, plan.explain()
    one = [ending("a", "c0", 8, 60), ending("b", "c1", 8, 3000)]
    plan = decide(snapshot(pools, BUSY_CORE, one + gang("llm", 2, 8) + behind), policy(), NOW)
    assert plan.gangs["team/llm"].state == GangState.COMING, plan.explain()
    # The gang's two new nodes; the single pod waits for c0.
    assert scaled(plan) == {"elastic": 2}, plan.explain()
    assert any("1 pod(s) wait for owned GPUs" in n for n in plan.notes), plan.explain()


def test_a_waiting_gang_is_placed_on_the_owned_gpus_once_they_are_free() -> None:
    """The tick after the Jobs ended: the gang fits on the owned nodes, no cloud node."""
    done = gang("llm", 2, 8)
    plan = decide(snapshot(POOLS, BUSY_CORE, done), policy(), NOW)
    assert plan.gangs["team/llm"].state == GangState.PLACED, plan.explain()
    assert not scaled(plan), plan.explain()


def _free_by(snap: ClusterSnapshot, at: float | None) -> list[int]:
    """Each owned node's GPUs free at ``at``, with those of Jobs expected to have ended by
    then (None: free now, every pod still holding its GPUs)."""
    ends = {j.key: j.expected_duration_seconds for j in snap.jobs}
    free = {n.name: n.gpus for n in snap.nodes if n.pool == "core"}
    for pod in snap.pods:
        if pod.node in free:
            expected = ends.get(pod.job or "")
            if at is None or expected is None or (pod.started_at or NOW) + expected > at:
                free[pod.node] -= pod.gpus
    return list(free.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.integers(-600, 1200)), max_size=3),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 5),
    st.sampled_from([2, 4, 8]),
    st.sampled_from(["critical", "standard"]),
    st.sampled_from(["0s", "60s", "5m", "15m"]),
)
def test_a_gang_waits_whole_or_not_at_all(
    core_work: list[list[tuple[int, int]]], size: int, gpus: int, crit: str, budget: str
) -> None:
    """Random firm Jobs ending at random times on 8-GPU owned nodes and a firm gang: the gang
    waits exactly when owned GPUs for every one of its pods are free by the end of its wait
    budget (and then no cloud node is bought for it); else it gets cloud nodes for all of it
    that owned GPUs do not hold now, or is placed now."""
    nodes, work = [], []
    for i, jobs in enumerate(core_work):
        nodes.append(node(f"c{i}", "core"))
        used = 0
        for j, (job_gpus, ends_in) in enumerate(jobs):
            if used + job_gpus > 8:
                break
            used += job_gpus
            work.append(ending(f"w{i}-{j}", f"c{i}", job_gpus, ends_in))
    pools = [pool("core", "core", max_nodes=len(nodes), min_nodes=len(nodes)), POOLS[1]]
    snap = snapshot(pools, nodes, work + gang("llm", size, gpus, crit))
    spec = policy(waitBudget={crit: budget})
    plan = decide(snap, spec, NOW)
    by = NOW - 60 + parse_duration_seconds(budget)
    fit_now = pods_that_fit(_free_by(snap, None), gpus)
    fit_by = pods_that_fit(_free_by(snap, by), gpus) if by > NOW else 0
    state = plan.gangs["team/llm"].state
    elastic = scaled(plan).get("elastic", 0)
    if fit_now >= size:
        assert state == GangState.PLACED and elastic == 0, plan.explain()
    elif fit_by >= size:
        assert state == GangState.WAITING and elastic == 0, plan.explain()
        assert plan.recheck_at is not None and plan.recheck_at <= by, plan.explain()
    else:
        assert state == GangState.COMING, plan.explain()
        assert elastic == math.ceil((size - fit_now) / (8 // gpus)), plan.explain()
        assert not any("wait for owned GPUs" in n for n in plan.notes), plan.explain()
