"""Committed cloud capacity on a GPUPool (spec.committed): filled before on-demand nodes,
never released below the commitment, billed whether used or not, idle committed GPUs
reported as waste (status, metric) and simulated like any other pool."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.support.builders import NOW, node, pending, policy, pool, running, snapshot

from hybridgpu.core.cost import (
    always_on_nodes,
    committed_idle,
    held_nodes,
    marginal_gpu_hour_dollars,
    node_hour_dollars,
    pool_hour_dollars,
)
from hybridgpu.core.decide import decide
from hybridgpu.kube.status import pool_status
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models import GPUPoolSpec
from hybridgpu.models.actions import ReleaseNode, ScaleUp
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

COMMITTED = {"nodes": 2, "termYears": 3, "perNodeHour": 10.0}


def committed_pool(nodes: int = 2) -> PoolState:
    return pool(
        "reserved",
        "elastic",
        max_nodes=nodes,
        price=24.0,
        committed={**COMMITTED, "nodes": nodes},
    )


def test_a_commitment_is_billed_in_full_and_its_nodes_cost_nothing_more_to_use():
    spec = committed_pool().spec
    assert node_hour_dollars(spec) == 10.0
    assert marginal_gpu_hour_dollars(spec) == 0.0
    assert pool_hour_dollars(spec, billed_nodes=0) == 20.0  # paid with no node running
    assert pool_hour_dollars(spec, billed_nodes=2) == 20.0
    assert held_nodes(spec) == 2
    assert always_on_nodes(spec) == 2


def test_upfront_is_spread_over_the_term():
    spec = pool(
        "r",
        "elastic",
        max_nodes=1,
        committed={"nodes": 1, "termYears": 1, "perNodeHour": 5.0, "upfrontPerNode": 8760.0},
    ).spec
    assert node_hour_dollars(spec) == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tier": "spot", "committed": COMMITTED}, "committed is for elastic pools"),
        ({"maxNodes": 5, "committed": COMMITTED}, "maxNodes must equal committed.nodes"),
        ({"committed": {**COMMITTED, "termYears": 2}}, "termYears"),
    ],
)
def test_bad_commitments_are_refused(body, message):
    base = {
        "tier": "elastic",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 2,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 24.0},
    }
    with pytest.raises(ValidationError, match=message):
        GPUPoolSpec.model_validate(base | body)


def test_committed_nodes_are_never_released_below_the_commitment():
    pools = [pool("core", "core", max_nodes=0), committed_pool(), pool("elastic", "elastic")]
    nodes = [
        node("r1", "reserved", idle_since=NOW - 86400, utilization_percent=0.0),
        node("r2", "reserved", idle_since=NOW - 86400, utilization_percent=0.0),
        node("e1", "elastic", idle_since=NOW - 3600, utilization_percent=0.0),
    ]
    plan = decide(snapshot(pools, nodes), policy(), NOW)
    released = {a.node for a in plan.actions if isinstance(a, ReleaseNode)}
    assert released == {"e1"}


def test_free_committed_gpus_are_filled_before_on_demand_nodes():
    """A pending standard pod with room on a committed node and on an on-demand node: the
    plan scales nothing (it fits) and the committed pool comes first in the free order."""
    pools = [committed_pool(), pool("elastic", "elastic")]
    nodes = [node("r1", "reserved"), node("r2", "reserved"), node("e1", "elastic")]
    plan = decide(snapshot(pools, nodes, [pending("job", 4)]), policy(), NOW)
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)]
    # The committed pool's free GPUs cost nothing more: it is the first place to put work.
    ordered = sorted(
        pools,
        key=lambda p: (marginal_gpu_hour_dollars(p.spec), p.name),
    )
    assert ordered[0].name == "reserved"


def test_scale_up_goes_to_the_commitment_before_on_demand():
    """Fewer committed nodes running than committed (e.g. after a restart): a new node there
    is cheaper than an on-demand one."""
    pools = [committed_pool(), pool("elastic", "elastic")]
    plan = decide(snapshot(pools, [], [pending("job", 8)]), policy(), NOW)
    ups = [a for a in plan.actions if isinstance(a, ScaleUp)]
    assert ups and ups[0].pool == "reserved"


def test_preemptible_work_on_committed_nodes_is_not_consolidated_away():
    """Moving work off a node that is paid anyway saves nothing."""
    pools = [committed_pool(), pool("spot", "spot")]
    nodes = [node("r1", "reserved", utilization_percent=90.0), node("r2", "reserved")]
    work = [running("batch", "r1", 8, "preemptible", started=NOW - 7200)]
    spec = {"preemption": {"allowOnDemandForPreemptible": True}}
    plan = decide(snapshot(pools, nodes, work), policy(**spec), NOW)
    assert not [a for a in plan.actions if a.kind.value == "move_job"]


def test_status_reports_idle_committed_gpus_as_waste():
    pools = [committed_pool()]
    nodes = [node("r1", "reserved")]  # one of two committed nodes running
    workloads = [running("job", "r1", 3)]
    snap = snapshot(pools, nodes, workloads)
    plan = decide(snap, policy(), NOW)
    status = pool_status("reserved", snap, plan, generation=1)
    assert status["costPerHour"] == 20.0
    assert status["committed"] == {
        "nodes": 2,
        "gpus": 16,
        "idleGpus": 13,
        "wastedPerHour": pytest.approx(13 * 10.0 / 8),
    }
    spec = pools[0].spec
    assert committed_idle(spec, 16) is not None
    assert committed_idle(spec, 16).idle_gpus == 0


def test_waste_is_counted_as_a_metric():
    pools = [committed_pool()]
    snap = snapshot(
        pools, [node("r1", "reserved"), node("r2", "reserved")], [running("j", "r1", 4)]
    )
    metrics = ExportedMetrics()
    metrics._record_cost(snap, NOW)
    metrics._record_cost(snap, NOW + 3600)
    wasted = metrics.registry.get_sample_value(
        "hybridgpu_committed_idle_cost_dollars_total", {"pool": "reserved"}
    )
    assert wasted == pytest.approx(12 * 10.0 / 8)  # 12 of 16 committed GPUs idle for an hour


def _trace(hours: float) -> list[TraceJob]:
    return [
        TraceJob(
            name="short",
            arrival_seconds=0.0,
            duration_seconds=3600.0,
            gpus=8,
            criticality=Criticality.STANDARD,
        ),
        TraceJob(
            name="late",
            arrival_seconds=hours * 3600 - 3600,
            duration_seconds=3600.0,
            gpus=8,
            criticality=Criticality.STANDARD,
        ),
    ]


def test_the_simulator_bills_a_commitment_whether_used_or_not():
    """Two 1-hour jobs ten hours apart on a 1-node commitment: the node runs (and is billed)
    the whole time; no on-demand node is launched."""
    pools = [committed_pool(nodes=1), pool("elastic", "elastic")]
    settings = SimSettings(seed=1)
    trace = _trace(10.0)
    result = Simulation(
        "hybridgpu",
        pools,
        ScalingPolicySpec(),
        trace,
        settings,
        horizon_seconds=10 * 3600.0,
        check_quiet=True,  # skipping quiet ticks with idle committed nodes changes nothing
    ).run()
    assert result.unfinished_jobs == 0
    # 10 hours x $10: the idle hours in between are billed, and no on-demand node ($24 an
    # hour, billed from launch) was needed.
    assert result.cost_by_tier_dollars["elastic"] == pytest.approx(10.0 * 10, rel=1e-6)


def test_the_simulation_ends_with_the_work_not_with_its_horizon():
    """A committed node is billed while the trace's work runs, like an owned one: it does not
    keep the simulation (and its bill) going to the horizon once every job is done."""
    pools = [committed_pool(nodes=1), pool("elastic", "elastic")]
    trace = _trace(1.0)[:1]  # one 1-hour job; the horizon is a day and more after it
    sim = Simulation("hybridgpu", pools, ScalingPolicySpec(), trace, SimSettings(seed=1))
    result = sim.run()
    assert result.unfinished_jobs == 0
    assert result.cost_by_tier_dollars["elastic"] == pytest.approx(10.0, rel=0.01)
