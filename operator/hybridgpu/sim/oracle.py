"""The offline oracle of deadline-aware spot: with perfect knowledge of a measured spot trace
(when the spot pool can launch, and when each node launched would be preempted), the
cheapest schedule of one 1-GPU Job that finishes by its deadline.

It replays the simulator's measured physics (``SimSettings`` with ``spot_availability`` and
an aligned ``spot_trace``; ``bench/deadlines.py``'s "measured"), for a Job alone on its own
nodes:

- nodes are launched at the operator's ticks (multiples of ``interval``), no earlier than
  the Job's arrival; a spot node only while ``AvailabilityTrace.launchable_at`` says so, and
  it gets its interruption notice ``max(SpotTrace.seconds_to_next_interruption, 1 s)`` after
  its launch, as ``Simulation._schedule_interruption`` draws it;
- a node is Ready ``boot`` seconds after its launch and billed from launch to when the Job
  leaves it (at least the billing minimum);
- a run makes progress after its start-up (none on the first run, the restart overhead on
  every later one), saves a checkpoint every ``checkpoint`` seconds of progress, and keeps
  only the last checkpoint when it stops;
- a spot run ends at the latest when its node is reclaimed (notice + 2 min); it may stop at
  any checkpoint before (the oracle knows when the node will go), an on-demand run too (to
  return to spot).

Everything the oracle allows the simulator allows too, or is more permissive (it stops a
run at a checkpoint between ticks, releases a node the moment the Job leaves it, and lets a
Job run through its node's 2-minute notice), so its cost is a lower bound on what any online
policy pays for that Job under these physics: Can't Be Late's "optimal" (Wu et al., NSDI
2024) with checkpoints, boots and billing. Not covered: a node that another Job leaves and
this one reuses (it saves a boot); ``bench/deadlines.py`` sums the oracle over Jobs, and
a simulation of one Job has none.

The schedule is a shortest path over (tick, checkpoints saved): waiting costs nothing,
launching a node leads to one of its run's checkpoints (or to the end). Backward in the
saved progress, each level is one pass of numpy over the ticks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hybridgpu.sim.defaults import (
    DEFAULT_BILLING_MINIMUM_SECONDS,
    DEFAULT_BOOT_SECONDS,
    DEFAULT_CHECKPOINT_SECONDS,
)
from hybridgpu.sim.engine import SimSettings
from hybridgpu.sim.spot import AvailabilityTrace, pool_offset
from hybridgpu.sim.traces import SpotTrace, TraceJob

INTERRUPTION_NOTICE_SECONDS = 120.0
"""From a spot node's interruption notice to its reclaim (``sim.engine``'s)."""
SPOT = "spot"
ON_DEMAND = "on-demand"
_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class OraclePhysics:
    """The measured physics of one spot pool and one on-demand pool of 1-GPU nodes."""

    spot_price: float
    """Dollars per spot node-hour."""
    on_demand_price: float
    """Dollars per on-demand node-hour."""
    availability: AvailabilityTrace | None
    """When the spot pool can launch (None: always)."""
    spot_trace: SpotTrace | None
    """Its preemptions, replayed from the pool's offset (None: never preempted)."""
    offset: int = 0
    """The pool's offset into both series (``sim.spot.pool_offset``)."""
    interval: float = 30.0
    """The operator's tick: launches happen on its multiples."""
    boot: float = DEFAULT_BOOT_SECONDS
    restart: float = 300.0
    checkpoint: float = DEFAULT_CHECKPOINT_SECONDS
    """Progress between checkpoints; 0: never (a stopped run loses everything)."""
    billing_minimum: float = DEFAULT_BILLING_MINIMUM_SECONDS

    @classmethod
    def measured(
        cls,
        settings: SimSettings,
        *,
        spot_pool: str,
        spot_price: float,
        on_demand_price: float,
        interval: float,
    ) -> OraclePhysics:
        """The physics a ``Simulation`` with ``settings`` gives the spot pool named
        ``spot_pool`` (measured availability, aligned preemptions) and an on-demand pool,
        both of 1-GPU nodes booting in the provisioning delay; ``interval`` is the policy's."""
        if settings.spot_trace is not None and not settings.spot_trace_aligned:
            raise ValueError("the oracle needs preemptions aligned with the availability")
        if settings.boot_seconds_by_pool or settings.spot_hazard_per_hour:
            raise ValueError("the oracle replays one boot time and measured preemptions only")
        return cls(
            spot_price=spot_price,
            on_demand_price=on_demand_price,
            availability=settings.spot_availability,
            spot_trace=settings.spot_trace,
            offset=pool_offset(settings.seed, spot_pool),
            interval=interval,
            boot=settings.provisioning_delay_seconds,
            restart=settings.restart_overhead_seconds,
            checkpoint=settings.checkpoint_interval_seconds,
            billing_minimum=settings.billing_minimum_seconds,
        )

    def launchable(self, at: float) -> bool:
        if self.availability is None:
            return True
        return self.availability.launchable_at(self.offset, at)

    def reclaimed_at(self, launched: float) -> float:
        """When a spot node launched at ``launched`` is reclaimed (inf: never)."""
        if self.spot_trace is None:
            return math.inf
        index = self.offset + int(launched // self.spot_trace.gap_seconds)
        delay = self.spot_trace.seconds_to_next_interruption(index)
        if delay is None:
            return math.inf
        return launched + max(delay, 1.0) + INTERRUPTION_NOTICE_SECONDS

    def price(self, tier: str) -> float:
        return self.spot_price if tier == SPOT else self.on_demand_price

    def dollars(self, tier: str, seconds: float) -> float:
        return self.price(tier) * max(seconds, self.billing_minimum) / 3600


@dataclass(frozen=True, slots=True)
class OracleRun:
    """One node the Job ran on."""

    tier: str
    launched: float
    stopped: float
    """When the Job left the node (finished, or stopped at a checkpoint)."""
    progress_before: float
    progress_after: float
    finished: bool
    dollars: float


@dataclass(frozen=True, slots=True)
class OracleSchedule:
    dollars: float
    runs: tuple[OracleRun, ...]

    @property
    def finished_at(self) -> float:
        return self.runs[-1].stopped

    def hours(self, tier: str) -> float:
        return sum(r.stopped - r.launched for r in self.runs if r.tier == tier) / 3600


def job_schedule(
    job: TraceJob,
    physics: OraclePhysics,
    *,
    on_demand_to_the_end: bool = False,
    spot_until_reclaimed: bool = False,
) -> OracleSchedule | None:
    """``cheapest_schedule`` of a 1-GPU trace Job with a deadline, at its own checkpoint
    interval when it states one."""
    if job.deadline_at is None or job.gpus != 1:
        raise ValueError(f"{job.name}: the oracle schedules 1-GPU Jobs with a deadline")
    if job.checkpoint_seconds is not None:
        physics = replace(physics, checkpoint=job.checkpoint_seconds)
    return cheapest_schedule(
        job.arrival_seconds,
        job.duration_seconds,
        job.deadline_at,
        physics,
        on_demand_to_the_end=on_demand_to_the_end,
        spot_until_reclaimed=spot_until_reclaimed,
    )


def cheapest_schedule(
    arrival: float,
    duration: float,
    deadline_at: float,
    physics: OraclePhysics,
    *,
    on_demand_to_the_end: bool = False,
    spot_until_reclaimed: bool = False,
) -> OracleSchedule | None:
    """The cheapest schedule that finishes a Job of ``duration`` seconds arriving at
    ``arrival`` by ``deadline_at`` (seconds on the simulation's clock); None when even an
    on-demand node launched at its arrival cannot.

    Two restrictions measure what parts of the foresight are worth (``bench/deadlines.py``
    reports them): ``on_demand_to_the_end``, a Job once on on-demand stays there (as
    hybridgpu's rule does); ``spot_until_reclaimed``, a spot run ends only when it finishes
    or its node is reclaimed, keeping its last checkpoint (as an operator that does not
    know when the interruption comes)."""
    step = physics.interval
    first = math.ceil(arrival / step - 1e-9)
    last = math.floor((deadline_at + _EPS) / step)
    ticks = last - first + 1
    if ticks <= 0 or duration <= 0:
        return None
    times = (first + np.arange(ticks)) * step
    every = physics.checkpoint
    levels = max(math.ceil(duration / every - 1e-9), 1) if every > 0 else 1
    spot_ok = np.array([physics.launchable(float(t)) for t in times], dtype=bool)
    reclaim = np.array(
        [
            physics.reclaimed_at(float(t)) if ok else -math.inf
            for t, ok in zip(times, spot_ok, strict=True)
        ]
    )
    inf = math.inf
    # value[j][k]: the least dollars to finish from tick k with j checkpoints saved and no
    # node running; launch[j][k]: the same when a node is launched at tick k itself, with
    # that launch's tier (0 spot, 1 on-demand) and the checkpoints its run gains (0: the
    # run finishes the Job).
    value = [np.full(ticks, inf) for _ in range(levels)]
    launch = [np.full(ticks, inf) for _ in range(levels)]
    tiers = [np.zeros(ticks, dtype=np.int8) for _ in range(levels)]
    gains = [np.zeros(ticks, dtype=np.int32) for _ in range(levels)]
    names = (SPOT, ON_DEMAND)
    for j in range(levels - 1, -1, -1):
        overhead = 0.0 if j == 0 else physics.restart
        best, tier, gain = launch[j], tiers[j], gains[j]
        run = physics.boot + overhead + (duration - j * every)
        ends = times + run
        done_in_time = ends <= deadline_at + _EPS
        for code, name in enumerate(names):
            ok = done_in_time & spot_ok & (ends <= reclaim + _EPS) if code == 0 else done_in_time
            finish = physics.dollars(name, run)
            better = ok & (finish < best)
            best[better] = finish
            tier[better] = code
            gain[better] = 0
        for m in range(1, levels - j):
            run = physics.boot + overhead + m * every
            shift = math.ceil(run / step - 1e-9)
            if shift >= ticks:
                break
            after = np.full(ticks, inf)
            after[: ticks - shift] = value[j + m][shift:]
            for code, name in enumerate(names):
                if code == 1 and on_demand_to_the_end:
                    continue
                ok = np.isfinite(after)
                if code == 0:
                    ok &= spot_ok & (times + run <= reclaim + _EPS)
                if code == 0 and spot_until_reclaimed:
                    # The node's reclaim ends the run with m checkpoints saved: m is the
                    # most the run saves before it, and the Job is free again then.
                    done = times + physics.boot + overhead + duration - j * every
                    ok &= np.minimum(times + run + every, done) > reclaim + _EPS
                    ended = np.where(ok, reclaim, times)
                    back = np.minimum(np.ceil((ended - times) / step - 1e-9), ticks).astype(int)
                    index = np.minimum(np.arange(ticks) + back, ticks - 1)
                    later = np.where(np.arange(ticks) + back < ticks, value[j + m][index], inf)
                    via = (
                        physics.price(name)
                        * np.maximum(ended - times, physics.billing_minimum)
                        / 3600
                        + later
                    )
                    ok &= np.isfinite(later)
                else:
                    via = physics.dollars(name, run) + after
                better = ok & (via < best - 1e-12)
                best[better] = via[better]
                tier[better] = code
                gain[better] = m
        # Waiting is free: from tick k, the best launch at k or later.
        value[j] = np.minimum.accumulate(best[::-1])[::-1]
    if not math.isfinite(value[0][0]):
        return None
    runs: list[OracleRun] = []
    j, k = 0, 0
    while True:
        # The first tick from k whose launch achieves the value (waiting until then).
        k += int(np.argmax(launch[j][k:] <= value[j][k] + 1e-9))
        name = names[int(tiers[j][k])]
        m = int(gains[j][k])
        overhead = 0.0 if j == 0 else physics.restart
        start = float(times[k])
        before = j * every
        if m == 0:
            stop = start + physics.boot + overhead + duration - before
            after_progress = duration
        else:
            stop = start + physics.boot + overhead + m * every
            if name == SPOT and spot_until_reclaimed:
                stop = float(reclaim[k])
            after_progress = before + m * every
        runs.append(
            OracleRun(
                tier=name,
                launched=start,
                stopped=stop,
                progress_before=before,
                progress_after=after_progress,
                finished=m == 0,
                dollars=physics.dollars(name, stop - start),
            )
        )
        if m == 0:
            break
        k += math.ceil((stop - start) / step - 1e-9)
        j += m
    return OracleSchedule(dollars=sum(r.dollars for r in runs), runs=tuple(runs))


def replay(
    schedule: OracleSchedule, arrival: float, duration: float, physics: OraclePhysics
) -> tuple[float, float]:
    """(dollars, finished at) of ``schedule`` replayed against ``physics`` run by run,
    independently of how it was found; raises ValueError where it breaks them (a launch
    before the Job arrived, off the tick grid, while spot cannot launch, a run past its
    node's reclaim, progress a run could not have saved)."""
    progress = 0.0
    free_at = arrival
    dollars = 0.0
    for number, run in enumerate(schedule.runs):
        where = f"run {number} ({run.tier} at {run.launched:g} s)"
        if run.launched < free_at - _EPS:
            raise ValueError(f"{where}: launched before the Job was free to run")
        if abs(run.launched / physics.interval - round(run.launched / physics.interval)) > 1e-9:
            raise ValueError(f"{where}: not launched at a tick")
        overhead = 0.0 if number == 0 else physics.restart
        began = run.launched + physics.boot + overhead
        if run.tier == SPOT:
            if not physics.launchable(run.launched):
                raise ValueError(f"{where}: spot could not launch")
            if run.stopped > physics.reclaimed_at(run.launched) + _EPS:
                raise ValueError(f"{where}: ran past its node's reclaim")
        reached = progress + max(run.stopped - began, 0.0)
        if run.finished:
            if reached < duration - _EPS:
                raise ValueError(f"{where}: stopped before the work was done")
            progress = duration
        else:
            saved = (
                math.floor(reached / physics.checkpoint + 1e-9) * physics.checkpoint
                if physics.checkpoint > 0
                else 0.0
            )
            if run.progress_after > min(saved, duration) + _EPS:
                raise ValueError(f"{where}: saved more than its checkpoints")
            progress = run.progress_after
        dollars += physics.dollars(run.tier, run.stopped - run.launched)
        free_at = run.stopped
    if progress < duration - _EPS:
        raise ValueError("the schedule does not finish the Job")
    return dollars, free_at
