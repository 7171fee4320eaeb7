"""A discrete-event simulation of a hybrid GPU cluster that runs the real ``core.decide``.

The simulated world: jobs arrive from a trace, a scheduler places pending pods on free
nodes (like kube-scheduler with a bin-packing score), the operator ticks every
``policy.interval`` and its plan is executed against a fake provider with provisioning
delay, spot interruptions (a hazard rate or a measured preemption trace) and restart
overhead for moved or interrupted jobs. Cloud nodes are billed from launch to removal;
owned nodes for the whole run, except that an owned pool with ``spec.power`` pays every
machine's capex and ops for the whole run and its electricity only while the machine is on
(``core.cost.pool_hour_dollars``): decide() powers idle machines off and on again, and a
machine powered on boots in ``power.bootTime``.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Generic, TypeVar

from sortedcontainers import SortedList

from hybridgpu.core.cost import (
    always_on_nodes,
    core_node_cost,
    held_nodes,
    is_cloud,
    node_hour_dollars,
    pool_hour_dollars,
    power_node_hour_dollars,
    powered,
)
from hybridgpu.core.deadline import (
    WINDOW_AGE_SECONDS,
    banked_seconds,
    first_checkpoint_seconds,
    must_leave_spot,
    must_start_on_demand,
    slack_of,
)
from hybridgpu.core.decide import decide
from hybridgpu.core.placement import FreeGPUs, placement_order
from hybridgpu.core.reserve import awaits_reserved_node, reservable
from hybridgpu.models.actions import (
    ActionKind,
    HandleInterruption,
    MoveJob,
    Plan,
    RebalanceReplica,
    ReclaimIdle,
    ReleaseNode,
    ScaleUp,
)
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import (
    CRITICALITY_RANK,
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    NodeState,
    PoolState,
    ServingState,
)
from hybridgpu.sim import serving as serving_sim
from hybridgpu.sim.defaults import (
    DEFAULT_BILLING_MINIMUM_SECONDS,
    DEFAULT_BOOT_SECONDS,
    DEFAULT_CHECKPOINT_SECONDS,
)
from hybridgpu.sim.prices import PriceSteps, SpotPrices
from hybridgpu.sim.spot import AvailabilityTrace, CorrelatedTrace, pool_offset
from hybridgpu.sim.traces import SpotTrace, TraceJob

V = TypeVar("V")
INTERRUPTION_NOTICE_SECONDS = 120.0
# Where cloud dollars went (`simulate --explain`). Lost work is counted while it runs (in
# the other terms) and again here when it is lost, so "cloud_work" subtracts it.
COST_TERMS = (
    "provisioning",
    "idle_nodes",
    "half_empty_nodes",
    "work_while_owned_gpus_free",
    "lost_work",
    "billing_minimum",
    "spot_unavailable",
    "cloud_work",
)
# Every this many seconds the cost/capacity time series gets a sample (for the PNG).
SERIES_STEP_SECONDS = 600.0
# With nothing new happening, the simulated operator still looks this often (consolidation
# and other decisions that ripen with time).
HEARTBEAT_SECONDS = 600.0
# GPU utilization of a running job whose trace gives none: busy.
BUSY_UTILIZATION_PERCENT = 90.0
# A pending job's class for the scheduler: its pinned pool, whether it is preemptible, its
# GPUs and GPU models (``Simulation._class_key``).
_ClassKey = tuple[str | None, bool, int, tuple[str, ...]]


class IndexedViews(Generic[V]):
    """Values by a job's index, read back in index order as a tuple.

    A snapshot lists the live jobs' views by index, and between two snapshots only a few of
    thousands change: they are kept in two aligned lists, updated in place, so the tuple is
    a copy of a list instead of a walk over a sorted map."""

    def __init__(self) -> None:
        self._indexes: list[int] = []
        self._values: list[V] = []

    def put(self, index: int, value: V) -> None:
        """Set the value of ``index`` (added in its place when new)."""
        at = bisect_left(self._indexes, index)
        if at < len(self._indexes) and self._indexes[at] == index:
            self._values[at] = value
        else:
            self._indexes.insert(at, index)
            self._values.insert(at, value)

    def discard(self, index: int) -> None:
        """Remove ``index`` and its value, if there."""
        at = bisect_left(self._indexes, index)
        if at < len(self._indexes) and self._indexes[at] == index:
            del self._indexes[at]
            del self._values[at]

    def values(self) -> tuple[V, ...]:
        """The values in the order of their indexes."""
        return tuple(self._values)


@dataclass(frozen=True)
class SimSettings:
    """The fake world's physics."""

    provisioning_delay_seconds: float = DEFAULT_BOOT_SECONDS
    """Launch to Ready for a cloud GPU node, image pull included (docs/concepts.md#physics)."""
    boot_seconds_by_pool: Mapping[str, float] = field(default_factory=dict)
    """Launch to Ready of the pools whose nodes boot in another time than
    ``provisioning_delay_seconds`` (the cluster file's ``sim.hybridgpu.io/boot-time``)."""
    restart_overhead_seconds: float = 300.0
    """Start-up time a job spends again on every restart before it makes progress."""
    checkpoint_interval_seconds: float = DEFAULT_CHECKPOINT_SECONDS
    """A job checkpoints after every this much progress, unless the trace says otherwise;
    work since its last checkpoint is lost on a move or an interruption. 0 = never: a
    restarted job starts from zero."""
    billing_minimum_seconds: float = DEFAULT_BILLING_MINIMUM_SECONDS
    """A cloud node is billed from launch to removal, at least this long."""
    spot_hazard_per_hour: float = 0.0
    """Interruptions per spot node-hour, when no spot trace is given."""
    spot_trace: SpotTrace | None = None
    spot_availability: AvailabilityTrace | None = None
    """When a spot pool can launch at all; None: always."""
    spot_correlated: CorrelatedTrace | None = None
    """Interruptions that take a share of a spot pool at once; replaces the per-node ones."""
    spot_trace_aligned: bool = False
    """Replay ``spot_trace`` per pool, from the same offset as ``spot_availability``: a node
    is taken at the first preemption after its launch in the pool's own replay (as one
    instance's measured life), instead of from a random point of the trace."""
    spot_prices: SpotPrices | None = None
    """Spot price series by pool (``sim.prices``); pools without one keep their price."""
    seed: int = 1
    surge_ready_seconds: float = 300.0
    """A serving replica added by a surge rebalance is Ready this long after it got its GPUs
    (model load); the cloud replica serves until then."""
    moved_jobs_keep_queue_place: bool = False
    """A job moved while it waits keeps its place in the scheduler's queue (when it first
    waited) instead of entering it again at the move. A move recreates the Job's pods
    (suspend, repin, resume), and kube-scheduler's PrioritySort orders pods by priority,
    then by when they entered its queue, so by default a moved job queues behind the jobs
    that waited before its move. True gives the other order, for tests that the operator's
    rules do not rely on which pending pod gets a new node."""


@dataclass
class _Node:
    name: str
    pool: str
    tier: str
    gpus: int
    price: float
    launched_at: float
    ready_at: float
    free: int
    jobs: set[int] = field(default_factory=set)
    cordoned: bool = False
    interruption_deadline: float | None = None
    idle_since: float | None = None
    removed_at: float | None = None
    used_gpu_percent: float = 0.0
    """Sum over its jobs of GPUs times their utilization: the node's DCGM average is this
    over its GPUs (free GPUs read 0%)."""
    booting: bool = False
    """Launched and not Ready yet (until its "ready" event)."""
    counted: tuple[int, int, int, int, int] | None = None
    """What the node adds to the simulation's per-pool tallies (``_Tally``) right now."""
    moves: tuple[int, int, int, int] = (0, 0, 0, 0)
    """What the node adds to the simulation's ``_moves`` tallies right now."""
    placeable: int | None = None
    """Its free GPUs as its pool's ``_placeable`` holds them, while pods can land on it."""
    kept_for: str | None = None
    """The key of the job the node is kept for (``core.reserve``) while that job runs on
    it: no other job lands on it meanwhile."""
    view: NodeState | None = None
    view_key: tuple[object, ...] = ()
    """The node as the operator last saw it, and the state it was built from."""

    @property
    def utilization_percent(self) -> float:
        return self.used_gpu_percent / self.gpus if self.gpus else 0.0


@dataclass
class _Job:
    index: int
    trace: TraceJob
    pending_since: float
    queued_at: float = 0.0
    """When its pods entered the scheduler's queue (``_queue_key``): when it began to wait,
    or when a move recreated its pods while it waited (the operator sees them pending
    from then on)."""
    progress: float = 0.0
    """Seconds of the job's work saved in its last checkpoint."""
    run_overhead: float = 0.0
    """Start-up seconds the current (or next) run spends before it makes progress."""
    lost_seconds: float = 0.0
    """Run time thrown away: work since the last checkpoint and restart start-ups."""
    finished_at: float | None = None
    pool: str | None = None
    node: str | None = None
    run_started: float | None = None
    first_started: float | None = None
    wait_seconds: float = 0.0
    done: bool = False
    run_id: int = 0
    saved_estimate: float = 0.0
    """The progress the operator has recorded on the Job (hybridgpu.io/progress): what its
    earlier runs saved, counted as conservatively as the operator counts it."""
    reclaimed_at: float | None = None
    restarts: int = 0
    """Moves the operator made of it (hybridgpu.io/restarts on a real Job)."""


@dataclass
class _Tally:
    """One pool's nodes by state, kept up to date as nodes change so that billing causes,
    samples and wake-ups cost O(pools) instead of O(nodes) per step."""

    nodes: int = 0
    booting: int = 0
    empty: int = 0
    """Ready cloud nodes without jobs."""
    busy_free_gpus: int = 0
    """Free GPUs on ready cloud nodes that run jobs (for owned pools: on uncordoned nodes)."""
    busy_used_gpus: int = 0
    busy_preemptible_gpus: int = 0
    """Of busy_used_gpus: GPUs preemptible jobs use (on on-demand nodes, the work spot
    would have run had it had capacity)."""


@dataclass
class DeadlineStats:
    """How the jobs with a deadline fared."""

    jobs: int = 0
    missed: int = 0
    """Finished after their deadline, or never."""
    on_demand_moves: int = 0
    """Moves to on-demand the deadline rule decided."""
    returns_to_spot: int = 0
    """Moves back from on-demand to spot the deadline rule decided."""

    def to_json(self) -> dict[str, int]:
        out = {"jobs": self.jobs, "missed": self.missed, "on_demand_moves": self.on_demand_moves}
        if self.returns_to_spot:
            out["returns_to_spot"] = self.returns_to_spot
        return out


@dataclass
class ReclaimStats:
    """What idle reclaim took back from workloads that held GPUs at low utilization."""

    workloads: int = 0
    idle_gpu_hours: float = 0.0
    """GPU-hours they had held idle when reclaimed (the operator's
    hybridgpu_reclaimed_gpu_hours_total)."""
    freed_gpu_hours: float = 0.0
    """GPU-hours they would still have held had they not been reclaimed."""
    freed_dollars: float = 0.0
    """Those GPU-hours at the price of the GPUs they held (each pool's node-hour price per
    GPU; for owned GPUs a sunk cost, so the saving shows in the cloud spend instead)."""

    def to_json(self) -> dict[str, float]:
        return {
            "workloads": self.workloads,
            "idle_gpu_hours": round(self.idle_gpu_hours, 1),
            "freed_gpu_hours": round(self.freed_gpu_hours, 1),
            "freed_dollars": round(self.freed_dollars, 2),
        }


@dataclass
class PolicyResult:
    """What one policy costs and how its jobs fared."""

    name: str
    total_cost_dollars: float
    cost_by_tier_dollars: dict[str, float]
    gpu_hours: dict[str, float]
    """GPU-hours run, by tier (lost work included), billed GPU-hours ("billed") and GPU-hours
    thrown away by moves and interruptions ("lost")."""
    wait_seconds: dict[str, dict[str, float]]
    preemptions: int
    spot_interruptions: int
    unfinished_jobs: int
    jobs: int
    scale_ups: int = 0
    releases: int = 0
    ticks: int = 0
    end_seconds: float = 0.0
    series: dict[str, list[float]] = field(default_factory=dict)
    cost_terms_dollars: dict[str, float] = field(default_factory=dict)
    """Cloud spend split by cause (COST_TERMS); the terms sum to the cloud spend."""
    max_lateness_seconds: dict[str, float] = field(default_factory=dict)
    """Per criticality, the most any job finished after arrival + duration (inf when one
    never finished): what the fluid bound's SLO is checked against."""
    deadlines: DeadlineStats = field(default_factory=DeadlineStats)
    idle_reclaim: ReclaimStats = field(default_factory=ReclaimStats)
    rebalances: int = 0
    """Serving replicas moved from cloud nodes to owned GPUs by surge."""
    serving_disruptions: int = 0
    """Times a serving replica was stopped before its end (requeued): a surge never does."""
    owned_power_dollars: float = 0.0
    """Of the core cost, the electricity of owned pools with spec.power (billed only while
    a machine is on); their capex and ops, and every other owned pool, are the rest."""
    owned_power_window_dollars: float = 0.0
    """The part of ``owned_power_dollars`` drawn within the trace window (first arrival to
    the end of the last job's required run), over which ``simulate`` bills owned nodes."""

    @property
    def work_gpu_hours(self) -> float:
        """GPU-hours run on every tier, lost work included."""
        return sum(self.gpu_hours.get(t.value, 0.0) for t in Tier)

    @property
    def cloud_cost_dollars(self) -> float:
        """The part of the bill the operator controls: elastic and spot spend, dollars."""
        return sum(v for k, v in self.cost_by_tier_dollars.items() if k != Tier.CORE.value)

    def to_json(self) -> dict[str, object]:
        return {
            "total_cost_dollars": round(self.total_cost_dollars, 2),
            "cloud_cost_dollars": round(self.cloud_cost_dollars, 2),
            "cost_terms_dollars": {k: round(v, 2) for k, v in self.cost_terms_dollars.items()},
            "max_lateness_seconds": {
                c: None if math.isinf(v) else round(v, 1)
                for c, v in self.max_lateness_seconds.items()
            },
            "cost_by_tier_dollars": {k: round(v, 2) for k, v in self.cost_by_tier_dollars.items()},
            "gpu_hours": {k: round(v, 1) for k, v in self.gpu_hours.items()},
            "wait_seconds": {
                c: {q: round(v, 1) for q, v in qs.items()} for c, qs in self.wait_seconds.items()
            },
            "preemptions": self.preemptions,
            "spot_interruptions": self.spot_interruptions,
            "unfinished_jobs": self.unfinished_jobs,
            "jobs": self.jobs,
            "scale_ups": self.scale_ups,
            "releases": self.releases,
            "deadlines": self.deadlines.to_json(),
            "idle_reclaim": self.idle_reclaim.to_json(),
            "rebalances": self.rebalances,
            "serving_disruptions": self.serving_disruptions,
        }


def _awaits(view: tuple[GPUPod, JobState]) -> bool:
    """Whether the waiting job (its one pod and Job) waits for a node kept for it."""
    pod, job = view
    return awaits_reserved_node(job, True, [pod])


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class Simulation:
    """One run of one policy over one trace."""

    def __init__(
        self,
        name: str,
        pools: Sequence[PoolState],
        policy: ScalingPolicySpec,
        jobs: Sequence[TraceJob],
        settings: SimSettings,
        *,
        horizon_seconds: float | None = None,
        progress: Callable[[float], None] | None = None,
        reads_annotations: bool = True,
        check_quiet: bool = False,
    ) -> None:
        """``reads_annotations`` False: the operator ignores the jobs' deadlines and
        idle-timeouts, as the baselines do (no autoscaler knows them). ``check_quiet``: run
        decide() on quiet ticks too and fail when it would have acted (tests)."""
        self.name = name
        self.reads_annotations = reads_annotations
        series = settings.spot_prices.by_pool if settings.spot_prices is not None else {}
        self._price_steps: dict[str, PriceSteps] = {
            p.name: series[p.name] for p in pools if p.spec.tier == Tier.SPOT and p.name in series
        }
        """The spot pools whose price moves: billed per interval at the price in force."""
        pools = [self._priced(p) for p in pools]
        self.pools = {p.name: p for p in pools}
        self.policy = policy
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.interval = parse_duration_seconds(policy.interval)
        self.trace = list(jobs)
        self.jobs: list[_Job] = []
        self.nodes: dict[str, _Node] = {}
        self.removed: list[_Node] = []
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.node_seq = 0
        self.now = 0.0
        self.pending: set[int] = set()
        self._queue: SortedList[tuple[int, float, int]] = SortedList()
        """The pending jobs in the scheduler's order: (criticality rank, pending since, index)."""
        self._classes: dict[_ClassKey, SortedList[tuple[int, float, int]]] = {}
        self._schedule_changes = 0
        """Counts the changes a scheduler pass depends on: a job queued or taken off the
        queue, a node's free GPUs as pods can land on them (``_placeable``)."""
        self._fruitless_at = -1
        """``_schedule_changes`` when a pass last placed nothing: until it moves, another
        pass would place nothing either."""
        """The same, split by class (``_class_key``)."""
        self._class_of: dict[int, _ClassKey] = {}
        """The class each pending job is queued in."""
        self._smallest_job_gpus = min((j.gpus for j in self.trace), default=0)
        self.running: set[int] = set()
        self.preemptions = 0
        self.interruptions = 0
        self.scale_ups = 0
        self.releases = 0
        self.ticks = 0
        self.decisions = 0
        """Ticks that ran decide(); the others were quiet (``_quiet``)."""
        self.check_quiet = check_quiet
        self._noticed: set[str] = set()
        """Nodes under an interruption notice."""
        self._moves = [0, 0, 0, 0]
        """Cloud nodes consolidation or return to core may empty (``_node_moves``): nodes of
        on-demand pools and of spot pools that run only preemptible work, and nodes whose
        every job may return to owned GPUs; of those, nodes of standard work alone (which may
        return by preempting preemptible work on owned nodes). Kept only when
        ``_consolidates``."""
        self._consolidates = policy.consolidation.enabled and policy.preemption.max_per_tick > 0
        """Whether decide() consolidates or returns work to core at all."""
        self._free_core: dict[str, _Node] = {}
        """Owned nodes, not cordoned, with every GPU free (consolidation's targets once idle
        for their idleFor)."""
        self.recheck_at: float | None = None
        """When the last plan said it goes stale by itself (a wait for owned GPUs ends)."""
        self.work_by_tier: dict[str, float] = {t.value: 0.0 for t in Tier}
        # Where each spot pool starts in the measured series: per pool, so that adding a
        # pool or a policy does not shift the others.
        self.spot_offsets = {
            p.name: pool_offset(settings.seed, p.name) for p in pools if p.spec.tier == Tier.SPOT
        }
        self.cost_terms: dict[str, float] = dict.fromkeys(COST_TERMS, 0.0)
        self._accounted_to = 0.0
        self.progress = progress
        self._eligible_cache: dict[_ClassKey, list[str]] = {}
        self._views: dict[int, tuple[int, GPUPod, JobState]] = {}
        self._tally = {p.name: _Tally() for p in pools}
        self._accounted_cloud_pools = [
            (p.name, self._tally[p.name], p.spec.gpu.per_node, p.spec.gpu.model)
            for p in pools
            if is_cloud(p.spec.tier)
        ]
        """What ``_account`` reads of each cloud pool that a price change does not move."""
        self._accounted_owned_tallies = [
            self._tally[p.name] for p in pools if not is_cloud(p.spec.tier)
        ]
        self._spot_launched: dict[str, deque[_Node]] = {}
        """Per spot pool, its nodes by launch, until they are two WINDOW_AGE_SECONDS old."""
        self._spot_seen: dict[str, list[int]] = {}
        """Per spot pool, (lasted, cut short) as PoolState reports them."""
        self._placeable: dict[str, FreeGPUs[str]] = {p.name: FreeGPUs() for p in pools}
        """Per pool, the nodes pods can land on (ready, not cordoned) by free GPUs: the
        scheduler's best fit is decide()'s (``core.placement``)."""
        self._most_free = {p.name: 0 for p in pools}
        """Per pool, its ``_placeable``'s most_free, set where that changes (``_room`` reads
        it after every start)."""
        self._node_price = {
            p.name: node_hour_dollars(p.spec, p.spot_price_per_node_hour) for p in pools
        }
        self._cloud_nodes = 0
        self._idle_cloud: dict[str, _Node] = {}
        """Cloud nodes with an idle stretch running (their idleFor may run out)."""
        self._committed_pools = {p.name for p in pools if p.spec.committed is not None}
        self._powered = {p.name for p in pools if powered(p.spec)}
        """Owned pools whose idle machines decide() powers off (spec.power)."""
        self._idle_owned: dict[str, _Node] = {}
        """Powered-on machines of those pools with no jobs (decide() may power them off)."""
        self._demand_gpus = 0
        """GPUs of the jobs running or pending."""
        self._changed_jobs: set[int] = set()
        """Jobs whose view changed (arrived, started, stopped, moved) since the snapshot."""
        self._live_pods: IndexedViews[GPUPod] = IndexedViews()
        """The pods of the running and pending jobs, by index (the snapshot's order)."""
        self._live_jobs: IndexedViews[JobState] = IndexedViews()
        """The same jobs as Jobs, less the serving replicas (which are no Jobs)."""
        self._job_views: tuple[tuple[GPUPod, ...], tuple[JobState, ...]] = ((), ())
        self._nodes_seen: tuple[dict[str, int], tuple[NodeState, ...]] | None = None
        """``_node_views`` since no node changed."""
        self._view_stale: dict[str, _Node] = {}
        """Nodes changed (``_node_changed``) or noticed since ``_node_views`` last ran."""
        self._ready_views: dict[str, NodeState] = {}
        """The views of the nodes that are up (not booting, not removed), by name."""
        self._booting: dict[str, _Node] = {}
        """Nodes launched and not Ready yet."""
        self._pool_views: dict[str, tuple[tuple[object, ...], PoolState]] = {}
        """``_pool_view``'s last view of each pool and what it was built from."""
        # The jobs a deadline or idle-reclaim rule may fire for (``_rules_due``).
        self._annotated = {
            i
            for i, j in enumerate(self.trace)
            if reads_annotations
            and (
                j.idle_timeout_seconds is not None
                or (j.deadline_at is not None and j.criticality == Criticality.PREEMPTIBLE)
            )
        }
        self._live_annotated: set[int] = set()
        """Of those, the ones running or pending."""
        self._drainable = [
            j.criticality == Criticality.PREEMPTIBLE and j.service is None for j in self.trace
        ]
        """Per job, whether decide()'s idle release may drain a node it runs on: only a
        preemptible Job's pods move (``_Decider._drainable``), never other work or a serving
        replica (no Job)."""
        self._ranks = sorted(set(CRITICALITY_RANK.values()))
        self.heartbeat = max(self.interval, HEARTBEAT_SECONDS)
        # Owned pools only and no preemption: the operator has nothing it could do.
        self.operator_can_act = (
            policy.preemption.enabled
            or any(is_cloud(p.spec.tier) for p in pools)
            or bool(self._powered)
            or (reads_annotations and any(j.idle_timeout_seconds for j in self.trace))
        )
        self.grace = parse_duration_seconds(policy.pending_grace_period)
        self.idle_for = {
            p.name: parse_duration_seconds(
                p.spec.power.idle_for
                if powered(p.spec) and p.spec.power is not None
                else p.spec.scale_down.idle_for
            )
            for p in pools
        }
        self.idle_percent = {p.name: p.spec.scale_down.idle_utilization_percent for p in pools}
        # What the operator assumes a restart costs, and gives a stopping Job: its deadline
        # arithmetic (core.deadline) uses them, and so does the progress it records.
        self.restart_seconds = parse_duration_seconds(policy.preemption.restart_overhead)
        self.stop_seconds = parse_duration_seconds(policy.preemption.checkpoint_grace_period)
        self.deadline_margin = 2 * self.interval
        self.reclaimed = ReclaimStats()
        self.deadline_moves = 0
        self.deadline_returns = 0
        self.serving = serving_sim.ServingBook()
        self.serving_disruptions = 0
        self.by_trace_name: dict[str, _Job] = {}
        """Serving replicas by name (a rebalance names the pods it moves)."""
        self._has_serving = any(j.service is not None for j in self.trace)
        self._by_key = {f"sim/{j.name}": i for i, j in enumerate(self.trace)}
        """The jobs by the name the operator knows them by (``_live_by_name``)."""
        self._unique_names = len(self._by_key) == len(self.trace)
        self._rebalances = self._has_serving and policy.rebalance.enabled
        waits = policy.wait_budget
        self._pending_only_buys = (
            not policy.preemption.enabled
            and not policy.consolidation.enabled
            and not (self._has_serving and policy.rebalance.enabled)
            and not reads_annotations
            and not self._powered
            and all(
                parse_duration_seconds(budget) <= 0
                for budget in (waits.critical, waits.standard, waits.preemptible)
            )
        )
        """Whether decide() does no more for a pending pod than place it on a node that
        exists, or one on its way, or buy one: it preempts nothing, moves nothing, lets no
        pod wait for owned GPUs, reads no deadline and powers no owned machine on (the
        baselines). Then ``_pending_on_the_way`` tells when it buys nothing."""
        self._serving_on_cloud = 0
        self._replicas: dict[str, list[int]] = {}
        """Per serving workload, its replicas running or pending and those running
        (``serving.serving_states``), kept as jobs change."""
        self._replica_counted: dict[int, tuple[int, int]] = {}
        """What each replica adds to ``_replicas`` now: (live, running)."""
        """Serving replicas running on cloud nodes (a rebalance may move them)."""
        last_arrival = max((j.arrival_seconds for j in self.trace), default=0.0)
        self.horizon = horizon_seconds or (
            last_arrival + max((j.duration_seconds for j in self.trace), default=0.0) * 4 + 86400
        )
        self.series: dict[str, list[float]] = {"t": []}
        for tier in Tier:
            self.series[f"gpus_{tier.value}"] = []
            self.series[f"cost_{tier.value}"] = []
        self.series["demand_gpus"] = []
        self._sampled_tiers = [
            (
                self.series[f"gpus_{tier.value}"],
                self.series[f"cost_{tier.value}"],
                [
                    (
                        p.name,
                        self._tally[p.name],
                        p.spec.gpu.per_node,
                        p.spec if p.name in self._powered else None,
                    )
                    for p in pools
                    if p.spec.tier == tier
                ],
            )
            for tier in Tier
        ]
        """What ``_sample`` reads per tier: its two series, and its pools (in the order of
        ``_tally``) with their spec when powered; a price change moves none of it."""

    def _priced(self, pool: PoolState) -> PoolState:
        """A pool with a price series as the operator sees it: priced by the provider
        (pricing.fromProvider), at the series' price at time 0."""
        steps = self._price_steps.get(pool.name)
        if steps is None:
            return pool
        pricing = pool.spec.pricing.model_copy(update={"from_provider": True})
        return PoolState(
            name=pool.name,
            spec=pool.spec.model_copy(update={"pricing": pricing}),
            spot_price_per_node_hour=steps.price_at(0.0),
        )

    # ------------------------------------------------------------------ events
    def _push(self, at: float, kind: str, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def _add_core_nodes(self) -> None:
        for pool in self.pools.values():
            # Owned pools are as big as maxNodes: that is the hardware that was bought. A
            # committed pool runs its commitment from the start, billed whether used or not
            # (decide() never releases it below the commitment).
            count = always_on_nodes(pool.spec)
            for _ in range(count):
                self._launch(pool, ready_at=0.0)

    def _launch(self, pool: PoolState, ready_at: float) -> _Node:
        self.node_seq += 1
        # A powered owned machine's capex and ops are billed for every machine, on or off
        # (``_result``); the node itself costs its electricity while it is on.
        price = (
            power_node_hour_dollars(pool.spec)
            if pool.name in self._powered
            else self._node_price[pool.name]
        )
        node = _Node(
            name=f"{pool.name}-{self.node_seq:05d}",
            pool=pool.name,
            tier=str(pool.spec.tier),
            gpus=pool.spec.gpu.per_node,
            price=price,
            launched_at=self.now,
            ready_at=ready_at,
            free=pool.spec.gpu.per_node,
            idle_since=ready_at,
            booting=ready_at > self.now,
        )
        self.nodes[node.name] = node
        self._tally[node.pool].nodes += 1
        if self._releasable(node):
            self._cloud_nodes += 1
        self._node_changed(node)
        if ready_at > self.now:
            self._push(ready_at, "ready", node.name)
        if node.tier == Tier.SPOT:
            self._schedule_interruption(node)
            self._spot_launched.setdefault(node.pool, deque()).append(node)
        return node

    def _survival_fields(self, pool: str) -> dict[str, int]:
        if pool not in self._spot_launched and pool not in self._spot_seen:
            return {}
        lasted, cut = self._spot_survival(pool)
        return {"nodes_lasted": lasted, "nodes_cut_short": cut}

    def _spot_survival(self, pool: str) -> tuple[int, int]:
        """(lasted, cut short): of the pool's nodes seen to run WINDOW_AGE_SECONDS without an
        interruption notice, those seen to run as long again, and those noticed before."""
        seen = self._spot_seen.setdefault(pool, [0, 0])
        queue = self._spot_launched.get(pool)
        while queue and queue[0].launched_at + 2 * WINDOW_AGE_SECONDS <= self.now:
            node = queue.popleft()
            until = node.launched_at + 2 * WINDOW_AGE_SECONDS
            noticed = (
                None
                if node.interruption_deadline is None
                else node.interruption_deadline - INTERRUPTION_NOTICE_SECONDS
            )
            if (noticed is None or noticed >= until) and (
                node.removed_at is None or node.removed_at >= until
            ):
                seen[0] += 1
        return seen[0], seen[1]

    def _launchable(self, pool: str) -> bool:
        trace = self.settings.spot_availability
        if trace is None or pool not in self.spot_offsets:
            return True
        return trace.launchable_at(self.spot_offsets[pool], self.now)

    def _schedule_price_change(self, pool: str) -> None:
        at = self._price_steps[pool].next_change_after(self.now)
        if at is not None:
            self._push(at, "price", pool)

    def _price_changed(self, pool: str) -> None:
        """The provider's price of ``pool`` moved: nodes are billed at it from now on and the
        operator's next snapshot shows it."""
        price = self._price_steps[pool].price_at(self.now)
        self._node_price[pool] = price
        self.pools[pool] = replace(self.pools[pool], spot_price_per_node_hour=price)
        self._eligible_cache.clear()  # the pools' order follows their prices
        self._schedule_price_change(pool)

    def _schedule_drop(self, pool: str) -> None:
        trace = self.settings.spot_correlated
        if trace is None:
            return
        nxt = trace.next_drop(self.spot_offsets[pool], self.now)
        if nxt is not None:
            at, share = nxt
            self._push(max(at, self.now + 1.0), "drop", (pool, share))

    def _drop(self, pool: str, share: float) -> None:
        """A correlated interruption: notices for that share of the pool's nodes at once."""
        live = sorted(
            n.name
            for n in self.nodes.values()
            if n.pool == pool and n.interruption_deadline is None
        )
        for name in self.rng.sample(live, math.ceil(share * len(live))) if live else []:
            self._push(self.now, "notice", name)
        self._schedule_drop(pool)

    def _schedule_interruption(self, node: _Node) -> None:
        if self.settings.spot_correlated is not None:
            return
        trace = self.settings.spot_trace
        if trace is not None:
            if self.settings.spot_trace_aligned and node.pool in self.spot_offsets:
                offset = self.spot_offsets[node.pool] + int(self.now // trace.gap_seconds)
            else:
                offset = self.rng.randrange(trace.length)
            delay = trace.seconds_to_next_interruption(offset)
        elif self.settings.spot_hazard_per_hour / 3600 > 0:  # a subnormal hazard is none
            delay = self.rng.expovariate(self.settings.spot_hazard_per_hour / 3600)
        else:
            delay = None
        if delay is not None:
            self._push(self.now + max(delay, 1.0), "notice", node.name)

    # ------------------------------------------------------------- scheduler
    def _class_key(self, job: _Job) -> _ClassKey:
        """What decides where the job's pod may land and how much room it needs: jobs of one
        class fit wherever any of them fits."""
        trace = job.trace
        return (
            job.pool,
            trace.criticality == Criticality.PREEMPTIBLE,
            trace.gpus,
            trace.gpu_models,
        )

    def _eligible_pools(self, job: _Job) -> list[str]:
        """The pools the job's pod may land on, in decide()'s order (``core.placement``)."""
        key = self._class_key(job)
        cached = self._eligible_cache.get(key)
        if cached is None:
            trace = job.trace
            order = placement_order(
                list(self.pools.values()),
                trace.gpus,
                trace.criticality,
                trace.gpu_models,
                on_demand_for_preemptible=self.policy.preemption.allow_on_demand_for_preemptible,
                pinned=job.pool,
            )
            cached = self._eligible_cache[key] = [p.name for p in order]
        return cached

    def _queue_key(self, job: _Job) -> tuple[int, float, int]:
        return (CRITICALITY_RANK[job.trace.criticality], self._queued_since(job), job.index)

    def _queued_since(self, job: _Job) -> float:
        """When the waiting job's pods entered the scheduler's queue, as the operator sees
        them pending: since its move, or since it began to wait when moved jobs keep their
        place (``SimSettings.moved_jobs_keep_queue_place``)."""
        return job.pending_since if self.settings.moved_jobs_keep_queue_place else job.queued_at

    def _enqueue(self, job: _Job) -> None:
        """The job waits: in the scheduler's queue and its class's."""
        self.pending.add(job.index)
        self._schedule_changes += 1
        key = self._queue_key(job)
        self._queue.add(key)
        klass = self._class_key(job)
        queue = self._classes.get(klass)
        if queue is None:
            queue = self._classes[klass] = SortedList()
        queue.add(key)
        self._class_of[job.index] = klass

    def _dequeue(self, job: _Job) -> None:
        """The job no longer waits (it started), or its class changes (``_enqueue`` again)."""
        self.pending.discard(job.index)
        self._schedule_changes += 1
        key = self._queue_key(job)
        self._queue.remove(key)
        klass = self._class_of.pop(job.index)
        queue = self._classes[klass]
        queue.remove(key)
        if not queue:
            del self._classes[klass]

    def _room(self) -> int:
        """The most free GPUs on any node pods can land on."""
        return max(self._most_free.values(), default=0)

    def _schedule(self) -> None:
        """Place pending pods, most critical and oldest first, each on the fullest node of
        its first eligible pool that has room (kube-scheduler with a bin-packing score).

        A pass only takes GPUs, so once a job found no room, no later job of its class
        (``_class_key``) finds any in that pass: the pass walks the classes' queues merged
        in the queue's order and drops a class at its first job that does not fit. Its cost
        grows with the jobs it places and the classes, not with the queue's length."""
        if not self.pending or self._fruitless_at == self._schedule_changes:
            return
        self._fruitless_at = self._schedule_changes  # unless a job starts below
        room = self._room()
        if room < self._smallest_job_gpus:
            return  # a queue in front of full nodes costs nothing per event
        heads = [(queue[0], klass) for klass, queue in self._classes.items() if klass[2] <= room]
        heapq.heapify(heads)
        while heads:
            key, klass = heapq.heappop(heads)
            job = self.jobs[key[2]]
            need = job.trace.gpus
            if need > room:
                continue
            for pool in self._eligible_pools(job):
                best = self._placeable[pool].best_fit(need)
                if best is None:
                    continue
                self._start(job, self.nodes[best])
                room = self._room()
                break
            else:
                continue  # the class has no room left in this pass
            if room < self._smallest_job_gpus:
                return
            queue = self._classes.get(klass)
            if queue:
                heapq.heappush(heads, (queue[0], klass))

    def _start(self, job: _Job, node: _Node) -> None:
        self._dequeue(job)
        self.running.add(job.index)
        node.free -= job.trace.gpus
        node.jobs.add(job.index)
        node.used_gpu_percent += job.trace.gpus * self._utilization(job)
        self._refresh_idle(node)
        self._node_changed(node)
        self._job_changed(job.index)
        if job.trace.service is not None and self._rebalance_source(node):
            self._serving_on_cloud += 1
        job.node = node.name
        job.run_started = self.now
        job.wait_seconds += self.now - job.pending_since
        if job.first_started is None:
            job.first_started = self.now
        job.run_id += 1
        left = job.run_overhead + job.trace.duration_seconds - job.progress
        self._push(self.now + left, "finish", (job.index, job.run_id))

    def _keep_for_waiting_job(self, node: _Node) -> None:
        """A node coming up in a pool where a job the deadline rule moved there waits for it
        (``core.reserve``) is kept for that job: the operator taints it as it registers,
        NotReady, before any pod may land (here registration and Ready are one instant). A
        critical pod tolerates the taint and outranks the job in the scheduler's queue, so
        the first critical job waiting that may land there gets it; else the job does, and the
        node stays kept (no other job lands there) while the job runs on it."""
        if node.tier != Tier.ELASTIC or not self._live_annotated:
            return
        view = NodeState(
            name=node.name,
            pool=node.pool,
            gpus=node.gpus,
            cordoned=node.cordoned,
            created_at=self.now,
            interruption_deadline=node.interruption_deadline,
        )
        if not reservable(view, bool(node.jobs), self.now):
            return
        waiting = [
            job
            for job in (self.jobs[i] for i in self._live_annotated if i in self.pending)
            if job.pool == node.pool
            and job.trace.gpus <= node.free
            and _awaits(self._job_view(job))
        ]
        if not waiting:
            return
        taker = min(waiting, key=self._queue_key)
        critical = CRITICALITY_RANK[Criticality.CRITICAL]
        for rank, _, index in self._queue:
            if rank != critical:
                break
            job = self.jobs[index]
            if job.trace.gpus <= node.free and node.pool in self._eligible_pools(job):
                self._start(job, node)
                return
        node.kept_for = self._job_view(taker)[1].key
        self._start(taker, node)

    def _rebalance_source(self, node: _Node) -> bool:
        """A node a serving rebalance may move replicas off: on demand or spot (owned and
        committed nodes are paid whether used or not)."""
        return is_cloud(node.tier) and node.pool not in self._committed_pools

    def _stop(self, job: _Job, *, requeue: bool, pool: str | None = None) -> None:
        """Take a running job off its node. A requeued job keeps the progress of its last
        checkpoint, loses the rest, and spends the restart overhead again when it restarts."""
        node = self.nodes[job.node] if job.node else None
        if node is not None:
            if job.trace.service is not None and self._rebalance_source(node):
                self._serving_on_cloud -= 1
            node.free += job.trace.gpus
            node.jobs.discard(job.index)
            if node.kept_for is not None and not node.jobs:
                node.kept_for = None  # its job has left: the operator lifts the taint
            node.used_gpu_percent -= job.trace.gpus * self._utilization(job)
            if not node.jobs:
                node.used_gpu_percent = 0.0  # no float residue on an empty node
            self._refresh_idle(node)
            self._node_changed(node)
            ran = self.now - job.run_started if job.run_started is not None else 0.0
            self.work_by_tier[node.tier] += ran * job.trace.gpus / 3600
            if requeue:
                reached = job.progress + max(ran - job.run_overhead, 0.0)
                saved = self._checkpointed(job, reached)
                lost = ran - (saved - job.progress)
                job.progress = saved
                # What the operator records on the Job when it stops (never more than true).
                job.saved_estimate = min(
                    job.saved_estimate
                    + banked_seconds(ran, self.restart_seconds, self._known_checkpoint(job)),
                    saved,
                )
            else:
                lost = min(ran, job.run_overhead)
            job.lost_seconds += lost
            if is_cloud(node.tier):
                self.cost_terms["lost_work"] += (
                    lost * job.trace.gpus * self._node_price[node.pool] / node.gpus / 3600
                )
        self.running.discard(job.index)
        job.node = None
        job.run_started = None
        job.run_id += 1
        if requeue and job.trace.service is not None:
            self.serving_disruptions += 1
        if requeue:
            job.run_overhead = self.settings.restart_overhead_seconds
            job.pending_since = job.queued_at = self.now
            job.pool = pool
            self._enqueue(job)
        else:
            self._demand_gpus -= job.trace.gpus
            job.done = True
            job.finished_at = self.now
        self._job_changed(job.index)

    def _utilization(self, job: _Job) -> float:
        value = job.trace.utilization_percent
        return BUSY_UTILIZATION_PERCENT if value is None else value

    def _refresh_idle(self, node: _Node) -> None:
        """A node is idle with no jobs, or with its GPUs used below its pool's threshold (as
        the operator's IdleTracker sees it); the stretch starts when it became so."""
        idle = not node.jobs or node.utilization_percent < self.idle_percent[node.pool]
        if not idle:
            node.idle_since = None
        elif node.idle_since is None:
            node.idle_since = max(self.now, node.ready_at)

    def _node_moves(self, node: _Node) -> tuple[int, int, int, int]:
        """Whether decide()'s consolidation may move every job off ``node`` to spot or owned
        GPUs (a node of an on-demand pool, one of a spot pool) and whether return to core may
        (``_Decider._consolidate``, ``_return_to_core``, ``_may_return``): a necessary
        condition, read from what does not change with time alone."""
        if (
            not node.jobs
            or node.cordoned
            or node.booting
            or node.removed_at is not None
            or not is_cloud(node.tier)
        ):
            return (0, 0, 0, 0)
        traces = [self.jobs[i].trace for i in node.jobs]
        preemptible = [t.criticality == Criticality.PREEMPTIBLE for t in traces]
        consolidates = all(preemptible) and node.pool not in self._committed_pools
        # Return to core: standard Jobs that opt in, preemptible ones that state a checkpoint
        # interval and leave at least half of the node empty; nothing critical.
        returns = not any(preemptible) or 2 * (node.gpus - node.free) <= node.gpus
        for trace, pre in zip(traces, preemptible, strict=True):
            if pre:
                every = trace.checkpoint_seconds
                if every is None:
                    every = self.settings.checkpoint_interval_seconds
                returns = returns and bool(every)
            elif trace.criticality == Criticality.STANDARD:
                returns = returns and self.reads_annotations and trace.return_to_core
            else:
                returns = False
        return (
            int(consolidates and node.tier != Tier.SPOT),
            int(consolidates and node.tier == Tier.SPOT),
            int(returns),
            # Standard work alone may return by preempting preemptible work on owned nodes.
            int(returns and not any(preemptible)),
        )

    def _node_changed(self, node: _Node) -> None:
        """Bring the per-pool tallies and the idle cloud nodes up to date with ``node``."""
        self._nodes_seen = None
        self._view_stale[node.name] = node
        if node.booting and node.removed_at is None:
            self._booting[node.name] = node
        else:
            self._booting.pop(node.name, None)
        tally = self._tally[node.pool]
        if node.counted is not None:
            booting, empty, free, used, preemptible = node.counted
            tally.booting -= booting
            tally.empty -= empty
            tally.busy_free_gpus -= free
            tally.busy_used_gpus -= used
            tally.busy_preemptible_gpus -= preemptible
        cloud = is_cloud(node.tier)
        placeable = None
        if (
            node.removed_at is None
            and not node.cordoned
            and not node.booting
            and node.kept_for is None
        ):
            placeable = node.free
        if placeable != node.placeable:
            self._schedule_changes += 1
            pool_placeable = self._placeable[node.pool]
            if placeable is None:
                pool_placeable.discard(node.name)
            else:
                pool_placeable.put(node.name, placeable)
            self._most_free[node.pool] = pool_placeable.most_free
            node.placeable = placeable
        if self._consolidates:  # else _quiet never reads the tallies
            moves = self._node_moves(node)
            if moves != node.moves:
                for i in range(4):
                    self._moves[i] += moves[i] - node.moves[i]
                node.moves = moves
        if not cloud and node.removed_at is None and not node.cordoned and node.free == node.gpus:
            self._free_core[node.name] = node
        else:
            self._free_core.pop(node.name, None)
        if node.removed_at is not None:
            node.counted = None
            self._noticed.discard(node.name)
            tally.nodes -= 1
            self._cloud_nodes -= self._releasable(node)
            self._idle_cloud.pop(node.name, None)
            self._idle_owned.pop(node.name, None)
            return
        if node.pool in self._powered:
            if not node.jobs and not node.booting and node.idle_since is not None:
                self._idle_owned[node.name] = node
            else:
                self._idle_owned.pop(node.name, None)
        if not cloud:
            # Owned GPUs count while free and schedulable (a machine powering on is not yet).
            counted = (0, 0, 0 if node.cordoned or node.booting else node.free, 0, 0)
        elif node.booting:
            counted = (1, 0, 0, 0, 0)
        elif not node.jobs:
            counted = (0, 1, 0, 0, 0)
        else:
            preemptible = 0
            if node.tier == Tier.ELASTIC:
                preemptible = sum(
                    self.jobs[i].trace.gpus
                    for i in node.jobs
                    if self.jobs[i].trace.criticality == Criticality.PREEMPTIBLE
                )
            counted = (0, 0, node.free, node.gpus - node.free, preemptible)
        booting, empty, free, used, preemptible = counted
        tally.booting += booting
        tally.empty += empty
        tally.busy_free_gpus += free
        tally.busy_used_gpus += used
        tally.busy_preemptible_gpus += preemptible
        node.counted = counted
        if cloud and node.idle_since is not None and node.pool not in self._committed_pools:
            # Committed nodes are never released: idle, they give decide() nothing to do.
            self._idle_cloud[node.name] = node
        else:
            self._idle_cloud.pop(node.name, None)

    def _known_checkpoint(self, job: _Job) -> float:
        """The checkpoint interval the operator is told (the Job's annotation)."""
        every = job.trace.checkpoint_seconds
        return self.settings.checkpoint_interval_seconds if every is None else every

    def _checkpointed(self, job: _Job, reached: float) -> float:
        """The progress saved by the job's last checkpoint at or before ``reached``."""
        every = job.trace.checkpoint_seconds
        if every is None:
            every = self.settings.checkpoint_interval_seconds
        if every <= 0:
            return 0.0
        return min(math.floor(reached / every) * every, job.trace.duration_seconds)

    # ------------------------------------------------------------- operator
    def _snapshot(self) -> ClusterSnapshot:
        if self._nodes_seen is None:
            self._nodes_seen = self._node_views()
        provisioning, nodes = self._nodes_seen
        if self._changed_jobs:
            live_pods = self._live_pods
            live_jobs = self._live_jobs
            for index in self._changed_jobs:
                if index in self.running or index in self.pending:
                    pod, state = self._job_view(self.jobs[index])
                    live_pods.put(index, pod)
                    if pod.serving is None:  # a serving replica is no Job
                        live_jobs.put(index, state)
                else:
                    live_pods.discard(index)
                    live_jobs.discard(index)
            self._changed_jobs.clear()
            self._job_views = (live_pods.values(), live_jobs.values())
        pods, jobs = self._job_views
        serving: tuple[ServingState, ...] = ()
        if self._has_serving:
            pods = pods + tuple(serving_sim.surge_pods(self))
            serving = serving_sim.serving_states(self)
        pools = tuple(map(self._pool_view, self.pools.values(), repeat(provisioning)))
        return ClusterSnapshot(
            taken_at=self.now,
            pools=pools,
            nodes=nodes,
            pods=pods,
            jobs=jobs,
            serving=serving,
        )

    def _pool_view(self, p: PoolState, provisioning: dict[str, int]) -> PoolState:
        """The pool as the operator sees it now; the same object while nothing in it moved."""
        name = p.name
        fields = (
            provisioning.get(name, 0),
            p.spot_price_per_node_hour,
            self._launchable(name),
            tuple(self._survival_fields(name).items()),
        )
        seen = self._pool_views.get(p.name)
        if seen is not None and seen[0] == fields and seen[1].spec is p.spec:
            return seen[1]
        view = PoolState(
            name=p.name,
            spec=p.spec,
            provisioning_nodes=fields[0],
            spot_price_per_node_hour=fields[1],
            launchable=fields[2],
            **dict(fields[3]),
        )
        self._pool_views[p.name] = (fields, view)
        return view

    def _node_views(self) -> tuple[dict[str, int], tuple[NodeState, ...]]:
        """The nodes as the operator sees them, and the nodes on their way per pool. Kept
        (``_nodes_seen``) until a node changes (``_node_changed``) or gets a notice: a node
        stops booting at its "ready" event, so time alone changes nothing here. Only the
        nodes changed since the last call are looked at again (``_view_stale``); the views
        are in the order the nodes came up (decide() reads them by name)."""
        provisioning: dict[str, int] = {}
        for node in self._booting.values():
            if node.ready_at > self.now:
                provisioning[node.pool] = provisioning.get(node.pool, 0) + 1
        views = self._ready_views
        for name, node in self._view_stale.items():
            if node.removed_at is not None or node.ready_at > self.now:
                views.pop(name, None)
                continue
            busy = bool(node.jobs)
            key = (
                node.cordoned,
                node.idle_since,
                busy,
                node.used_gpu_percent,
                node.interruption_deadline,
                node.kept_for,
            )
            if node.view is None or node.view_key != key:
                node.view_key = key
                node.view = NodeState(
                    name=node.name,
                    pool=node.pool,
                    gpus=node.gpus,
                    cordoned=node.cordoned,
                    created_at=node.launched_at,
                    idle_since=node.idle_since,
                    utilization_percent=node.utilization_percent if busy else 0.0,
                    interruption_deadline=node.interruption_deadline,
                    reserved_for=node.kept_for,
                )
            views[name] = node.view
        self._view_stale.clear()
        return provisioning, tuple(views.values())

    def _job_changed(self, index: int) -> None:
        """The job arrived, started, stopped or moved: its view is rebuilt for the next
        snapshot, and the annotated jobs that run or wait are brought up to date."""
        self._changed_jobs.add(index)
        service = self.jobs[index].trace.service
        if service is not None:
            running = int(index in self.running)
            counted = (int(running or index in self.pending), running)
            before = self._replica_counted.get(index, (0, 0))
            if counted != before:
                self._replica_counted[index] = counted
                tally = self._replicas.setdefault(service, [0, 0])
                tally[0] += counted[0] - before[0]
                tally[1] += counted[1] - before[1]
                if not tally[0]:
                    del self._replicas[service]
        if index in self._annotated:
            if index in self.running or index in self.pending:
                self._live_annotated.add(index)
            else:
                self._live_annotated.discard(index)

    def _pending_since_first(self) -> float:
        """The earliest moment a pending job's pods have waited since (inf: none waits). The
        queue is sorted by criticality rank, then that moment (``_queued_since``)."""
        first = math.inf
        queue = self._queue
        if not queue:
            return first  # most steps: every job runs
        for rank in self._ranks:
            at = queue.bisect_left((rank, -math.inf, -1))
            if at < len(queue) and queue[at][0] == rank:
                first = min(first, queue[at][1])
        return first

    def _pending_ready_next(self) -> float:
        """The first moment after now at which a pending job's grace period runs out (inf:
        none). Pending since earlier than a second before the grace period reaches back ran
        out already, whatever the rounding."""
        out = math.inf
        if not self._queue:
            return out
        for rank in self._ranks:
            start = (rank, self.now - self.grace - 1.0, -1)
            for key_rank, since, _ in self._queue.irange(start):
                if key_rank != rank:
                    break
                ready = since + self.grace
                if ready > self.now:
                    out = min(out, ready)
                    break
        return out

    def _job_view(self, job: _Job) -> tuple[GPUPod, JobState]:
        """The job as the operator sees it; rebuilt only when it changed (run_id moves on
        every start and stop)."""
        cached = self._views.get(job.index)
        if (
            cached is not None
            and cached[0] == job.run_id
            and cached[1].pool == job.pool
            and cached[1].node == job.node  # a rebalanced replica moves while it runs
            and cached[2].restarts == job.restarts
        ):
            return cached[1], cached[2]
        crit = job.trace.criticality
        trace = job.trace
        used = self._utilization(job)
        host = self.nodes.get(job.node) if job.node else None
        # Per-pod DCGM utilization, idle from the start of the run when below the threshold.
        idle = host is not None and used < self.idle_percent[host.pool]
        pod = GPUPod(
            namespace="sim",
            name=job.trace.name,
            gpus=job.trace.gpus,
            criticality=crit,
            node=job.node,
            job=None if trace.service is not None else f"sim/{job.trace.name}",
            pool=job.pool,
            pending_since=self._queued_since(job),
            started_at=job.run_started,
            gpu_models=job.trace.gpu_models,
            idle_timeout_seconds=trace.idle_timeout_seconds if self.reads_annotations else None,
            idle_since=job.run_started if idle else None,
            utilization_percent=used if host is not None else None,
            serving=serving_sim.workload_of(job),
        )
        deadline = trace.deadline_at if self.reads_annotations else None
        state = JobState(
            namespace="sim",
            name=job.trace.name,
            criticality=crit,
            gpus_per_pod=job.trace.gpus,
            pool=job.pool,
            started_at=job.run_started,
            pinned_by_operator=job.pool is not None,
            gpu_models=job.trace.gpu_models,
            # The operator knows each job's checkpoint interval (its annotation).
            checkpoint_seconds=(
                self.settings.checkpoint_interval_seconds
                if job.trace.checkpoint_seconds is None
                else job.trace.checkpoint_seconds
            ),
            created_at=trace.arrival_seconds,
            deadline_at=deadline,
            expected_duration_seconds=(
                (
                    trace.expected_duration_seconds
                    or (None if deadline is None else trace.duration_seconds)
                )
                if self.reads_annotations
                else None
            ),
            progress_seconds=job.saved_estimate,
            restarts=job.restarts,
            return_to_core=trace.return_to_core and self.reads_annotations,
        )
        self._views[job.index] = (job.run_id, pod, state)
        return pod, state

    def _quiet(self) -> bool:
        """Whether decide() has nothing to do now: no pending pod past its grace period, no
        interruption notice, no cloud node idle for its idleFor that idle release may take
        (empty, or running only preemptible Jobs), nothing consolidation, return to core, a
        serving rebalance, a deadline or idle reclaim could move. Then it plans nothing and
        asks for no recheck (``check_quiet`` proves it in tests), so the tick is skipped and
        costs no snapshot."""
        if self._noticed:
            return False
        if self._consolidates:
            # Consolidation moves preemptible work off on-demand nodes to spot or to owned
            # nodes idle for their idleFor, off spot nodes to such owned nodes; return to
            # core moves work to owned GPUs free now.
            off_on_demand, off_spot, returns, firm_returns = self._moves
            if off_on_demand:
                return False
            if off_spot and self._settled_core():
                return False
            if returns and serving_sim.owned_gpus_free(self):
                return False
            if firm_returns and self._preemptible_on_owned():
                return False
        if self._rebalances and self._serving_on_cloud and serving_sim.owned_gpus_free(self):
            return False  # a rebalance may move a replica
        for index in self._live_annotated:
            if index in self.pending:
                return False
            if self._rule_may_fire(self.jobs[index]):
                return False
        if self._pending_since_first() + self.grace <= self.now and not self._pending_on_the_way():
            return False
        drainable = self._drainable
        for node in self._idle_cloud.values():
            assert node.idle_since is not None
            if node.idle_since + self.idle_for[node.pool] <= self.now and all(
                drainable[i] for i in node.jobs
            ):
                return False  # idle release may take it (a busy node only if drainable)
        return not any(self._power_off_due(node) for node in self._idle_owned.values())

    def _pending_on_the_way(self) -> bool:
        """Whether decide() places every pod pending past its grace period on a node on its
        way (launched, not Ready yet), and so buys nothing and plans nothing for them, under
        a policy that does nothing else for pending pods (``_pending_only_buys``).

        The scheduler has left each pending pod no room on the nodes that are up, and
        decide() sees the same free GPUs there (less on nodes under a notice), so it tries
        them all on the nodes on their way, as ``core.decide`` does: in the scheduler's own
        order (``_scheduler_order``: criticality, the longest pending, the name; firm work
        before preemptible work is the same order), each on the fullest such node of the
        first of its pools (``placement_order``, ``_eligible_pools``) that has room. Nodes of
        one pool on their way differ only by their free GPUs, so counts by free GPUs tell the
        same."""
        if not self._pending_only_buys or not self._booting:
            return False
        on_the_way: dict[str, list[int]] = {}  # per pool, its nodes on their way by free GPUs
        for node in self._booting.values():
            if node.ready_at > self.now:
                counts = on_the_way.get(node.pool)
                if counts is None:
                    per_node = self.pools[node.pool].spec.gpu.per_node
                    counts = on_the_way[node.pool] = [0] * (per_node + 1)
                counts[-1] += 1
        now = self.now
        grace = self.grace
        waiting: list[tuple[int, float, str, int]] = []
        for index in self.pending:
            job = self.jobs[index]
            since = self._queued_since(job)
            if now - since < grace:
                continue  # as decide() leaves it out (``_collect_pending``)
            if job.pool is not None:
                return False  # a pinned pod: decide() may move its Job to owned nodes
            trace = job.trace
            rank = CRITICALITY_RANK[trace.criticality]
            waiting.append((rank, since, trace.name, index))
        waiting.sort()  # the index last: the snapshot's order among equal names
        for _, _, _, index in waiting:
            job = self.jobs[index]
            need = job.trace.gpus
            for pool in self._eligible_pools(job):
                counts = on_the_way.get(pool)
                if counts is None:
                    continue
                for free in range(need, len(counts)):
                    if counts[free]:
                        counts[free] -= 1
                        counts[free - need] += 1
                        break
                else:
                    continue
                break
            else:
                return False  # decide() buys a node for it, or says why not
        return True

    def _rule_may_fire(self, job: _Job) -> bool:
        """Whether idle reclaim may take the running ``job`` now (as ``_Decider._reclaim_one``
        tests it), or a deadline may move it off spot (any preemptible Job with a deadline
        on a spot node: its slack is left to decide())."""
        pod, state = self._job_view(job)
        timeout = pod.idle_timeout_seconds
        if (
            timeout is not None
            and pod.idle_since is not None
            and not self.now - pod.idle_since < timeout
        ):
            return True
        if state.deadline_at is not None and state.criticality == Criticality.PREEMPTIBLE:
            host = self.nodes.get(job.node) if job.node else None
            if host is not None and host.tier == Tier.ELASTIC and job.pool is not None:
                # A Job the rule put on on-demand may go back to spot once spot has run.
                return any(self._tally[p].nodes for p in self.spot_offsets)
            return host is None or host.tier == Tier.SPOT
        return False

    def _preemptible_on_owned(self) -> bool:
        """Whether an owned node runs preemptible work (return to core may preempt it)."""
        for node in self.nodes.values():
            if node.tier == Tier.CORE and node.removed_at is None:
                jobs = self.jobs
                if any(jobs[i].trace.criticality == Criticality.PREEMPTIBLE for i in node.jobs):
                    return True
        return False

    def _settled_core(self) -> bool:
        """Whether an owned node has had every GPU free for its pool's idleFor."""
        for node in self._free_core.values():
            since = node.idle_since
            if since is not None and since <= self.now - self.idle_for[node.pool]:
                return True
        return False

    def _tick(self) -> Plan:
        self.ticks += 1
        quiet = self._quiet()
        if quiet and not self.check_quiet:
            self.recheck_at = None
            return Plan(decided_at=self.now)
        self.decisions += 1
        plan = decide(self._snapshot(), self.policy, self.now)
        if quiet and (plan.actions or plan.recheck_at is not None):
            raise AssertionError(
                f"{self.name} at {self.now:g} s: a tick taken for quiet acts: "
                + "; ".join(a.reason for a in plan.actions)
                + f" (recheck at {plan.recheck_at})"
            )
        self.recheck_at = plan.recheck_at
        by_name: Callable[[str], _Job | None] = self._live_by_name
        if not self._unique_names and any(
            isinstance(a, MoveJob | ReclaimIdle) for a in plan.actions
        ):
            # A trace that repeats a name: the job of that name as a map of them all gives.
            live = {
                f"sim/{j.trace.name}": j
                for j in (self.jobs[i] for i in self.running | self.pending)
            }
            by_name = live.get
        for action in plan.actions:
            if isinstance(action, ScaleUp):
                pool = self.pools[action.pool]
                if not self._launchable(pool.name):
                    continue  # decide() plans none there; a launch would fail for capacity
                self.scale_ups += 1  # a power-on counts as one too
                boot = self.settings.boot_seconds_by_pool.get(
                    pool.name, self._default_boot_seconds(pool)
                )
                for _ in range(action.nodes):
                    self._launch(pool, ready_at=self.now + boot)
            elif isinstance(action, ReleaseNode):
                node = self.nodes.get(action.node)
                if node is None:
                    continue
                for index in sorted(node.jobs):
                    self._stop(self.jobs[index], requeue=True, pool=self.jobs[index].pool)
                self.releases += 1
                self._remove(node)
            elif isinstance(action, ReclaimIdle):
                job = by_name(f"{action.namespace}/{action.name}")
                if job is not None and job.node is not None:
                    self._reclaim(job)
            elif isinstance(action, MoveJob):
                job = by_name(action.job_key)
                if job is None:
                    continue
                if action.kind == ActionKind.DEADLINE:
                    target = self.pools.get(action.to_pool or "")
                    if target is not None and target.spec.tier == Tier.SPOT:
                        self.deadline_returns += 1
                    else:
                        self.deadline_moves += 1
                self.preemptions += 1
                job.restarts += 1
                if job.node is not None:
                    self._stop(job, requeue=True, pool=action.to_pool)
                else:
                    waits = job.index in self.pending  # not if reclaimed by this plan
                    if waits:
                        self._dequeue(job)
                    job.pool = action.to_pool
                    job.queued_at = self.now  # its pods are recreated
                    if waits:
                        self._enqueue(job)
                    self._job_changed(job.index)
            elif isinstance(action, RebalanceReplica):
                serving_sim.start(self, action)
            elif isinstance(action, HandleInterruption):
                node = self.nodes.get(action.node)
                if node is None:
                    continue
                node.cordoned = True
                self._node_changed(node)
                for index in sorted(node.jobs):
                    self._stop(self.jobs[index], requeue=True, pool=self.jobs[index].pool)
        return plan

    def _live_by_name(self, key: str) -> _Job | None:
        """The job the operator names ``sim/<trace name>`` when it ran or waited as the
        tick began (a job reclaimed by this tick's plan still counts), with unique names."""
        index = self._by_key.get(key)
        if index is None:
            return None
        job = self.jobs[index]
        if index in self.running or index in self.pending or job.reclaimed_at == self.now:
            return job
        return None

    def _default_boot_seconds(self, pool: PoolState) -> float:
        """Launch (or power-on) to Ready: an owned machine powered on takes its pool's
        power.bootTime, a cloud node the provisioning delay."""
        if pool.name in self._powered and pool.spec.power is not None:
            return parse_duration_seconds(pool.spec.power.boot_time)
        return self.settings.provisioning_delay_seconds

    def _power_off_due(self, node: _Node) -> bool:
        """Whether decide() may power the idle owned machine off now: no jobs for its
        power.idleFor, and its pool above minNodes/minPoweredOn."""
        assert node.idle_since is not None
        if node.idle_since + self.idle_for[node.pool] > self.now:
            return False
        return self._tally[node.pool].nodes > held_nodes(self.pools[node.pool].spec)

    def _reclaim(self, job: _Job) -> None:
        """The operator suspended an idle Job: what it held idle, and what it would still
        have held (its run to the end), are counted; its user does not come back for it."""
        node = self.nodes[job.node or ""]
        assert job.run_started is not None
        left = job.run_overhead + job.trace.duration_seconds - job.progress
        ends_at = job.run_started + left
        gpu_hour = self._node_price[node.pool] / node.gpus
        self.reclaimed.workloads += 1
        self.reclaimed.idle_gpu_hours += job.trace.gpus * (self.now - job.run_started) / 3600
        freed = job.trace.gpus * max(ends_at - self.now, 0.0) / 3600
        self.reclaimed.freed_gpu_hours += freed
        self.reclaimed.freed_dollars += freed * gpu_hour
        self._stop(job, requeue=False)
        job.reclaimed_at = self.now

    def _account(self, until: float) -> None:
        """Split the cloud bill from the last accounted moment to ``until`` into the causes
        ``--explain`` names; the cluster did not change in between."""
        dt = (until - self._accounted_to) / 3600
        self._accounted_to = until
        if dt <= 0:
            return
        terms = self.cost_terms
        busy: list[tuple[float, int, int, float]] = []
        spot_gpu_price = self._spot_gpu_price_while_unavailable()
        node_price = self._node_price
        for name, tally, per_node, model in self._accounted_cloud_pools:
            if not tally.nodes:
                continue
            price = node_price[name]
            gpu_price = price / per_node
            # A zero term would leave its sum as it is: most pools add one or two terms.
            if tally.booting:
                terms["provisioning"] += tally.booting * price * dt
            if tally.empty:
                terms["idle_nodes"] += tally.empty * price * dt
            if tally.busy_free_gpus:
                terms["half_empty_nodes"] += tally.busy_free_gpus * gpu_price * dt
            if tally.busy_used_gpus:
                # Preemptible work on on-demand while the spot pools of its model had no
                # capacity: what it paid above the spot price is spot unavailability's.
                spot = spot_gpu_price.get(model)
                premium = max(gpu_price - spot, 0.0) if spot is not None else 0.0
                pre = tally.busy_preemptible_gpus if premium else 0
                busy.append((gpu_price, tally.busy_used_gpus, pre, premium))
        if not busy:
            return
        # Owned GPUs that sat free while cloud GPUs worked: the dearest cloud work first.
        free_core = sum(t.busy_free_gpus for t in self._accounted_owned_tallies if t.nodes)
        for gpu_price, gpus, pre, premium in sorted(busy, reverse=True):
            overlap = min(free_core, gpus)
            free_core -= overlap
            if overlap:
                terms["work_while_owned_gpus_free"] += overlap * gpu_price * dt
            unavailable = min(pre, gpus - overlap) * premium * dt
            if unavailable:
                terms["spot_unavailable"] += unavailable
            terms["cloud_work"] += (gpus - overlap) * gpu_price * dt - unavailable

    def _spot_gpu_price_while_unavailable(self) -> dict[str, float]:
        """GPU model -> the cheapest spot price per GPU-hour of its spot pools, for the models
        whose every spot pool cannot launch now (none: spot had capacity or no availability
        series is replayed)."""
        if self.settings.spot_availability is None:
            return {}
        cheapest: dict[str, float] = {}
        launchable: set[str] = set()
        for name, pool in self.pools.items():
            if pool.spec.tier != Tier.SPOT or pool.spec.max_nodes <= 0:
                continue
            model = pool.spec.gpu.model
            per_gpu = self._node_price[name] / pool.spec.gpu.per_node
            cheapest[model] = min(cheapest.get(model, per_gpu), per_gpu)
            if self._launchable(name):
                launchable.add(model)
        return {m: p for m, p in cheapest.items() if m not in launchable}

    def _cost_terms(self) -> dict[str, float]:
        terms = dict(self.cost_terms)
        terms["cloud_work"] -= terms["lost_work"]
        return terms

    def _remove(self, node: _Node) -> None:
        node.removed_at = self.now
        self.removed.append(node)
        del self.nodes[node.name]
        self._node_changed(node)

    # ----------------------------------------------------------------- time
    def _sample(self) -> None:
        node_price = self._node_price
        for gpus_series, cost_series, pools in self._sampled_tiers:
            gpus = 0
            cost = 0.0
            for name, tally, per_node, powered_spec in pools:
                if powered_spec is not None:
                    gpus += tally.nodes * per_node
                    cost += pool_hour_dollars(powered_spec, tally.nodes)
                elif tally.nodes:
                    gpus += tally.nodes * per_node
                    cost += tally.nodes * node_price[name]
            gpus_series.append(gpus)
            cost_series.append(cost)
        self.series["t"].append(self.now / 3600)
        self.series["demand_gpus"].append(self._demand_gpus)

    def _releasable(self, node: _Node) -> bool:
        """A cloud node the operator may release: what keeps the simulation ticking (a
        committed node is billed until the trace's work is done, like an owned one)."""
        return is_cloud(node.tier) and node.pool not in self._committed_pools

    def _needs_ticks(self) -> bool:
        return bool(self.pending) or self._cloud_nodes > 0 or self._may_power_off()

    def _may_power_off(self) -> bool:
        """Whether an idle powered-on owned machine may be powered off, now or later."""
        return any(
            self._tally[node.pool].nodes > held_nodes(self.pools[node.pool].spec)
            for node in self._idle_owned.values()
        )

    def _next_wake(self) -> float:
        """When the operator must look again although nothing happened: a heartbeat while
        there is work or cloud capacity, and the moment an idle node's idleFor or a pending
        pod's grace period runs out. Between events and wake-ups decide() would see the same
        cluster and decide the same, so the simulation skips those ticks."""
        if not self.operator_can_act:
            return math.inf
        if not self._needs_ticks():
            return self._rules_due()  # an idle-timeout may still run out on owned GPUs
        wake = self.now + self.heartbeat
        for node in (*self._idle_cloud.values(), *self._idle_owned.values()):
            assert node.idle_since is not None
            idle_for = self.idle_for[node.pool]
            if node.idle_since + idle_for > self.now:
                wake = min(wake, node.idle_since + idle_for)
        if self.pending and self.settings.spot_availability is not None:
            # Spot capacity may come back at the next sample of the availability series.
            gap = self.settings.spot_availability.gap_seconds
            wake = min(wake, (math.floor(self.now / gap) + 1) * gap)
        if self.recheck_at is not None and self.recheck_at > self.now:
            wake = min(wake, self.recheck_at)
        wake = min(wake, self._pending_ready_next())
        return min(wake, self._rules_due())

    def _rules_due(self) -> float:
        """The first moment a deadline or idle-reclaim rule may fire for a job as things
        stand (the real operator looks every interval; the simulation only then)."""
        due = math.inf
        for index in self._live_annotated:
            job = self.jobs[index]
            pod, state = self._job_view(job)
            if pod.idle_timeout_seconds is not None and pod.idle_since is not None:
                due = min(due, pod.idle_since + pod.idle_timeout_seconds)
            slack = slack_of(
                state,
                job.run_started,
                self.now,
                restart_seconds=self.restart_seconds,
                # As decide() counts it: a job on no node has nothing to stop.
                stop_seconds=self.stop_seconds if job.node else 0.0,
            )
            if slack is None or state.criticality != Criticality.PREEMPTIBLE:
                continue
            host = self.nodes.get(job.node) if job.node else None
            if host is None:
                if must_start_on_demand(slack, state.checkpoint_seconds, self.deadline_margin):
                    continue  # already due: the tick that follows the next event acts
                # Slack shrinks one for one while it waits; the rule fires at the margin.
                margin = self.deadline_margin + first_checkpoint_seconds(
                    slack, state.checkpoint_seconds
                )
                due = min(due, self.now + max(slack.seconds - margin, 0.0))
            elif host.tier == Tier.SPOT and not must_leave_spot(slack, self.deadline_margin):
                due = min(due, self.now + max(slack.seconds - self.deadline_margin, 0.0))
        return due

    def run(self) -> PolicyResult:
        self._add_core_nodes()
        for pool in self.spot_offsets:
            self._schedule_drop(pool)
        for pool in self._price_steps:
            self._schedule_price_change(pool)
        for index, tj in enumerate(self.trace):
            self.jobs.append(_Job(index, tj, tj.arrival_seconds, tj.arrival_seconds))
            if tj.service is not None:
                self.by_trace_name[tj.name] = self.jobs[-1]
            self._push(tj.arrival_seconds, "arrive", index)
        trace_end = max((j.arrival_seconds + j.duration_seconds for j in self.trace), default=1.0)
        next_tick = 0.0
        next_sample = 0.0
        wake = 0.0
        dirty = True
        outstanding = len(self.trace)
        while self.now <= self.horizon:
            left = outstanding - self.reclaimed.workloads
            if left == 0 and not self._cloud_nodes:
                break
            next_event = self.events[0][0] if self.events else math.inf
            if not self.operator_can_act:
                due = math.inf
            else:
                # The operator's timer fires on its grid; after a quiet spell the next tick is
                # the first grid point from now, never one in the past.
                due = max(self._on_grid(max(next_tick, self.now if dirty else wake)), self.now)
            t = min(next_event, due, next_sample)
            if t == math.inf or t > self.horizon:
                break
            if t < self.now:
                raise AssertionError(f"simulated clock ran backwards: {t} < {self.now}")
            self._account(t)
            self.now = t
            if t == next_sample:
                self._sample()
                next_sample += SERIES_STEP_SECONDS
                if self.progress is not None:
                    # A trace of jobs that all end at 0 (the loaders skip 0 s jobs; a caller
                    # of the engine may not) is all simulated from the start.
                    self.progress(min(1.0, t / trace_end) if trace_end > 0 else 1.0)
            while self.events and self.events[0][0] <= t:
                _, _, kind, payload = heapq.heappop(self.events)
                outstanding -= self._handle(kind, payload)
                dirty = True
            self._schedule()
            if t >= due:
                plan = self._tick()
                self._schedule()
                dirty = bool(plan.actions)
                next_tick = t + self.interval
                wake = self._next_wake()
        return self._result()

    def _on_grid(self, at: float) -> float:
        if at == math.inf:
            return math.inf
        # A hair of tolerance: t + interval must not round up to the grid point after it.
        return math.ceil(at / self.interval - 1e-9) * self.interval

    def _handle(self, kind: str, payload: object) -> int:
        """Process one event; returns 1 when a job finished."""
        if kind == "arrive":
            assert isinstance(payload, int)
            self._enqueue(self.jobs[payload])
            self._demand_gpus += self.jobs[payload].trace.gpus
            self._job_changed(payload)
            return 0
        if kind == "finish":
            assert isinstance(payload, tuple)
            finished: int = payload[0]
            run_id: int = payload[1]
            job = self.jobs[finished]
            if job.run_id != run_id or job.done:
                return 0
            self._stop(job, requeue=False)
            return 1
        if kind == "ready":
            ready = self.nodes.get(str(payload))
            if ready is not None:
                ready.booting = False
                self._keep_for_waiting_job(ready)
                self._node_changed(ready)
            return 0
        if kind == "surge":
            assert isinstance(payload, int)
            serving_sim.ready(self, payload)
            return 0
        if kind == "drop":
            assert isinstance(payload, tuple)
            self._drop(payload[0], payload[1])
            return 0
        if kind == "price":
            self._price_changed(str(payload))
            return 0
        node = self.nodes.get(str(payload))
        if node is None:
            return 0
        if kind == "notice":
            if node.interruption_deadline is not None:
                return 0
            self.interruptions += 1
            node.interruption_deadline = self.now + INTERRUPTION_NOTICE_SECONDS
            if WINDOW_AGE_SECONDS <= self.now - node.launched_at < 2 * WINDOW_AGE_SECONDS:
                self._spot_seen.setdefault(node.pool, [0, 0])[1] += 1
            self._nodes_seen = None
            self._view_stale[node.name] = node
            self._noticed.add(node.name)
            self._push(node.interruption_deadline, "reclaim", node.name)
        elif kind == "reclaim":
            for index in sorted(node.jobs):
                self._stop(self.jobs[index], requeue=True, pool=self.jobs[index].pool)
            self._remove(node)
        return 0

    # ---------------------------------------------------------------- result
    def _result(self) -> PolicyResult:
        end = self.now
        cost: dict[str, float] = {t.value: 0.0 for t in Tier}
        billed = 0.0
        owned_power = owned_power_window = 0.0
        window_start = min((j.arrival_seconds for j in self.trace), default=0.0)
        window_end = max((j.arrival_seconds + j.duration_seconds for j in self.trace), default=0.0)
        minimum = self.settings.billing_minimum_seconds
        for node in list(self.nodes.values()) + self.removed:
            stop = node.removed_at if node.removed_at is not None else end
            seconds = max(stop - node.launched_at, 0.0)
            steps = self._price_steps.get(node.pool)
            if steps is not None:
                # Each interval at the price in force then; the minimum at the launch's prices.
                ran = steps.node_dollars(node.launched_at, node.launched_at + seconds)
                if seconds < minimum:
                    seconds = minimum
                    paid = steps.node_dollars(node.launched_at, node.launched_at + minimum)
                    self.cost_terms["billing_minimum"] += paid - ran
                    ran = paid
                cost[node.tier] += ran
                billed += seconds / 3600 * node.gpus
                continue
            if is_cloud(node.tier) and seconds < minimum:
                self.cost_terms["billing_minimum"] += (minimum - seconds) * node.price / 3600
                seconds = minimum
            hours = seconds / 3600
            cost[node.tier] += hours * node.price
            billed += hours * node.gpus
            if node.pool in self._powered:
                owned_power += hours * node.price
                inside = min(stop, window_end) - max(node.launched_at, window_start)
                owned_power_window += max(inside, 0.0) / 3600 * node.price
        for name in sorted(self._powered):
            # Every machine of a powered pool costs its capex and ops, on or off.
            spec = self.pools[name].spec
            parts = core_node_cost(spec)
            sunk = spec.max_nodes * (parts.capex_per_hour + parts.ops_per_hour)
            cost[Tier.CORE.value] += sunk * end / 3600
        for index in list(self.running):
            job = self.jobs[index]
            host = self.nodes.get(job.node) if job.node else None
            if host is not None:
                ran = end - job.run_started if job.run_started is not None else 0.0
                self.work_by_tier[host.tier] += ran * job.trace.gpus / 3600
        waits: dict[str, list[float]] = {c.value: [] for c in Criticality}
        for job in self.jobs:
            if job.first_started is not None:
                waits[job.trace.criticality].append(job.wait_seconds)
        unfinished = sum(1 for j in self.jobs if not j.done)
        gpu_hours = {k: v for k, v in self.work_by_tier.items()}
        gpu_hours["billed"] = billed
        gpu_hours["lost"] = sum(j.lost_seconds * j.trace.gpus for j in self.jobs) / 3600
        # How late each class finished against arriving and running at once (inf: never).
        lateness: dict[str, float] = {c.value: 0.0 for c in Criticality}
        for j in self.jobs:
            finished = math.inf if j.finished_at is None else j.finished_at
            late = finished - j.trace.arrival_seconds - j.trace.duration_seconds
            lateness[j.trace.criticality] = max(lateness[j.trace.criticality], late)
        deadlines = DeadlineStats(
            on_demand_moves=self.deadline_moves, returns_to_spot=self.deadline_returns
        )
        for j in self.jobs:
            due = j.trace.deadline_at
            if due is not None:
                deadlines.jobs += 1
                deadlines.missed += j.finished_at is None or j.finished_at > due + 1e-6
        return PolicyResult(
            name=self.name,
            total_cost_dollars=sum(cost.values()),
            cost_by_tier_dollars=cost,
            gpu_hours=gpu_hours,
            wait_seconds={
                c: {"p50": percentile(w, 50), "p95": percentile(w, 95)} for c, w in waits.items()
            },
            preemptions=self.preemptions,
            spot_interruptions=self.interruptions,
            unfinished_jobs=unfinished,
            jobs=len(self.jobs),
            scale_ups=self.scale_ups,
            releases=self.releases,
            ticks=self.ticks,
            end_seconds=end,
            series=self.series,
            cost_terms_dollars=self._cost_terms(),
            max_lateness_seconds=lateness,
            deadlines=deadlines,
            idle_reclaim=self.reclaimed,
            rebalances=self.serving.completed,
            serving_disruptions=self.serving_disruptions,
            owned_power_dollars=owned_power,
            owned_power_window_dollars=owned_power_window,
        )
