"""The simulator's figures stay exactly what they were unless a change means them to move.

Every policy's result (dollars, GPU-hours, waits, moves, interruptions; equal up to float
noise of 1e-9 relative, the order of a sum's terms) and a
digest of every job's outcome (when it first started, when it finished, how long it waited,
what it lost) are pinned in ``sim_golden.json`` for the bundled scenario and two small
synthetic traces that exercise deadlines, return to core, spot availability and correlated
interruptions. A speedup of the simulator must leave them all as they are. A change that
moves a figure on purpose (a bug fix, a new rule in decide()) regenerates the file with

    HYBRIDGPU_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/unit/test_sim_golden.py

and says in its commit message which figure moved and why.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.sim import BUNDLED_CLUSTER, sim_cluster, sim_pool

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import Plan, ScaleUp
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.sim.compare import BOUND, WaitSLO, fluid_bound, policy_runs, simulation
from hybridgpu.sim.compare import trace_window_seconds as _window
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation
from hybridgpu.sim.spot import AvailabilityTrace, CorrelatedTrace
from hybridgpu.sim.traces import TraceJob, synthetic

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("sim_golden.json")
UPDATE = os.environ.get("HYBRIDGPU_UPDATE_GOLDEN") == "1"


def _annotated(jobs: list[TraceJob]) -> list[TraceJob]:
    """Some preemptible jobs with a deadline and some standard ones that may return to
    owned GPUs, so the deadline and return-to-core rules have work."""
    out: list[TraceJob] = []
    for n, job in enumerate(jobs):
        if job.criticality == Criticality.PREEMPTIBLE and n % 3 == 0:
            job = replace(job, deadline_seconds=2.5 * job.duration_seconds + 3600)
        elif job.criticality == Criticality.STANDARD and n % 4 == 0:
            job = replace(job, return_to_core=True, expected_duration_seconds=job.duration_seconds)
        out.append(job)
    return out


def _cases() -> dict[str, tuple[Sequence[PoolState], Any, list[TraceJob], SimSettings]]:
    bundled = load_cluster(BUNDLED_CLUSTER)
    small = sim_cluster(core_nodes=2, od_gpu_price=3.0, spot_gpu_price=0.9)
    policy = bundled.policy.spec
    jobs = _annotated(synthetic(seed=3, hours=24))
    return {
        # What `hybridgpu simulate` runs without arguments.
        "bundled": (
            bundled.pools,
            policy,
            synthetic(seed=7, hours=72),
            SimSettings(spot_hazard_per_hour=0.05, seed=7),
        ),
        "availability": (
            small,
            policy,
            jobs,
            SimSettings(
                spot_hazard_per_hour=0.2,
                spot_availability=AvailabilityTrace(
                    gap_seconds=1800, launchable=(True, True, False, True, False, False)
                ),
                seed=5,
            ),
        ),
        "correlated": (
            small,
            policy.model_copy(update={"interval": "45s"}),
            jobs,
            SimSettings(
                spot_correlated=CorrelatedTrace(
                    gap_seconds=600, drops=((7, 0.5), (30, 1.0), (41, 0.25)), length=60
                ),
                checkpoint_interval_seconds=900,
                seed=9,
            ),
        ),
    }


def _job_digest(sim: Simulation) -> str:
    rows = [
        (
            j.trace.name,
            None if j.first_started is None else round(j.first_started, 3),
            None if j.finished_at is None else round(j.finished_at, 3),
            round(j.wait_seconds, 3),
            round(j.lost_seconds, 3),
            None if j.reclaimed_at is None else round(j.reclaimed_at, 3),
        )
        for j in sim.jobs
    ]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:24]


def _raw(result: PolicyResult) -> dict[str, Any]:
    """Every figure of ``result``, unrounded (a figure on a rounding boundary would flip with
    the last bit of a sum's order)."""
    return {
        "total_cost_dollars": result.total_cost_dollars,
        "cost_by_tier_dollars": result.cost_by_tier_dollars,
        "cost_terms_dollars": result.cost_terms_dollars,
        "gpu_hours": result.gpu_hours,
        "wait_seconds": result.wait_seconds,
        "max_lateness_seconds": {
            c: None if math.isinf(v) else v for c, v in result.max_lateness_seconds.items()
        },
        "preemptions": result.preemptions,
        "spot_interruptions": result.spot_interruptions,
        "unfinished_jobs": result.unfinished_jobs,
        "jobs": result.jobs,
        "scale_ups": result.scale_ups,
        "releases": result.releases,
        "end_seconds": result.end_seconds,
        "deadlines": result.deadlines.to_json(),
        "idle_reclaim": {
            "workloads": result.idle_reclaim.workloads,
            "idle_gpu_hours": result.idle_reclaim.idle_gpu_hours,
            "freed_gpu_hours": result.idle_reclaim.freed_gpu_hours,
            "freed_dollars": result.idle_reclaim.freed_dollars,
        },
    }


def _figures() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for case, (pools, policy, jobs, physics) in _cases().items():
        figures: dict[str, Any] = {}
        for name, (run_pools, run_policy) in policy_runs(pools, policy).items():
            # Quiet ticks run decide() too, to prove that skipping them changes nothing.
            sim = simulation(name, run_pools, run_policy, jobs, physics, check_quiet=True)
            figures[name] = {**_raw(sim.run()), "jobs_digest": _job_digest(sim)}
        bound = fluid_bound(pools, jobs, _window(jobs), WaitSLO())
        figures[BOUND] = _raw(bound)
        out[case] = figures
    return out


def _differences(want: Any, got: Any, where: str) -> list[str]:
    """Where ``got`` differs from ``want``: numbers beyond float noise (1e-9 relative),
    anything else when not equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing or extra" for k in want.keys() ^ got.keys()]
        for key in want.keys() & got.keys():
            out += _differences(want[key], got[key], f"{where}.{key}")
        return out
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers):
        if math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-9):
            return []
    elif want == got:
        return []
    return [f"{where}: pinned {want!r}, now {got!r}"]


def test_every_policy_figure_and_job_outcome_is_as_pinned() -> None:
    figures = json.loads(json.dumps(_figures()))  # as the file holds them
    if UPDATE:
        GOLDEN.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    moved = _differences(json.loads(GOLDEN.read_text()), figures, "golden")
    assert not moved, (
        f"{len(moved)} figure(s) moved: {moved[:8]}; if on purpose, regenerate with "
        "HYBRIDGPU_UPDATE_GOLDEN=1 and say in the commit which moved and why"
    )


annotated_jobs = st.lists(
    st.tuples(
        st.floats(0, 8 * 3600, allow_nan=False),
        st.floats(300, 4 * 3600, allow_nan=False),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from(list(Criticality)),
        st.sampled_from([None, 1.5, 4.0]),  # deadline, in durations
        st.booleans(),  # return to core / low utilization with an idle-timeout
    ),
    min_size=1,
    max_size=16,
).map(
    lambda rows: [
        TraceJob(
            f"j{n}",
            arrival,
            duration,
            gpus,
            crit,
            deadline_seconds=None if factor is None else factor * duration,
            return_to_core=flag and crit == Criticality.STANDARD,
            utilization_percent=2.0 if flag and crit != Criticality.STANDARD else None,
            idle_timeout_seconds=1800.0 if flag and crit != Criticality.STANDARD else None,
        )
        for n, (arrival, duration, gpus, crit, factor, flag) in enumerate(rows)
    ]
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=annotated_jobs,
    hazard=st.sampled_from([0.0, 0.5]),
    interval=st.sampled_from(["10s", "30s", "5m"]),
)
def test_a_tick_skipped_as_quiet_is_one_where_decide_does_nothing(jobs, hazard, interval) -> None:
    """Every policy, with deadlines, return to core, idle reclaim and interruptions: decide()
    run on each tick the simulation would skip plans no action and asks for no recheck."""
    pools = sim_cluster(core_nodes=2, od_gpu_price=3.0, spot_gpu_price=0.9)
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec.model_copy(update={"interval": interval})
    physics = SimSettings(spot_hazard_per_hour=hazard, seed=len(jobs))
    for name, (run_pools, run_policy) in policy_runs(pools, policy).items():
        sim = simulation(name, run_pools, run_policy, jobs, physics, check_quiet=True)
        sim.run()  # raises when a quiet tick would have acted
        assert sim.decisions <= sim.ticks


class _OnTheWayWatch(Simulation):
    """A simulation that checks, at every tick with pods pending past their grace period,
    ``_pending_on_the_way`` against decide() itself: True exactly when decide() neither buys
    a node for a pending pod nor says why it cannot (a limit)."""

    compared = 0
    fitted = 0

    def _tick(self) -> Plan:
        due = self._pending_since_first() + self.grace <= self.now
        if self._pending_only_buys and due and not self._noticed:
            fits = self._pending_on_the_way()
            plan = decide(self._snapshot(), self.policy, self.now)
            buys = any(isinstance(a, ScaleUp) for a in plan.actions) or bool(plan.blocked)
            assert fits == (not buys), (self.name, self.now, fits, plan.actions, plan.blocked)
            _OnTheWayWatch.compared += 1
            _OnTheWayWatch.fitted += fits
        return super()._tick()


burst_jobs = st.lists(
    st.tuples(
        st.floats(0, 3600, allow_nan=False),
        st.floats(300, 3 * 3600, allow_nan=False),
        st.integers(1, 8),
        st.sampled_from(list(Criticality)),
    ),
    min_size=2,
    max_size=24,
).map(lambda rows: [TraceJob(f"j{n}", *row) for n, row in enumerate(rows)])


def _check_on_the_way(
    jobs: list[TraceJob], boot: float, grace: str, per_node: tuple[int, ...]
) -> None:
    """Every baseline with cloud pools on ``jobs``, ``_pending_on_the_way`` compared with
    decide() at every tick where pods pend past their grace period (``_OnTheWayWatch``)."""
    pools: list[PoolState] = [sim_pool("core", "core", 8, 1, 120_000)]
    for size in per_node:
        # The smaller nodes dearer per GPU: pods try the bigger pools first.
        pools.append(sim_pool(f"od-{size}g", "elastic", size, 6, (3.0 + 0.1 * (8 - size)) * size))
        pools.append(sim_pool(f"spot-{size}g", "spot", size, 6, (0.9 + 0.1 * (8 - size)) * size))
    bundled = load_cluster(BUNDLED_CLUSTER).policy.spec
    policy = bundled.model_copy(update={"pending_grace_period": grace})
    physics = SimSettings(provisioning_delay_seconds=boot, spot_hazard_per_hour=0.2, seed=3)
    for name, (run_pools, run_policy) in policy_runs(pools, policy).items():
        if name in ("hybridgpu", "owned_only"):
            continue
        sim = _OnTheWayWatch(
            name, run_pools, run_policy, jobs, physics, reads_annotations=False, check_quiet=True
        )
        sim.run()  # raises when a skipped tick would have acted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=burst_jobs,
    boot=st.sampled_from([120.0, 600.0, 1500.0]),
    grace=st.sampled_from(["5s", "45s"]),
    per_node=st.sampled_from([(2, 8), (4, 8), (3, 5, 8)]),
)
def test_pods_fit_on_the_way_exactly_when_decide_buys_nothing_for_them(
    jobs, boot, grace, per_node
) -> None:
    """Bursts of pods of every size from 1 to 8 GPUs on on-demand and spot pools of several
    node sizes, nodes booting for minutes: for the baselines, ``_pending_on_the_way`` says
    the pending pods fit on the nodes on their way exactly when decide() buys nothing for
    them, and every tick skipped as quiet is one where decide() plans nothing."""
    _check_on_the_way(jobs, boot, grace, per_node)


def test_the_on_the_way_check_was_compared_with_decide() -> None:
    """The property above compares on many ticks, some where the pods fit on the way (a
    check that never ran proves nothing)."""
    before = (_OnTheWayWatch.compared, _OnTheWayWatch.fitted)
    jobs = [TraceJob(f"j{n}", 10.0 * n, 3600, 1 + n % 8, Criticality.STANDARD) for n in range(12)]
    _check_on_the_way(jobs, 600.0, "5s", (3, 5, 8))
    assert _OnTheWayWatch.compared - before[0] > 10
    assert _OnTheWayWatch.fitted - before[1] > 3
