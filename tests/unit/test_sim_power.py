"""The simulator runs and bills owned machines with ``spec.power`` as the operator does
(issue 9: plan and simulation bill the same dollars): decide() powers an idle machine off
after power.idleFor and on again (booting in power.bootTime) when work needs it; every machine
costs its capex and ops for the whole run, its electricity only while it is on
(``core.cost.pool_hour_dollars``). Before, the simulator removed a powered-off machine like a
released cloud node, so it stopped billing its capex and ops, and billed a powered-on one's
capex and ops a second time, booting it in the cloud's provisioning delay.

Without ``spec.power`` an owned node-hour costs the simulator what it costs the planner
(``OwnedNodeType`` at the same capex, wall power, PUE, $/kWh and ops, no cost of capital)."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.core.cost import core_node_cost, power_node_hour_dollars
from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.planner.model import OwnedNodeType
from hybridgpu.sim.compare import BOUND, compare, core_cost_per_hour, trace_window_seconds
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

HOUR = 3600.0
PRICING = {
    "capexPerNode": 70000,
    "amortizationYears": 4,
    "powerWattsPerNode": 3000,
    "pue": 1.4,
    "electricityPerKWh": 0.12,
    "opsPerNodeHour": 0.6,
}
POLICY = ScalingPolicy.model_validate(
    {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "default"},
        "spec": {"interval": "30s", "pendingGracePeriod": "5s"},
    }
).spec


def _owned(machines: int, power: dict[str, Any] | None) -> PoolState:
    spec: dict[str, Any] = {
        "tier": "core",
        "gpu": {"model": "V100-16GB", "perNode": 8},
        "minNodes": 0 if power is not None else machines,
        "maxNodes": machines,
        "provider": {"type": "fake" if power is not None else "static"},
        "pricing": PRICING,
    }
    if power is not None:
        spec["power"] = power
    manifest: dict[str, Any] = {"apiVersion": "hybridgpu.io/v1alpha1", "kind": "GPUPool"}
    manifest |= {"metadata": {"name": "owned"}, "spec": spec}
    return PoolState(name="owned", spec=GPUPool.model_validate(manifest).spec)


def _trace() -> list[TraceJob]:
    # One machine's work for an hour, nothing for hours, then an hour's work again.
    pre = Criticality.PREEMPTIBLE
    return [TraceJob("first", 0.0, HOUR, 8, pre), TraceJob("later", 5 * HOUR, HOUR, 8, pre)]


def test_powered_off_machines_pay_capex_and_ops_but_no_electricity() -> None:
    pool = _owned(2, {"idleFor": "30m", "bootTime": "5m"})
    sim = Simulation("hybridgpu", [pool], POLICY, _trace(), SimSettings(), check_quiet=True)
    result = sim.run()
    assert result.unfinished_jobs == 0
    machines = [*sim.nodes.values(), *sim.removed]
    # Both were on at the start; each was powered off once idle for 30 min, and one was
    # powered on again for the job at 5 h, Ready 5 min later.
    assert len(machines) == 3 and len(sim.removed) == 2
    first_off = min(n.removed_at for n in sim.removed if n.removed_at is not None)
    assert first_off == pytest.approx(0.5 * HOUR, abs=60)  # the machine never used
    (again,) = [n for n in machines if n.launched_at > 0]
    assert 5 * HOUR <= again.launched_at <= 5 * HOUR + 60
    assert again.ready_at - again.launched_at == pytest.approx(300.0)
    on_hours = (
        sum(
            ((n.removed_at if n.removed_at is not None else result.end_seconds) - n.launched_at)
            for n in machines
        )
        / HOUR
    )
    parts = core_node_cost(pool.spec)
    sunk = 2 * (parts.capex_per_hour + parts.ops_per_hour) * result.end_seconds / HOUR
    expected = sunk + on_hours * power_node_hour_dollars(pool.spec)
    assert result.cost_by_tier_dollars["core"] == pytest.approx(expected)
    always_on = 2 * parts.total_per_hour * result.end_seconds / HOUR
    assert on_hours < 2 * result.end_seconds / HOUR / 2  # off most of the time
    assert result.cost_by_tier_dollars["core"] < always_on


def test_power_per_node_hour_overrides_the_wall_power() -> None:
    pool = _owned(1, {"idleFor": "30m", "bootTime": "5m", "powerPerNodeHour": 2.0})
    sim = Simulation("hybridgpu", [pool], POLICY, _trace(), SimSettings())
    result = sim.run()
    machines = [*sim.nodes.values(), *sim.removed]
    on_hours = (
        sum(
            ((n.removed_at if n.removed_at is not None else result.end_seconds) - n.launched_at)
            for n in machines
        )
        / HOUR
    )
    parts = core_node_cost(pool.spec)
    sunk = (parts.capex_per_hour + parts.ops_per_hour) * result.end_seconds / HOUR
    assert result.cost_by_tier_dollars["core"] == pytest.approx(sunk + 2.0 * on_hours)


def test_an_owned_node_hour_costs_the_simulator_what_it_costs_the_plan() -> None:
    pool = _owned(3, None)
    result = Simulation("hybridgpu", [pool], POLICY, _trace(), SimSettings()).run()
    node = OwnedNodeType("8xV100", 8, 70000, 4, 3000, 1.4, 0.12, 0.6, cost_of_capital_per_year=0)
    hours = result.end_seconds / HOUR
    assert result.cost_by_tier_dollars["core"] == pytest.approx(3 * node.node_hour_dollars * hours)
    assert power_node_hour_dollars(pool.spec) == pytest.approx(node.cost.power_per_hour)


def test_simulate_bills_each_policy_the_electricity_its_machines_drew() -> None:
    # `hybridgpu simulate` bills owned nodes over the trace window for every policy; with
    # spec.power that is every machine's capex and ops, plus the electricity each policy's
    # machines drew, and the fluid bound's owned work at the least electricity: it stays
    # below every policy that meets the SLO.
    pool = _owned(2, {"idleFor": "30m", "bootTime": "5m"})
    results = compare(
        [pool, _cloud("od", 24.48), _cloud("spot", 7.36)], POLICY, _trace(), SimSettings()
    )
    window = trace_window_seconds(_trace()) / HOUR
    parts = core_node_cost(pool.spec)
    sunk = 2 * (parts.capex_per_hour + parts.ops_per_hour) * window
    ours = results["hybridgpu"]
    assert ours.owned_power_window_dollars > 0
    assert ours.owned_power_window_dollars <= ours.owned_power_dollars
    assert ours.cost_by_tier_dollars["core"] == pytest.approx(
        sunk + ours.owned_power_window_dollars
    )
    assert ours.cost_by_tier_dollars["core"] < core_cost_per_hour([pool]) * window
    bound = results[BOUND]
    # 16 GPU-hours of work, at least on owned GPUs drawing their share of a machine's power.
    least = 16 * power_node_hour_dollars(pool.spec) / 8
    assert bound.cost_by_tier_dollars["core"] == pytest.approx(sunk + least)
    assert bound.total_cost_dollars <= ours.total_cost_dollars


def _cloud(tier: str, per_node_hour: float) -> PoolState:
    spec: dict[str, Any] = {
        "tier": "elastic" if tier == "od" else "spot",
        "gpu": {"model": "V100-16GB", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": per_node_hour},
    }
    manifest: dict[str, Any] = {"apiVersion": "hybridgpu.io/v1alpha1", "kind": "GPUPool"}
    manifest |= {"metadata": {"name": tier}, "spec": spec}
    return PoolState(name=tier, spec=GPUPool.model_validate(manifest).spec)


def test_a_backlog_past_the_window_draws_no_billed_electricity() -> None:
    # owned_only queues three 1-hour jobs on one machine: it runs until 3 h, but owned nodes
    # are billed over the trace window (the first hour) for every policy, electricity too.
    pool = _owned(1, {"idleFor": "30m", "bootTime": "5m"})
    pre = Criticality.PREEMPTIBLE
    trace = [TraceJob(f"j{i}", 0.0, HOUR, 8, pre) for i in range(3)]
    cloud = [_cloud("od", 24.48), _cloud("spot", 7.36)]
    owned_only = compare([pool, *cloud], POLICY, trace, SimSettings())["owned_only"]
    assert owned_only.owned_power_dollars == pytest.approx(3 * power_node_hour_dollars(pool.spec))
    assert owned_only.cost_by_tier_dollars["core"] == pytest.approx(
        core_node_cost(pool.spec).total_per_hour
    )
