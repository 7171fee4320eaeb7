"""Every metric the operator exports (prefix ``hybridgpu_``), defined here and nowhere else.

The metrics live on their own ``CollectorRegistry`` (not prometheus_client's global one), so
tests and embedders build as many independent sets as they like. The operator records one
reconcile tick with :meth:`ExportedMetrics.record_plan` (the plan and the snapshot it was
decided on) and serves ``/metrics`` with :func:`serve`.

Cost counters are integrals of cost rates over time, computed by :class:`CostMeter` from
the times passed in (never the wall clock): between two observations of a pool it costs what
the first of them said (nodes, provisioning instances included, times the node-hour price
of ``core.cost``). Each ScalingPolicy's tick observes only its own pools, so everything kept
between ticks is kept per pool, or per policy. Each pool's cost is split over its GPUs: the
share of GPUs allocated to a namespace's pods goes to ``namespace_cost_dollars_total``, the
rest to ``idle_gpu_cost_dollars_total``; the two add up to ``cost_dollars_total``.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from hybridgpu.core.cost import pool_hour_dollars
from hybridgpu.core.provisioning import gang_of
from hybridgpu.models.actions import (
    Action,
    ActionKind,
    GangState,
    HandleInterruption,
    MoveJob,
    Plan,
    RebalanceReplica,
    ReclaimIdle,
    ReleaseNode,
    ScaleUp,
)
from hybridgpu.models.snapshot import LWS_GANG_MARK, ClusterSnapshot, Criticality, JobState

PREFIX = "hybridgpu_"
SECONDS_PER_HOUR = 3600.0
# Ticks further apart than this are a gap in observation (e.g. the operator was down):
# the cost of the gap is still counted at the last known rate, but never for longer.
MAX_INTEGRATION_STEP_SECONDS = 3600.0


class AdmissionOutcome(StrEnum):
    """What an admission webhook did with a pod (``admission_reviews_total{outcome}``)."""

    PATCHED = "patched"
    """The mutating webhook set the pod's PriorityClass or tier affinity."""
    UNCHANGED = "unchanged"
    NO_PRIORITY_CLASS = "no_priority_class"
    """No PriorityClass is labelled with the pod's criticality: the pod keeps its own."""
    ALLOWED = "allowed"
    REFUSED = "refused"
    """The validating webhook refused a critical pod restricted to spot."""


@dataclass(slots=True)
class _PoolRate:
    """What one pool costs per hour now, and how that cost splits over its GPUs."""

    tier: str
    dollars_per_hour: float
    gpus: int
    allocated_by_namespace: dict[str, int]
    committed: bool = False
    """Its GPUs are a commitment: paid whether used or not, idle ones are waste."""

    @property
    def allocated(self) -> int:
        return sum(self.allocated_by_namespace.values())


@dataclass(slots=True)
class CostTotals:
    """Dollars and GPU-hours accumulated by a :class:`CostMeter` since it started."""

    by_pool: dict[tuple[str, str], float] = field(default_factory=dict)
    """(pool, tier) -> dollars."""
    by_namespace: dict[tuple[str, str], float] = field(default_factory=dict)
    """(namespace, tier) -> dollars."""
    idle_by_pool: dict[tuple[str, str], float] = field(default_factory=dict)
    """(pool, tier) -> dollars of GPUs no pod requested."""
    committed_idle_by_pool: dict[str, float] = field(default_factory=dict)
    """pool -> dollars of committed GPUs no pod requested (part of idle_by_pool)."""
    allocated_gpu_hours: float = 0.0
    tokens_by_pool: dict[str, float] = field(default_factory=dict)
    """pool -> tokens its nodes generated (see :meth:`ExportedMetrics.record_tokens`)."""

    @property
    def dollars(self) -> float:
        return sum(self.by_pool.values())


def pool_rates(snapshot: ClusterSnapshot) -> dict[str, _PoolRate]:
    """Cost per hour of every pool in the snapshot and its GPU allocation by namespace.

    Billed nodes are the pool's nodes plus the instances still provisioning (a cloud bills
    from launch); their GPUs count as idle until pods use them.
    """
    node_pool = {n.name: n.pool for n in snapshot.nodes}
    node_count: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.billed:  # not once the provider says its instance is terminated
            node_count[node.pool] = node_count.get(node.pool, 0) + 1
    allocated: dict[str, dict[str, int]] = {}
    for pod in snapshot.pods:
        pod_pool = node_pool.get(pod.node) if pod.node is not None else None
        if pod_pool is None:
            continue
        by_ns = allocated.setdefault(pod_pool, {})
        by_ns[pod.namespace] = by_ns.get(pod.namespace, 0) + pod.gpus
    rates: dict[str, _PoolRate] = {}
    for pool in snapshot.pools:
        billed = node_count.get(pool.name, 0) + pool.provisioning_nodes
        committed = pool.spec.committed
        if committed is not None:
            # A commitment is paid in full, nodes running or not.
            billed = max(billed, committed.nodes)
        rates[pool.name] = _PoolRate(
            tier=str(pool.tier),
            dollars_per_hour=pool_hour_dollars(pool.spec, billed, pool.spot_price_per_node_hour),
            gpus=billed * pool.gpus_per_node,
            allocated_by_namespace=allocated.get(pool.name, {}),
            committed=committed is not None,
        )
    return rates


class CostMeter:
    """Integrates pool cost rates over time (seconds since the epoch, passed in).

    Each pool is charged from its own last observation: a snapshot (one ScalingPolicy's)
    that leaves a pool out neither charges nor forgets it.
    """

    def __init__(self) -> None:
        self.totals = CostTotals()
        self._rates: dict[str, _PoolRate] = {}
        self._last: dict[str, float] = {}

    def observe(self, snapshot: ClusterSnapshot, now: float) -> CostTotals:
        """Charge each pool of the snapshot for the time since it was last observed, at the
        rate seen then; take its new rate.

        Returns the increments charged by this call (for the counters).
        """
        charged = CostTotals()
        for pool, rate in pool_rates(snapshot).items():
            last = self._last.get(pool)
            if last is not None and now > last and pool in self._rates:
                hours = min(now - last, MAX_INTEGRATION_STEP_SECONDS) / SECONDS_PER_HOUR
                self._charge(charged, pool, self._rates[pool], hours)
            if last is None or now > last:
                self._last[pool] = now
            self._rates[pool] = rate
        _merge(self.totals, charged)
        return charged

    def rates(self) -> dict[str, float]:
        """Current cost of each pool, dollars per hour."""
        return {pool: rate.dollars_per_hour for pool, rate in self._rates.items()}

    @staticmethod
    def _charge(out: CostTotals, pool: str, rate: _PoolRate, hours: float) -> None:
        dollars = rate.dollars_per_hour * hours
        key = (pool, rate.tier)
        out.by_pool[key] = out.by_pool.get(key, 0.0) + dollars
        out.allocated_gpu_hours += min(rate.allocated, rate.gpus) * hours
        if rate.gpus <= 0:
            return
        per_gpu = dollars / rate.gpus
        used = 0
        for namespace, gpus in rate.allocated_by_namespace.items():
            gpus = min(gpus, rate.gpus - used)  # never split more than the pool's GPUs
            used += gpus
            ns_key = (namespace, rate.tier)
            out.by_namespace[ns_key] = out.by_namespace.get(ns_key, 0.0) + per_gpu * gpus
        out.idle_by_pool[key] = out.idle_by_pool.get(key, 0.0) + per_gpu * (rate.gpus - used)
        if rate.committed:
            wasted = out.committed_idle_by_pool
            wasted[pool] = wasted.get(pool, 0.0) + per_gpu * (rate.gpus - used)


def _merge(into: CostTotals, more: CostTotals) -> None:
    for target, source in (
        (into.by_pool, more.by_pool),
        (into.by_namespace, more.by_namespace),
        (into.idle_by_pool, more.idle_by_pool),
    ):
        for key, value in source.items():
            target[key] = target.get(key, 0.0) + value
    for pool, value in more.committed_idle_by_pool.items():
        into.committed_idle_by_pool[pool] = into.committed_idle_by_pool.get(pool, 0.0) + value
    into.allocated_gpu_hours += more.allocated_gpu_hours


def _action_key(action: Action) -> tuple[str, ...] | None:
    """Identity of an action that a plan repeats tick after tick until it is done (None: each
    occurrence is new, as for scale-ups, whose earlier requests the snapshot already counts)."""
    if isinstance(action, MoveJob):
        return (action.kind.value, action.namespace, action.job, str(action.to_pool))
    if isinstance(action, ReclaimIdle):
        return (action.kind.value, action.namespace, action.name)
    if isinstance(action, RebalanceReplica):
        return (action.kind.value, action.namespace, action.workload, action.node)
    if isinstance(action, ScaleUp):
        return None
    return (action.kind.value, action.pool, action.node)


class ExportedMetrics:
    """The operator's metrics on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.meter = CostMeter()
        self._ongoing_by_policy: dict[str, set[tuple[str, ...]]] = {}
        """Actions being carried out, by ScalingPolicy: counted when they first appear."""
        self._gangs_by_policy: dict[str, dict[str, str]] = {}
        """gang -> state of each policy's last tick: a gang's decision counts when it changes."""
        self._series_by_policy: dict[tuple[str, str], set[tuple[str, str]]] = {}
        """(kind, state) series of ``workloads`` and ``gangs`` each policy has set, by (metric,
        policy): dropped with the policy."""
        self._pools_by_policy: dict[str, dict[str, str]] = {}
        """pool -> tier of each policy's last tick: whose series to drop when a pool goes."""
        r = self.registry
        p = PREFIX
        self.pool_nodes = Gauge(
            p + "pool_nodes",
            "Nodes of a pool by state (ready, not_ready, cordoned, provisioning).",
            ["pool", "tier", "state"],
            registry=r,
        )
        self.pool_gpus = Gauge(
            p + "pool_gpus",
            "GPUs of a pool by state (allocated to pods, idle).",
            ["pool", "tier", "state"],
            registry=r,
        )
        self.pool_gpu_utilization_ratio = Gauge(
            p + "pool_gpu_utilization_ratio",
            "Average GPU utilization (0-1) of the pool's nodes with fresh samples; absent "
            "when no node has one.",
            ["pool", "tier"],
            registry=r,
        )
        self.pool_cost_per_hour_dollars = Gauge(
            p + "pool_cost_per_hour_dollars",
            "What the pool costs now, dollars per hour (provisioning instances included).",
            ["pool", "tier"],
            registry=r,
        )
        self.cost_dollars = Counter(
            p + "cost_dollars",
            "Cost of the pool integrated over time, dollars.",
            ["pool", "tier"],
            registry=r,
        )
        self.namespace_cost_dollars = Counter(
            p + "namespace_cost_dollars",
            "Cost of the GPUs allocated to a namespace's pods, dollars.",
            ["namespace", "tier"],
            registry=r,
        )
        self.idle_gpu_cost_dollars = Counter(
            p + "idle_gpu_cost_dollars",
            "Cost of GPUs no pod requested (waste on core, idle rent on cloud), dollars.",
            ["pool", "tier"],
            registry=r,
        )
        self.committed_idle_cost_dollars = Counter(
            p + "committed_idle_cost_dollars",
            "Cost of committed GPUs (reserved, savings plan, lease) no pod requested: paid for "
            "and unused, dollars (also counted in idle_gpu_cost_dollars).",
            ["pool"],
            registry=r,
        )
        self.reclaimed_gpu_hours = Counter(
            p + "reclaimed_gpu_hours",
            "GPU-hours that workloads opted in to idle reclaim had held below the idle "
            "threshold when the operator suspended (Job) or evicted (bare pod) them.",
            ["namespace", "tier"],
            registry=r,
        )
        self.preemptions = Counter(
            p + "preemptions",
            "Jobs moved between tiers (reason: preempt, consolidate, deadline).",
            ["from_tier", "to_tier", "reason"],
            registry=r,
        )
        self.workload_moves = Counter(
            p + "workload_moves",
            "Workloads the operator decided to move between pools (suspend, repoint every pod "
            "template, resume), by kind (Job, JobSet, RayJob, PyTorchJob, TrainJob), route "
            "and reason (preempt, consolidate, deadline); a gang moves whole and counts once.",
            ["kind", "from_tier", "to_tier", "reason"],
            registry=r,
        )
        self.workloads = Gauge(
            p + "workloads",
            "GPU workloads of each suspendable batch kind in a policy's last tick, by state: "
            "running, suspended, moving (a move of the operator in flight), queued (Kueue's).",
            ["policy", "kind", "state"],
            registry=r,
        )
        self.gangs = Gauge(
            p + "gangs",
            "Gangs (workloads whose pods must all run at once, and Kueue ProvisioningRequests) "
            "past their grace period in a policy's last tick, by kind and by what the tick "
            "found: placed (fits on nodes that exist), coming (on nodes on their way or bought "
            "for it), waiting (for owned GPUs that free up within its waitBudget), blocked "
            "(not all of it fits and no capacity could be bought: none was).",
            ["policy", "kind", "state"],
            registry=r,
        )
        self.gang_decisions = Counter(
            p + "gang_decisions",
            "Gangs that became placed, coming, waiting or blocked (counted when a gang's state "
            "changes), by kind, and by cause when blocked (max_nodes, max_per_tick, "
            "budget_hourly, budget_monthly, no_pool, no_capacity).",
            ["kind", "state", "cause"],
            registry=r,
        )
        self.rebalances = Counter(
            p + "rebalances",
            "Serving replicas moved from cloud nodes to owned GPUs by surge, by outcome "
            "(started, completed, rolled_back: the surge replica was not Ready in time, "
            "aborted: someone else changed the workload).",
            ["namespace", "from_tier", "to_tier", "result"],
            registry=r,
        )
        self.scale_events = Counter(
            p + "scale_events",
            "Scale-ups and node releases decided, by pool and direction (up, down).",
            ["pool", "direction"],
            registry=r,
        )
        self.spot_interruptions = Counter(
            p + "spot_interruptions",
            "Nodes the provider announced it will take away.",
            ["pool"],
            registry=r,
        )
        self.pending_gpu_requests = Gauge(
            p + "pending_gpu_requests",
            "GPUs requested by pending pods with no capacity yet, by criticality.",
            ["criticality"],
            registry=r,
        )
        self.budget_spent_dollars = Gauge(
            p + "budget_spent_dollars", "Cloud spend this month, dollars.", registry=r
        )
        self.budget_limit_dollars = Gauge(
            p + "budget_limit_dollars",
            "The ScalingPolicy's monthly cloud budget, dollars (absent: no limit).",
            registry=r,
        )
        self.reconcile_duration_seconds = Histogram(
            p + "reconcile_duration_seconds",
            "Time one reconcile tick took (snapshot, decide, act, report), seconds.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.decisions = Counter(
            p + "decisions",
            "Actions decided, by kind; an action repeated by consecutive ticks counts once.",
            ["action"],
            registry=r,
        )
        self.effective_cost_per_gpu_hour_dollars = Gauge(
            p + "effective_cost_per_gpu_hour_dollars",
            "All pools' cost divided by the GPU-hours allocated to pods since start, dollars.",
            registry=r,
        )
        self.cost_per_million_tokens_dollars = Gauge(
            p + "cost_per_million_tokens_dollars",
            "Cost of the pool divided by the tokens its nodes generated (the ScalingPolicy's "
            "prometheus.tokensQuery), times a million, since the operator started, dollars; "
            "absent until tokens are counted.",
            ["pool", "tier"],
            registry=r,
        )
        self.last_tick_timestamp_seconds = Gauge(
            p + "last_tick_timestamp_seconds",
            "When the leader last decided a plan for the ScalingPolicy (its status.lastTick), "
            "seconds since the epoch; absent until its first tick.",
            ["policy"],
            registry=r,
        )
        self.policy_condition = Gauge(
            p + "policy_condition",
            "A ScalingPolicy's status condition as its last tick wrote it: 1 True, 0 False.",
            ["policy", "condition"],
            registry=r,
        )
        self.pool_condition = Gauge(
            p + "pool_condition",
            "A GPUPool's status condition as its policy's last tick wrote it: 1 True, 0 False.",
            ["pool", "tier", "condition"],
            registry=r,
        )
        self.admission_reviews = Counter(
            p + "admission_reviews",
            "Pods the admission webhooks reviewed, by webhook (handler id), criticality and "
            "outcome (patched, unchanged, no_priority_class; allowed, refused).",
            ["webhook", "criticality", "outcome"],
            registry=r,
        )
        self.unmanaged_nodes = Gauge(
            p + "unmanaged_nodes",
            "Cloud nodes labelled for a GPUPool that does not exist, by that pool: nothing "
            "manages or releases them, and their instances are billed (the pool was deleted "
            "before the operator held it, or while the node was booting).",
            ["pool"],
            registry=r,
        )
        self._unmanaged_pools: set[str] = set()
        """Pools with an unmanaged_nodes series, to drop it once their nodes are gone."""
        self.pods_without_admission = Gauge(
            p + "pods_admitted_without_webhook",
            "Labelled pods in the cluster now that the mutating webhook did not change (created "
            "while it was down or unreachable: failurePolicy Ignore), by criticality: they lack "
            "their PriorityClass or tier affinity until recreated.",
            ["criticality"],
            registry=r,
        )
        self._unadmitted: dict[str, str] = {}
        """Pods counted by pods_admitted_without_webhook: uid -> criticality."""
        self._conditions_by_policy: dict[str, set[str]] = {}
        self._conditions_by_pool: dict[tuple[str, str], set[str]] = {}
        """Condition types with a series, to drop them with their policy or pool."""
        for level in Criticality:
            self.pending_gpu_requests.labels(criticality=level.value).set(0)

    # --- recording ------------------------------------------------------------------

    def record_plan(
        self,
        plan: Plan,
        snapshot: ClusterSnapshot,
        now: float,
        *,
        budget_limit_dollars: float | None = None,
        policy: str = "default",
    ) -> None:
        """Update every metric from one tick of ``policy``: the plan decided on ``snapshot``
        at ``now`` (seconds since the epoch)."""
        self._record_cost(snapshot, now)
        self._record_pools(snapshot, policy)
        self._record_actions(plan, snapshot, policy)
        self._record_workloads(plan, snapshot, policy)
        for level in Criticality:
            gpus = plan.pending_gpus.get(level.value, 0)
            self.pending_gpu_requests.labels(criticality=level.value).set(gpus)
        self.budget_spent_dollars.set(snapshot.budget.spent_this_month_dollars)
        if budget_limit_dollars is not None:
            self.budget_limit_dollars.set(budget_limit_dollars)
        self.last_tick_timestamp_seconds.labels(policy=policy).set(now)

    def record_policy_conditions(
        self, policy: str, conditions: Iterable[Mapping[str, Any]]
    ) -> None:
        """Set ``policy_condition`` from the conditions (wire dicts) of the policy's status;
        a condition neither True nor False has no series."""
        seen = self._conditions_by_policy.setdefault(policy, set())
        for kind, value in _condition_values(conditions).items():
            if value is None:
                _remove(self.policy_condition, policy, kind)
            else:
                self.policy_condition.labels(policy=policy, condition=kind).set(value)
                seen.add(kind)

    def record_pool_conditions(
        self, pool: str, tier: str, conditions: Iterable[Mapping[str, Any]]
    ) -> None:
        """Set ``pool_condition`` from the conditions (wire dicts) of the pool's status."""
        seen = self._conditions_by_pool.setdefault((pool, tier), set())
        for kind, value in _condition_values(conditions).items():
            if value is None:
                _remove(self.pool_condition, pool, tier, kind)
            else:
                self.pool_condition.labels(pool=pool, tier=tier, condition=kind).set(value)
                seen.add(kind)

    def record_unmanaged(self, by_pool: Mapping[str, int]) -> None:
        """Set unmanaged_nodes to ``by_pool`` (missing pool -> nodes); a pool no longer
        listed loses its series."""
        for pool in self._unmanaged_pools - set(by_pool):
            _remove(self.unmanaged_nodes, pool)
        for pool, count in by_pool.items():
            self.unmanaged_nodes.labels(pool=pool).set(count)
        self._unmanaged_pools = set(by_pool)

    def forget_policy(self, policy: str) -> None:
        """Drop the last tick and condition series of a deleted ScalingPolicy (alerts on
        them would otherwise fire for a policy that no longer exists)."""
        _remove(self.last_tick_timestamp_seconds, policy)
        for kind in self._conditions_by_policy.pop(policy, set()):
            _remove(self.policy_condition, policy, kind)
        for name, gauge in (("workloads", self.workloads), ("gangs", self.gangs)):
            for kind, state in self._series_by_policy.pop((name, policy), set()):
                _remove(gauge, policy, kind, state)
        self._gangs_by_policy.pop(policy, None)

    def record_admission(self, webhook: str, criticality: str, outcome: AdmissionOutcome) -> None:
        """Count one pod an admission webhook reviewed."""
        self.admission_reviews.labels(
            webhook=webhook, criticality=criticality, outcome=outcome.value
        ).inc()

    def record_unadmitted(self, uid: str, criticality: str | None) -> bool:
        """Count a live pod the webhook did not mutate (``criticality``), or forget it (None:
        it has what it needs, finished or is gone). True when the pod is newly counted."""
        before = self._unadmitted.get(uid)
        if criticality is None:
            self._unadmitted.pop(uid, None)
        else:
            self._unadmitted[uid] = criticality
        for level in {before, criticality} - {None}:
            count = sum(1 for c in self._unadmitted.values() if c == level)
            self.pods_without_admission.labels(criticality=level).set(count)
        return before is None and criticality is not None

    def record_tokens(self, pool: str, tokens: float) -> None:
        """Add tokens generated on the pool's nodes since its last tick (an increase of the
        tokens counter over the same interval the tick's cost was charged for)."""
        if tokens > 0 and math.isfinite(tokens):
            totals = self.meter.totals.tokens_by_pool
            totals[pool] = totals.get(pool, 0.0) + tokens
        self._record_token_cost()

    def record_reclaimed(self, action: ReclaimIdle, tier: str) -> None:
        """Count one idle reclaim the executor carried out (a dry run records none)."""
        self.reclaimed_gpu_hours.labels(namespace=action.namespace, tier=tier).inc(
            action.idle_gpu_hours
        )

    def record_rebalance(self, namespace: str, from_tier: str, to_tier: str, result: str) -> None:
        """Count one surge rebalance started or ended (a dry run records none)."""
        self.rebalances.labels(
            namespace=namespace, from_tier=from_tier, to_tier=to_tier, result=result
        ).inc()

    def observe_reconcile(self, seconds: float) -> None:
        """Record how long one tick took, seconds."""
        self.reconcile_duration_seconds.observe(seconds)

    def _record_cost(self, snapshot: ClusterSnapshot, now: float) -> None:
        charged = self.meter.observe(snapshot, now)
        for (pool, tier), dollars in charged.by_pool.items():
            self.cost_dollars.labels(pool=pool, tier=tier).inc(dollars)
        for (namespace, tier), dollars in charged.by_namespace.items():
            self.namespace_cost_dollars.labels(namespace=namespace, tier=tier).inc(dollars)
        for (pool, tier), dollars in charged.idle_by_pool.items():
            self.idle_gpu_cost_dollars.labels(pool=pool, tier=tier).inc(dollars)
        for pool, dollars in charged.committed_idle_by_pool.items():
            self.committed_idle_cost_dollars.labels(pool=pool).inc(dollars)
        totals = self.meter.totals
        if totals.allocated_gpu_hours > 0:
            self.effective_cost_per_gpu_hour_dollars.set(
                totals.dollars / totals.allocated_gpu_hours
            )
        self._record_token_cost()

    def _record_token_cost(self) -> None:
        gauge = self.cost_per_million_tokens_dollars
        totals = self.meter.totals
        for (pool, tier), dollars in totals.by_pool.items():
            tokens = totals.tokens_by_pool.get(pool, 0.0)
            if tokens > 0:
                gauge.labels(pool=pool, tier=tier).set(dollars / tokens * 1e6)

    def _record_pools(self, snapshot: ClusterSnapshot, policy: str) -> None:
        rates = self.meter.rates()
        now_pools = {pool.name: str(pool.tier) for pool in snapshot.pools}
        # Pools that left this policy lose their series; other policies' pools keep theirs.
        for gone, gone_tier in self._pools_by_policy.get(policy, {}).items():
            if now_pools.get(gone) != gone_tier:
                self._forget_pool(gone, gone_tier)
        self._pools_by_policy[policy] = now_pools
        allocated_on: dict[str, int] = {}
        for pod in snapshot.pods:
            if pod.node is not None:
                allocated_on[pod.node] = allocated_on.get(pod.node, 0) + pod.gpus
        for pool in snapshot.pools:
            tier = str(pool.tier)
            nodes = [n for n in snapshot.nodes if n.pool == pool.name]
            states = {
                "ready": sum(1 for n in nodes if n.ready and not n.cordoned),
                "not_ready": sum(1 for n in nodes if not n.ready and not n.cordoned),
                "cordoned": sum(1 for n in nodes if n.cordoned),
                "provisioning": pool.provisioning_nodes,
            }
            for state, count in states.items():
                self.pool_nodes.labels(pool=pool.name, tier=tier, state=state).set(count)
            gpus = sum(n.gpus for n in nodes)
            allocated = min(gpus, sum(allocated_on.get(n.name, 0) for n in nodes))
            self.pool_gpus.labels(pool=pool.name, tier=tier, state="allocated").set(allocated)
            self.pool_gpus.labels(pool=pool.name, tier=tier, state="idle").set(gpus - allocated)
            fresh = [
                n.utilization_percent
                for n in nodes
                if n.utilization_percent is not None and not n.utilization_stale
            ]
            if fresh and snapshot.metrics.available:
                ratio = sum(fresh) / len(fresh) / 100.0
                self.pool_gpu_utilization_ratio.labels(pool=pool.name, tier=tier).set(ratio)
            else:
                _remove(self.pool_gpu_utilization_ratio, pool.name, tier)
            self.pool_cost_per_hour_dollars.labels(pool=pool.name, tier=tier).set(
                rates.get(pool.name, 0.0)
            )

    def _forget_pool(self, pool: str, tier: str) -> None:
        for state in ("ready", "not_ready", "cordoned", "provisioning"):
            _remove(self.pool_nodes, pool, tier, state)
        for state in ("allocated", "idle"):
            _remove(self.pool_gpus, pool, tier, state)
        for gauge in (
            self.pool_gpu_utilization_ratio,
            self.pool_cost_per_hour_dollars,
            self.cost_per_million_tokens_dollars,
        ):
            _remove(gauge, pool, tier)
        for kind in self._conditions_by_pool.pop((pool, tier), set()):
            _remove(self.pool_condition, pool, tier, kind)

    def _record_actions(self, plan: Plan, snapshot: ClusterSnapshot, policy: str) -> None:
        tiers = {p.name: str(p.tier) for p in snapshot.pools}
        kinds = {j.key: j.kind for j in snapshot.jobs}
        before = self._ongoing_by_policy.get(policy, set())
        ongoing: set[tuple[str, ...]] = set()
        for action in plan.actions:
            key = _action_key(action)
            if key is not None:
                ongoing.add(key)
                if key in before:
                    continue  # the same decision as last tick, still being carried out
            self.decisions.labels(action=action.kind.value).inc()
            if isinstance(action, ScaleUp):
                self.scale_events.labels(pool=action.pool, direction="up").inc()
            elif isinstance(action, ReleaseNode):
                self.scale_events.labels(pool=action.pool, direction="down").inc()
            elif isinstance(action, HandleInterruption):
                self.spot_interruptions.labels(pool=action.pool).inc()
            elif isinstance(action, MoveJob):
                from_tier = tiers.get(action.from_pool or "", "none")
                to_tier = tiers.get(action.to_pool or "", "requeue")
                reason = {
                    ActionKind.CONSOLIDATE: "consolidate",
                    ActionKind.DEADLINE: "deadline",
                }.get(action.kind, "preempt")
                self.preemptions.labels(from_tier=from_tier, to_tier=to_tier, reason=reason).inc()
                self.workload_moves.labels(
                    kind=kinds.get(action.job_key, "Job"),
                    from_tier=from_tier,
                    to_tier=to_tier,
                    reason=reason,
                ).inc()
        self._ongoing_by_policy[policy] = ongoing

    def _record_workloads(self, plan: Plan, snapshot: ClusterSnapshot, policy: str) -> None:
        """``workloads`` and ``gangs`` of this tick (a kind and state seen before and not now
        is set to 0, not dropped, so a panel shows the drop), and ``gang_decisions`` for each
        gang whose state changed since the policy's last tick."""
        kinds = {j.key: j.kind for j in snapshot.jobs}
        workloads: dict[tuple[str, str], int] = {}
        for job in snapshot.jobs:
            key = (job.kind, _workload_state(job))
            workloads[key] = workloads.get(key, 0) + 1
        gangs: dict[tuple[str, str], int] = {}
        before = self._gangs_by_policy.get(policy, {})
        states: dict[str, str] = {}
        for gang, placement in plan.gangs.items():
            kind, state = _gang_kind(gang, kinds), placement.state.value
            gangs[(kind, state)] = gangs.get((kind, state), 0) + 1
            states[gang] = state
            if before.get(gang) != state:
                cause = placement.cause if placement.state is GangState.BLOCKED else ""
                self.gang_decisions.labels(kind=kind, state=state, cause=cause or "none").inc()
        self._gangs_by_policy[policy] = states
        for name, gauge, counts in (
            ("workloads", self.workloads, workloads),
            ("gangs", self.gangs, gangs),
        ):
            seen = self._series_by_policy.setdefault((name, policy), set())
            seen |= set(counts)
            for kind, state in seen:
                gauge.labels(policy=policy, kind=kind, state=state).set(
                    counts.get((kind, state), 0)
                )


def _workload_state(job: JobState) -> str:
    if job.queued:
        return "queued"
    if job.move is not None:
        return "moving"
    return "suspended" if job.suspended else "running"


def _gang_kind(gang: str, kinds: Mapping[str, str]) -> str:
    """The kind of the workload a gang is (a ProvisioningRequest's gang is its request)."""
    if gang.startswith(gang_of("")):
        return "ProvisioningRequest"
    if LWS_GANG_MARK in gang:
        return "LeaderWorkerSet"
    return kinds.get(gang, "Job")


def _remove(gauge: Gauge, *labels: str) -> None:
    """Drop one series of ``gauge`` if it is there."""
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)


def _condition_values(conditions: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """Condition type -> 1.0 (True), 0.0 (False) or None (Unknown or anything else)."""
    values = {"True": 1.0, "False": 0.0}
    return {str(c["type"]): values.get(str(c.get("status"))) for c in conditions if c.get("type")}


METRICS = ExportedMetrics()
"""The operator process's metrics (tests build their own ExportedMetrics)."""


def record_plan(
    plan: Plan,
    snapshot: ClusterSnapshot,
    now: float,
    *,
    budget_limit_dollars: float | None = None,
    policy: str = "default",
    metrics: ExportedMetrics = METRICS,
) -> None:
    """Update the operator's metrics from one tick (see :meth:`ExportedMetrics.record_plan`)."""
    metrics.record_plan(
        plan, snapshot, now, budget_limit_dollars=budget_limit_dollars, policy=policy
    )


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(
    port: int,
    addr: str = "127.0.0.1",
    *,
    metrics: ExportedMetrics = METRICS,
    readiness: Callable[[], Sequence[str]] | None = None,
) -> WSGIServer:
    """Serve ``/metrics`` on ``addr:port`` in a daemon thread; ``shutdown()`` stops it.

    With ``readiness`` (why the operator cannot work, one line each), ``/readyz`` answers 200
    ``ok`` when it returns nothing, else 503 with the lines: the pod's readiness probe.
    """
    metrics_app = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") != "/readyz" or readiness is None:
            return metrics_app(environ, start_response)
        problems = list(readiness())
        text = "ok\n" if not problems else "not ready: " + "; ".join(problems) + "\n"
        body = text.encode()
        status = "200 OK" if not problems else "503 Service Unavailable"
        headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
        ]
        start_response(status, headers)
        return [body]

    server = make_server(addr, port, app, _ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
