"""Idle reclaim and the drain of under-used nodes in decide(), table-driven."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from tests.support.builders import NOW, node, pending, policy, pool, running, snapshot

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import Plan, ReclaimIdle, ReleaseNode
from hybridgpu.models.snapshot import GPUPod, JobState, MetricsHealth, NodeState

pytestmark = pytest.mark.unit

H = 3600.0
POOLS = [
    pool("core", "core", max_nodes=1, min_nodes=1),
    pool("elastic", "elastic", idle_for="10m"),
    pool("spot", "spot", idle_for="10m"),
]


def idle(
    workload: tuple[GPUPod, JobState | None],
    *,
    for_h: float,
    timeout_h: float = 1.0,
    utilization: float = 2.0,
    **pod_fields: object,
) -> tuple[GPUPod, JobState | None]:
    """The workload's pod, opted in with ``timeout_h``, idle for the last ``for_h`` hours."""
    pod, job = workload
    return (
        replace(
            pod,
            idle_timeout_seconds=timeout_h * H,
            idle_since=NOW - for_h * H,
            utilization_percent=utilization,
            **pod_fields,  # type: ignore[arg-type]
        ),
        job,
    )


def reclaims(plan: Plan) -> list[tuple[str, str, bool]]:
    return [(a.namespace, a.name, a.job) for a in plan.actions if isinstance(a, ReclaimIdle)]


@dataclass
class Case:
    workloads: list
    nodes: list = field(default_factory=lambda: [node("c1", "core")])
    metrics: MetricsHealth | None = None
    want: list = field(default_factory=list)
    want_note: str | None = None


CASES = {
    "a Job idle past its timeout is suspended": Case(
        workloads=[idle(running("nb", "c1", 1), for_h=1.5)],
        want=[("team", "nb", True)],
    ),
    "a Job idle for less than its timeout is left alone": Case(
        workloads=[idle(running("nb", "c1", 1), for_h=0.5)],
    ),
    "a Job that did not opt in is never reclaimed, however idle": Case(
        workloads=[
            (replace(running("nb", "c1", 1)[0], idle_since=NOW - 9 * H), running("nb", "c1", 1)[1])
        ],
    ),
    "a bare pod idle past its timeout is evicted": Case(
        workloads=[idle(running("nb", "c1", 1, job=False), for_h=2, bare=True)],
        want=[("team", "nb-pod", False)],
    ),
    "a pod of another controller is not reclaimed (it would only come back)": Case(
        workloads=[idle(running("nb", "c1", 1, job=False), for_h=2, bare=False)],
    ),
    "critical work is not reclaimed unless it opts in to that too": Case(
        workloads=[idle(running("svc", "c1", 1, "critical"), for_h=5)],
    ),
    "critical work that opts in is reclaimed": Case(
        workloads=[idle(running("svc", "c1", 1, "critical"), for_h=5, reclaim_critical=True)],
        want=[("team", "svc", True)],
    ),
    "with metrics unavailable nothing is reclaimed and the plan says why": Case(
        workloads=[idle(running("nb", "c1", 1), for_h=5)],
        metrics=MetricsHealth(available=False, reason="prometheus down"),
        want_note="idle reclaim of 1 workload(s) skipped",
    ),
    "a pod whose utilization is unknown or busy has no idle stretch: not reclaimed": Case(
        workloads=[
            (
                replace(running("nb", "c1", 1)[0], idle_timeout_seconds=H, idle_since=None),
                running("nb", "c1", 1)[1],
            )
        ],
    ),
    "a Job with one busy pod is not suspended for its idle one": Case(
        workloads=[
            idle(running("par", "c1", 1), for_h=3),
            (
                replace(running("par", "c1", 1)[0], name="par-pod-2", idle_timeout_seconds=H),
                None,
            ),
        ],
    ),
    "a suspended Job (its pods exiting) is not reclaimed again": Case(
        workloads=[
            (
                idle(running("nb", "c1", 1), for_h=3)[0],
                replace(running("nb", "c1", 1)[1], suspended=True),  # type: ignore[type-var]
            )
        ],
    ),
    "a terminating bare pod is not evicted again": Case(
        workloads=[idle(running("nb", "c1", 1, job=False), for_h=2, bare=True, terminating=True)],
    ),
    "a pending pod holds no GPU: nothing to reclaim": Case(
        workloads=[idle(pending("nb", 1), for_h=3)],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_idle_reclaim(case: Case) -> None:
    snap = snapshot(POOLS, case.nodes, case.workloads, metrics=case.metrics)
    plan = decide(snap, policy(), NOW)
    assert reclaims(plan) == case.want, plan.explain()
    if case.want_note:
        assert any(case.want_note in n for n in plan.notes), plan.notes


def test_the_reclaim_names_the_idle_time_and_the_dollars_held() -> None:
    snap = snapshot(
        POOLS,
        [node("e1", "elastic")],
        [idle(running("nb", "e1", 2, pool_pin=None), for_h=1.5)],
    )
    (action,) = [a for a in decide(snap, policy(), NOW).actions if isinstance(a, ReclaimIdle)]
    # elastic: $24 per 8-GPU node-hour, 2 GPUs for 1.5 h = $9.00
    assert action.held_dollars == pytest.approx(9.0)
    assert action.idle_gpu_hours == pytest.approx(3.0)
    assert "1h30m" in action.reason and "$9.00" in action.reason
    assert "idle-timeout 1h00m" in action.reason and "suspend" in action.reason


def test_a_bad_idle_timeout_is_reported_in_the_plan() -> None:
    pod, job = running("nb", "c1", 1)
    bad = replace(pod, input_error="annotation hybridgpu.io/idle-timeout: 'soon' is not a duration")
    plan = decide(snapshot(POOLS, [node("c1", "core")], [(bad, job)]), policy(), NOW)
    assert any("'soon' is not a duration" in n for n in plan.notes)


# ----------------------------------------------------------------- under-used node drain


def releases(plan: Plan) -> list[str]:
    return [a.node for a in plan.actions if isinstance(a, ReleaseNode)]


def spot_node(name: str, *, util: float, idle_h: float | None = 1.0) -> NodeState:
    return node(
        name,
        "spot",
        utilization_percent=util,
        idle_since=None if idle_h is None else NOW - idle_h * H,
    )


@dataclass
class DrainCase:
    nodes: list
    workloads: list
    want: list = field(default_factory=list)


DRAIN_CASES = {
    "an under-used spot node whose preemptible Jobs fit on another node is drained": DrainCase(
        nodes=[spot_node("s1", util=3.0), spot_node("s2", util=60.0, idle_h=None)],
        workloads=[
            running("slow", "s1", 1, "preemptible"),
            running("busy", "s2", 4, "preemptible"),
        ],
        want=["s1"],
    ),
    "when its Jobs fit nowhere else the node is kept (a new node would idle the same)": DrainCase(
        nodes=[spot_node("s1", util=3.0)],
        workloads=[running("slow", "s1", 1, "preemptible")],
    ),
    "a node used above the threshold is not drained": DrainCase(
        nodes=[spot_node("s1", util=40.0), spot_node("s2", util=60.0, idle_h=None)],
        workloads=[
            running("slow", "s1", 1, "preemptible"),
            running("busy", "s2", 4, "preemptible"),
        ],
    ),
    "a node with a standard pod is not drained, however idle": DrainCase(
        nodes=[spot_node("s1", util=3.0), spot_node("s2", util=60.0, idle_h=None)],
        workloads=[
            running("nb", "s1", 1, "standard"),
            running("busy", "s2", 4, "preemptible"),
        ],
    ),
    "a node with no utilization sample is not drained": DrainCase(
        nodes=[
            node("s1", "spot", idle_since=NOW - H),
            spot_node("s2", util=60.0, idle_h=None),
        ],
        workloads=[
            running("slow", "s1", 1, "preemptible"),
            running("busy", "s2", 4, "preemptible"),
        ],
    ),
    "two under-used nodes cannot both move onto the same free GPUs": DrainCase(
        nodes=[
            spot_node("s1", util=3.0),
            spot_node("s2", util=3.0),
            spot_node("s3", util=60.0, idle_h=None),
        ],
        workloads=[
            running("a", "s1", 2, "preemptible"),
            running("b", "s2", 2, "preemptible"),
            running("busy", "s3", 6, "preemptible"),  # 2 free GPUs: room for one of them
        ],
        want=["s1"],
    ),
}


@pytest.mark.parametrize("case", DRAIN_CASES.values(), ids=DRAIN_CASES.keys())
def test_under_used_node_drain(case: DrainCase) -> None:
    # Owned GPUs are all taken: "elsewhere" is the other spot nodes.
    core_full = running("svc", "c1", 8, "critical")
    snap = snapshot(POOLS, [node("c1", "core"), *case.nodes], [core_full, *case.workloads])
    plan = decide(snap, policy(consolidation={"enabled": False}), NOW)
    assert releases(plan) == case.want, plan.explain()


def test_an_under_used_node_drains_onto_free_owned_gpus() -> None:
    snap = snapshot(
        POOLS,
        [node("c1", "core"), spot_node("s1", util=3.0)],
        [running("slow", "s1", 1, "preemptible")],
    )
    assert releases(decide(snap, policy(consolidation={"enabled": False}), NOW)) == ["s1"]
