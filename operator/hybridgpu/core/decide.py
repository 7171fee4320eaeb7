"""``decide(snapshot, policy, now) -> Plan``: the whole policy of the operator, pure.

Order (DESIGN.md, "The control loop"):
1. interruption notices: cordon + drain, the node's Jobs requeue;
2. pending GPU demand in criticality order then age: critical/standard work takes free
   core GPUs, else preempts preemptible Jobs on core, before any cloud node is filled or
   bought; then free capacity of the tier's cloud pools; a pod that still fits nowhere waits
   when owned GPUs free up for it within its waitBudget (core/forecast.py), else the pods
   left are packed across every pool they may grow (core/shapes.py), capped by maxNodes,
   maxNodesPerTick and the budget; the pods of a gang (a JobSet) get a place, or wait for
   owned GPUs, all at once or none of them do;
3. consolidation: preemptible Jobs on elastic nodes move to spot (or to idle owned nodes)
   when it pays; standard Jobs that opt in return from the cloud to owned GPUs; serving
   replicas move to free owned GPUs by surge (core/rebalance.py);
4. idle release of elastic/spot nodes within the disruption budget, never when blind;
5. GPU health: nodes with XID errors are cordoned.

The capacity ledger below holds each pool's nodes by free GPUs (``core.placement.FreeGPUs``)
and places pods with the placer the simulator and the planner use too (``core.placement``):
the same pool order, the same best fit.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import attrgetter

from hybridgpu.core.cost import (
    held_nodes,
    is_cloud,
    marginal_gpu_hour_dollars,
    node_hour_dollars,
    paid_whether_used,
    power_node_hour_dollars,
    powered,
)
from hybridgpu.core.deadline import (
    BOOT_ALLOWANCE_SECONDS,
    RETURN_ROOM_SECONDS,
    WINDOW_AGE_SECONDS,
    Slack,
    may_be_moved,
    may_return_to_spot,
    must_leave_spot,
    must_start_on_demand,
    slack_of,
    spot_lasts,
)
from hybridgpu.core.forecast import NodeView, OwnedForecast
from hybridgpu.core.gang_preempt import preempt_for_gang
from hybridgpu.core.gang_wait import wait_for_gang
from hybridgpu.core.placement import FreeGPUs, placement_order
from hybridgpu.core.rebalance import rebalance_serving
from hybridgpu.core.reserve import (
    RESERVATION_SECONDS,
    awaits_reserved_node,
    reservable,
    reservation_ends,
)
from hybridgpu.core.shapes import Shape, pack
from hybridgpu.models.actions import (
    Action,
    ActionKind,
    Blocked,
    CordonUnhealthy,
    GangPlacement,
    GangState,
    HandleInterruption,
    MoveJob,
    Plan,
    ReclaimIdle,
    ReleaseNode,
    ReserveNode,
    ScaleUp,
)
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import GPUPoolSpec, Tier, serves_models
from hybridgpu.models.snapshot import (
    CRITICALITY_RANK,
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    NodeState,
    PoolState,
)

# Plain constants: reading enum members through their class is slow on hot paths.
CORE = Tier.CORE.value
ELASTIC = Tier.ELASTIC.value
SPOT = Tier.SPOT.value
PREEMPTIBLE = Criticality.PREEMPTIBLE

# Preemption compares victims on at most this many core nodes that could host the pod (in
# name order): the cheapest of 64 is nearly always as cheap as the best of thousands, and it
# keeps a tick on a 10,000-node cluster well under a second.
PREEMPTION_SEARCH_NODES = 64

# Times a packing the scheduler would leave pods out of is packed again for them
# (``_Decider._buy_for_the_scheduler``): each round costs one more pass over the pods placed
# on nodes on their way.
REPAIR_ROUNDS = 3

# A node that is not Ready yet, or whose GPUs are not reported yet, counts as capacity on
# its way for this long after it appears.
JOINING_GRACE_SECONDS = 600.0
_NO_PENDING_GPUS: dict[str, int] = {c.value: 0 for c in Criticality}
"""``Plan.pending_gpus`` before any pod is counted (copied per tick)."""

# A cloud node NotReady this long is replaced (drain, terminate, the scale-up follows).
NOT_READY_GRACE_SECONDS = 900.0
# A Ready cloud node that still reports no GPUs this long after it appeared (its device
# plugin never came up, a driver failed to load) is replaced the same way.
NO_GPUS_GRACE_SECONDS = 900.0
# More than this share of a pool NotReady (or without GPUs) at once looks like a partition
# (or a device plugin missing from the pool's nodes), not broken machines: none of them is
# replaced, since their replacements would fare no better (Karpenter's node repair stops at
# 20%).
NOT_READY_MAX_SHARE = 0.5
CORDONED_FOR_XID = "xid-errors"


@dataclass(slots=True)
class _Demand:
    """One pod's worth of GPUs that needs a place."""

    gpus: int
    criticality: Criticality
    since: float
    key: str
    pool: str | None
    job: str | None
    models: tuple[str, ...] = ()
    """GPU models it may run on; empty: any."""
    waiting_since: float | None = None
    """Since when it has waited for a place, when not ``since`` (a Job preempted now);
    None: since ``since``."""
    free_order: list[_PoolLedger] | None = None
    """The pools whose free capacity it may use (``_free_order``), once known."""
    gang: str | None = None
    """The gang it belongs to: its pods are placed all or none (``_place_gang``)."""
    wait_until: float | None = None
    """``_Decider._wait_until``, once found."""

    @property
    def order(self) -> tuple[int, int, float, str]:
        """Sort key: criticality rank, largest first, oldest first, name. Made when sorting,
        not kept: a tick holds up to 100,000 demands, and each kept tuple is one more
        object for the garbage collector to walk."""
        return (CRITICALITY_RANK[self.criticality], -self.gpus, self.since, self.key)


@dataclass(slots=True)
class _Pass:
    """One ``_place_on_the_way`` pass: its pods, the node on its way each got (None: left
    out), the pools whose nodes those pods may take, and the pools whose nodes they took."""

    demands: list[_Demand]
    placed: list[str | None]
    may_use: frozenset[str]
    used: frozenset[str]


_by_key = attrgetter("key")
_by_since = attrgetter("since")
_by_gpus = attrgetter("gpus")
_RANKS = range(max(CRITICALITY_RANK.values()) + 1)


def _in_order(demands: Iterable[_Demand]) -> list[_Demand]:
    """``demands`` sorted by ``_Demand.order``, in stable passes from its last field to its
    first: thousands of pods of one size and age would otherwise be told apart by comparing
    tuples field by field down to their names (7 ms against 3 ms for the 4,645 pending pods
    of the 1,000-node bench cluster)."""
    order = sorted(demands, key=_by_key)
    order.sort(key=_by_since)
    order.sort(key=_by_gpus, reverse=True)
    by_rank: list[list[_Demand]] = [[] for _ in _RANKS]
    for demand in order:
        by_rank[CRITICALITY_RANK[demand.criticality]].append(demand)
    return [demand for same_rank in by_rank for demand in same_rank]


def _left_out(demands: list[_Demand], placed: list[str | None]) -> list[_Demand]:
    """The pods of ``demands`` that ``placed`` (a node each, or None) leaves out."""
    return [d for d, where in zip(demands, placed, strict=True) if where is None]


def _gpus_out(demands: list[_Demand], placed: list[str | None]) -> int:
    """The GPUs of the pods of ``demands`` that ``placed`` leaves out."""
    return sum(d.gpus for d in _left_out(demands, placed))


def _scheduler_order(demands: Iterable[_Demand]) -> list[_Demand]:
    """``demands`` in the order the scheduler takes pending pods: the most critical first,
    then the longest pending (kube-scheduler's PrioritySort: priority, then when the pod
    entered its queue; the simulator's ``_schedule``), then by name. A pod of a Job this tick
    preempts or moves enters the queue now, as the Job's new pod (``waiting_since``), however
    long the Job ran before."""
    rank = CRITICALITY_RANK
    return sorted(
        demands,
        key=lambda d: (
            rank[d.criticality],
            d.since if d.waiting_since is None else d.waiting_since,
            d.key,
        ),
    )


@dataclass(frozen=True, slots=True)
class _PoolTerms:
    """What a pool's spec (and its spot price) make of it for decide(): the same every tick
    while the spec is the same object (``_pool_terms``)."""

    spec: GPUPoolSpec
    """Held so that its ``id`` is not another spec's while the terms are cached."""
    tier: str
    per_node: int
    node_price: float
    gpu_price: float
    idle_for_seconds: float
    launch_price: float
    boot_seconds: float
    paid: bool


_TERMS: dict[tuple[int, float | None], _PoolTerms] = {}
_TERMS_KEPT = 256


def _pool_terms(spec: GPUPoolSpec, spot_price: float | None) -> _PoolTerms:
    """The pool's prices and parsed durations. decide() runs every tick, the simulator tens
    of thousands of times, on the same spec objects: they are worked out once per spec and
    price (a bounded memo: pure, as the specs are immutable)."""
    key = (id(spec), spot_price)
    found = _TERMS.get(key)
    if found is not None and found.spec is spec:
        return found
    price = node_hour_dollars(spec, spot_price)
    power = spec.power if powered(spec) else None
    terms = _PoolTerms(
        spec=spec,
        tier=str(spec.tier),
        per_node=spec.gpu.per_node,
        node_price=price,
        gpu_price=marginal_gpu_hour_dollars(spec, spot_price),
        idle_for_seconds=parse_duration_seconds(
            spec.scale_down.idle_for if power is None else power.idle_for
        ),
        launch_price=price if power is None else power_node_hour_dollars(spec),
        boot_seconds=0.0 if power is None else parse_duration_seconds(power.boot_time),
        paid=paid_whether_used(spec),
    )
    if len(_TERMS) >= _TERMS_KEPT:
        _TERMS.clear()  # the operator parses new spec objects every tick
    _TERMS[key] = terms
    return terms


@dataclass(slots=True)
class _PoolLedger:
    state: PoolState
    name: str
    tier: str
    per_node: int
    node_price: float
    gpu_price: float
    live_nodes: int
    """Nodes that count toward maxNodes: not interrupted, not being released."""
    billed_nodes: int
    """Every Node of the pool: a node is paid for until the provider has terminated it."""
    provisioning: int
    buckets: FreeGPUs[str]
    """Nodes that exist, by free GPUs."""
    future: FreeGPUs[str]
    """Nodes on their way (provisioning, or planned this tick), by free GPUs."""
    idle_for_seconds: float
    """The pool's scaleDown.idleFor (power.idleFor for an owned pool with power), parsed
    once per tick."""
    launch_price: float
    """Dollars per hour one more node of the pool costs: the node price of a cloud pool,
    the electricity of a powered-off owned node powered on."""
    boot_seconds: float = 0.0
    """An owned pool with power: power.bootTime."""
    new_nodes: int = 0
    released: int = 0
    scale_reasons: dict[str, int] = field(default_factory=dict)
    scale_gpus: int = 0
    paid: bool = False
    """Paid for whether used or not (owned, committed: ``paid_whether_used``)."""

    @property
    def newest_node(self) -> str:
        """The name of the node this tick opened last in the pool (``_Decider._open_node``)."""
        return f"{self.name}/new-{self.new_nodes}"


class _PodsByJob:
    """Pods by the key of their Job, in the snapshot's order. Most Jobs have one pod: those
    keep no list of their own (a tick at 100,000 pods would make tens of thousands, each one
    more object for the garbage collector to walk)."""

    __slots__ = ("_first", "_more", "first_start")

    def __init__(self) -> None:
        self._first: dict[str, GPUPod] = {}
        self._more: dict[str, list[GPUPod]] = {}
        """Every pod of each Job that has more than one."""
        self.first_start: dict[str, float] = {}
        """Per Job, the first start of its pods that are on a node (``_first_pod_start``),
        found as the pods are added: asked for thousands of Jobs per tick."""

    def add(self, job: str, pod: GPUPod) -> None:
        started = pod.started_at
        if started is not None and pod.node is not None:
            known = self.first_start.get(job)
            if known is None or started < known:
                self.first_start[job] = started
        first = self._first.get(job)
        if first is None:
            self._first[job] = pod
            return
        more = self._more.get(job)
        if more is None:
            self._more[job] = [first, pod]
        else:
            more.append(pod)

    def get(self, job: str, default: Sequence[GPUPod] = ()) -> Sequence[GPUPod]:
        """The Job's pods; ``default`` for a Job without any."""
        more = self._more.get(job)
        if more is not None:
            return more
        first = self._first.get(job)
        return default if first is None else (first,)


_LIFTED_NEXT_TICK = frozenset({"max_per_tick", "budget_hourly"})
"""Limits on a pool's growth that may let a pod through at the next tick."""


def _price_per_gpu(ledger: _PoolLedger, gpus: int) -> tuple[float, int, str]:
    """A new node's price per GPU a pod of ``gpus`` uses on it; ties to the smaller node."""
    return (ledger.node_price / min(ledger.per_node, gpus), ledger.per_node, ledger.name)


def _has_room(ledger: _PoolLedger) -> bool:
    """Whether the pool is below its maxNodes with the nodes it has and those on the way."""
    return ledger.live_nodes + ledger.provisioning < ledger.state.spec.max_nodes


_name = attrgetter("name")


def _first_pod_start(job: JobState, pods: Iterable[GPUPod]) -> float | None:
    """The first start of the Job's pods among ``pods`` that are on a node, or None."""
    started = [
        p.started_at
        for p in pods
        if p.job == job.key and p.node is not None and p.started_at is not None
    ]
    return min(started) if started else None


def _has_model(ledger: _PoolLedger, models: tuple[str, ...]) -> bool:
    """Whether the pool's GPUs are among ``models`` (empty: any whole GPU will do)."""
    return serves_models(ledger.state.spec.gpu, models)


@dataclass(frozen=True, slots=True)
class _PreemptedRoom:
    """Room on an owned node for a Job returning to core, made by preempting ``victims``."""

    node: str
    victims: list[JobState]
    spot_dollars_per_hour: float
    """What the victims' new spot nodes cost per hour (a node per pod, at most)."""
    lost_dollars: float
    """The work the victims' restarts throw away, at the spot price."""


@dataclass(slots=True)
class _Victims:
    """The movable Jobs on a node (``_Decider._victims_on``)."""

    moving_seen: int
    """How many Jobs were moving when ``gpus_by_job`` was last checked."""
    gpus_by_job: dict[str, int]
    """The GPUs each holds on the node, by Job key."""
    gpus: int
    """Their sum."""


@dataclass(slots=True)
class _Blocks:
    gpus: int = 0
    pods: int = 0
    reason: str = ""

    def count(self, gpus: int) -> None:
        """One more pod of ``gpus`` held back."""
        self.gpus += gpus
        self.pods += 1


class _Decider:
    def __init__(self, snapshot: ClusterSnapshot, policy: ScalingPolicySpec, now: float) -> None:
        self.snap = snapshot
        self.policy = policy
        self.now = now
        self.actions: list[Action] = []
        self.notes: list[str] = []
        self.grace = parse_duration_seconds(policy.pending_grace_period)
        self.min_runtime = parse_duration_seconds(policy.preemption.min_runtime)
        self.restart_hours = parse_duration_seconds(policy.preemption.restart_overhead) / 3600.0
        self.moves_left = policy.preemption.max_per_tick
        self.blocked: dict[tuple[str, str], _Blocks] = {}

        self.pools: dict[str, _PoolLedger] = {}
        for pool in sorted(snapshot.pools, key=_name):
            terms = _pool_terms(pool.spec, pool.spot_price_per_node_hour)
            self.pools[pool.name] = _PoolLedger(
                state=pool,
                name=pool.name,
                tier=terms.tier,
                per_node=terms.per_node,
                node_price=terms.node_price,
                gpu_price=terms.gpu_price,
                live_nodes=0,
                billed_nodes=0,
                provisioning=pool.provisioning_nodes,
                buckets=FreeGPUs(),
                future=FreeGPUs(),
                idle_for_seconds=terms.idle_for_seconds,
                launch_price=terms.launch_price,
                boot_seconds=terms.boot_seconds,
                paid=terms.paid,
            )
        self.pool_states = [ledger.state for ledger in self.pools.values()]
        """The pools as the snapshot has them, by name (``core.placement``'s input)."""
        self._powered = [
            ledger
            for ledger in self.pools.values()
            if ledger.tier == CORE and powered(ledger.state.spec)
        ]
        """The owned pools whose nodes may be powered off and on, in the pools' order."""
        self.node_free: dict[str, int] = {}
        self.node_pool: dict[str, str] = {}
        self.reserved: set[str] = set()
        self.kept_nodes: list[str] = []
        """Nodes kept for a Job when the tick began (``NodeState.reserved_for``)."""
        self.unpaid_open: list[str] = []
        """Nodes pods can land on (``_schedulable``) of pools not paid whether used, by name:
        the only ones consolidation and return to core may empty."""
        cache_key = tuple[str | None, bool, int, tuple[str, ...]]
        self._order_cache: dict[cache_key, list[_PoolLedger]] = {}
        self._target_cache: dict[cache_key, _PoolLedger | None] = {}
        self._launch_cache: dict[cache_key, tuple[str, ...]] = {}
        self._others_cache: dict[tuple[str, cache_key], list[_PoolLedger]] = {}
        self.new_node_names: set[str] = set()
        self.future_nodes: set[str] = set()
        self._passes: list[_Pass] = []
        """The ``_place_on_the_way`` passes of this tick (``_recheck_on_the_way``)."""
        self.nodes: dict[str, NodeState] = {}
        self.pods_on: dict[str, list[GPUPod]] = {}
        self.pods_of_job = _PodsByJob()
        """The pods of each Job that may move (preemptible, or mid-move when the tick
        began), by Job key (``_build``)."""
        self.jobs: dict[str, JobState] = {j.key: j for j in snapshot.jobs}
        self.moving: set[str] = {j.key for j in self.jobs.values() if j.move is not None}
        self._moving_at_start = frozenset(self.moving)
        self._opted: set[str] | None = None
        self._gpus_of_job: dict[str, int] = {}
        self._restart_hours_of: dict[str, float] = {}
        """``_job_gpus`` and ``_restart_gpu_hours`` by Job, as found this tick."""
        self._victim_ranks: dict[str, tuple[float, int, float, str]] = {}
        self._victims_seen: dict[str, _Victims] = {}
        self.pending: list[_Demand] = []
        self.pending_pods: list[GPUPod] = []
        self.requeued: list[_Demand] = []
        self._movable_cache: dict[str, JobState | None] = {}
        self._preempt_failed_at: dict[tuple[str, ...], int] = {}
        """Per GPU-model restriction, the smallest pod size for which no core node could be
        freed: larger ones fail too."""
        self.pending_gpus: dict[str, int] = dict(_NO_PENDING_GPUS)
        self.unhealthy: dict[str, str] = {}
        """Cloud nodes to replace this tick, by name: why (they no longer hold maxNodes)."""
        waits = policy.wait_budget
        self.wait_budget: dict[str, float] = {
            Criticality.CRITICAL: parse_duration_seconds(waits.critical),
            Criticality.STANDARD: parse_duration_seconds(waits.standard),
            Criticality.PREEMPTIBLE: parse_duration_seconds(waits.preemptible),
        }
        self.forecasts: dict[bool, OwnedForecast] = {}
        """When owned GPUs free up, as firm work (True) and preemptible work sees it; built
        on first use."""
        self._fragments: dict[str, int] | None = None
        """Per owned pool, the free GPUs (less those promised) preemptible pods that fit on
        no single node may still wait for this tick (``_wait_for_fragments``)."""
        self.claimed: dict[str, int] = {}
        """Owned GPUs promised this tick to pods that wait for them, by node."""
        self._releases: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        """Per owned node, when each of its GPUs held by a pod comes back, in time order, as
        firm work and as preemptible work see it (``_owned_view``): tuples of floats, which
        the garbage collector stops walking (lists it walks at every collection)."""
        self._owned_pools: dict[tuple[str | None, int, tuple[str, ...]], list[str]] = {}
        self._owned_floor: dict[tuple[bool, str | None, int, tuple[str, ...]], float] = {}
        """The soonest time owned GPUs were found for a kind of pod (a lower bound)."""
        self._expected_any: bool | None = None
        """Whether any Job states its expected duration (else preemptible work never waits)."""
        self._no_room: set[int] = set()
        """Kinds of pods (their pool lists) for which no node that exists has room."""
        self._preemptible_jobs: bool | None = None
        """Whether any Job is preemptible; found on first use."""
        self._cores_by_model: dict[tuple[str, ...], list[_PoolLedger]] = {}
        """The core pools a pod of these GPU models may use, cheapest first (``_core_room``)."""
        self._paid: list[_PoolLedger] | None = None
        """The pools paid for whether used or not, in ``_take_owned``'s order; on first use."""
        self._closed: dict[str, str] = {}
        """Pools that may not grow any more this tick: the limit that stops them."""
        self.waits: list[float] = []
        """When each pod that waits for owned GPUs this tick should get them."""
        self.recheck_at: float | None = None
        """The first moment a decision of this tick should be looked at again (a wait ends,
        a Job that may return to core reaches a checkpoint)."""
        self.checkpoint_window = 2 * parse_duration_seconds(policy.interval)
        """A Job that checkpointed this recently loses little to a move."""
        self.deadline_margin = 2 * parse_duration_seconds(policy.interval)
        """Slack a Job with a deadline keeps: it is looked at again only an interval later."""
        self.window_age: dict[str, float] = {}
        """Per spot pool, how long its oldest node without a notice has run (computed once)."""
        self.stop_seconds = parse_duration_seconds(policy.preemption.checkpoint_grace_period)
        self.progress_by_job: dict[str, float] = {}
        self.gangs: dict[str, GangPlacement] = {}
        """What became of each gang placed (or not) this tick (Plan.gangs)."""
        """Saved progress of running Jobs with an expected duration (Plan field)."""

    # ---------------------------------------------------------------- ledger
    def _build(self) -> None:
        """One pass over pods and nodes: allocation per node, pods per node, pending pods,
        and the pods of Jobs that may move (preemptible or mid-move)."""
        for job_state in [j for j in self.snap.jobs if j.input_error]:
            self.notes.append(f"Job {job_state.key}: {job_state.input_error}")
        allocated: dict[str, int] = {}
        pods_on = self.pods_on
        pending_pods = self.pending_pods
        pods_of_job = self.pods_of_job
        moving = self._moving_at_start
        # Every pod is read here once: a second pass over 10,000s of them for pods_of_job,
        # when first needed, cost more than collecting them here in every tick.
        for pod in self.snap.pods:
            job = pod.job
            if job is not None and (pod.criticality == PREEMPTIBLE or job in moving):
                pods_of_job.add(job, pod)
            node = pod.node
            if node is None:
                pending_pods.append(pod)
                continue
            on_node = pods_on.get(node)
            if on_node is None:
                allocated[node] = pod.gpus
                pods_on[node] = [pod]
            else:
                allocated[node] += pod.gpus
                on_node.append(pod)
        pools = self.pools
        nodes = self.nodes
        node_pool = self.node_pool
        node_free = self.node_free
        unpaid_open = self.unpaid_open
        kept_nodes = self.kept_nodes
        now = self.now
        suspects: list[NodeState] = []  # NotReady, cordoned or without GPUs: for _find_unhealthy
        free_by_pool: dict[str, list[tuple[str, int]]] = {name: [] for name in pools}
        # One pass over thousands of nodes every tick: ``_schedulable``, ``leaving`` and
        # ``billed`` are spelt out here rather than called.
        for state in sorted(self.snap.nodes, key=_name):
            ledger = pools.get(state.pool)
            if ledger is None:
                continue
            name = state.name
            deadline = state.interruption_deadline
            if deadline is not None and not is_cloud(ledger.tier):
                # Owned hardware is never interrupted, whatever a notice or annotation says.
                self.notes.append(f"interruption notice for owned node {name} ignored")
                state = replace(state, interruption_deadline=None)
                deadline = None
            nodes[name] = state
            node_pool[name] = state.pool
            ready = state.ready
            cordoned = state.cordoned
            gpus = state.gpus
            if not ready or cordoned or not gpus:
                suspects.append(state)
            if state.reserved_for is not None:
                kept_nodes.append(name)
            if state.instance_terminated:
                # Its instance terminated while the cloud still lists it: not billed, and
                # (as one deleting) no capacity, not counted toward maxNodes, never released
                # or terminated again.
                continue
            ledger.billed_nodes += 1
            if state.deleting:
                continue
            releasing = state.releasing
            if deadline is None and not releasing:
                ledger.live_nodes += 1
            if (
                cordoned
                or releasing
                or deadline is not None
                or state.xid_errors > 0
                or not (ready or now - state.created_at < JOINING_GRACE_SECONDS)
            ):
                continue  # no pod lands on it (``_schedulable``)
            if gpus > ledger.per_node:
                gpus = ledger.per_node
            elif gpus == 0 and now - state.created_at < JOINING_GRACE_SECONDS:
                # Registered, its device plugin not reporting its GPUs yet: a whole node on
                # its way (its launch no longer counts as provisioning once its Node exists).
                gpus = ledger.per_node
            free = gpus - allocated.get(name, 0)
            if free < 0:
                free = 0
            node_free[name] = free
            free_by_pool[ledger.name].append((name, free))
            if not ledger.paid:
                unpaid_open.append(name)
        for name, free_nodes in free_by_pool.items():
            self.pools[name].buckets = FreeGPUs(free_nodes)
        self._find_unhealthy(suspects)
        for ledger in self.pools.values():
            for i in range(ledger.provisioning):
                self._add_node(ledger, f"{ledger.name}/provisioning-{i}")

    def _find_unhealthy(self, suspects: Iterable[NodeState]) -> None:
        """Cloud nodes that are paid for and cannot serve: NotReady past the grace period,
        Ready without GPUs past theirs, or cordoned for GPU errors. A person's cordon is left
        alone. ``suspects``: the nodes NotReady, cordoned or without GPUs, by name."""
        # Suspect nodes by pool, then name: what each shows.
        not_ready: dict[str, dict[str, str]] = {}
        no_gpus: dict[str, dict[str, str]] = {}
        budget = self.policy.disruption.max_nodes_per_tick
        now = self.now
        for node in suspects:
            if (
                node.ready
                and not node.cordoned
                and (node.gpus or now - node.created_at < NO_GPUS_GRACE_SECONDS)
            ):
                continue  # not cordoned for GPU errors, not NotReady, GPUs reported
            ledger = self.pools[node.pool]
            if (
                not is_cloud(ledger.tier)
                or node.releasing
                or node.interruption_deadline
                or node.leaving
            ):
                continue
            if node.cordoned and node.cordoned_by == CORDONED_FOR_XID:
                self.unhealthy[node.name] = (
                    f"{ledger.tier} node {node.name} was cordoned for GPU XID errors: drain, "
                    "terminate and replace it"
                )
            elif (
                not node.ready
                and node.not_ready_since is not None
                and now - node.not_ready_since >= NOT_READY_GRACE_SECONDS
            ):
                not_ready.setdefault(node.pool, {})[node.name] = (
                    f"NotReady for {(now - node.not_ready_since) / 60:.0f} min"
                )
            elif node.ready and not node.cordoned:
                no_gpus.setdefault(node.pool, {})[node.name] = (
                    f"reports no GPUs {(now - node.created_at) / 60:.0f} min after it appeared"
                )
        in_pool: dict[str, int] = {}
        if not_ready or no_gpus:
            for node in self.nodes.values():
                in_pool[node.pool] = in_pool.get(node.pool, 0) + 1
        for by_pool, what, looks_like in (
            (not_ready, "are NotReady", "a partition"),
            (no_gpus, "report no GPUs", "a device plugin missing from the pool's nodes"),
        ):
            for pool, broken in sorted(by_pool.items()):
                if len(broken) > 1 and len(broken) > NOT_READY_MAX_SHARE * in_pool[pool]:
                    self.notes.append(
                        f"{len(broken)} of {in_pool[pool]} nodes of {pool} {what}: looks like "
                        f"{looks_like}, none is replaced"
                    )
                    continue
                for name, shows in broken.items():
                    self.unhealthy[name] = (
                        f"{self.pools[pool].tier} node {name} {shows}: drain, terminate and "
                        "replace it"
                    )
        for name in sorted(self.unhealthy)[budget:]:
            del self.unhealthy[name]  # the disruption budget holds for repairs too
        for name in self.unhealthy:
            self.pools[self.nodes[name].pool].live_nodes -= 1

    def _schedulable(self, node: NodeState) -> bool:
        if node.cordoned or node.releasing or node.interruption_deadline is not None:
            return False
        if node.leaving:
            return False
        if node.xid_errors > 0:
            return False
        return node.ready or self.now - node.created_at < JOINING_GRACE_SECONDS

    def _add_node(self, ledger: _PoolLedger, name: str) -> None:
        """A node on its way: provisioning, or planned in this tick."""
        self.node_free[name] = ledger.per_node
        self.node_pool[name] = ledger.name
        self.future_nodes.add(name)
        ledger.future.put(name, ledger.per_node)

    def _take_best_fit(self, ledger: _PoolLedger, gpus: int, future: bool = False) -> str | None:
        nodes = ledger.future if future else ledger.buckets
        name = nodes.take(gpus)
        if name is None:
            return None
        self.node_free[name] = self.node_free[name] - gpus
        self.reserved.add(name)
        if self.forecasts and ledger.tier == CORE:
            self._touch_forecast(name, gained=False)
        return name

    def _adjust(self, node: str, delta: int) -> None:
        """Change a node's free GPUs by ``delta`` (positive: freed, negative: taken)."""
        free = self.node_free.get(node)
        if free is None:
            return
        ledger = self.pools[self.node_pool[node]]
        nodes = ledger.future if node in self.future_nodes else ledger.buckets
        new_free = max(0, min(ledger.per_node, free + delta))
        nodes.put(node, new_free)
        self.node_free[node] = new_free
        if delta > 0:
            self._no_room.clear()
        if self.forecasts and ledger.tier == CORE:
            self._touch_forecast(node, gained=delta > 0)

    # ------------------------------------------------------- 1. interruptions
    def _interruptions(self) -> None:
        for node in self.nodes.values():
            if node.interruption_deadline is None:
                continue
            if not is_cloud(self.pools[node.pool].tier):
                continue  # owned hardware is never interrupted (see _build)
            pods = self.pods_on.get(node.name, [])
            if node.cordoned and not pods:
                continue
            left = node.interruption_deadline - self.now
            jobs = sorted({p.job for p in pods if p.job is not None})
            self.actions.append(
                HandleInterruption(
                    pool=node.pool,
                    node=node.name,
                    reason=f"provider reclaims {node.name} in {max(left, 0):.0f}s: cordon and "
                    f"drain; {len(jobs)} Job(s) requeue",
                )
            )
            for pod in pods:
                if pod.job is None:
                    self.notes.append(
                        f"bare pod {pod.key} on interrupted node {node.name} cannot be requeued"
                    )
                    continue
                self.requeued.append(
                    _Demand(
                        pod.gpus,
                        pod.criticality,
                        self.now,
                        pod.key,
                        pod.pool,
                        pod.job,
                        pod.gpu_models,
                    )
                )

    # -------------------------------------------------------------- 2. demand
    def _collect_pending(self) -> None:
        gangs: dict[str, list[GPUPod]] = {}
        moving = self.moving
        pending_gpus = self.pending_gpus
        pending = self.pending
        now = self.now
        grace = self.grace
        wait_budget_end = self._wait_budget_end
        for pod in self.pending_pods:
            if pod.job is not None and pod.job in moving:
                continue
            pending_gpus[pod.criticality] += pod.gpus
            if pod.gang is not None:
                gangs.setdefault(pod.gang, []).append(pod)
                continue
            if now - pod.pending_since < grace:
                continue
            demand = _Demand(
                pod.gpus,
                pod.criticality,
                pod.pending_since,
                pod.key,
                pod.pool,
                pod.job,
                pod.gpu_models,
            )
            # Found now, in the snapshot's order, not in placement order: placement takes
            # the pods by criticality and size, and its look-ups of their Jobs, scattered
            # over 10,000s of them, missed the CPU's caches.
            demand.wait_until = wait_budget_end(demand)
            pending.append(demand)
        # A Job in the middle of a move has no pods; its demand waits on the target pool.
        for key in sorted(self.moving):
            job = self.jobs[key]
            assert job.move is not None
            if any(p.node is None for p in self.pods_of_job.get(key, [])):
                continue
            for i in range(job.parallelism):
                self.pending.append(
                    _Demand(
                        job.gpus_per_pod,
                        job.criticality,
                        job.move.since,
                        f"{key}#move-{i}",
                        job.move.to_pool,
                        key,
                        job.gpu_models,
                        gang=key if job.gang else None,
                    )
                )
        if gangs:
            self._collect_gangs(gangs)
        self.pending.extend(self.requeued)

    @property
    def _on_demand_for_preemptible(self) -> bool:
        return self.policy.preemption.allow_on_demand_for_preemptible

    def _free_order(self, demand: _Demand) -> list[_PoolLedger]:
        """Pools whose free capacity the pod may use, cheapest marginal GPU first."""
        if demand.free_order is not None:
            return demand.free_order
        key = (demand.pool, demand.criticality == PREEMPTIBLE, demand.gpus, demand.models)
        cached = self._order_cache.get(key)
        if cached is None:
            cached = self._order_cache[key] = self._free_order_uncached(demand)
        demand.free_order = cached
        return cached

    def _free_order_uncached(self, demand: _Demand) -> list[_PoolLedger]:
        order = placement_order(
            self.pool_states,
            demand.gpus,
            demand.criticality,
            demand.models,
            on_demand_for_preemptible=self._on_demand_for_preemptible,
            pinned=demand.pool,
        )
        return [self.pools[p.name] for p in order]

    def _scale_target(self, demand: _Demand) -> _PoolLedger | None:
        """The cloud pool to grow for a pod that fits nowhere."""
        key = (demand.pool, demand.criticality == PREEMPTIBLE, demand.gpus, demand.models)
        if key not in self._target_cache:
            self._target_cache[key] = self._scale_target_uncached(demand)
        return self._target_cache[key]

    def _scale_target_uncached(self, demand: _Demand) -> _PoolLedger | None:
        if demand.pool is not None:
            pinned = self.pools.get(demand.pool)
            if pinned is None or not is_cloud(pinned.tier) or pinned.per_node < demand.gpus:
                return None
            return pinned if _has_model(pinned, demand.models) else None
        want = SPOT if demand.criticality == PREEMPTIBLE else "elastic"
        fitting = [
            p
            for p in self.pools.values()
            if p.tier == want and p.per_node >= demand.gpus and _has_model(p, demand.models)
        ]
        # A pool the provider has no capacity for, or one at its maxNodes, cannot grow:
        # another one of the tier may (else a pod would wait on a full pool, and say so,
        # while a dearer one has room).
        candidates = [p for p in fitting if p.state.launchable and _has_room(p)]
        if not candidates and want == SPOT and self._on_demand_for_preemptible:
            candidates = [
                p
                for p in self.pools.values()
                if p.tier == "elastic"
                and p.per_node >= demand.gpus
                and p.state.launchable
                and _has_room(p)
                and _has_model(p, demand.models)
            ]
        if not candidates:
            # Nothing can grow: name the pool that would have, so the block says why.
            candidates = [p for p in fitting if p.state.launchable] or fitting
        return self._cheapest_for(candidates, demand.gpus, demand.criticality == PREEMPTIBLE)

    def _spot_target(self, gpus: int, models: tuple[str, ...] = ()) -> _PoolLedger | None:
        spots = [
            p
            for p in self.pools.values()
            if p.tier == SPOT
            and p.per_node >= gpus
            and p.state.launchable
            and _has_model(p, models)
        ]
        return self._cheapest_for(spots, gpus, True)

    def _cheapest_for(
        self, candidates: list[_PoolLedger], gpus: int, preemptible: bool
    ) -> _PoolLedger | None:
        """The pool whose new node costs least for one pod of ``gpus`` alone (several pods
        are packed across pools by ``_buy_for``); ties go to the smaller node."""
        if not candidates:
            return None
        return min(candidates, key=partial(_price_per_gpu, gpus=gpus))

    def _launch_candidates(self, demand: _Demand) -> tuple[str, ...]:
        """The pools, by name, whose shapes a pod that fits nowhere is packed into: owned
        pools it may power on, then the launchable cloud pools of its scale target's tier with
        its GPU model (pods of one such set are packed together; the packing puts each only
        into nodes big enough for it)."""
        key = (demand.pool, demand.criticality == PREEMPTIBLE, demand.gpus, demand.models)
        cloud = self._launch_cache.get(key)
        if cloud is None:
            cloud = self._launch_cache[key] = self._cloud_launch_candidates(demand)
        if not self._powered:
            return cloud  # no owned machine to power on: the same for every pod of a kind
        owned = self._power_on_candidates(demand)
        return tuple(p.name for p in owned) + cloud if owned else cloud

    def _cloud_launch_candidates(self, demand: _Demand) -> tuple[str, ...]:
        """``_launch_candidates`` less the owned pools: the same for every pod of a kind
        during a tick (its scale target is)."""
        target = self._scale_target(demand)
        if target is None:
            return ()
        if demand.pool is not None or not target.state.launchable:
            return (target.name,)
        return tuple(
            p.name
            for p in self.pools.values()
            if p.tier == target.tier and p.state.launchable and _has_model(p, demand.models)
        )

    def _power_on_candidates(self, demand: _Demand) -> list[_PoolLedger]:
        """Owned pools with powered-off machines the pod may use, when it may wait for their
        boot: a boot no longer than a cloud node's costs no wait; a longer one only within
        the pod's waitBudget. Powering on costs electricity only, far below any cloud price,
        so the packing takes these first."""
        found = []
        for p in self._powered:
            if (
                (demand.pool is not None and p.name != demand.pool)
                or p.per_node < demand.gpus
                or not p.state.launchable
                or not _has_room(p)
                or not _has_model(p, demand.models)
            ):
                continue
            extra = p.boot_seconds - BOOT_ALLOWANCE_SECONDS
            if extra > 0 and self.now + extra > self._wait_until(demand):
                continue
            found.append(p)
        return found

    def _place_demand(self) -> None:
        # Criticality first; within it the largest pods first (first-fit decreasing packs
        # well, and places the same pods the same way on the next tick), then the oldest.
        order = _in_order(self.pending)
        self._place_all([d for d in order if d.criticality != PREEMPTIBLE])
        # Jobs preempted above joined the preemptible queue; older work first.
        preemptible = self._unpin_to_owned([d for d in order if d.criticality == PREEMPTIBLE])
        preemptible.extend(self.requeued_by_preemption)
        self._place_all(_in_order(preemptible))
        if self.waits:
            self.notes.append(
                f"{len(self.waits)} pod(s) wait for owned GPUs that free up within their "
                f"waitBudget (the first in {min(self.waits) - self.now:.0f}s) instead of new "
                "cloud nodes"
            )

    requeued_by_preemption: list[_Demand]

    def _unpin_to_owned(self, demands: list[_Demand]) -> list[_Demand]:
        """A preemptible Job the operator pinned to a cloud pool (a preemption moved it to
        spot, consolidation moved it off a node) whose pods all wait again, having lost
        their node or never got one, moves to owned nodes idle for their idleFor, as
        consolidation would move it (``_core_room``): a move of a Job that runs nowhere
        throws nothing away, and without it the Job waits for that pool alone while
        paid-for GPUs sit idle (an interrupted Job without checkpoints could restart on spot
        forever). Its demands are placed there with the rest. Jobs of the deadline rule stay
        where it put them (``_deadlines``)."""
        if self.moves_left <= 0:
            return demands
        waiting: dict[str, list[_Demand]] = {}
        for d in demands:
            if d.pool is not None and d.job is not None:
                waiting.setdefault(d.job, []).append(d)
        for key, mine in waiting.items():
            if self.moves_left <= 0:
                break
            job = self.jobs.get(key)
            pinned = self.pools.get(mine[0].pool or "")
            if (
                job is None
                or pinned is None
                or not is_cloud(pinned.tier)
                or not job.pinned_by_operator
                or job.queued
                or job.deadline_at is not None
                or key in self.moving
            ):
                continue
            pods = self.pods_of_job.get(key, [])
            if len(pods) != len(mine) or any(p.node is not None for p in pods):
                continue  # some pod still runs, or has not waited out the grace period
            target = self._core_room([p.gpus for p in pods], job.gpu_models)
            if target is None:
                continue
            self.moves_left -= 1
            self.moving.add(key)
            for d in mine:
                d.pool = target.name
                d.free_order = None
            gpus = sum(p.gpus for p in pods)
            self._consolidate_job(
                job,
                pinned,
                target,
                gpus,
                f"preemptible Job {key} waits pinned to {pinned.tier} pool {pinned.name} while "
                f"owned nodes of {target.name} with {gpus} GPU(s) have been idle for their "
                "idleFor: it runs nowhere, so moving it there throws nothing away",
            )
        return demands

    def _consolidate_job(
        self, job: JobState, source: _PoolLedger, target: _PoolLedger, gpus: int, reason: str
    ) -> None:
        """Ask for a consolidation move of ``job`` (``gpus`` GPUs) from ``source`` to
        ``target``, for ``reason``."""
        self.actions.append(
            MoveJob(
                namespace=job.namespace,
                job=job.name,
                from_pool=source.name,
                to_pool=target.name,
                gpus=gpus,
                kind=ActionKind.CONSOLIDATE,
                reason=reason,
            )
        )

    def _place_all(self, demands: list[_Demand]) -> None:
        """Place pods in order on nodes that exist; the rest on nodes on their way, buying
        the cheapest packing of new nodes for those that fit nowhere. A gang is placed
        whole, or not at all (``_place_gang``)."""
        if any(d.gang is not None for d in demands):
            self._place_all_with_gangs(demands)
            return
        later = [d for d in demands if not self._place_now(d)]
        if later:
            self._place_on_the_way(later)

    def _place_now(self, demand: _Demand) -> bool:
        order = self._free_order(demand)
        # Once no node that exists had room for pods of a kind, none has until GPUs come
        # back (``_adjust``): every pod placed meanwhile only takes room.
        full = id(order) in self._no_room
        if demand.criticality != PREEMPTIBLE:
            # Owned GPUs, freed by preemption if need be, before a cloud node is filled or
            # bought: owned GPUs never hold preemptible work while firm work pays on-demand.
            for ledger in () if full else order:
                if ledger.tier == CORE and self._take_best_fit(ledger, demand.gpus):
                    return True
            if self._preempt_for(demand):
                return True
        if not full:
            for ledger in order:
                if self._take_best_fit(ledger, demand.gpus) is not None:
                    return True
            self._no_room.add(id(order))
        return self._wait_for_owned(demand)

    # ------------------------------------------------------- wait or launch
    def _wait_for_owned(self, demand: _Demand) -> bool:
        """Rule 3: a pod that fits on no node that exists waits, instead of a cloud node
        on its way or a new one, when owned GPUs free up for it within its wait budget;
        those GPUs are promised to it (no other waiting pod counts on them)."""
        by = self._wait_until(demand)
        found = self._owned_in_time(demand, by)
        if found is None:
            return self._wait_for_fragments(demand, by)
        at, node = found
        self.claimed[node] = self.claimed.get(node, 0) + demand.gpus
        self._touch_forecast(node, gained=False)
        self.waits.append(at)
        # Look again when its GPUs should be free, or when its budget runs out.
        self._recheck(min(at if at > self.now else math.inf, by))
        return True

    def _wait_for_fragments(self, demand: _Demand, by: float) -> bool:
        """A preemptible pod that fits on no owned node, while the owned GPUs free now add up
        to what it needs, waits for them to come together (its neighbours end) within its
        wait budget instead of a spot node. The GPUs it counts on are set aside for this
        tick, so the free owned GPUs are not counted twice."""
        if demand.criticality != PREEMPTIBLE or demand.pool is not None or by <= self.now:
            return False
        if self._fragments is None:
            self._fragments = {}
            for name, free in self.node_free.items():
                ledger = self.pools[self.node_pool[name]]
                if ledger.tier == CORE and name not in self.future_nodes:
                    left = free - self.claimed.get(name, 0)
                    self._fragments[ledger.name] = self._fragments.get(ledger.name, 0) + left
        for p in self._free_order(demand):
            if p.tier == CORE and self._fragments.get(p.name, 0) >= demand.gpus:
                break
        else:
            return False
        self._fragments[p.name] -= demand.gpus
        self.waits.append(by)
        self._recheck(by)
        return True

    def _wait_until(self, demand: _Demand) -> float:
        """The latest time the pod may get its GPUs: its wait budget counts the Job's whole
        delay when the Job's creation is known (earlier waits and lost work included). The
        same all tick (what it depends on does not change): kept on the demand."""
        found = demand.wait_until
        if found is None:
            found = demand.wait_until = self._wait_budget_end(demand)
        return found

    def _wait_budget_end(self, demand: _Demand) -> float:
        budget = self.wait_budget[demand.criticality]
        if budget <= 0:
            return -math.inf
        job = self.jobs.get(demand.job) if demand.job is not None else None
        if job is not None and job.created_at is not None:
            return job.created_at + job.progress_seconds + budget
        waiting_since = demand.since if demand.waiting_since is None else demand.waiting_since
        return waiting_since + budget

    def _owned_in_time(self, demand: _Demand, by: float) -> tuple[float, str] | None:
        """The owned node that has the pod's GPUs free soonest, if by ``by``: (when, node).
        The soonest time found for pods of a kind is remembered: during a tick it only moves
        later, until GPUs come back (``_touch_forecast``)."""
        if by <= self.now:
            return None
        firm = demand.criticality != PREEMPTIBLE
        if self._expected_any is None:
            self._expected_any = any(j.expected_duration_seconds for j in self.snap.jobs)
        if not self._expected_any and not (firm and self.policy.preemption.enabled):
            return None  # nothing on owned GPUs is known to end
        floor_key = (firm, demand.pool, demand.gpus, demand.models)
        if self._owned_floor.get(floor_key, -math.inf) > by:
            return None
        kind = (demand.pool, demand.gpus, demand.models)
        pools = self._owned_pools.get(kind)
        if pools is None:
            pools = self._owned_pools[kind] = [
                p.name
                for p in self.pools.values()
                if p.tier == CORE
                and (demand.pool is None or p.name == demand.pool)
                and p.per_node >= demand.gpus
                and _has_model(p, demand.models)
            ]
        found = self._forecast(firm).earliest(pools, demand.gpus) if pools else None
        self._owned_floor[floor_key] = math.inf if found is None else found[0]
        return found if found is not None and found[0] <= by else None

    def _forecast(self, firm: bool) -> OwnedForecast:
        found = self.forecasts.get(firm)
        if found is None:
            # ``firm`` bound positionally: bound by keyword, each of the forecast's thousands
            # of calls copied a dict of arguments.
            found = self.forecasts[firm] = OwnedForecast(self.now, partial(self._owned_view, firm))
            for name in self.node_free:
                if name not in self.future_nodes and self.pools[self.node_pool[name]].tier == CORE:
                    found.add(name)
        return found

    def _touch_forecast(self, name: str, *, gained: bool) -> None:
        """An owned node's free GPUs changed (``gained``: some came back, e.g. Jobs moved
        off it)."""
        if gained:
            self._owned_floor.clear()
            self._releases.pop(name, None)
        for forecast in self.forecasts.values():
            forecast.touch(name, gained=gained)

    def _owned_view(self, firm: bool, name: str) -> NodeView:
        """An owned node for the forecast: its free GPUs less those promised, and when its
        pods give theirs back: at the end of a run whose Job states its expected duration,
        and (to firm work) when a preemptible Job may be preempted."""
        releases = self._releases.get(name)
        if releases is None:
            releases = self._releases[name] = self._release_times(name)
        ledger = self.pools[self.node_pool[name]]
        return (
            ledger.name,
            ledger.per_node,
            self.node_free[name] - self.claimed.get(name, 0),
            releases[0] if firm else releases[1],
        )

    def _release_times(self, name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``_owned_view``'s times, one per GPU, in time order, for firm work and for
        preemptible work: every pod of every owned node is looked at here, once for both
        views (they differ only where a preemptible Job may be preempted sooner), so the
        loop reads no more than it needs."""
        ends: list[float] = []
        firm_ends: list[float] = []
        preempting = self.policy.preemption.enabled
        first_start = self.pods_of_job.first_start
        min_runtime = self.min_runtime
        jobs = self.jobs
        moving = self.moving
        now = self.now
        inf = math.inf
        for pod in self.pods_on.get(name, ()):
            key = pod.job
            if key is None or key in moving:
                continue  # a bare pod never ends as far as we know; a moving Job left
            job = jobs.get(key)
            if job is None:
                continue
            expected = job.expected_duration_seconds
            end = inf
            if expected is not None:
                started = pod.started_at
                end = (now if started is None else started) + expected - job.progress_seconds
            firm_end = end
            if preempting and job.criticality == PREEMPTIBLE:
                run = first_start.get(key, job.started_at)  # _run_start
                movable_at = (now if run is None else run) + min_runtime
                if movable_at < end:
                    firm_end = movable_at
            gpus = pod.gpus
            if end < inf:
                if gpus == 1:
                    ends.append(end)
                else:
                    ends.extend([end] * gpus)
            if firm_end < inf:
                if gpus == 1:
                    firm_ends.append(firm_end)
                else:
                    firm_ends.extend([firm_end] * gpus)
        ends.sort()
        firm_ends.sort()
        return tuple(firm_ends), tuple(ends)

    def _fill_future(self, demands: list[_Demand]) -> list[str | None]:
        """Each pod in order on the fullest node on its way that takes it, cheapest pool
        first: how the scheduler will place them once those nodes are up (``demands`` in
        ``_scheduler_order``), so the next tick asks for no more. Returns the node each got,
        or None, in the order of ``demands``."""
        placed: list[str | None] = []
        full: set[int] = set()  # kinds of pods no node on its way had room for
        for demand in demands:
            where = None
            order = self._free_order(demand)
            if id(order) not in full:
                for ledger in order:
                    where = self._take_best_fit(ledger, demand.gpus, future=True)
                    if where is not None:
                        break
                else:
                    full.add(id(order))
            placed.append(where)
        return placed

    def _unfill(self, demands: list[_Demand], placed: list[str | None]) -> None:
        """Give back what ``_fill_future`` took."""
        for demand, where in zip(demands, placed, strict=True):
            if where is not None:
                self._adjust(where, demand.gpus)

    def _place_on_the_way(self, demands: list[_Demand]) -> None:
        # The scheduler, not this tick, places the pods on the nodes on their way, in its
        # own order: the nodes bought must hold them in that order.
        demands = _scheduler_order(demands)
        placed = self._fill_future(demands)
        if None in placed:
            placed = self._buy_for_the_scheduler(demands, placed)
        blocked: dict[int, _Blocks] = {}
        final: list[str | None] = []
        for demand, where in zip(demands, placed, strict=True):
            if where is None:
                where = self._launch_one(demand, blocked)
            self._count_scale(demand, where, 1)
            final.append(where)
        orders = {id(o): o for o in map(self._free_order, demands)}
        self._passes.append(
            _Pass(
                demands,
                final,
                frozenset(ledger.name for order in orders.values() for ledger in order),
                frozenset(self.node_pool[where] for where in final if where is not None),
            )
        )

    def _count_scale(self, demand: _Demand, where: str | None, sign: int) -> None:
        """Count (``sign`` 1) or take back (-1) ``demand`` among the pods a new node of its
        pool is bought for (the ScaleUp's reason)."""
        if where is not None and where in self.new_node_names:
            ledger = self.pools[self.node_pool[where]]
            reasons = ledger.scale_reasons
            reasons[demand.criticality] = reasons.get(demand.criticality, 0) + sign
            ledger.scale_gpus += sign * demand.gpus

    def _recheck_on_the_way(self) -> None:
        """Every pod placed on nodes on their way this tick, placed again in one scheduler
        order. Each pass (firm pods, preemptible ones, each Job a consolidation moves) was
        checked in its own order, but the scheduler takes all of them together: an older
        pod of an earlier pass takes room a later pass bought for another pod, when it may
        use that pool (it went to a dearer pool's node before the cheaper one was bought),
        and the next tick would buy again for the pod left out. Here what the scheduler
        would leave out gets its nodes now, or the limit that holds it back is reported.
        Skipped when no pass's pods may take another pass's nodes (the usual case)."""
        passes = self._passes
        if len(passes) < 2 or not any(
            a is not b and a.may_use & b.used for a in passes for b in passes
        ):
            return
        demands = [d for p in passes for d in p.demands]
        before = [w for p in passes for w in p.placed]
        left_before = {id(d) for d, w in zip(demands, before, strict=True) if w is None}
        for demand, where in zip(demands, before, strict=True):
            self._count_scale(demand, where, -1)
        self._unfill(demands, before)
        demands = _scheduler_order(demands)
        placed = self._fill_future(demands)
        if None in placed:
            placed = self._buy_for_the_scheduler(demands, placed)
        blocked: dict[int, _Blocks] = {}
        for demand, where in zip(demands, placed, strict=True):
            if where is None and id(demand) not in left_before:
                where = self._launch_one(demand, blocked)
            self._count_scale(demand, where, 1)

    def _buy_for_the_scheduler(
        self, demands: list[_Demand], placed: list[str | None]
    ) -> list[str | None]:
        """New nodes for the pods ``placed`` left out (None), such that the scheduler, taking
        every pod of ``demands`` in its order into the cheapest pool with room (best fit),
        leaves none out: the packing counts on pods going where it put them, the scheduler
        may put them elsewhere (a 3-GPU pod the packing put beside a 5-GPU one on an 8-GPU
        node takes a 4-GPU node first, and the 2-GPU pod meant for that one has no room).
        Each packing is checked by placing the pods in the scheduler's order, and what it
        leaves out is packed again onto more nodes (``REPAIR_ROUNDS``); when the packing
        across every shape leaves pods out, the packing into each single shape is tried too,
        and the cheapest one that leaves out the fewest GPUs is bought. Returns the node each
        pod of ``demands`` gets, or None."""
        left = _left_out(demands, placed)
        self._unfill(demands, placed)
        closed = dict(self._closed)
        best: tuple[tuple[int, float, int], list[str]] | None = None
        for only in self._packings(left):
            opened, unpacked_gpus = self._buy_for(left, only)
            if not opened:
                if only is None:
                    break  # every shape any pod fits is at a limit: no single one is not
                continue
            placed = self._fill_future(demands)
            if only is None and _gpus_out(demands, placed) <= unpacked_gpus:
                # The scheduler leaves out no more than the packing did (a limit held those
                # back): the packing holds as the scheduler places, the usual case.
                return placed
            for _ in range(REPAIR_ROUNDS):
                more, _ = self._buy_for(_left_out(demands, placed))
                if not more:
                    break
                opened += more
                self._unfill(demands, placed)
                placed = self._fill_future(demands)
            ledgers = [self.pools[self.node_pool[name]] for name in opened]
            score = (
                _gpus_out(demands, placed),
                sum(ledger.launch_price for ledger in ledgers),
                sum(ledger.per_node for ledger in ledgers),
            )
            if best is None or score < best[0]:
                best = (score, [ledger.name for ledger in ledgers])
            self._unfill(demands, placed)
            for name in reversed(opened):
                self._close_new_node(name)
            self._closed = dict(closed)
        if best is not None:
            for pool in best[1]:
                self._open_node(self.pools[pool])
        return self._fill_future(demands)

    def _packings(self, demands: list[_Demand]) -> Iterator[str | None]:
        """The packings ``_buy_for_the_scheduler`` tries for ``demands``: across every shape
        (None), then into each cloud pool's shape alone, by pool name (found only when the
        first is not kept)."""
        yield None
        yield from sorted(
            {
                name
                for demand in demands
                for name in self._launch_candidates(demand)
                if is_cloud(self.pools[name].tier)
            }
        )

    def _buy_for(self, demands: list[_Demand], only: str | None = None) -> tuple[list[str], int]:
        """Open new nodes for pods that fit nowhere: per set of pools they may grow, the
        packing across those pools' node shapes with the fewest dollars per hour (a
        half-empty big node only when that is cheaper than smaller ones); with ``only``,
        into that pool's shape alone for the sets it is in. Returns the nodes opened, in
        order, and the GPUs of the pods no node was opened for (no pool may grow for them,
        or a limit stopped it)."""
        groups: dict[tuple[str, ...], dict[int, int]] = {}
        unpacked_gpus = 0
        for demand in demands:
            pools = self._launch_candidates(demand)
            if pools:
                sizes = groups.get(pools)
                if sizes is None:
                    sizes = groups[pools] = {}
                sizes[demand.gpus] = sizes.get(demand.gpus, 0) + 1
            else:
                unpacked_gpus += demand.gpus
        opened: list[str] = []

        def open_node(shape: Shape) -> bool:
            ledger = self.pools[shape.pool]
            if self._open_node(ledger) is not None:
                return False
            opened.append(ledger.newest_node)
            return True

        for pools, sizes in sorted(groups.items()):
            if only is not None and only in pools:
                pools = (only,)
            ledgers = [self.pools[name] for name in pools]
            shapes = [Shape(p.name, p.per_node, p.launch_price) for p in ledgers]
            unpacked = pack(sizes, shapes, open_node)
            unpacked_gpus += sum(gpus * n for gpus, n in unpacked.items())
        return opened, unpacked_gpus

    def _launch_one(self, demand: _Demand, blocked: dict[int, _Blocks]) -> str | None:
        """A pod the packing left out (a limit stopped it, or the next tick would place it
        elsewhere): room on its own cheapest pool, a new node there, or the reason why not.
        ``blocked``: the kinds of pods (``_free_order``'s list) blocked so far in this pass,
        with the ``_Blocks`` they were counted in: blocked again at once, into the same
        (thousands are, when a limit is reached).
        A stopped pool stays stopped and its nodes on their way only fill up meanwhile;
        owned pools to power on are asked per pod (its wait budget), so then it is not kept."""
        kind = id(self._free_order(demand))
        known = blocked.get(kind)
        if known is not None:
            known.count(demand.gpus)
            return None
        for owned in self._power_on_candidates(demand):
            if self._open_node(owned) is None:
                return self._take_best_fit(owned, demand.gpus, future=True)
        target = self._scale_target(demand)
        if target is None:
            entry = self._block(demand.pool or "-", "no_pool", demand)
            if not self._powered:
                blocked[kind] = entry
            return None
        held: tuple[_PoolLedger, str] | None = None
        for pool in self._pools_to_grow(demand, target):
            where = self._take_best_fit(pool, demand.gpus, future=True)
            if where is None:
                limit = self._open_node(pool)
                if limit is not None:
                    # The limit to report: the first met, unless a later one the next tick
                    # lifts (the per-tick cap, the hourly budget) holds the pod back.
                    if held is None or (
                        limit in _LIFTED_NEXT_TICK and held[1] not in _LIFTED_NEXT_TICK
                    ):
                        held = (pool, limit)
                    continue
                where = self._take_best_fit(pool, demand.gpus, future=True)
            return where
        assert held is not None
        entry = self._block(held[0], held[1], demand)
        if not self._powered:
            blocked[kind] = entry
        return None

    def _pools_to_grow(self, demand: _Demand, target: _PoolLedger) -> Iterator[_PoolLedger]:
        """``target`` (the pod's scale target, chosen at the tick's start), then, should a
        limit stop it, the other cloud pools of its launch candidates that fit the pod,
        cheapest first. The packing may have filled the target meanwhile; without the others
        a pod waited on a pool at its maxNodes, and said so, while another had room, or was
        held back only by the per-tick cap."""
        yield target
        kind = (demand.pool, demand.criticality == PREEMPTIBLE, demand.gpus, demand.models)
        others = self._others_cache.get((target.name, kind))
        if others is None:
            others = sorted(
                (
                    self.pools[name]
                    for name in self._launch_candidates(demand)
                    if name != target.name
                    and is_cloud(self.pools[name].tier)
                    and self.pools[name].per_node >= demand.gpus
                ),
                key=partial(_price_per_gpu, gpus=demand.gpus),
            )
            self._others_cache[(target.name, kind)] = others
        yield from others

    def _open_node(self, ledger: _PoolLedger) -> str | None:
        """Add one planned node to the pool, or say which limit stops it (limits only
        tighten during a tick: a pool stopped once stays stopped)."""
        cause = self._closed.get(ledger.name) or self._limit(ledger)
        if cause is not None:
            self._closed[ledger.name] = cause
            return cause
        ledger.new_nodes += 1
        name = ledger.newest_node
        self.new_node_names.add(name)
        self._add_node(ledger, name)
        return None

    def _limit(self, ledger: _PoolLedger) -> str | None:
        """The limit that stops one more node of the pool, if any."""
        if not ledger.state.launchable:
            return "no_capacity"
        if (
            ledger.live_nodes + ledger.provisioning + ledger.new_nodes + 1
            > ledger.state.spec.max_nodes
        ):
            return "max_nodes"
        if ledger.new_nodes + 1 > self.policy.scale_up.max_nodes_per_tick:
            return "max_per_tick"
        if not is_cloud(ledger.tier):
            return None  # powering on an owned node spends no cloud budget
        budget = self.policy.budget
        if budget.monthly_limit is not None and (
            self.snap.budget.spent_this_month_dollars >= budget.monthly_limit
        ):
            return "budget_monthly"
        if budget.max_hourly_cost is not None and (
            self._cloud_cost_per_hour() + ledger.node_price > budget.max_hourly_cost + 1e-9
        ):
            return "budget_hourly"
        return None

    def _cause_text(self, ledger: _PoolLedger, cause: str) -> str:
        budget = self.policy.budget
        if cause == "max_nodes":
            return f"{ledger.name} is at maxNodes={ledger.state.spec.max_nodes}"
        if cause == "no_capacity":
            return f"the provider has no capacity for {ledger.name} now (spot unavailable)"
        if cause == "max_per_tick":
            return f"scaleUp.maxNodesPerTick={self.policy.scale_up.max_nodes_per_tick} reached"
        if cause == "budget_monthly":
            return (
                f"cloud spend this month ${self.snap.budget.spent_this_month_dollars:.2f} "
                f"reached budget.monthlyLimit ${budget.monthly_limit:.2f}"
            )
        return (
            f"one more {ledger.name} node (${ledger.node_price:.2f}/h) would take cloud spend "
            f"${self._cloud_cost_per_hour():.2f}/h above budget.maxHourlyCost "
            f"${budget.max_hourly_cost or 0:.2f}/h"
        )

    def _block(self, target: _PoolLedger | str, cause: str, demand: _Demand) -> _Blocks:
        """Count the pod as blocked by ``cause`` at ``target``; returns the count."""
        pool = target if isinstance(target, str) else target.name
        entry = self.blocked.get((pool, cause))
        if entry is None:
            # The first blocked pod's view of the limit explains the whole group.
            entry = self.blocked[(pool, cause)] = _Blocks(
                reason="no pool can take it"
                if isinstance(target, str)
                else self._cause_text(target, cause)
            )
        entry.count(demand.gpus)
        return entry

    def _cloud_cost_per_hour(self) -> float:
        """Cloud spend rate, $/h: from launch (provisioning) until terminated (releasing,
        interrupted and released-this-tick nodes are still billed)."""
        return sum(
            (p.billed_nodes + p.provisioning + p.new_nodes) * p.node_price
            for p in self.pools.values()
            if is_cloud(p.tier)
        )

    # ---------------------------------------------------------------- 2c. gangs
    def _collect_gangs(self, gangs: dict[str, list[GPUPod]]) -> None:
        """The pending pods of each gang once its oldest is past the grace period, and one
        demand for each of its pods not created yet: a gang asks for all of it at once."""
        present: dict[str, int] = {}
        for pod in self.snap.pods:
            gang = pod.gang
            if gang is not None and gang in gangs and not pod.terminating:
                present[gang] = present.get(gang, 0) + 1
        for gang, pods in sorted(gangs.items()):
            since = min(p.pending_since for p in pods)
            if self.now - since < self.grace:
                continue
            pods.sort(key=attrgetter("key"))
            first = pods[0]
            missing = max(p.gang_size for p in pods) - present[gang]
            for i, pod in enumerate(pods + [first] * max(missing, 0)):
                self.pending.append(
                    _Demand(
                        pod.gpus,
                        pod.criticality,
                        since,
                        pod.key if i < len(pods) else f"{gang}#pod-{i}",
                        pod.pool,
                        pod.job,
                        pod.gpu_models,
                        gang=gang,
                    )
                )

    def _place_all_with_gangs(self, demands: list[_Demand]) -> None:
        """``_place_all`` when some pods belong to gangs: a gang is placed at the turn of its
        first pod, whole on nodes that exist (preempting if need be), or waits whole for owned
        GPUs that free up within its wait budget; else, after the pods before it, whole on
        nodes that exist, are on their way or are bought for it."""
        members: dict[str, list[_Demand]] = {}
        for demand in demands:
            if demand.gang is not None:
                members.setdefault(demand.gang, []).append(demand)
        later: list[_Demand | list[_Demand]] = []
        for demand in demands:
            if demand.gang is None:
                if not self._place_now(demand):
                    later.append(demand)
            elif demand.gang in members:
                gang = members.pop(demand.gang)
                if self._place_gang(gang, buy=False) or preempt_for_gang(self, gang):
                    continue
                if demand.gang in self.snap.check_only_gangs:
                    self.gangs[demand.gang] = GangPlacement(GangState.BLOCKED, cause="no_room")
                elif not wait_for_gang(self, gang):
                    later.append(gang)
        singles: list[_Demand] = []
        for item in later:
            if isinstance(item, _Demand):
                singles.append(item)
                continue
            if singles:
                self._place_on_the_way(singles)
                singles = []
            self._place_gang(item, buy=True)
        if singles:
            self._place_on_the_way(singles)

    def _place_gang(self, gang: list[_Demand], *, buy: bool) -> bool:
        """Every pod of a gang, largest first, on free GPUs of nodes that exist, then (when
        ``buy``) of nodes on their way and of new nodes of its scale target; or none of
        them: what was taken is given back, the nodes opened for it are closed again, and
        (when ``buy``) every pod of the gang is reported blocked. Preempting for a gang and
        waiting for owned GPUs are the rules before this one (core/gang_preempt.py,
        core/gang_wait.py)."""
        taken: list[tuple[str, int]] = []
        opened: list[str] = []
        closed_before = dict(self._closed)
        blocker: _PoolLedger | str = "-"
        cause: str | None = None
        ordered = sorted(gang, key=attrgetter("order"))
        for demand in ordered:
            order = self._free_order(demand)
            where = self._gang_slot(order, demand.gpus, future=False)
            if where is None and buy:
                where = self._gang_slot(order, demand.gpus, future=True)
                if where is None:
                    target = self._scale_target(demand)
                    blocker = demand.pool or "-" if target is None else target
                    cause = "no_pool" if target is None else self._open_node(target)
                    if target is not None and cause is None:
                        opened.append(target.newest_node)
                        where = self._take_best_fit(target, demand.gpus, future=True)
            if where is None:
                break
            taken.append((where, demand.gpus))
        else:
            for demand, (where, _) in zip(ordered, taken, strict=True):
                if where in self.new_node_names:
                    ledger = self.pools[self.node_pool[where]]
                    reasons = ledger.scale_reasons
                    reasons[demand.criticality] = reasons.get(demand.criticality, 0) + 1
                    ledger.scale_gpus += demand.gpus
            coming = any(where in self.future_nodes for where, _ in taken)
            self.gangs[ordered[0].gang or ""] = GangPlacement(
                GangState.COMING if coming else GangState.PLACED,
                pools=tuple(sorted({self.node_pool[where] for where, _ in taken})),
            )
            return True
        for where, gpus in taken:
            self._adjust(where, gpus)
        for name in reversed(opened):
            self._close_new_node(name)
        self._closed = closed_before
        if buy:
            cause = cause or "no_pool"
            self.gangs[gang[0].gang or ""] = GangPlacement(GangState.BLOCKED, cause=cause)
            for demand in gang:
                self._block(blocker, cause, demand)
            gpus = sum(d.gpus for d in gang)
            self.notes.append(
                f"gang {gang[0].gang}: {len(gang)} pod(s) needing {gpus} GPU(s) get no "
                f"capacity ({cause}): all of them at once or none"
            )
        return False

    def _gang_slot(self, order: list[_PoolLedger], gpus: int, *, future: bool) -> str | None:
        for ledger in order:
            where = self._take_best_fit(ledger, gpus, future=future)
            if where is not None:
                return where
        return None

    def _close_new_node(self, name: str) -> None:
        """Take back the last node opened this tick (its GPUs all free again)."""
        ledger = self.pools[self.node_pool.pop(name)]
        self.node_free.pop(name)
        ledger.future.discard(name)
        self.future_nodes.discard(name)
        self.new_node_names.discard(name)
        self.reserved.discard(name)
        ledger.new_nodes -= 1

    # ---------------------------------------------------------- preemption
    def _movable(self, job_key: str | None) -> JobState | None:
        if job_key is None or job_key in self.moving:
            return None
        if job_key in self._movable_cache:
            return self._movable_cache[job_key]
        found = self._movable_cache[job_key] = self._movable_uncached(job_key)
        return found

    def _movable_uncached(self, job_key: str) -> JobState | None:
        job = self.jobs.get(job_key)
        if job is None or job.criticality != PREEMPTIBLE or job.queued:
            return None  # Kueue owns a queued Job's suspend flag: it is never moved
        started = self._run_start(job)
        if started is None or self.now - started < self.min_runtime:
            return None
        if job.deadline_at is not None and not self._deadline_allows_move(job):
            return None
        if job.deadline_at is not None and job.pinned_by_operator:
            pinned = self.pools.get(job.pool or "")
            if pinned is not None and pinned.tier == ELASTIC:
                return None  # only the deadline rule's return moves it (_maybe_return_to_spot)
        return job

    def _job_gpus(self, job_key: str) -> int:
        gpus = self._gpus_of_job.get(job_key)
        if gpus is None:
            # pods_of_job does not change during a tick.
            gpus = self._gpus_of_job[job_key] = sum(
                p.gpus for p in self.pods_of_job.get(job_key, [])
            )
        return gpus

    def _lost_hours(self, job: JobState, run_started_at: float | None = None) -> float:
        """Hours of a GPU's work a move of the Job throws away: the restart overhead plus,
        when its checkpoint interval is known, the progress since its last checkpoint in the
        run that started at ``run_started_at`` (default: the Job's start)."""
        every = job.checkpoint_seconds
        started = self._run_start(job) if run_started_at is None else run_started_at
        if every is None or started is None:
            return self.restart_hours
        ran = max(self.now - started, 0.0)
        since_checkpoint = ran if every <= 0 else ran % every
        return self.restart_hours + since_checkpoint / 3600.0

    def _restart_gpu_hours(self, job_key: str) -> float:
        """GPU-hours a move of the Job throws away (its GPUs times ``_lost_hours``)."""
        hours = self._restart_hours_of.get(job_key)
        if hours is None:
            hours = self._job_gpus(job_key) * self._lost_hours(self.jobs[job_key])
            self._restart_hours_of[job_key] = hours
        return hours

    def _victims_on(self, node_name: str) -> _Victims:
        """The GPUs each movable Job holds on the node. Kept until a Job starts to move
        (``moving`` only grows during a tick; pods do not move)."""
        seen = self._victims_seen.get(node_name)
        moving = self.moving
        if seen is None:
            gpus_by_job: dict[str, int] = {}
            movable = self._movable_cache
            for pod in self.pods_on.get(node_name, ()):
                key = pod.job
                if key is None or key in moving:
                    continue
                # _movable inlined: every pod of every core node with preemptible work.
                job = movable[key] if key in movable else self._movable(key)
                if job is not None:
                    gpus_by_job[key] = gpus_by_job.get(key, 0) + pod.gpus
            seen = self._victims_seen[node_name] = _Victims(
                len(moving), gpus_by_job, sum(gpus_by_job.values())
            )
        elif seen.moving_seen != len(moving):
            seen.moving_seen = len(moving)
            if not moving.isdisjoint(seen.gpus_by_job):
                # A Job that started to move is no victim any more; the others still are.
                seen.gpus_by_job = {
                    key: gpus for key, gpus in seen.gpus_by_job.items() if key not in moving
                }
                seen.gpus = sum(seen.gpus_by_job.values())
        return seen

    def _victim_rank(self, job_key: str) -> tuple[float, int, float, str]:
        """Where a Job comes among the victims of a preemption: least work thrown away,
        fewest GPUs, the latest started; the same all tick (memo)."""
        rank = self._victim_ranks.get(job_key)
        if rank is None:
            rank = self._victim_ranks[job_key] = (
                self._restart_gpu_hours(job_key),
                self._job_gpus(job_key),
                -(self._run_start(self.jobs[job_key]) or 0.0),
                job_key,
            )
        return rank

    def _preempt_for(self, demand: _Demand) -> bool:
        policy = self.policy.preemption
        if not policy.enabled or self.moves_left <= 0:
            return False
        # Free plus movable GPUs on a node only shrink during a tick, so a size that found
        # no node once finds none later.
        failed = self._preempt_failed_at.get(demand.models)
        if failed is not None and demand.gpus >= failed:
            return False
        best: tuple[float, str, list[JobState]] | None = None
        feasible = 0
        gpus = demand.gpus
        node_free = self.node_free
        seen_victims = self._victims_seen
        for ledger in self._free_order(demand):
            if ledger.tier != CORE:
                continue
            for node_name in self._preemption_candidates(ledger.name):
                free = node_free.get(node_name)
                if free is None:
                    continue
                # Most nodes hold too few movable GPUs: said without a call once known (a
                # count kept from before a Job started to move is only ever too high).
                seen = seen_victims.get(node_name)
                if seen is not None and free + seen.gpus < gpus:
                    continue
                found = self._cheapest_victims(node_name, free, gpus)
                if found is None:
                    continue
                cost, chosen = found
                if len(chosen) > self.moves_left:
                    continue
                if best is None or (cost, node_name) < (best[0], best[1]):
                    best = (cost, node_name, chosen)
                feasible += 1
                if feasible >= PREEMPTION_SEARCH_NODES:
                    break
        if best is None:
            self._preempt_failed_at[demand.models] = (
                demand.gpus if failed is None else min(failed, demand.gpus)
            )
            return False
        _, node_name, chosen = best
        self._preempt_victims(node_name, chosen, demand.gpus, demand)
        return True

    def _cheapest_victims(
        self, node_name: str, free: int, gpus: int
    ) -> tuple[float, list[JobState]] | None:
        """The preemptible Jobs on ``node_name`` whose GPUs, with its ``free`` ones, make
        ``gpus``, cheapest to restart first (least work thrown away: GPUs times the time
        since the last checkpoint, when known; then the fewest GPUs), and the GPU-hours their
        restarts throw away; None when all of them are not enough."""
        found = self._victims_on(node_name)
        if free + found.gpus < gpus:
            return None
        victims = found.gpus_by_job
        ranked = sorted(victims, key=self._victim_rank) if len(victims) > 1 else victims
        chosen: list[JobState] = []
        got = free
        cost = 0.0
        for key in ranked:
            if got >= gpus:
                break
            chosen.append(self.jobs[key])
            got += victims[key]
            cost += self._restart_gpu_hours(key)
        return cost, chosen

    def _preempt_victims(
        self,
        node_name: str,
        chosen: list[JobState],
        gpus: int,
        demand: _Demand | None,
        cause: str = "",
    ) -> list[_Demand]:
        """Preempt ``chosen`` off ``node_name`` and take ``gpus`` of it (for ``demand``, or
        for ``cause``); returns the victims' pods requeued. The victims leave and the GPUs are
        taken before each victim's destination is chosen: the victims may wait for other
        owned GPUs, not for these."""
        first = len(self.requeued_by_preemption)
        for job in chosen:
            self._release_job_pods(job, None)
        self._adjust(node_name, -gpus)
        self.reserved.add(node_name)
        requeued = self.requeued_by_preemption[first:]
        for job in chosen:
            self._move_job(job, node_name, demand, [d for d in requeued if d.job == job.key], cause)
        return requeued

    def _preemption_candidates(self, pool: str) -> list[str]:
        cached = self._candidates_cache.get(pool)
        if cached is None:
            cached = [
                n
                for n, pods in self.pods_on.items()
                if self.node_pool.get(n) == pool
                and any(p.criticality == PREEMPTIBLE and p.job for p in pods)
            ]
            cached.sort()
            self._candidates_cache[pool] = cached
        return cached

    _candidates_cache: dict[str, list[str]]

    def _move_job(
        self,
        job: JobState,
        node_name: str,
        demand: _Demand | None,
        requeued: list[_Demand],
        cause: str = "",
    ) -> None:
        """The preemption of a victim whose pods were released (``requeued``): to spot, or
        to the queue when owned GPUs free up for it within its wait budget."""
        target = None
        where = "the queue (no spot pool)"
        if self.policy.preemption.move_to_spot:
            if requeued and all(
                self._owned_in_time(d, self._wait_until(d)) is not None for d in requeued
            ):
                where = "the queue: owned GPUs free up for it within its waitBudget"
            else:
                target = self._spot_target(job.gpus_per_pod, job.gpu_models)
                if target is not None:
                    where = f"spot pool {target.name}"
        for moved in requeued:
            moved.pool = target.name if target else None
            moved.free_order = None
        gpus = self._job_gpus(job.key)
        self.actions.append(
            MoveJob(
                namespace=job.namespace,
                job=job.name,
                from_pool=self.node_pool.get(node_name),
                to_pool=target.name if target else None,
                gpus=gpus,
                kind=ActionKind.PREEMPT,
                reason=(
                    f"{demand.criticality} pod {demand.key} needs {demand.gpus} GPU(s)"
                    if demand is not None
                    else cause
                )
                + f" on core node {node_name}: preempt preemptible Job {job.key} "
                f"({gpus} GPU(s)) and move it to {where}",
            )
        )

    def _release_job_pods(self, job: JobState, to_pool: str | None) -> None:
        self.moves_left -= 1
        self.moving.add(job.key)
        for pod in self.pods_of_job.get(job.key, []):
            if pod.node is not None:
                self._adjust(pod.node, pod.gpus)
            self.requeued_by_preemption.append(
                _Demand(
                    pod.gpus,
                    Criticality.PREEMPTIBLE,
                    self.now if job.started_at is None else job.started_at,
                    pod.key,
                    to_pool,
                    job.key,
                    pod.gpu_models or job.gpu_models,
                    waiting_since=self.now,
                    gang=job.key if job.gang else None,
                )
            )

    # -------------------------------------------------------- 3. consolidation
    def _consolidate(self) -> None:
        policy = self.policy
        if not policy.consolidation.enabled or self.moves_left <= 0:
            return
        if not self._any_preemptible_job():
            return  # every pod of a candidate node belongs to a movable (preemptible) Job
        candidates: list[tuple[float, str, list[JobState], _PoolLedger]] = []
        settled: dict[str, int] = {}  # nothing below takes or frees GPUs: see _core_room
        room: dict[tuple[tuple[int, ...], tuple[str, ...]], _PoolLedger | None] = {}
        """``_core_room`` by (pod sizes, GPU models), for the same reason."""
        pods_on = self.pods_on
        reserved = self.reserved
        # Owned and committed nodes are paid whether used or not: moving off saves nothing.
        # The candidates are sorted below, so the order of this scan does not matter.
        for node_name in self.unpaid_open:
            pods = pods_on.get(node_name)
            if pods is None or node_name in reserved:
                continue
            ledger = self.pools[self.node_pool[node_name]]
            jobs: dict[str, JobState] = {}
            gpus = 0
            for pod in pods:
                job = self._movable(pod.job)
                if job is None or (pod.pool == ledger.name and not job.pinned_by_operator):
                    jobs = {}
                    break
                jobs[job.key] = job
                gpus += pod.gpus
            if not jobs:
                continue  # nothing to move
            restrictions = {j.gpu_models for j in jobs.values()}
            if len(restrictions) > 1:
                continue  # jobs that may run on different GPU models
            models = restrictions.pop()
            # Idle owned GPUs are paid for anyway: the best place; else spot for elastic work.
            sizes = (
                (pods[0].gpus,)
                if len(pods) == 1
                else tuple(sorted([p.gpus for p in pods], reverse=True))
            )
            if (sizes, models) in room:
                target = room[sizes, models]
            else:
                target = room[sizes, models] = self._core_room(list(sizes), models, settled)
            if target is None and ledger.tier == ELASTIC:
                target = self._spot_target(max(j.gpus_per_pod for j in jobs.values()), models)
            if target is None:
                continue
            savings = ledger.node_price - gpus * target.gpu_price
            if savings < policy.consolidation.min_savings_per_hour:
                continue
            elapsed_h = (
                min(self.now - (self._run_start(j) or self.now) for j in jobs.values()) / 3600
            )
            # The work redone after a restart, priced at the dearer of the two places.
            lost_hours = max(self._lost_hours(j) for j in jobs.values())
            restart_cost = gpus * max(target.gpu_price, ledger.gpu_price) * lost_hours
            if savings * elapsed_h <= restart_cost:
                continue
            candidates.append(
                (-savings, node_name, sorted(jobs.values(), key=lambda j: j.key), target)
            )
        candidates.sort(key=lambda c: (c[0], c[1]))
        for neg_savings, node_name, victims, target in candidates:
            if len(victims) > self.moves_left or any(v.key in self.moving for v in victims):
                continue
            if target.tier == CORE:
                # Earlier moves this tick may have taken the room.
                pod_gpus = [p.gpus for v in victims for p in self.pods_of_job.get(v.key, [])]
                if self._core_room(pod_gpus, victims[0].gpu_models) is not target:
                    continue
            elif sum(self._job_gpus(v.key) for v in victims) > self._headroom_gpus(target):
                continue
            source = self.pools[self.node_pool[node_name]]
            for victim in victims:
                self._consolidate_job(
                    victim,
                    source,
                    target,
                    self._job_gpus(victim.key),
                    f"{source.tier} node {node_name} runs only preemptible work: moving Job "
                    f"{victim.key} to {target.tier} pool {target.name} saves "
                    f"${-neg_savings:.2f}/h once the node is released",
                )
                self.requeued_by_preemption = []
                self._release_job_pods(victim, target.name)
                self._place_all(self.requeued_by_preemption)
            self.requeued_by_preemption = []

    # ---------------------------------------------------- 3b. return to core
    def _return_to_core(self) -> None:
        """Rule 4: Jobs that alone keep a cloud node busy move back to owned GPUs free now,
        when releasing that node saves more over their remaining run than the work their
        restart throws away: standard Jobs that opt in (hybridgpu.io/return-to-core:
        "true"), and preemptible Jobs that leave at least half of a multi-GPU cloud node
        empty (``_may_return``). Other preemptible work comes back only to owned nodes idle
        for their idleFor (``_consolidate``). A standard Job for which no owned GPUs are
        free takes those of preemptible Jobs on an owned node, as pending firm work does
        (``_room_by_preemption``), when the saving less the victims' spot nodes still pays
        for both restarts."""
        if not self.policy.consolidation.enabled or self.moves_left <= 0:
            return
        if not self._any_preemptible_job() and not self._opted_to_return():
            return  # every pod of a candidate node is of an opted-in or a movable Job
        candidates: list[tuple[float, str, list[GPUPod]]] = []
        pods_on = self.pods_on
        reserved = self.reserved
        # Owned and committed nodes are paid whether used or not: moving off saves nothing.
        # The candidates are sorted below, so the order of this scan does not matter.
        for node_name in self.unpaid_open:
            pods = pods_on.get(node_name)
            if pods is None or node_name in reserved:
                continue
            ledger = self.pools[self.node_pool[node_name]]
            preemptible = False
            used = 0
            for p in pods:
                used += p.gpus
                if p.criticality == PREEMPTIBLE:
                    preemptible = True
            if preemptible and 2 * used > ledger.per_node:
                continue  # the node is mostly used: see _may_return
            if all(self._may_return(p, ledger) for p in pods):
                candidates.append((-ledger.node_price, node_name, pods))
        for _, node_name, pods in sorted(candidates, key=lambda c: (c[0], c[1])):
            jobs = sorted({p.job for p in pods if p.job is not None})
            if len(jobs) > self.moves_left or any(
                self.jobs[k].parallelism != sum(1 for p in pods if p.job == k) for k in jobs
            ):
                continue  # a Job with pods on other nodes too stays (they would restart)
            source = self.pools[self.node_pool[node_name]]
            gpus = sum(p.gpus for p in pods)
            taken = self._take_owned([p for p in pods])
            room: _PreemptedRoom | None = None
            if taken is None:
                room = self._room_by_preemption(pods, gpus)
                if room is None:
                    continue
                taken = [(room.node, 0)]
            target = self.pools[self.node_pool[taken[0][0]]]
            savings = source.node_price - gpus * target.gpu_price
            if room is not None:
                savings -= room.spot_dollars_per_hour
            # A Job that checkpoints moves right after a checkpoint, so that it loses only the
            # restart: until then the plan asks to be looked at again.
            # Its run is its pods' (all on this node): a Kubernetes Job's own startTime comes
            # before its pods had a node, by a boot when the node was bought for it.
            runs = {k: self._run_start(self.jobs[k], pods) for k in jobs}
            until_checkpoint = max(self._until_checkpoint(self.jobs[k], runs[k]) for k in jobs)
            # The work a restart throws away, at the cloud price, against the saving over
            # the run left (stated, else as long as it has run: the consolidation estimate).
            lost_h = (
                self.restart_hours
                if until_checkpoint > 0
                else max(self._lost_hours(self.jobs[k], runs[k]) for k in jobs)
            )
            lost = gpus * source.gpu_price * lost_h
            if room is not None:
                lost += room.lost_dollars
            left_h = min(self._hours_left(self.jobs[k], pods) for k in jobs)
            left_h -= until_checkpoint / 3600
            pays = savings >= self.policy.consolidation.min_savings_per_hour and (
                savings * left_h > lost
            )
            if not pays or until_checkpoint > 0:
                for node, taken_gpus in taken:
                    self._adjust(node, taken_gpus)
                if pays:
                    self._recheck(self.now + until_checkpoint)
                continue
            if room is not None:
                if len(jobs) + len(room.victims) > self.moves_left:
                    continue
                self._preempt_room(
                    room,
                    gpus,
                    f"standard Job {jobs[0]} (hybridgpu.io/return-to-core) alone keeps "
                    f"{source.tier} node {node_name} busy and needs {gpus} GPU(s)",
                )
            for key in jobs:
                job = self.jobs[key]
                self.moves_left -= 1
                self.moving.add(key)
                self._consolidate_job(
                    job,
                    source,
                    target,
                    sum(p.gpus for p in pods if p.job == key),
                    f"{job.criticality} Job {key}"
                    + (" (hybridgpu.io/return-to-core)" if job.return_to_core else "")
                    + f" alone keeps {source.tier} node {node_name} busy"
                    + ("" if job.return_to_core else f" ({gpus} of {source.per_node} GPUs)")
                    + f" and owned GPUs of {target.name} "
                    f"are free: moving it back saves ${savings:.2f}/h once the node is "
                    f"released, more over its {left_h:.1f} h left than the "
                    f"${lost:.2f} of work its restart throws away",
                )
            for p in pods:
                self._adjust(node_name, p.gpus)

    def _room_by_preemption(self, pods: list[GPUPod], gpus: int) -> _PreemptedRoom | None:
        """Room on one owned node for a returning Job's ``pods`` (``gpus`` in all) made by
        preempting preemptible Jobs there, as pending firm work would (``_preempt_for``):
        only for Jobs that opt in to return to core (standard), never for preemptible work.
        The node whose victims lose the least work; what their spot nodes will cost per hour
        and the work they throw away (at the spot price) are weighed by the caller."""
        policy = self.policy.preemption
        if not policy.enabled or not policy.move_to_spot:
            return None
        if any(p.criticality != Criticality.STANDARD for p in pods):
            return None
        models = pods[0].gpu_models or self.jobs[pods[0].job or ""].gpu_models
        best: tuple[float, str, list[JobState]] | None = None
        for ledger in self._paid_pools():
            if ledger.tier != CORE or ledger.per_node < gpus or not _has_model(ledger, models):
                continue
            for node_name in self._preemption_candidates(ledger.name):
                free = self.node_free.get(node_name)
                if free is None or node_name in self.future_nodes:
                    continue
                free -= self.claimed.get(node_name, 0)
                found = self._cheapest_victims(node_name, free, gpus)
                if found is None:
                    continue
                cost, chosen = found
                if best is None or (cost, node_name) < (best[0], best[1]):
                    best = (cost, node_name, chosen)
        if best is None:
            return None
        _, node_name, chosen = best
        per_hour = 0.0
        lost = 0.0
        for job in chosen:
            spot = self._spot_target(job.gpus_per_pod, job.gpu_models)
            if spot is None:
                return None  # a victim would have nowhere to go but the queue
            per_hour += spot.node_price * len(self.pods_of_job.get(job.key, []))
            lost += self._restart_gpu_hours(job.key) * spot.gpu_price
        return _PreemptedRoom(node_name, chosen, per_hour, lost)

    def _preempt_room(self, room: _PreemptedRoom, gpus: int, why: str) -> None:
        """Preempt ``room``'s victims (to spot, or to the queue when owned GPUs free up for
        them in time) and take ``gpus`` of its node; their new nodes are planned now."""
        self.requeued_by_preemption = []
        requeued = self._preempt_victims(room.node, room.victims, gpus, None, why)
        self._place_all(sorted(requeued, key=attrgetter("order")))
        self.requeued_by_preemption = []

    def _opted_to_return(self) -> set[str]:
        """The Jobs that opt in to return to core (and no queue holds); found on first use."""
        if self._opted is None:
            self._opted = {j.key for j in self.snap.jobs if j.return_to_core and not j.queued}
        return self._opted

    def _may_return(self, pod: GPUPod, ledger: _PoolLedger) -> bool:
        """Whether the pod's Job may move from this cloud node back to owned GPUs.

        A standard Job when it opts in. A preemptible Job when the caller found its node at
        least half empty (the half-empty node is the waste: its price is paid mostly for
        GPUs nobody uses, and releasing it saves far more per hour than the GPUs moved),
        when it states its checkpoint interval (it moves right after a checkpoint and loses
        only the restart) and when its delay so far, two restarts and one checkpoint
        interval fit in the preemptible waitBudget (room for this restart and one more
        preemption by firm work). Preemptible Jobs that fill most of a node, e.g. alone on
        a 1-GPU spot node, stay: on openb with measured spot preemptions, returning them
        made firm work preempt them again and again, and preemptible work finished 4.3-7.7 h
        late (allowance 4 h; bench/simulate_openb.py --spot-trace)."""
        if pod.criticality == Criticality.STANDARD:
            if (
                pod.job not in self._opted_to_return()
                or pod.job in self.moving
                or pod.started_at is None
            ):
                return False
            job = self.jobs.get(pod.job or "")
            # Its restart must not make it later than the class tolerates: its waitBudget
            # plus a node's boot (the delay of a pod that waited its budget, then a boot).
            return job is not None and (
                self._delay_seconds(job) + self.restart_hours * 3600
                <= self.wait_budget[Criticality.STANDARD] + BOOT_ALLOWANCE_SECONDS
            )
        if pod.criticality != PREEMPTIBLE:
            return False
        job = self._movable(pod.job)
        if job is None or (pod.pool == ledger.name and not job.pinned_by_operator):
            return False  # too young, moving, or pinned to that pool by its owner
        every = job.checkpoint_seconds
        room = self._delay_seconds(job) + 2 * self.restart_hours * 3600 + (every or 0.0)
        return bool(every) and room <= self.wait_budget[PREEMPTIBLE]

    def _delay_seconds(self, job: JobState) -> float:
        """How late the Job already is: the time since its creation that its saved progress
        does not account for, up to its current run (0 when its creation is not known)."""
        started = self._run_start(job)
        if job.created_at is None or started is None:
            return 0.0
        return max(started - job.created_at - job.progress_seconds, 0.0)

    def _any_preemptible_job(self) -> bool:
        """Whether any Job is preemptible (else ``_movable`` finds none)."""
        if self._preemptible_jobs is None:
            self._preemptible_jobs = any(j.criticality == PREEMPTIBLE for j in self.jobs.values())
        return self._preemptible_jobs

    def _paid_pools(self) -> list[_PoolLedger]:
        """The pools paid for whether used or not (owned, committed), the cheapest to use
        first (committed ones, then owned by their power), then by name."""
        if self._paid is None:
            self._paid = sorted(
                (p for p in self.pools.values() if paid_whether_used(p.state.spec)),
                key=lambda p: (p.gpu_price, p.name),
            )
        return self._paid

    def _take_owned(self, pods: list[GPUPod]) -> list[tuple[str, int]] | None:
        """GPUs paid for whether used or not (owned, committed) free now (none promised to
        waiting pods) for every pod, largest first, the cheapest to use first (committed
        ones, then owned by their power), taken; None (and nothing taken) when they do not
        all fit."""
        taken: list[tuple[str, int]] = []
        cores = self._paid_pools()
        largest = max((p.gpus for p in pods), default=0)
        if all(ledger.buckets.most_free < largest for ledger in cores):
            return None  # the first pod fits nowhere: nothing is taken or touched
        for pod in sorted(pods, key=lambda p: -p.gpus):
            where = None
            for ledger in cores:
                if not _has_model(ledger, pod.gpu_models):
                    continue
                where = self._take_best_fit(ledger, pod.gpus)
                if where is not None and self.node_free[where] < self.claimed.get(where, 0):
                    self._adjust(where, pod.gpus)  # promised to a waiting pod
                    where = None
                if where is not None:
                    break
            if where is None:
                for node, gpus in taken:
                    self._adjust(node, gpus)
                return None
            taken.append((where, pod.gpus))
        return taken

    def _until_checkpoint(self, job: JobState, run_started_at: float | None) -> float:
        """Seconds until the Job's next checkpoint in the run that started at
        ``run_started_at``, or 0 when it checkpointed within the last two ticks (or its
        checkpoints or start are not known). A run after a move of the operator (``restarts``)
        first loads its checkpoint (restartOverhead), so its checkpoints count from there."""
        every = job.checkpoint_seconds
        if not every or run_started_at is None:
            return 0.0
        start_up = self.restart_hours * 3600.0 if job.restarts else 0.0
        since = max(self.now - run_started_at - start_up, 0.0) % every
        return 0.0 if since <= self.checkpoint_window else every - since

    def _recheck(self, at: float) -> None:
        """The plan should be looked at again at ``at`` (seconds since the epoch)."""
        self.recheck_at = at if self.recheck_at is None else min(self.recheck_at, at)

    def _hours_left(self, job: JobState, pods: list[GPUPod]) -> float:
        """Hours of the Job's run left: as stated (hybridgpu.io/expected-duration), else as
        long as it has already run."""
        started = min((p.started_at for p in pods if p.started_at is not None), default=self.now)
        ran = max(self.now - started, 0.0)
        if job.expected_duration_seconds is not None:
            return max(job.expected_duration_seconds - job.progress_seconds - ran, 0.0) / 3600
        return ran / 3600

    def _core_room(
        self,
        pod_gpus: list[int],
        models: tuple[str, ...] = (),
        settled: dict[str, int] | None = None,
    ) -> _PoolLedger | None:
        """The cheapest core pool whose settled idle nodes take all these pods (first-fit
        decreasing), or None. Only nodes idle for the pool's scaleDown.idleFor count: owned
        GPUs freed a moment ago are likely wanted by the next critical pod, and work moved
        back onto them would be preempted again. ``settled``: a memo of each pool's count of
        such nodes, for callers that take and free no GPUs between calls."""
        cores = self._cores_by_model.get(models)
        if cores is None:
            cores = self._cores_by_model[models] = sorted(
                (p for p in self.pools.values() if p.tier == CORE and _has_model(p, models)),
                key=lambda p: (p.gpu_price, p.name),
            )
        for ledger in cores:
            idle = None if settled is None else settled.get(ledger.name)
            if idle is None:
                idle = self._settled_idle(ledger)
                if settled is not None:
                    settled[ledger.name] = idle
            counts = [0] * (ledger.per_node + 1)
            counts[ledger.per_node] = idle
            placed = 0
            for gpus in sorted(pod_gpus, reverse=True):
                for free in range(gpus, ledger.per_node + 1):
                    if counts[free]:
                        counts[free] -= 1
                        counts[free - gpus] += 1
                        placed += 1
                        break
                else:
                    break
            if placed == len(pod_gpus):
                return ledger
        return None

    def _settled_idle(self, ledger: _PoolLedger) -> int:
        """The pool's nodes with every GPU free, idle for its idleFor."""
        settled = self.now - ledger.idle_for_seconds
        nodes = self.nodes
        return sum(
            1
            for name in ledger.buckets.with_free(ledger.per_node)
            if (since := nodes[name].idle_since) is not None and since <= settled
        )

    def _headroom_gpus(self, ledger: _PoolLedger) -> int:
        free = ledger.buckets.total + ledger.future.total
        nodes = min(
            ledger.state.spec.max_nodes
            - ledger.live_nodes
            - ledger.provisioning
            - ledger.new_nodes,
            self.policy.scale_up.max_nodes_per_tick - ledger.new_nodes,
        )
        budget = self.policy.budget
        if budget.max_hourly_cost is not None:
            room = budget.max_hourly_cost - self._cloud_cost_per_hour()
            nodes = min(nodes, int(room // ledger.node_price) if ledger.node_price > 0 else nodes)
        if budget.monthly_limit is not None and (
            self.snap.budget.spent_this_month_dollars >= budget.monthly_limit
        ):
            nodes = 0
        return free + max(nodes, 0) * ledger.per_node

    # --------------------------------------------------------------- scale-up
    def _power_on_to_minimum(self) -> None:
        """An owned pool with power keeps power.minPoweredOn nodes on or booting (a machine
        that died, or replicas someone lowered): power on the missing ones."""
        for ledger in self.pools.values():
            spec = ledger.state.spec
            if spec.power is None or not powered(spec):
                continue
            on = ledger.live_nodes + ledger.provisioning + ledger.new_nodes
            missing = spec.power.min_powered_on - on
            for _ in range(max(missing, 0)):
                if self._open_node(ledger) is not None:
                    break
                ledger.scale_reasons["power.minPoweredOn"] = (
                    ledger.scale_reasons.get("power.minPoweredOn", 0) + 1
                )

    def _emit_scale_ups(self) -> None:
        for ledger in self.pools.values():
            if ledger.new_nodes <= 0:
                continue
            if ledger.tier == CORE:
                self.actions.append(self._power_on(ledger))
                continue
            by = ", ".join(
                f"{c} {n}"
                for c, n in sorted(
                    ledger.scale_reasons.items(), key=lambda i: CRITICALITY_RANK[i[0]]
                )
            )
            self.actions.append(
                ScaleUp(
                    pool=ledger.name,
                    nodes=ledger.new_nodes,
                    reason=f"{sum(ledger.scale_reasons.values())} pending pod(s) ({by}) need "
                    f"{ledger.scale_gpus} GPU(s) that fit nowhere: add {ledger.new_nodes} "
                    f"{ledger.name} node(s) of {ledger.per_node} GPU(s) at "
                    f"${ledger.node_price:.2f}/h each",
                )
            )

    def _power_on(self, ledger: _PoolLedger) -> ScaleUp:
        spec = ledger.state.spec
        off = spec.max_nodes - ledger.live_nodes - ledger.provisioning
        minimum = ledger.scale_reasons.pop("power.minPoweredOn", 0)
        pods = sum(ledger.scale_reasons.values())
        why = (
            f"{pods} pending pod(s) need {ledger.scale_gpus} GPU(s) that fit nowhere"
            if pods
            else ""
        )
        if minimum:
            floor = f"power.minPoweredOn={spec.power.min_powered_on if spec.power else 0}"
            why = f"{why}; {floor}" if why else f"{floor} not met"
        return ScaleUp(
            pool=ledger.name,
            nodes=ledger.new_nodes,
            kind=ActionKind.POWER_ON,
            reason=f"{why}: power on {ledger.new_nodes} of {off} powered-off owned "
            f"{ledger.name} node(s) of {ledger.per_node} GPU(s) (boot "
            f"{_hours_minutes(ledger.boot_seconds)}) at ${ledger.launch_price:.2f}/h of "
            "electricity each, before buying cloud capacity",
        )

    # ---------------------------------------------------------- 4. idle release
    def _release_idle(self) -> None:
        metrics = self.snap.metrics
        candidates: list[tuple[float, float, str]] = []
        continuing: list[ReleaseNode] = []
        for node in self.nodes.values():
            if node.idle_since is None and not node.releasing:
                continue  # busy, and no release to continue
            ledger = self.pools[node.pool]
            owned = not is_cloud(ledger.tier)
            if owned and not powered(ledger.state.spec):
                continue
            if node.leaving:
                continue  # a leaving node's release is over: never terminated twice
            if node.releasing and node.interruption_deadline is None:
                continuing.append(
                    ReleaseNode(
                        pool=node.pool,
                        node=node.name,
                        reason=f"continue {'powering off' if owned else 'releasing'} {node.name}",
                        kind=ActionKind.POWER_OFF if owned else ActionKind.RELEASE_NODE,
                    )
                )
                continue
            if node.name in self.reserved or node.name not in self.node_free:
                continue
            spec = ledger.state.spec
            if owned:
                if not self._may_power_off(node, ledger):
                    continue
            elif not spec.scale_down.enabled or ledger.new_nodes > 0:
                continue
            if node.idle_since is None:
                continue
            if self.now - node.idle_since < ledger.idle_for_seconds:
                continue
            pods = self.pods_on.get(node.name, [])
            if pods and not self._drainable(node, pods, spec.scale_down.idle_utilization_percent):
                continue
            candidates.append((-ledger.launch_price, node.idle_since, node.name))
        if not candidates and not continuing:
            return
        if not metrics.available:
            self.notes.append(
                f"utilization data unavailable ({metrics.reason or 'stale'}): "
                f"{len(candidates) + len(continuing)} idle node(s) kept (fail static)"
            )
            return
        self.actions.extend(continuing)
        candidates.sort()
        budget_left = self.policy.disruption.max_nodes_per_tick
        released_in_pool: dict[str, int] = {}
        for _, idle_since, name in candidates:
            if budget_left <= 0:
                break
            node = self.nodes[name]
            if node.utilization_stale:
                continue
            ledger = self.pools[node.pool]
            spec = ledger.state.spec
            remaining = ledger.live_nodes + ledger.provisioning - ledger.released
            if remaining - 1 < held_nodes(spec):  # minNodes, the commitment, minPoweredOn
                continue
            cap = max(1, math.floor(self.policy.disruption.max_percent / 100 * ledger.live_nodes))
            if released_in_pool.get(ledger.name, 0) >= cap:
                continue
            released_in_pool[ledger.name] = released_in_pool.get(ledger.name, 0) + 1
            ledger.released += 1
            budget_left -= 1
            idle_min = (self.now - idle_since) / 60
            if ledger.tier == CORE:
                self.actions.append(
                    ReleaseNode(
                        pool=ledger.name,
                        node=name,
                        kind=ActionKind.POWER_OFF,
                        reason=f"owned node {name} has had no pods for {idle_min:.0f} min "
                        f"(power.idleFor {spec.power.idle_for if spec.power else ''}): power it "
                        f"off, saving ${ledger.launch_price:.2f}/h of electricity; "
                        f"{remaining - 1} of {spec.max_nodes} stay on (minPoweredOn "
                        f"{held_nodes(spec)})",
                    )
                )
                continue
            self.actions.append(
                ReleaseNode(
                    pool=ledger.name,
                    node=name,
                    reason=f"{ledger.tier} node {name} idle for {idle_min:.0f} min "
                    f"(threshold {spec.scale_down.idle_for}): cordon, drain and terminate, "
                    f"saving ${ledger.node_price:.2f}/h",
                )
            )

    def _may_power_off(self, node: NodeState, ledger: _PoolLedger) -> bool:
        """An owned node is powered off only when it has no pods at all (never drained), is
        Ready, nothing was placed on or promised from it this tick, and the pool powers on
        nothing this tick."""
        return (
            ledger.new_nodes == 0
            and node.ready
            and not self.pods_on.get(node.name)
            and self.node_free.get(node.name) == min(node.gpus, ledger.per_node)
            and not self.claimed.get(node.name)
        )

    def _drainable(self, node: NodeState, pods: list[GPUPod], threshold: float) -> bool:
        """A busy node may be released only when its GPUs are nearly unused and every pod
        on it belongs to a preemptible Job (which requeues)."""
        if node.utilization_percent is None or node.utilization_percent >= threshold:
            return False
        return all(self._movable(p.job) is not None for p in pods) and self._fits_elsewhere(
            node, pods
        )

    def _replace_unhealthy(self) -> None:
        for name, reason in sorted(self.unhealthy.items()):
            self.actions.append(ReleaseNode(pool=self.nodes[name].pool, node=name, reason=reason))

    # ----------------------------------------------------------- 5. GPU health
    def _gpu_health(self) -> None:
        for node in self.nodes.values():
            if node.xid_errors > 0 and not node.cordoned and not node.leaving:
                self.actions.append(
                    CordonUnhealthy(
                        pool=node.pool,
                        node=node.name,
                        reason=f"{node.name} reports {node.xid_errors} GPU XID error(s): cordon "
                        "it so no new work lands there",
                    )
                )

    # ------------------------------------------------------------ 2b. deadlines
    def _deadlines(self) -> None:
        """Preemptible Jobs with a deadline wait for spot or owned GPUs while their slack
        allows, and move to on-demand when waiting (or staying on spot) longer could miss
        it (core/deadline.py; docs/concepts.md, "Deadlines")."""
        with_deadline = sorted(
            (
                j
                for j in self.snap.jobs
                if j.deadline_at is not None and j.criticality == PREEMPTIBLE and not j.queued
            ),
            key=attrgetter("key"),
        )
        if not with_deadline:
            return
        keys = {j.key for j in with_deadline}
        demands: dict[str, list[_Demand]] = {}
        for demand in self.pending:
            if demand.job in keys:
                demands.setdefault(demand.job, []).append(demand)
        exposed = self._waiting_for_their_node(with_deadline)
        for job in with_deadline:
            key = job.key
            if key in self.moving or job.suspended:
                continue  # a move finishes first; a Job its owner suspended stays so
            slack = self._slack(job)
            if slack is None:
                continue
            placed = [p.node for p in self.pods_of_job.get(key, []) if p.node is not None]
            if placed:
                self.progress_by_job[key] = slack.saved
            # Pods on a node being interrupted are requeued already: the Job waits.
            bound = [n for n in placed if n in self.nodes and not self._interrupted(n)]
            from_pool: str | None
            if bound:
                on_spot = [n for n in bound if self._tier_of_node(n) == SPOT]
                if not on_spot:
                    self._maybe_return_to_spot(job, slack, bound)
                    continue
                if not must_leave_spot(slack, self.deadline_margin):
                    continue
                doing, from_pool = "runs on spot", self.node_pool[on_spot[0]]
            elif key in demands and must_start_on_demand(
                slack, job.checkpoint_seconds, self.deadline_margin + self._return_room(job)
            ):
                doing, from_pool = "waits", job.pool
            else:
                continue
            target = self._on_demand_target(job)
            if target is None:
                self.notes.append(f"Job {key} may miss its deadline: no on-demand pool can run it")
                continue
            rivals = [k for k in exposed.get(target.name, ()) if k != key]
            if rivals and job.pool != target.name:
                # Its pods would wait beside a Job that needs the node on its way there, and
                # the scheduler may give that node to either (docs/concepts.md, "Deadlines").
                # It waits only while it could still be taken off in time were it to start
                # on another node meanwhile (a spot node launched for others): an interval
                # from now, its slack as a running Job (a stop to pay) stays above the margin.
                interval = self.deadline_margin / 2
                hold = slack.seconds - self.stop_seconds - interval - self.deadline_margin
                if not bound and hold >= 0:
                    self.notes.append(
                        f"Job {key} waits a tick before it moves to on-demand pool "
                        f"{target.name}: Job {rivals[0]} waits there for the node launched for "
                        "it and would miss its deadline on a node launched now"
                    )
                    # Looked at again once that Job is on its node (an event), at the latest
                    # an interval after this one could no longer wait.
                    self._recheck(self.now + hold + interval)
                    continue
                target = self._on_demand_target(job, avoid=exposed.keys()) or target
            for demand in demands.get(key, []):
                demand.pool = target.name
            if bound:
                self.actions.append(self._deadline_action(job, slack, target, doing, from_pool))
                self._release_job_pods(job, target.name)
            elif job.pool != target.name:
                self.actions.append(self._deadline_action(job, slack, target, doing, from_pool))
                self.moving.add(key)

    # ------------------------------------------------------- 2c. reservations
    def _reserve_nodes(self) -> None:
        """A Job the deadline rule moved to an on-demand pool, waiting there, gets the pool's
        first new empty node kept for it, and its pods are placed there; the node stays kept
        while the Job runs on it, and its reservation ends once the Job neither waits for it
        nor runs there, another pod took it first, or it lasted (core/reserve.py)."""
        waiting = self._awaiting_reserved_nodes()
        if not waiting and not self.kept_nodes:
            return
        kept: dict[str, list[str]] = {}
        for name in self.kept_nodes:
            node = self.nodes[name]
            key = node.reserved_for
            assert key is not None
            job = waiting.get(key)
            waits = job is not None and job.pool == node.pool
            on_it = self.pods_on.get(name, ())
            runs = self._runs_on_kept_node(key, node)
            others = any(p.job != key for p in on_it)
            usable = name in self.node_free  # cordoned, going, NotReady too long: no pods
            if not usable or reservation_ends(node, runs, others, waits, self.now):
                if not usable:
                    why = "no pod can land on it"
                elif others and not runs:
                    why = "another pod took it"
                elif job is None:
                    why = f"Job {key} neither waits for it nor runs on it"
                elif not waits:
                    why = f"Job {key} was moved to another pool"
                else:
                    why = f"it has been kept for {RESERVATION_SECONDS / 60:.0f} min"
                self.actions.append(
                    ReserveNode(
                        pool=node.pool,
                        node=name,
                        job=None,
                        reason=f"node {name} of pool {node.pool} is no longer kept for Job "
                        f"{key}: {why}",
                        kind=ActionKind.UNRESERVE_NODE,
                    )
                )
                continue  # its free GPUs are anyone's again
            self._keep(name, key, kept)
        for key, job in waiting.items():
            if key in kept:
                continue
            found = self._reservable_node(job, kept)
            if found is None:
                continue  # placed like any pod: the node launched for it is on its way
            self._keep(found, key, kept)
            self.actions.append(
                ReserveNode(
                    pool=self.nodes[found].pool,
                    node=found,
                    job=key,
                    reason=f"node {found} of on-demand pool {job.pool} is kept for Job {key}, "
                    "which the deadline rule moved there and which waits for it: a pod of "
                    "higher priority waiting in the pool would otherwise take it first",
                )
            )
        if not kept:
            return
        placed: set[str] = set()
        for demand in self.pending:
            names = kept.get(demand.job or "")
            if not names:
                continue
            for name in names:
                if self.node_free.get(name, 0) >= demand.gpus:
                    self.node_free[name] -= demand.gpus
                    self.reserved.add(name)  # never released while kept
                    placed.add(demand.key)
                    break
        for names in kept.values():
            self.reserved.update(names)
        if placed:
            self.pending = [d for d in self.pending if d.key not in placed]

    def _runs_on_kept_node(self, key: str, node: NodeState) -> bool:
        """Whether Job ``key``, for which ``node`` is kept, runs on it: a pod of the Job is
        on it, and the Job stays in the node's pool (not suspended, not being moved)."""
        job = self.jobs.get(key)
        if job is None or job.suspended or job.pool != node.pool or key in self.moving:
            return False
        return any(p.node == node.name for p in self.pods_of_job.get(key, ()))

    def _keep(self, name: str, job: str, kept: dict[str, list[str]]) -> None:
        """Node ``name`` is kept for ``job`` this tick: out of everyone else's capacity, with
        a whole node's GPUs (it is empty; a node that has just joined may not report its GPUs
        before its device plugin runs)."""
        kept.setdefault(job, []).append(name)
        ledger = self.pools[self.nodes[name].pool]
        ledger.buckets.discard(name)
        if self.nodes[name].gpus == 0:
            self.node_free[name] = ledger.per_node
        lasts_until = self.nodes[name].created_at + RESERVATION_SECONDS
        if lasts_until > self.now:  # (a node its Job runs on is kept past that)
            self._recheck(lasts_until)

    def _awaiting_reserved_nodes(self) -> dict[str, JobState]:
        """The Jobs that wait for a node kept for them (``awaits_reserved_node``), by key,
        in the order they started to wait."""
        found: list[tuple[float, str, JobState]] = []
        for job in self.snap.jobs:
            if job.deadline_at is None or not job.pinned_by_operator or job.key in self.moving:
                continue
            ledger = self.pools.get(job.pool or "")
            pods = self.pods_of_job.get(job.key, [])
            if ledger is None or not awaits_reserved_node(job, ledger.tier == ELASTIC, pods):
                continue
            found.append((min(p.pending_since for p in pods), job.key, job))
        return {key: job for _, key, job in sorted(found, key=lambda f: (f[0], f[1]))}

    def _reservable_node(self, job: JobState, kept: dict[str, list[str]]) -> str | None:
        """The first node of the Job's pool that may be kept for it (``reservable``, kept
        for no one this tick; the pool's nodes fit its pods, as the deadline rule chose it):
        the oldest, the first Ready."""
        taken = {n for names in kept.values() for n in names}
        candidates = [
            n
            for n in self.nodes.values()
            if n.pool == job.pool
            and n.name not in taken
            and n.name in self.node_free  # pods may land on it (or will, once it is Ready)
            and reservable(n, n.name in self.pods_on, self.now)
        ]
        best = min(candidates, key=lambda n: (n.created_at, n.name), default=None)
        return None if best is None else best.name

    def _return_room(self, job: JobState) -> float:
        """Slack a waiting Job keeps for a return from on-demand: RETURN_ROOM_SECONDS while a
        spot pool it may use has nodes that last (``spot_lasts``) and none can launch now;
        none once it has returned (it waits pinned to a spot pool), so that it is not sent
        back."""
        pinned = self.pools.get(job.pool or "")
        if pinned is not None and pinned.tier == SPOT:
            return 0.0
        if self._spot_target(job.gpus_per_pod, job.gpu_models) is not None:
            return 0.0  # spot can launch now: the Job gets its spot run without a detour
        return RETURN_ROOM_SECONDS if self._spot_lasts_for(job) else 0.0

    def _spot_lasts_for(self, job: JobState) -> bool:
        """Whether a spot pool the Job may use has nodes that last (``spot_lasts``)."""
        return any(
            p.tier == SPOT
            and p.per_node >= job.gpus_per_pod
            and _has_model(p, job.gpu_models)
            and spot_lasts(p.state.nodes_lasted, p.state.nodes_cut_short)
            for p in self.pools.values()
        )

    def _spot_window_age(self, pool: str) -> float:
        """How long the oldest node of ``pool`` without an interruption notice has run (0:
        none runs): a lower bound on how long spot has been available there."""
        if pool not in self.window_age:
            created = [
                n.created_at
                for n in self.snap.nodes
                if n.pool == pool and n.interruption_deadline is None and not n.cordoned
            ]
            self.window_age[pool] = self.now - min(created) if created else 0.0
        return self.window_age[pool]

    def _maybe_return_to_spot(self, job: JobState, slack: Slack, bound: list[str]) -> None:
        """A Job the deadline rule put on on-demand goes back to spot right after a
        checkpoint, once a spot node has run for WINDOW_AGE_SECONDS and its slack lets a spot
        run still come back (core/deadline.py)."""
        if not job.pinned_by_operator or self.moves_left <= 0 or not job.checkpoint_seconds:
            return  # (without checkpoints a return would throw away all it did on on-demand)
        if any(self._tier_of_node(n) != ELASTIC for n in bound):
            return
        spot = self._spot_target(job.gpus_per_pod, job.gpu_models)
        if spot is None:
            return
        if not spot_lasts(spot.state.nodes_lasted, spot.state.nodes_cut_short):
            return
        age = self._spot_window_age(spot.name)
        if age < WINDOW_AGE_SECONDS:
            if age > 0:
                self._recheck(self.now + WINDOW_AGE_SECONDS - age)
            return
        started = self._run_started_at(job)
        if started is None:
            return  # its pods are not running yet: no checkpoint to return after
        wait = self._until_progress_checkpoint(job, started)
        if wait > 0:
            self._recheck(self.now + wait)
            return
        # Right after a checkpoint, where its slack is the most it will be until the next.
        if not may_return_to_spot(slack, job.checkpoint_seconds, self.deadline_margin):
            return
        self.actions.append(
            MoveJob(
                namespace=job.namespace,
                job=job.name,
                from_pool=self.node_pool[bound[0]],
                to_pool=spot.name,
                gpus=job.gpus_per_pod * job.parallelism,
                kind=ActionKind.DEADLINE,
                reason=f"Job {job.key} has {slack.seconds / 3600:.1f} h of slack and a node of "
                f"spot pool {spot.name} has run for {age / 3600:.1f} h ({spot.state.nodes_lasted}"
                f" of the {spot.state.nodes_lasted + spot.state.nodes_cut_short} seen to run an "
                f"hour ran another): it returns there from on-demand "
                f"(${spot.gpu_price:.2f}/GPU-h)",
            )
        )
        self._release_job_pods(job, spot.name)

    def _until_progress_checkpoint(self, job: JobState, run_started_at: float) -> float:
        """Seconds until the running Job's next checkpoint, counted from the end of its
        start-up (restartOverhead) in the run that started at ``run_started_at`` (its pods'
        start, as ``_slack`` counts its checkpoints); 0 within two ticks after one."""
        every = job.checkpoint_seconds
        if not every:
            return 0.0
        progress = self.now - run_started_at - self.restart_hours * 3600.0
        if progress < 0:
            return every - progress
        since = progress % every
        return 0.0 if since <= self.checkpoint_window and progress >= every else every - since

    def _interrupted(self, node: str) -> bool:
        return self.nodes[node].interruption_deadline is not None

    def _tier_of_node(self, node: str) -> str | None:
        ledger = self.pools.get(self.node_pool.get(node, ""))
        return None if ledger is None else ledger.tier

    def _run_started_at(self, job: JobState) -> float | None:
        """When the Job's current run started: its first pod on a node, not the Job's own
        start (a Kubernetes Job's status.startTime is set when it is resumed, before its
        pods have a node: an on-demand node may take minutes to boot); None when none of
        its pods has started on a node."""
        return self.pods_of_job.first_start.get(job.key)

    def _run_start(self, job: JobState, pods: Iterable[GPUPod] | None = None) -> float | None:
        """``_run_started_at``, else the Job's own start (its pods have not started on a
        node): what minRuntime, a run's checkpoints and a Job's delay count from. ``pods``:
        where to find its pods when they are not in ``pods_of_job`` (a standard Job's)."""
        if pods is not None:
            started = _first_pod_start(job, pods)
            return job.started_at if started is None else started
        started = self.pods_of_job.first_start.get(job.key)
        return job.started_at if started is None else started

    def _slack(self, job: JobState) -> Slack | None:
        pods = self.pods_of_job.get(job.key, [])
        # A Job none of whose pods is on a node has nothing to stop before it switches.
        placed = any(p.node is not None for p in pods)
        return slack_of(
            job,
            self._run_started_at(job),
            self.now,
            restart_seconds=self.restart_hours * 3600.0,
            stop_seconds=self.stop_seconds if placed else 0.0,
        )

    def _deadline_allows_move(self, job: JobState) -> bool:
        """A Job with a deadline is preempted, drained or moved off on-demand only while it
        would keep the slack to try spot again."""
        slack = self._slack(job)
        return slack is None or may_be_moved(slack, job.checkpoint_seconds, self.deadline_margin)

    def _waiting_for_their_node(self, with_deadline: list[JobState]) -> dict[str, list[str]]:
        """Per on-demand pool, the Jobs with a deadline that wait there (moved there, none of
        their pods on a node yet) and could not make it on a node launched now: each needs
        the node already on its way. Any pending pod that fits may take that node, so the
        rule moves no other Job there while one waits (``_deadlines``)."""
        out: dict[str, list[str]] = {}
        for job in with_deadline:
            if job.suspended:
                continue
            key = job.key
            if key in self.moving:
                assert job.move is not None
                pool = job.move.to_pool
            else:
                pods = self.pods_of_job.get(key, [])
                if not pods or any(p.node is not None for p in pods):
                    continue
                pool = job.pool
            ledger = self.pools.get(pool or "")
            if ledger is None or ledger.tier != ELASTIC:
                continue
            slack = self._slack(job)
            if slack is not None and slack.seconds < self.deadline_margin:
                out.setdefault(ledger.name, []).append(key)
        return out

    def _on_demand_target(self, job: JobState, avoid: Collection[str] = ()) -> _PoolLedger | None:
        """The elastic pool whose GPU is cheapest for the Job (one that can launch first),
        other than the pools in ``avoid``."""
        fitting = [
            p
            for p in self.pools.values()
            if p.tier == ELASTIC
            and p.name not in avoid
            and p.per_node >= job.gpus_per_pod
            and _has_model(p, job.gpu_models)
        ]
        return min(
            fitting, key=lambda p: (not p.state.launchable, p.gpu_price, p.name), default=None
        )

    def _deadline_action(
        self, job: JobState, slack: Slack, target: _PoolLedger, doing: str, from_pool: str | None
    ) -> MoveJob:
        left_h = max(slack.time_left, 0.0) / 3600
        work_h = slack.work_left / 3600
        return MoveJob(
            namespace=job.namespace,
            job=job.name,
            from_pool=from_pool,
            to_pool=target.name,
            gpus=job.gpus_per_pod * job.parallelism,
            kind=ActionKind.DEADLINE,
            reason=f"Job {job.key} {doing} with {left_h:.1f} h to its deadline and "
            f"{work_h:.1f} h of work left: waiting longer could miss it, so it moves to "
            f"on-demand pool {target.name} (${target.gpu_price:.2f}/GPU-h)",
        )

    def _fits_elsewhere(self, node: NodeState, pods: list[GPUPod]) -> bool:
        """Whether the pods of an under-used node fit on free GPUs of other nodes they may
        use (taken for them when they do): only then does draining it pack the work tighter.
        Otherwise its Jobs would wait for a new node and idle there as they idled here, and
        the drain would repeat every idleFor (measured in bench/idle_reclaim.py)."""
        ledger = self.pools[node.pool]
        free = self.node_free.get(node.name)
        if free is not None:
            ledger.buckets.discard(node.name)  # not onto itself
        taken: list[tuple[str, int]] = []
        try:
            for pod in sorted(pods, key=lambda p: (-p.gpus, p.key)):
                demand = _Demand(
                    pod.gpus, pod.criticality, 0.0, pod.key, pod.pool, pod.job, pod.gpu_models
                )
                for target in self._free_order(demand):
                    name = self._take_best_fit(target, pod.gpus)
                    if name is not None:
                        taken.append((name, pod.gpus))
                        break
                else:
                    for name, gpus in taken:
                        self._adjust(name, gpus)
                    return False
            return True
        finally:
            if free is not None:
                ledger.buckets.put(node.name, free)

    # ------------------------------------------------------------- idle reclaim
    def _reclaim_idle(self) -> None:
        """Workloads that opted in (hybridgpu.io/idle-timeout) and held GPUs below the idle
        threshold for that long give them back: their Job is suspended, a bare pod evicted.
        Never while metrics are unavailable; critical work only when it opts in too."""
        for pod in [p for p in self.snap.pods if p.input_error]:
            self.notes.append(f"pod {pod.key}: {pod.input_error}")
        opted = {
            ("job", pod.job) if pod.job is not None else ("pod", pod.key)
            for pod in self.snap.pods
            if pod.idle_timeout_seconds is not None and pod.node is not None
        }
        if not opted:
            return
        # Every running pod of an opted-in workload, opted in itself or not: all must be idle.
        by_owner: dict[tuple[str, str], list[GPUPod]] = {}
        jobs = {name for kind, name in opted if kind == "job"}
        bare = {name for kind, name in opted if kind == "pod"}
        for pod in self.snap.pods:
            if pod.node is None:
                continue
            job = pod.job
            if job is not None:
                if job in jobs:
                    by_owner.setdefault(("job", job), []).append(pod)
            elif pod.key in bare:
                by_owner.setdefault(("pod", pod.key), []).append(pod)
        candidates = sorted(by_owner.items())
        if not self.snap.metrics.available:
            self.notes.append(
                f"utilization data unavailable ({self.snap.metrics.reason or 'stale'}): idle "
                f"reclaim of {len(candidates)} workload(s) skipped (fail static)"
            )
            return
        for (kind, name), pods in candidates:
            action = self._reclaim_one(kind, name, pods)
            if action is not None:
                self.actions.append(action)

    def _reclaim_one(self, kind: str, name: str, pods: list[GPUPod]) -> ReclaimIdle | None:
        first = pods[0]
        if any(p.queued for p in pods):
            return None  # Kueue admitted it: suspending or evicting it is Kueue's call
        if kind == "job":
            job = self.jobs.get(name)
            if job is None or job.suspended or job.queued or name in self.moving:
                return None
        elif not first.bare:
            return None  # owned by a controller that would only recreate it
        if any(p.terminating for p in pods):
            return None
        critical = any(p.criticality == Criticality.CRITICAL for p in pods)
        if critical and not all(p.reclaim_critical for p in pods):
            return None
        idle_for: list[float] = []
        for pod in pods:
            timeout = pod.idle_timeout_seconds
            if timeout is None or pod.idle_since is None or self.now - pod.idle_since < timeout:
                return None
            idle_for.append(self.now - pod.idle_since)
        idle_seconds = min(idle_for)
        gpus = sum(p.gpus for p in pods)
        node = first.node or ""
        ledger = self.pools.get(self.node_pool.get(node, ""))
        if ledger is None:
            return None
        gpu_hour = ledger.node_price / max(ledger.per_node, 1)
        held = gpus * gpu_hour * idle_seconds / 3600
        spec = ledger.state.spec.scale_down
        used = max((p.utilization_percent or 0.0) for p in pods)
        what = f"Job {name}" if kind == "job" else f"bare pod {name}"
        then = "suspend it (resume: set spec.suspend=false)" if kind == "job" else "evict it"
        namespace, short = name.split("/", 1)
        return ReclaimIdle(
            namespace=namespace,
            name=short,
            job=kind == "job",
            pool=ledger.name,
            node=node,
            gpus=gpus,
            idle_seconds=idle_seconds,
            held_dollars=held,
            reason=f"{what} held {gpus} GPU(s) of {ledger.tier} pool {ledger.name} below "
            f"{spec.idle_utilization_percent:g}% utilization (now {used:.0f}%) for "
            f"{_hours_minutes(idle_seconds)}, past its idle-timeout "
            f"{_hours_minutes(first.idle_timeout_seconds or 0.0)}: ${held:.2f} of GPU time "
            f"held idle; {then}",
        )

    # ------------------------------------------------------------------- run
    def run(self) -> Plan:
        self._candidates_cache = {}
        self.requeued_by_preemption = []
        self._build()
        self._interruptions()
        self._collect_pending()
        self._deadlines()
        self._reserve_nodes()
        self._place_demand()
        self.requeued_by_preemption = []
        self._consolidate()
        self._return_to_core()
        rebalance_serving(self)
        self._recheck_on_the_way()
        self._power_on_to_minimum()
        self._emit_scale_ups()
        self._release_idle()
        self._reclaim_idle()
        self._replace_unhealthy()
        self._gpu_health()
        blocked = tuple(
            Blocked(
                pool=pool,
                nodes=math.ceil(b.gpus / max(1, self.pools[pool].per_node))
                if pool in self.pools
                else 0,
                reason=f"{b.pods} pod(s) needing {b.gpus} GPU(s) wait: {b.reason}",
                cause=cause,
            )
            for (pool, cause), b in sorted(self.blocked.items())
        )
        budget = self.policy.budget
        over_month = budget.monthly_limit is not None and (
            self.snap.budget.spent_this_month_dollars >= budget.monthly_limit
        )
        return Plan(
            decided_at=self.now,
            actions=tuple(self.actions),
            blocked=blocked,
            pending_gpus=dict(self.pending_gpus),
            cloud_cost_per_hour=self._cloud_cost_per_hour(),
            budget_exceeded=over_month or any(b.cause.startswith("budget") for b in blocked),
            metrics_available=self.snap.metrics.available,
            notes=tuple(self.notes),
            recheck_at=self.recheck_at,
            gangs=dict(self.gangs),
            progress_seconds_by_job=dict(self.progress_by_job),
        )


def _hours_minutes(seconds: float) -> str:
    """``1h05m`` (or ``42m``, ``30s``) for a span of seconds."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    hours, minutes = divmod(int(seconds // 60), 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"


def decide(snapshot: ClusterSnapshot, policy: ScalingPolicySpec, now: float) -> Plan:
    """The plan for ``snapshot`` under ``policy`` at ``now`` (seconds since the epoch).

    Pure and deterministic: the same inputs give the same plan, and nothing is read from the
    clock or the network.
    """
    return _Decider(snapshot, policy, now).run()
