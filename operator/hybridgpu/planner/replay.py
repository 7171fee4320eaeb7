"""A job trace placed on an owned fleet the way the operator places it: where each job runs
and how many GPU-hours each tier is billed.

Rules (``replay_jobs``), each job once, in arrival order:

- a critical/standard job that fits on a committed cloud node runs there (the fullest node
  that fits): committed capacity is paid whether used or not, and serves firm work only (as
  on-demand capacity does; admission keeps preemptible pods on owned and spot nodes);
- a job that fits on an owned node runs there (the fullest node that fits);
- a critical/standard job that does not fit evicts preemptible jobs from the owned node where
  that frees enough with the fewest GPUs (the most recently started first); they finish on
  spot after the restart overhead;
- a preemptible job that fits on no owned node waits, as the operator's wait-or-launch rule
  has it (ScalingPolicy waitBudget.preemptible, ``preemptible_wait_hours``), while the free
  owned GPUs add up to what it needs (less what larger or older waiting jobs count on): it
  starts on the first owned node that has room, or on spot when its budget (from its
  arrival) runs out or the free GPUs no longer add up;
- otherwise it runs in the cloud: preemptible on spot (reruns after interruptions), the rest
  on demand; a preemptible job comes back (after the restart overhead) once an owned node has
  sat idle for ``idle_release_hours`` and the job has run in the cloud longer than a restart
  throws away (``spot_restart_overhead_hours``), as the operator's consolidation does (it
  moves when the saving over the time the job has run beats the work lost), checked
  whenever a job arrives.

Cloud GPUs are billed from launch (``node_startup_hours`` before the job can start) to
``idle_release_hours`` after their last job, and reused by jobs arriving meanwhile. With
shared GPUs (``share_replicas`` R > 1) a cloud GPU is still rented whole: jobs needing shares
of one are packed onto the fullest rented GPU with room (``_SharedCloudTier``), and it is
billed until ``idle_release_hours`` after its last share leaves.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from sortedcontainers import SortedList

from hybridgpu.core.placement import FreeGPUs, NumberedFreeGPUs, placement_tiers
from hybridgpu.models.snapshot import Criticality
from hybridgpu.planner.model import CloudRates, JobDemand, Usage

CORE, COMMITTED, ELASTIC, SPOT = "core", "committed", "elastic", "spot"
_ARRIVAL_ORDER = attrgetter("arrival_seconds", "duration_seconds")
"""The order jobs are replayed in: by arrival, the shorter first among equals."""


@dataclass(slots=True)
class _Run:
    """One run of a job on one tier (a move starts a new run)."""

    job: JobDemand
    tier: str
    started: float
    ends: float
    units: int
    """What it takes (``job.units`` of the replay's GPUs)."""
    node: int = -1
    """Owned node index (core and committed runs)."""
    launched: Sequence[Any] = ()
    """What its cloud tier's ``take`` gave it (cloud runs), handed back to the tier."""


class _CloudTier:
    """Cloud GPUs of one tier at GPU granularity: launched on demand, reused while idle,
    released ``idle_release`` seconds after their last work; billed launch to release."""

    def __init__(self, startup: float, idle_release: float) -> None:
        self.startup = startup
        self.idle_release = idle_release
        self.idle: list[tuple[float, float]] = []  # (idle since, launched at), oldest first
        self.billed_seconds = 0.0

    def _expire(self, now: float) -> None:
        # GPUs come back in time order, so the expired ones are the oldest: a prefix.
        expired = 0
        for since, launched in self.idle:
            if since + self.idle_release >= now:
                break
            self.billed_seconds += since + self.idle_release - launched
            expired += 1
        del self.idle[:expired]

    def take(self, gpus: int, now: float) -> tuple[float, list[float]]:
        """GPUs for a job arriving at ``now``: (when it can start, launch times of its GPUs)."""
        self._expire(now)
        launched: list[float] = []
        while self.idle and len(launched) < gpus:
            launched.append(self.idle.pop()[1])  # the most recently idle first
        fresh = gpus - len(launched)
        launched.extend([now] * fresh)
        return (now + self.startup if fresh else now), launched

    def give_back(self, launched: Sequence[float], now: float) -> None:
        self.idle.extend((now, at) for at in launched)

    def close(self) -> float:
        """Billed GPU-seconds once every idle GPU is released."""
        for since, launched in self.idle:
            self.billed_seconds += since + self.idle_release - launched
        self.idle.clear()
        return self.billed_seconds


class _SharedCloudTier:
    """Cloud GPUs of one tier shared ``replicas`` ways, counted in units (1/replicas of a
    GPU): a job needing shares of one GPU goes on the fullest rented GPU with room (the
    placer's best fit), else an idle one, else a new one; a whole-GPU job takes whole idle
    or new GPUs. A GPU is billed whole from launch to ``idle_release`` seconds after its last
    unit came back, as a cloud node is. A run holds (GPU, units) pairs."""

    def __init__(self, startup: float, idle_release: float, replicas: int) -> None:
        self.startup = startup
        self.idle_release = idle_release
        self.replicas = replicas
        self.launched_at: list[float] = []
        self.ready_at: list[float] = []
        self.partial: FreeGPUs[int] = FreeGPUs()  # GPUs in use, by free units
        self.idle: list[tuple[float, int]] = []  # (idle since, GPU), oldest first
        self.billed_seconds = 0.0

    def _expire(self, now: float) -> None:
        expired = 0
        for since, gpu in self.idle:
            if since + self.idle_release >= now:
                break
            self.billed_seconds += since + self.idle_release - self.launched_at[gpu]
            expired += 1
        del self.idle[:expired]

    def _gpu(self, now: float) -> int:
        """An idle GPU (the most recently idle), else a new one."""
        if self.idle:
            return self.idle.pop()[1]
        self.launched_at.append(now)
        self.ready_at.append(now + self.startup)
        return len(self.launched_at) - 1

    def take(self, units: int, now: float) -> tuple[float, list[tuple[int, int]]]:
        """Units for a job arriving at ``now``: (when it can start, its (GPU, units))."""
        self._expire(now)
        replicas = self.replicas
        if units < replicas:
            gpu = self.partial.best_fit(units)
            if gpu is None:
                gpu = self._gpu(now)
                self.partial.put(gpu, replicas - units)
            else:
                self.partial.put(gpu, self.partial.free(gpu) - units)  # type: ignore[operator]
            return max(now, self.ready_at[gpu]), [(gpu, units)]
        held = [(self._gpu(now), replicas) for _ in range(math.ceil(units / replicas))]
        for gpu, _ in held:
            self.partial.put(gpu, 0)
        return max(now, *(self.ready_at[gpu] for gpu, _ in held)), held

    def give_back(self, held: Sequence[tuple[int, int]], now: float) -> None:
        for gpu, units in held:
            free = self.partial.free(gpu)
            assert free is not None
            if free + units < self.replicas:
                self.partial.put(gpu, free + units)
            else:
                self.partial.discard(gpu)
                self.idle.append((now, gpu))

    def close(self) -> float:
        """Billed GPU-seconds once every idle GPU is released."""
        self._expire(math.inf)
        return self.billed_seconds


class _OwnedNodes:
    """Free GPUs of the owned (or committed) nodes, placed on by decide()'s best fit
    (``core.placement.NumberedFreeGPUs``), with the preemptible runs on each node (in start order)
    and since when each node is idle."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = list(sizes)
        self.fit = NumberedFreeGPUs(sizes)
        self.free = self.fit.frees
        """Each node's free units (the best fit's own counts, read-only: change them with
        ``add``, ``take`` and ``give_back``)."""
        self.preemptible: list[dict[int, None]] = [{} for _ in sizes]
        self.idle_since: list[float | None] = [-math.inf] * len(sizes)
        self.idle: SortedList[tuple[float, int]] = SortedList(
            (-math.inf, n) for n in range(len(sizes))
        )
        """(idle since, node) of the nodes with nothing on them: the longest idle first."""

    def best_fit(self, gpus: int) -> int | None:
        """The fullest node with ``gpus`` free (lowest index among equals), or None."""
        return self.fit.best_fit(gpus)

    @property
    def free_total(self) -> int:
        return self.fit.total

    def add(self, node: int, delta: int) -> None:
        """``delta`` more units free on the node, without following whether it is idle
        (committed nodes)."""
        self.fit.put(node, self.free[node] + delta)

    def take(self, node: int, units: int) -> None:
        """``units`` of the node go to a run: it is no longer idle."""
        self.fit.put(node, self.free[node] - units)
        since = self.idle_since[node]
        if since is not None:
            self.idle_since[node] = None
            self.idle.remove((since, node))

    def give_back(self, node: int, units: int, now: float) -> None:
        """A run's ``units`` of the node come back at ``now``: idle since then if it is
        now empty."""
        free = self.free[node] + units
        self.fit.put(node, free)
        if free == self.sizes[node]:
            self.idle_since[node] = now
            self.idle.add((now, node))

    def idle_for(self, seconds: float, now: float) -> list[int]:
        """Nodes with nothing on them since at least ``seconds`` before ``now``, in node
        order. ``since + seconds`` grows with ``since`` (float addition is monotone), so
        they are a prefix of ``idle``: O(log n + the nodes found)."""
        settled = []
        for since, node in self.idle:
            if since + seconds > now:
                break
            settled.append(node)
        settled.sort()
        return settled

    def most_free_first(self) -> Iterator[tuple[int, int]]:
        """(free units, node) of every node, the most free first."""
        return self.fit.most_free_first()


class _Replay:
    """The state of one replay: owned nodes, cloud tiers and the runs in progress."""

    def __init__(
        self,
        owned_node_gpus: Sequence[int],
        cloud: CloudRates,
        spot_allowed: bool | None,
        committed_node_gpus: Sequence[int] = (),
        share_replicas: int = 1,
    ) -> None:
        # Everything is counted in units of 1/R of a GPU (R = share_replicas): a whole GPU is
        # R units, a fractional job its shares; GPU-hours are unit-hours / R.
        self.replicas = share_replicas
        self.use_spot = cloud.spot_is_used and spot_allowed is not False
        self.restart_seconds = cloud.spot_restart_overhead_hours * 3600.0
        self.spot_rerun = cloud.spot_rerun_factor if self.use_spot else 1.0
        self.settle_seconds = cloud.idle_release_hours * 3600.0
        startup = cloud.node_startup_hours * 3600.0
        self.cloud: dict[str, _CloudTier | _SharedCloudTier] = {
            tier: _CloudTier(startup, self.settle_seconds)
            if share_replicas == 1
            else _SharedCloudTier(startup, self.settle_seconds, share_replicas)
            for tier in (ELASTIC, SPOT)
        }
        self.owned = _OwnedNodes([g * share_replicas for g in owned_node_gpus])
        self.owned_gpu_seconds = 0.0
        self.committed = _OwnedNodes([g * share_replicas for g in committed_node_gpus])
        self.committed_gpu_seconds = 0.0
        self.committed_short = False
        """Whether some job committed capacity may serve found no room on it: while not,
        more committed nodes (after these) would change nothing (``replay_committed``)."""
        self.runs: dict[int, _Run] = {}
        self.cloud_preemptible: dict[int, None] = {}
        """Keys of the preemptible runs in the cloud (what may come back to core)."""
        self.finishes: list[tuple[float, int]] = []  # (ends, run key); stale keys skipped
        self._keys = itertools.count()
        self.wait_seconds = cloud.preemptible_wait_hours * 3600.0
        self.waiting: dict[int, tuple[JobDemand, float]] = {}
        """Preemptible jobs waiting for owned GPUs, by key: (job, when its budget ends)."""
        self.budgets: list[tuple[float, int]] = []  # (budget ends, waiting key); stale skipped
        # As admission does by default; without spot, preemptible work goes on demand instead
        # (``start_in_cloud``), but never onto committed capacity (it serves firm work).
        self._tiers_of = {
            preemptible: placement_tiers(
                Criticality.PREEMPTIBLE if preemptible else Criticality.STANDARD,
                on_demand_for_preemptible=False,
            )
            for preemptible in (False, True)
        }
        """The tiers a job may run on, by whether it is preemptible (asked for every job)."""
        self._committed_for = (ELASTIC in self._tiers_of[False], ELASTIC in self._tiers_of[True])
        """Whether committed capacity may serve a job, by whether it is preemptible."""

    def run(self, jobs: Sequence[JobDemand]) -> Usage:
        finishes, budgets, moving = self.finishes, self.budgets, self.cloud_preemptible
        for job in sorted(jobs, key=_ARRIVAL_ORDER):
            now = job.arrival_seconds
            # Most arrivals end nothing and move nothing: those two calls only when they may.
            if (finishes and finishes[0][0] <= now) or (budgets and budgets[0][0] <= now):
                self.finish_until(now)
            if moving:
                self.return_to_core(now)
            self.place(job, now)
        self.finish_until(math.inf)
        return Usage(
            owned=self.owned_gpu_seconds / 3600.0,
            elastic=self.cloud[ELASTIC].close() / 3600.0,
            spot=self.cloud[SPOT].close() / 3600.0,
            committed=self.committed_gpu_seconds / 3600.0,
        )

    def place(self, job: JobDemand, now: float) -> None:
        # Committed capacity is on-demand capacity paid in advance: only the tiers that
        # admission lets a job onto (core.placement) may use it; owned GPUs come next (they
        # cost only power, committed ones nothing more).
        units = job.units(self.replicas)
        if self._committed_for[job.preemptible]:
            slot = self.committed.fit.best_fit(units) if self.committed.sizes else None
            if slot is not None:
                key = next(self._keys)
                self.committed.add(slot, -units)
                ends = now + job.duration_seconds
                self.runs[key] = _Run(job, COMMITTED, now, ends, units, slot)
                heapq.heappush(self.finishes, (ends, key))
                return
            self.committed_short = True
        node = self.owned.fit.best_fit(units)
        if node is not None:
            self.start_on_core(job, node, now, job.duration_seconds, units)
            return
        if job.preemptible and self.wait_seconds > 0:
            key = next(self._keys)
            self.waiting[key] = (job, now + self.wait_seconds)
            heapq.heappush(self.budgets, (now + self.wait_seconds, key))
            self.serve_waiting(now)
            return
        room = None if job.preemptible else self.make_room(job)
        if room is None:
            self.start_in_cloud(job, now, job.duration_seconds)
            return
        node, victims = room
        for key in victims:
            evicted = self.runs.pop(key)
            self.leave_core(key, evicted, now)
            self.start_in_cloud(evicted.job, now, evicted.ends - now + self.restart_seconds)
        self.start_on_core(job, node, now, job.duration_seconds, units)

    def serve_waiting(self, now: float) -> None:
        """The waiting preemptible jobs, largest first then oldest (as the operator orders
        pending pods): on the fullest owned node with room, else they wait on while their
        budget lasts and the free owned GPUs (less those counted for the jobs before them)
        add up to what they need, else to the cloud."""
        if not self.waiting:
            return
        counted = 0
        order = sorted(
            self.waiting.items(),
            key=lambda item: (
                -item[1][0].units(self.replicas),
                item[1][0].arrival_seconds,
                item[0],
            ),
        )
        for key, (job, until) in order:
            need = job.units(self.replicas)
            node = self.owned.best_fit(need)
            if node is not None:
                del self.waiting[key]
                self.start_on_core(job, node, now, job.duration_seconds, need)
            elif until <= now or self.owned.free_total - counted < need:
                del self.waiting[key]
                self.start_in_cloud(job, now, job.duration_seconds)
            else:
                counted += need

    def finish_until(self, now: float) -> None:
        """End the runs that finish at or before ``now`` and the waits whose budget runs out
        by then, in time order."""
        budgets, finishes, waiting, runs = self.budgets, self.finishes, self.waiting, self.runs
        heappop, inf = heapq.heappop, math.inf
        while True:
            while budgets and budgets[0][1] not in waiting:
                heappop(budgets)  # served before its budget ran out
            budget = budgets[0][0] if budgets else inf
            finish = finishes[0][0] if finishes else inf
            first = budget if budget < finish else finish
            if first > now or first == inf:
                return
            if budget < finish:
                heappop(budgets)
                self.serve_waiting(budget)
                continue
            at, key = heappop(finishes)
            run = runs.pop(key, None)
            if run is None:
                continue  # evicted or moved earlier
            if run.job.preemptible:
                self.cloud_preemptible.pop(key, None)
            if run.tier == CORE:
                self.leave_core(key, run, at)
                self.serve_waiting(at)
            elif run.tier == COMMITTED:
                self.committed.add(run.node, run.units)
                self.committed_gpu_seconds += (at - run.started) * run.job.demand_gpus
            else:
                self.cloud[run.tier].give_back(run.launched, at)

    def start_on_core(
        self, job: JobDemand, node: int, now: float, seconds: float, units: int
    ) -> None:
        """``units``: ``job.units`` of this replay's GPUs (every caller has them)."""
        key = next(self._keys)
        self.owned.take(node, units)
        self.runs[key] = _Run(job, CORE, now, now + seconds, units, node)
        if job.preemptible:
            self.owned.preemptible[node][key] = None
        heapq.heappush(self.finishes, (now + seconds, key))

    def start_in_cloud(self, job: JobDemand, now: float, seconds: float) -> None:
        tier = SPOT if SPOT in self._tiers_of[job.preemptible] and self.use_spot else ELASTIC
        units = job.units(self.replicas)
        start, launched = self.cloud[tier].take(units, now)
        ends = start + seconds * (self.spot_rerun if tier == SPOT else 1.0)
        key = next(self._keys)
        self.runs[key] = _Run(job, tier, start, ends, units, launched=launched)
        if job.preemptible:
            self.cloud_preemptible[key] = None
        heapq.heappush(self.finishes, (ends, key))

    def leave_core(self, key: int, run: _Run, now: float) -> None:
        owned = self.owned
        owned.give_back(run.node, run.units, now)
        owned.preemptible[run.node].pop(key, None)
        self.owned_gpu_seconds += (now - run.started) * run.job.demand_gpus

    def return_to_core(self, now: float) -> None:
        """Preemptible cloud runs that have run there longer than a restart throws away move
        to owned nodes idle for ``idle_release_hours``, the largest first."""
        if not self.cloud_preemptible:
            return
        idle = self.owned.idle
        if not idle or idle[0][0] + self.settle_seconds > now:
            return  # no node idle long enough (the longest idle is the first)
        settled = self.owned.idle_for(self.settle_seconds, now)
        if not settled:
            return
        movers = sorted(
            (
                k
                for k in self.cloud_preemptible
                if self.runs[k].started + self.restart_seconds < now
            ),
            key=lambda k: (-self.runs[k].units, k),
        )
        for key in movers:
            run = self.runs[key]
            need = run.units
            node = next((n for n in settled if self.owned.free[n] >= need), None)
            if node is None:
                continue
            del self.runs[key]
            del self.cloud_preemptible[key]
            self.cloud[run.tier].give_back(run.launched, now)
            left = (run.ends - now) / (self.spot_rerun if run.tier == SPOT else 1.0)
            self.start_on_core(run.job, node, now, left + self.restart_seconds, need)

    def make_room(self, job: JobDemand) -> tuple[int, list[int]] | None:
        """The owned node where evicting the most recently started preemptible runs frees
        ``job.gpus`` with the fewest GPUs evicted (the lowest node among equals), and those
        runs; None when none can.

        A node with ``free`` units free evicts at least ``need - free``: nodes are looked at
        from the most free down, and the search stops at the first whose least possible
        eviction is more than the best found (every node after it frees no more)."""
        best: tuple[int, int, list[int]] | None = None
        need = job.units(self.replicas)
        runs = self.runs
        preemptible = self.owned.preemptible
        for free, node in self.owned.most_free_first():
            if best is not None and need - free > best[0]:
                break
            if not preemptible[node] and free < need:
                continue
            victims: list[int] = []
            room = free
            for key in reversed(preemptible[node]):
                if room >= need:
                    break
                victims.append(key)
                room += runs[key].units
            if room >= need:
                evicted = room - free
                if best is None or (evicted, node) < (best[0], best[1]):
                    best = (evicted, node, victims)
        return None if best is None else (best[1], best[2])


def replay_jobs(
    jobs: Sequence[JobDemand],
    owned_node_gpus: Sequence[int],
    cloud: CloudRates,
    *,
    spot_allowed: bool | None = None,
    committed_node_gpus: Sequence[int] = (),
    share_replicas: int = 1,
) -> Usage:
    """GPU-hours per tier over the trace's window when ``jobs`` meet owned nodes of
    ``owned_node_gpus`` GPUs each (and committed cloud nodes of ``committed_node_gpus``),
    placed as the module doc says. ``spot_allowed=False`` runs every cloud job on demand
    (the all-on-demand reference). With ``share_replicas`` R > 1 every GPU, owned or rented,
    is advertised as R units, as a pool with gpu.sharing: jobs with ``shares`` take that many,
    whole-GPU jobs R each; cloud GPUs are still rented (and billed) whole."""
    return _Replay(owned_node_gpus, cloud, spot_allowed, committed_node_gpus, share_replicas).run(
        jobs
    )


def replay_committed(
    jobs: Sequence[JobDemand],
    owned_node_gpus: Sequence[int],
    cloud: CloudRates,
    committed_node_gpus: Sequence[int],
    *,
    share_replicas: int = 1,
) -> tuple[Usage, bool]:
    """``replay_jobs`` with committed nodes, and whether the committed nodes were enough:
    every job they may serve found room on them when it came.

    When they were, the same replay with more committed nodes listed after these (sizes
    sorted: none smaller than these) has the same usage: each job finds the same node among
    these in the same state (best fit takes the fullest node with room, the first among
    equals), and a node added after them is empty, so never fuller than that choice."""
    replay = _Replay(owned_node_gpus, cloud, None, committed_node_gpus, share_replicas)
    usage = replay.run(jobs)
    return usage, not replay.committed_short
