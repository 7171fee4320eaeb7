"""The offline oracle of deadline-aware spot (sim/oracle.py): hand-checked schedules on tiny
traces, and the property that makes it a bound: on the same Job and measured trace it is
never dearer than the simulated operator, and its schedule finishes by the deadline."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.sim import sim_pool

from hybridgpu.models import ScalingPolicySpec
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.oracle import (
    ON_DEMAND,
    SPOT,
    OraclePhysics,
    cheapest_schedule,
    job_schedule,
    replay,
)
from hybridgpu.sim.spot import AvailabilityTrace
from hybridgpu.sim.traces import SpotTrace, TraceJob

pytestmark = pytest.mark.unit

H = 3600.0
SPOT_PRICE = 0.92
OD_PRICE = 3.06


def measured(data: list[int], gap: float) -> tuple[AvailabilityTrace, SpotTrace]:
    """A 1-node series as the spot-preemptions files hold it (1: no instance), read both
    ways as ``load_availability_trace`` and ``load_spot_trace`` read it."""
    edges = [i for i in range(1, len(data)) if data[i] == 1 and data[i - 1] == 0]
    availability = AvailabilityTrace(gap, tuple(x == 0 for x in data))
    return availability, SpotTrace(gap_seconds=gap, edges=edges, length=len(data))


def physics(data: list[int] | None, gap: float = 600.0, **kw: float) -> OraclePhysics:
    availability, trace = measured(data, gap) if data is not None else (None, None)
    return OraclePhysics(SPOT_PRICE, OD_PRICE, availability, trace, **kw)  # type: ignore[arg-type]


def dollars(price: float, seconds: float) -> float:
    return price * seconds / 3600


def test_spot_that_never_goes_runs_the_job_once_on_spot() -> None:
    plan = cheapest_schedule(100.0, 2 * H, 5 * H, physics(None))
    assert plan is not None
    (run,) = plan.runs
    # Launched at the first tick after arrival; boot, then the work (no start-up at first).
    assert (run.tier, run.launched, run.stopped) == (SPOT, 120.0, 120.0 + 300 + 2 * H)
    assert plan.dollars == pytest.approx(dollars(SPOT_PRICE, 300 + 2 * H))


def test_without_spot_the_job_runs_on_demand_from_arrival() -> None:
    plan = cheapest_schedule(0.0, 2 * H, 5 * H, physics([1, 1, 1]))
    assert plan is not None
    assert [(r.tier, r.launched) for r in plan.runs] == [(ON_DEMAND, 0.0)]
    assert plan.dollars == pytest.approx(dollars(OD_PRICE, 300 + 2 * H))


def test_a_spot_window_banks_one_checkpoint_then_on_demand_finishes() -> None:
    # Spot for the first 40 minutes of every 3 hours: a node launched at t in the window is
    # noticed at 40 min + (t mod 10 min) and reclaimed 2 min later. A 1 h Job banks its
    # 30 min checkpoint on spot (boot 5 min, then 30 min of work) and finishes on demand
    # (boot 5 min, restart 5 min, 30 min of work); all on demand would cost 3.06 x 65 min.
    trace = [0] * 4 + [1] * 14
    plan = cheapest_schedule(0.0, H, 3 * H, physics(trace))
    assert plan is not None
    spot, od = plan.runs
    assert (spot.tier, spot.progress_after, spot.stopped - spot.launched) == (SPOT, 1800, 2100)
    assert (od.tier, od.launched, od.stopped - od.launched) == (ON_DEMAND, spot.stopped, 2400)
    assert plan.dollars == pytest.approx(dollars(SPOT_PRICE, 2100) + dollars(OD_PRICE, 2400))
    assert plan.dollars < dollars(OD_PRICE, 300 + H)


def test_a_deadline_too_tight_for_the_detour_takes_on_demand_at_once() -> None:
    # The detour above ends at 2100 + 2400 s = 75 min; with 73 min it cannot.
    plan = cheapest_schedule(0.0, H, 73 * 60, physics([0] * 4 + [1] * 14))
    assert plan is not None
    assert [r.tier for r in plan.runs] == [ON_DEMAND]
    assert plan.dollars == pytest.approx(dollars(OD_PRICE, 300 + H))


def test_on_demand_bridges_an_outage_and_spot_finishes() -> None:
    # No spot for 2 h, then spot for good. A 4 h Job due at 5 h cannot wait for it: three
    # checkpoints on demand (5 min boot + 90 min), then spot from 2 h (boot, restart, 2.5 h)
    # finishes at 4 h 40 min; four checkpoints would keep on demand 30 min longer.
    plan = cheapest_schedule(0.0, 4 * H, 5 * H, physics([1] * 12 + [0] * 88))
    assert plan is not None
    od, spot = plan.runs
    assert (od.tier, od.launched, od.stopped, od.progress_after) == (ON_DEMAND, 0, 5700, 5400)
    assert (spot.tier, spot.launched, spot.stopped) == (SPOT, 2 * H, 2 * H + 600 + 9000)
    assert plan.dollars == pytest.approx(dollars(OD_PRICE, 5700) + dollars(SPOT_PRICE, 9600))


def test_a_job_that_cannot_make_its_deadline_has_no_schedule() -> None:
    assert cheapest_schedule(0.0, H, H + 299, physics(None)) is None


def test_replay_rejects_what_the_physics_forbid() -> None:
    world = physics([0] * 4 + [1] * 14)
    plan = cheapest_schedule(0.0, H, 3 * H, world)
    assert plan is not None
    assert replay(plan, 0.0, H, world) == (pytest.approx(plan.dollars), plan.finished_at)
    # The same spot run where spot cannot launch (the series shifted by 40 minutes).
    with pytest.raises(ValueError, match="spot could not launch"):
        replay(plan, 0.0, H, physics([1] * 14 + [0] * 4))
    # A Job that needs longer than the schedule runs it.
    with pytest.raises(ValueError, match="stopped before the work was done"):
        replay(plan, 0.0, 2 * H, world)


@st.composite
def series(draw: st.DrawFn) -> list[int]:
    """Runs of available and unavailable samples, as the measured traces have them."""
    data: list[int] = []
    for _ in range(draw(st.integers(1, 8))):
        data += [draw(st.integers(0, 1))] * draw(st.integers(1, 30))
    return data


@st.composite
def one_job_worlds(draw: st.DrawFn) -> tuple[TraceJob, list[int], float, int]:
    duration = draw(st.floats(0.5 * H, 6 * H))
    job = TraceJob(
        "j",
        draw(st.floats(0, 3 * H)),
        duration,
        1,
        Criticality.PREEMPTIBLE,
        draw(st.sampled_from([None, 0.0, 900.0, 1800.0])),
        # On on-demand from arrival with the operator's switch allowance and margin.
        deadline_seconds=duration + 1080 + draw(st.floats(0, 3 * duration)),
    )
    gap = draw(st.sampled_from([32.0, 300.0, 600.0, 1800.0]))
    return job, draw(series()), gap, draw(st.integers(0, 1000))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_job_worlds())
def test_the_oracle_is_never_dearer_than_the_operator_and_never_late(
    world: tuple[TraceJob, list[int], float, int],
) -> None:
    job, data, gap, seed = world
    availability, trace = measured(data, gap)
    physics_ = SimSettings(
        spot_trace=trace, spot_availability=availability, spot_trace_aligned=True, seed=seed
    )
    pools = [
        sim_pool("od", "elastic", 1, 10, OD_PRICE),
        sim_pool("spot", "spot", 1, 10, SPOT_PRICE),
    ]
    result = Simulation("h", pools, ScalingPolicySpec(), [job], physics_).run()
    assert result.deadlines.missed == 0
    world_ = OraclePhysics.measured(
        physics_, spot_pool="spot", spot_price=SPOT_PRICE, on_demand_price=OD_PRICE, interval=30
    )
    plan = job_schedule(job, world_)
    assert plan is not None
    if job.checkpoint_seconds is not None:
        world_ = replace(world_, checkpoint=job.checkpoint_seconds)
    cost, finished = replay(plan, job.arrival_seconds, job.duration_seconds, world_)
    assert cost == pytest.approx(plan.dollars)
    assert job.deadline_at is not None and finished <= job.deadline_at + 1e-6
    assert plan.dollars <= result.total_cost_dollars + 1e-9, (plan, result.to_json())
    assert not math.isnan(plan.dollars)


def test_restricted_oracles_stay_on_demand_or_on_spot_until_the_reclaim() -> None:
    # The bridge above, but a Job on on-demand stays there: all of it on demand.
    late_spot = physics([1] * 12 + [0] * 88)
    plan = cheapest_schedule(0.0, 4 * H, 5 * H, late_spot, on_demand_to_the_end=True)
    assert plan is not None
    assert [r.tier for r in plan.runs] == [ON_DEMAND]
    # The spot window above, without knowing when the node goes: the spot run lasts to its
    # reclaim (40 min + 2 min from a launch at 0, or as long from 9.5 min), keeping the
    # 30 min checkpoint; on demand finishes from there.
    window = physics([0] * 4 + [1] * 14)
    plan = cheapest_schedule(0.0, H, 3 * H, window, spot_until_reclaimed=True)
    assert plan is not None
    spot, od = plan.runs
    assert (spot.tier, spot.stopped - spot.launched, spot.progress_after) == (SPOT, 2520, 1800)
    assert (od.tier, od.launched) == (ON_DEMAND, spot.stopped)
    assert plan.dollars == pytest.approx(dollars(SPOT_PRICE, 2520) + dollars(OD_PRICE, 2400))
    assert replay(plan, 0.0, H, window)[0] == pytest.approx(plan.dollars)
