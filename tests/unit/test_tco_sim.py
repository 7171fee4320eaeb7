"""The plan matches the simulator: plan on a trace, simulate that trace with the recommended
fleet, and the simulated cost is within 5% of the plan's projection; owning one node more
or less does not simulate cheaper."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import PoolState
from hybridgpu.planner.cost import CostModel
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
    settings = SimSettings(
        provisioning_delay_seconds=PROVISIONING_SECONDS,
        restart_overhead_seconds=RESTART_SECONDS,
        spot_hazard_per_hour=HAZARD_PER_HOUR,
        seed=3,
    )
    result = Simulation("hybridgpu", cluster(owned_nodes), POLICY, trace, settings).run()
    assert result.unfinished_jobs == 0
    return result.total_cost_dollars


def test_simulated_cost_of_the_recommended_fleet_is_within_5_percent_of_the_plan():
    trace = synthetic(seed=7, hours=72.0)
    jobs = jobs_of_trace(trace)
    node = OwnedNodeType("8xV100", 8, 70000, 4, 3000, 1.4, 0.12, 0.6)
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
            spot_restart_overhead_hours=RESTART_SECONDS / 3600,
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

    simulated = simulate(trace, owned)
    assert simulated == pytest.approx(projected, rel=0.05)

    # The recommendation is also what the simulator would have picked among its neighbours.
    model = CostModel(inputs)
    for other in (owned - 1, owned + 1):
        assert simulate(trace, other) >= simulated * 0.98, other
        assert model.total_dollars((other,)) >= model.total_dollars((owned,))
