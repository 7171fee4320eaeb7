"""The plan's replay waits and returns work as the operator does (issue 9, plan against
simulator; bench/tco_plan_vs_sim.py):

- a preemptible job that fits on no owned node waits for owned GPUs while the free ones add
  up to what it needs, within ScalingPolicy waitBudget.preemptible (2 h), instead of going to
  spot at once (decide()'s wait-or-launch rule). Sent to spot at once, the replay billed the
  synthetic traces' 8-GPU preemptible jobs hours of spot that the simulator runs on owned
  GPUs, and bought one owned node too many on trace 4;
- a preemptible job on spot comes back to an idle owned node only once it has run there
  longer than a restart throws away (decide()'s consolidation: the saving over the time it
  has run must beat the work the move loses). Moved back at once, the replay let returned
  8-GPU jobs hold whole owned nodes that firm 8-GPU jobs then preempted, where the simulator
  rents on-demand nodes for them, and bought one owned node too few on trace 9.

Each case runs the replay and the simulator on the same small trace."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.planner.io import jobs_of_trace
from hybridgpu.planner.model import CloudRates
from hybridgpu.planner.replay import replay_jobs
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

HOUR = 3600.0
ON_DEMAND, SPOT = 3.06, 0.92
RESTART_SECONDS, CHECKPOINT_SECONDS = 300.0, 1800.0
PROVISIONING_SECONDS, IDLE_FOR_SECONDS, INTERVAL_SECONDS = 120.0, 300.0, 30.0
RATES = CloudRates(
    ON_DEMAND,
    SPOT,
    spot_restart_overhead_hours=(RESTART_SECONDS + CHECKPOINT_SECONDS / 2) / HOUR,
    node_startup_hours=PROVISIONING_SECONDS / HOUR,
    idle_release_hours=(IDLE_FOR_SECONDS + INTERVAL_SECONDS / 2) / HOUR,
)
POLICY = ScalingPolicy.model_validate(
    {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "default"},
        "spec": {"interval": f"{INTERVAL_SECONDS:g}s", "pendingGracePeriod": "5s"},
    }
).spec


def _pool(name: str, tier: str, max_nodes: int) -> PoolState:
    spec: dict[str, Any] = {
        "tier": tier,
        "gpu": {"model": "V100-16GB", "perNode": 8},
        "maxNodes": max_nodes,
        "scaleDown": {"idleFor": f"{IDLE_FOR_SECONDS:g}s"},
    }
    if tier == "core":
        pricing = {"capexPerNode": 70000, "powerWattsPerNode": 3000, "opsPerNodeHour": 0.6}
        spec |= {"minNodes": max_nodes, "provider": {"type": "static"}, "pricing": pricing}
    else:
        price = ON_DEMAND if tier == "elastic" else SPOT
        spec |= {"provider": {"type": "fake"}, "pricing": {"perNodeHour": price * 8}}
    manifest: dict[str, Any] = {"apiVersion": "hybridgpu.io/v1alpha1", "kind": "GPUPool"}
    manifest |= {"metadata": {"name": name}, "spec": spec}
    return PoolState(name=name, spec=GPUPool.model_validate(manifest).spec)


def _simulate(trace: list[TraceJob], owned_nodes: int) -> dict[str, float]:
    """Work GPU-hours per tier in the simulator (no interruptions: the cases are timing)."""
    pools = [_pool("core", "core", owned_nodes), _pool("od", "elastic", 8)]
    pools.append(_pool("spot", "spot", 8))
    settings = SimSettings(
        provisioning_delay_seconds=PROVISIONING_SECONDS,
        restart_overhead_seconds=RESTART_SECONDS,
        checkpoint_interval_seconds=CHECKPOINT_SECONDS,
        billing_minimum_seconds=0.0,
    )
    result = Simulation("hybridgpu", pools, POLICY, trace, settings).run()
    return result.gpu_hours


def _job(name: str, at_hours: float, hours: float, gpus: int, crit: Criticality) -> TraceJob:
    return TraceJob(name, at_hours * HOUR, hours * HOUR, gpus, crit)


PRE, STD = Criticality.PREEMPTIBLE, Criticality.STANDARD


def test_a_preemptible_job_waits_for_owned_gpus_that_add_up_instead_of_spot() -> None:
    # Two owned nodes, 6 of 8 GPUs busy on each for an hour: a 4-GPU preemptible job fits on
    # neither, but the 4 free GPUs add up to it. It waits and starts on the first node that
    # frees (at 1 h), within its 2 h budget; nothing is rented.
    trace = [
        _job("a", 0.0, 1.0, 6, PRE),
        _job("b", 0.0, 1.5, 6, PRE),
        _job("waits", 0.2, 3.0, 4, PRE),
    ]
    simulated = _simulate(trace, 2)
    assert simulated["spot"] == 0.0 and simulated["core"] == pytest.approx(6 + 9 + 12)
    usage = replay_jobs(jobs_of_trace(trace), [8, 8], RATES)
    assert usage.spot == 0.0
    assert usage.owned == pytest.approx(6 + 9 + 12)


def test_a_preemptible_job_goes_to_spot_when_its_wait_budget_runs_out() -> None:
    # The owned GPUs add up to it but nothing frees for 5 h: it waits its 2 h budget, then
    # runs on spot (the simulator's job starts on spot a node boot later).
    trace = [
        _job("a", 0.0, 5.0, 6, PRE),
        _job("b", 0.0, 5.0, 6, PRE),
        _job("late", 0.2, 1.0, 4, PRE),
    ]
    simulated = _simulate(trace, 2)
    assert simulated["spot"] == pytest.approx(4.0)
    usage = replay_jobs(jobs_of_trace(trace), [8, 8], RATES)
    # 4 GPUs for its hour, plus start-up and idle before release, from 2.2 h on.
    startup, idle = RATES.node_startup_hours, RATES.idle_release_hours
    assert usage.spot == pytest.approx(4 * (1.0 + startup + idle))
    waiting_off = CloudRates(**{**_fields(RATES), "preemptible_wait_hours": 0.0})
    assert replay_jobs(jobs_of_trace(trace), [8, 8], waiting_off).spot == pytest.approx(
        usage.spot
    )  # same hours, rented 2 h earlier


def test_spot_work_returns_to_an_idle_owned_node_only_once_a_move_pays() -> None:
    # A standard job holds the owned node for an hour; a preemptible 8-GPU job arriving just
    # before it ends goes to spot (nothing adds up to it). The owned node is idle from 1 h;
    # the next arrival (1.15 h) sees it settled, but the spot job has run only a few minutes
    # there, less than a restart throws away: it stays on spot, as in the simulator, and the
    # arrival (1 GPU) and the firm job at 1.3 h get the owned node. Moved back at once, it
    # filled the node, sent the arrival to spot, and was preempted again at 1.3 h.
    trace = [
        _job("firm", 0.0, 1.0, 8, STD),
        _job("spot", 0.95, 1.8, 8, PRE),
        _job("tick", 1.15, 0.1, 1, PRE),
        _job("firm-2", 1.3, 2.0, 8, STD),
    ]
    simulated = _simulate(trace, 1)
    assert simulated["elastic"] == 0.0
    assert simulated["spot"] == pytest.approx(8 * 1.8)
    usage = replay_jobs(jobs_of_trace(trace), [8], RATES)
    assert usage.elastic == 0.0
    assert usage.owned == pytest.approx(simulated["core"])
    assert usage.owned == pytest.approx(8 * 1.0 + 0.1 + 8 * 2.0)


def _fields(rates: CloudRates) -> dict[str, float]:
    return {name: getattr(rates, name) for name in rates.__dataclass_fields__}
