"""The plan matches the simulator: plan on a trace, then simulate the trace with every owned
size from none to past the peak (the real ``core.decide`` in the discrete-event simulator).
The plan recommends the size the simulator finds cheapest, and projects its cost within 5%.

The plan is an expectation and a simulation one draw of spot interruptions, so each size is
simulated with several seeds and their mean is compared (with one seed, the simulator's own
spread between seeds is larger than the gap between two neighbouring sizes). The plan is
given the simulator's physics: work lost per interruption or move = restart + on average half
a checkpoint interval; owned nodes straight line, as GPUPool pricing bills them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import PoolState
from hybridgpu.planner.io import history_from_jobs, jobs_of_trace
from hybridgpu.planner.model import CloudRates, OwnedNodeType, PlanInputs
from hybridgpu.planner.plan import plan_capacity
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import synthetic

pytestmark = pytest.mark.unit

ON_DEMAND, SPOT = 3.06, 0.92  # $/GPU-hour, as the bundled scenario (p3 list prices)
CORE_PRICING = {
    "capexPerNode": 70000,
    "amortizationYears": 4,
    "powerWattsPerNode": 3000,
    "pue": 1.4,
    "electricityPerKWh": 0.12,
    "opsPerNodeHour": 0.6,
}
HAZARD_PER_HOUR = 0.05
RESTART_SECONDS = 300.0
CHECKPOINT_SECONDS = 1800.0
SEEDS = (1, 2, 3)
PROVISIONING_SECONDS = 120.0
IDLE_FOR_SECONDS = 300.0
INTERVAL_SECONDS = 30.0


def pool(name: str, tier: str, gpus: int, max_nodes: int) -> PoolState:
    spec: dict = {
        "tier": tier,
        "gpu": {"model": "V100-16GB", "perNode": gpus},
        "maxNodes": max_nodes,
        "scaleDown": {"idleFor": f"{IDLE_FOR_SECONDS:g}s"},
    }
    if tier == "core":
        spec |= {"minNodes": max_nodes, "provider": {"type": "static"}, "pricing": CORE_PRICING}
    else:
        price = ON_DEMAND if tier == "elastic" else SPOT
        spec |= {"provider": {"type": "fake"}, "pricing": {"perNodeHour": price * gpus}}
    manifest: dict[str, Any] = {"apiVersion": "hybridgpu.io/v1alpha1", "kind": "GPUPool"}
    manifest |= {"metadata": {"name": name}, "spec": spec}
    return PoolState(name=name, spec=GPUPool.model_validate(manifest).spec)


def cluster(owned_nodes: int) -> list[PoolState]:
    """Owned 8-GPU nodes; cloud nodes of 1, 2, 4 and 8 GPUs at one price per GPU."""
    pools = [pool("core", "core", 8, owned_nodes)] if owned_nodes else []
    for gpus in (1, 2, 4, 8):
        pools.append(pool(f"elastic-{gpus}g", "elastic", gpus, 64))
        pools.append(pool(f"spot-{gpus}g", "spot", gpus, 64))
    return pools


POLICY = ScalingPolicy.model_validate(
    {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "default"},
        "spec": {"interval": f"{INTERVAL_SECONDS:g}s", "pendingGracePeriod": "5s"},
    }
).spec


def simulate(trace, owned_nodes: int) -> float:
    """The mean simulated cost over ``SEEDS``, dollars."""
    costs = []
    for seed in SEEDS:
        settings = SimSettings(
            provisioning_delay_seconds=PROVISIONING_SECONDS,
            restart_overhead_seconds=RESTART_SECONDS,
            checkpoint_interval_seconds=CHECKPOINT_SECONDS,
            spot_hazard_per_hour=HAZARD_PER_HOUR,
            seed=seed,
        )
        result = Simulation("hybridgpu", cluster(owned_nodes), POLICY, trace, settings).run()
        assert result.unfinished_jobs == 0
        costs.append(result.total_cost_dollars)
    return sum(costs) / len(costs)


def test_the_plan_recommends_the_owned_size_the_simulator_finds_cheapest():
    trace = synthetic(seed=7, hours=72.0)
    jobs = jobs_of_trace(trace)
    node = OwnedNodeType("8xV100", 8, 70000, 4, 3000, 1.4, 0.12, 0.6, cost_of_capital_per_year=0)
    assert node.node_hour_dollars == pytest.approx(
        CORE_PRICING["capexPerNode"] / (4 * 8760) + 3000 * 1.4 * 0.12 / 1000 + 0.6
    )
    inputs = PlanInputs(
        history=tuple(history_from_jobs(jobs)),
        node_types=(node,),
        cloud=CloudRates(
            ON_DEMAND,
            SPOT,
            spot_interruptions_per_hour=HAZARD_PER_HOUR,
            spot_restart_overhead_hours=(RESTART_SECONDS + CHECKPOINT_SECONDS / 2) / 3600,
            node_startup_hours=PROVISIONING_SECONDS / 3600,
            idle_release_hours=(IDLE_FOR_SECONDS + INTERVAL_SECONDS / 2) / 3600,
        ),
        horizon_months=1,
        jobs=tuple(jobs),
    )
    plan = plan_capacity(inputs, with_sensitivity=False)
    (owned,) = plan.recommended.nodes
    assert owned > 0  # the case is only interesting when owning pays
    window_hours = (
        max(j.arrival_seconds + j.duration_seconds for j in jobs)
        - min(j.arrival_seconds for j in jobs)
    ) / 3600
    projected = plan.recommended.total_dollars / plan.recommended.horizon_hours * window_hours

    peak_nodes = math.ceil(max(s.total_gpus for s in inputs.history) / node.gpus_per_node)
    simulated = {size: simulate(trace, size) for size in range(peak_nodes + 2)}
    cheapest = min(simulated, key=lambda size: simulated[size])
    assert owned == cheapest, {n: round(c) for n, c in simulated.items()}
    assert simulated[owned] == pytest.approx(projected, rel=0.05)
