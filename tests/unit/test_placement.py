"""One placer (issue 9, item 6): decide(), the simulator's scheduler and the planner's replay
place pods with ``core.placement`` and so put the same pods on the same nodes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.builders import NOW, node, pending, pool, snapshot
from tests.support.sim import BUNDLED_CLUSTER

from hybridgpu.core.decide import _Decider
from hybridgpu.core.placement import (
    FreeGPUs,
    NumberedFreeGPUs,
    placement_order,
    placement_tiers,
)
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.planner.model import CloudRates, JobDemand
from hybridgpu.planner.replay import _Replay
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit


def test_best_fit_is_the_fullest_node_with_room_and_the_lowest_name_among_equals() -> None:
    nodes = FreeGPUs([("c", 4), ("a", 8), ("b", 4), ("d", 1)])
    assert nodes.total == 17 and len(nodes) == 4 and nodes.most_free == 8
    assert nodes.best_fit(2) == "b"
    assert nodes.take(2) == "b" and nodes.free("b") == 2
    assert nodes.best_fit(2) == "b"  # now the fullest with room
    assert nodes.best_fit(5) == "a"
    assert nodes.best_fit(9) is None
    assert nodes.with_free(4) == ["c"]
    nodes.discard("a")
    assert nodes.best_fit(5) is None and nodes.total == 7 and "a" not in nodes
    nodes.put("e", 0)
    assert nodes.best_fit(0) == "e"


def test_the_pools_a_pod_may_use_cheapest_marginal_gpu_first() -> None:
    core = pool("core", "core")
    pools = [
        pool("spot-b", "spot", price=8.0),
        pool("spot-a", "spot", price=16.0),
        pool("od", "elastic"),
        core,
        pool("t4", "elastic", gpu={"model": "T4", "perNode": 8}),
        pool("small", "spot", per_node=1, price=1.0),
    ]

    def names(*args: Any, **kw: Any) -> list[str]:
        kw.setdefault("on_demand_for_preemptible", False)
        return [p.name for p in placement_order(pools, *args, **kw)]

    assert names(8, Criticality.PREEMPTIBLE) == ["core", "spot-b", "spot-a"]
    # $1 per GPU-hour both: the name decides.
    assert names(1, Criticality.PREEMPTIBLE) == ["core", "small", "spot-b", "spot-a"]
    assert names(8, Criticality.STANDARD) == ["core", "od", "t4"]
    assert names(8, Criticality.STANDARD, ("T4",)) == ["t4"]
    assert names(8, Criticality.PREEMPTIBLE, on_demand_for_preemptible=True)[-2:] == ["od", "t4"]
    assert names(8, Criticality.STANDARD, pinned="spot-a") == ["spot-a"]
    assert names(8, Criticality.STANDARD, pinned="small") == []  # too small for the pod
    assert placement_tiers(Criticality.CRITICAL, on_demand_for_preemptible=True) == {
        "core",
        "elastic",
    }


class _Recorder(Simulation):
    """The simulation, recording where each job first starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_on: dict[str, str] = {}

    def _start(self, job: Any, node: Any) -> None:
        self.started_on.setdefault(job.trace.name, node.name)
        super()._start(job, node)


def _sim_free(core: PoolState, sizes: list[int]) -> dict[str, int]:
    """Free GPUs per owned node once the simulator's scheduler placed the pods."""
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec
    # All arrive at once, in the order decide() takes them (largest first, then by name).
    jobs = [
        TraceJob(f"p{i:03d}", 0.0, 3600.0 + i, gpus, Criticality.STANDARD)
        for i, gpus in enumerate(sizes)
    ]
    sim = _Recorder("h", [core], policy, jobs, SimSettings())
    sim.run()
    free = {f"core-{n + 1:05d}": core.spec.gpu.per_node for n in range(core.spec.max_nodes)}
    for i, gpus in enumerate(sizes):
        where = sim.started_on[f"p{i:03d}"]
        if sim.jobs[i].first_started == 0.0:
            free[where] -= gpus
    return free


def _decide_free(core: PoolState, sizes: list[int]) -> dict[str, int]:
    """Free GPUs per owned node as decide()'s ledger places the same pending pods."""
    nodes = [
        node(f"core-{n + 1:05d}", "core", core.spec.gpu.per_node)
        for n in range(core.spec.max_nodes)
    ]
    pods = [pending(f"p{i:03d}", gpus, since=NOW - 600) for i, gpus in enumerate(sizes)]
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec
    decider = _Decider(snapshot([core], nodes, pods), policy, NOW)
    decider.run()
    return {n.name: decider.node_free[n.name] for n in nodes}


def _planner_free(core: PoolState, sizes: list[int]) -> dict[str, int]:
    """Free GPUs per owned node as the planner's replay places the same jobs."""
    per_node = core.spec.gpu.per_node
    replay = _Replay([per_node] * core.spec.max_nodes, CloudRates(4.0, 1.0), None)
    for i, gpus in enumerate(sizes):
        replay.place(JobDemand(0.0, 3600.0 + i, gpus, False), 0.0)
    return {f"core-{n + 1:05d}": free for n, free in enumerate(replay.owned.free)}


@settings(max_examples=40, deadline=None)
@given(
    per_node=st.sampled_from([4, 8]),
    count=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=14),
)
def test_decide_the_simulator_and_the_planner_put_the_same_pods_on_the_same_nodes(
    per_node: int, count: int, sizes: list[int]
) -> None:
    """Pods of mixed sizes onto a fleet of owned nodes: each of the three fills the same
    nodes with the same pods (the pods that fit nowhere are left out by all three). Before
    the one placer, decide() took any node of the best free count (the last one it had
    touched) where the simulator took the lowest name, and they disagreed."""
    core = pool("core", "core", per_node=per_node, min_nodes=count, max_nodes=count)
    # decide() takes pods largest first; the others in arrival order: give it that order.
    ordered = sorted((s for s in sizes if s <= per_node), reverse=True)
    decided = _decide_free(core, ordered)
    assert _planner_free(core, ordered) == decided
    assert _sim_free(core, ordered) == decided


@settings(max_examples=300, deadline=None)
@given(
    start=st.lists(st.integers(0, 8), max_size=70),
    steps=st.lists(
        st.tuples(st.integers(0, 69), st.integers(0, 12), st.integers(-1, 14)), max_size=60
    ),
)
def test_numbered_free_gpus_answer_as_free_gpus_do(
    start: list[int], steps: list[tuple[int, int, int]]
) -> None:
    """The planner's replay places on ``NumberedFreeGPUs`` (bit sets per free count): every
    best fit, total and most-free-first order is the one ``FreeGPUs`` gives (more than 64
    nodes: the bit sets span several machine words)."""
    numbered = NumberedFreeGPUs(start)
    named = FreeGPUs(enumerate(start))

    def agree(gpus: int) -> None:
        assert numbered.best_fit(gpus) == named.best_fit(gpus)
        assert numbered.total == named.total and len(numbered) == len(named)
        assert list(numbered.most_free_first()) == list(reversed(named.by_free()))

    agree(1)
    for number, free, gpus in steps:
        if start:
            number %= len(start)
            numbered.put(number, free)
            named.put(number, free)
            assert numbered.free(number) == named.free(number) == free
        agree(gpus)


def test_numbered_free_gpus_refuse_a_negative_count() -> None:
    with pytest.raises(ValueError):
        NumberedFreeGPUs([2, -1])
    nodes = NumberedFreeGPUs([2, 1])
    with pytest.raises(ValueError):
        nodes.put(0, -1)
    assert nodes.best_fit(2) == 0 and nodes.total == 3
