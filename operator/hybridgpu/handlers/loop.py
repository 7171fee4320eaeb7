"""One reconcile tick of a ScalingPolicy: snapshot -> decide -> execute -> report.

Runs in a worker thread (the kubernetes client is blocking); kopf only schedules it.
"""

from __future__ import annotations

import calendar
import cProfile
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from hybridgpu.core.cost import node_hour_from_gpu_prices
from hybridgpu.core.decide import decide
from hybridgpu.handlers.capacity import Providers
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.handlers.preflight import Preflight
from hybridgpu.handlers.provisioning import answer_requests, requests_of_policy, with_requests
from hybridgpu.kube.cache import WatchCache
from hybridgpu.kube.cluster import ClusterObjects, KubeCluster
from hybridgpu.kube.convert import (
    IdleTracker,
    epoch_of,
    pool_of_node,
    pool_selector,
    unschedulable_since,
)
from hybridgpu.kube.errors import KubeError
from hybridgpu.kube.executor import Execution, PlanExecutor
from hybridgpu.kube.lease import LeaderLease
from hybridgpu.kube.names import (
    GPUPOOLS,
    LEASE_NAME,
    POOL_LABEL,
    PROVREQ_PLURAL,
    SCALINGPOLICIES,
    TIER_LABEL,
)
from hybridgpu.kube.provisioning import read_requests
from hybridgpu.kube.serving import ServingObjects, read_serving, with_serving
from hybridgpu.kube.snapshot import Conversions, Measurements, build_snapshot
from hybridgpu.kube.status import (
    NO_PROMETHEUS,
    gpus_allocated_by_node,
    policy_status,
    pool_status,
)
from hybridgpu.kube.survival import SpotSurvival
from hybridgpu.metrics.exported import METRICS, ExportedMetrics
from hybridgpu.metrics.prometheus import PrometheusClient, TokenCounter
from hybridgpu.models.actions import Plan, RebalanceResult
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import GPUPoolSpec, Tier
from hybridgpu.models.snapshot import BudgetState, ClusterSnapshot, MetricsHealth

log = logging.getLogger(__name__)

DEFAULT_POLICY = "default"
SLOW_TICK_SECONDS = 60.0
"""A tick still running after this long logs where it is (again every as long after)."""


def month_hours(now: float) -> tuple[str, float]:
    """The month of ``now`` as YYYY-MM and the hours left in it."""
    moment = datetime.fromtimestamp(now, UTC)
    days = calendar.monthrange(moment.year, moment.month)[1]
    end = datetime(moment.year, moment.month, days, tzinfo=UTC).timestamp() + 86400
    return moment.strftime("%Y-%m"), max(0.0, (end - now) / 3600)


def spent_so_far(status: dict[str, Any], now: float) -> float:
    """Cloud dollars this month: last status value plus the last rate since the last tick."""
    budget = status.get("budget") or {}
    last = epoch_of(status.get("lastTick"))
    spent = float(budget.get("spentThisMonth") or 0.0)
    if last is None or month_hours(last)[0] != month_hours(now)[0]:
        return 0.0 if last is not None else spent
    return spent + float(budget.get("hourlyCost") or 0.0) * max(0.0, now - last) / 3600


@dataclass
class Measured:
    """What one tick measured besides the cluster's objects."""

    measurements: Measurements
    provider_errors: dict[str, str]
    """Pool -> why its provider failed."""
    unhealthy: dict[str, list[str]]
    """Pool -> instances replaced for never registering, one line each."""
    tokens_by_node: dict[str, float]
    """Tokens generated on each node since this policy's last tick."""


def tokens_by_pool(snapshot: ClusterSnapshot, tokens_by_node: dict[str, float]) -> dict[str, float]:
    """Tokens of the snapshot's nodes, added up per pool (other nodes are left out)."""
    pool_of = {node.name: node.pool for node in snapshot.nodes}
    out: dict[str, float] = {}
    for node, tokens in tokens_by_node.items():
        pool = pool_of.get(node)
        if pool is not None:
            out[pool] = out.get(pool, 0.0) + tokens
    return out


@dataclass
class TickResult:
    """What a tick did, for logs, probes and tests."""

    policy: str
    leader: bool
    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Reads(Protocol):
    """Where a tick reads the cluster: the watch cache (kube.cache.WatchCache) in the
    operator, or the apiserver itself (KubeCluster, one LIST per kind)."""

    def read_objects(self) -> ClusterObjects: ...

    def list_pools(self) -> list[dict[str, Any]]: ...

    def list_policies(self) -> list[dict[str, Any]]: ...

    def get_policy(self, name: str) -> dict[str, Any]: ...

    def list_deployments(self) -> list[dict[str, Any]]: ...

    def list_replicasets(self) -> list[dict[str, Any]]: ...

    def list_hpas(self) -> list[dict[str, Any]]: ...

    def list_provisioning_requests(self) -> list[dict[str, Any]]: ...


class Reconciler:
    """Everything a tick needs, built once at startup (kept in kopf's memo)."""

    def __init__(
        self,
        cluster: KubeCluster,
        options: OperatorOptions,
        clock: Callable[[], float] = time.time,
        metrics: ExportedMetrics = METRICS,
        monotonic: Callable[[], float] = time.monotonic,
        reads: Reads | None = None,
    ) -> None:
        self.cluster = cluster
        """Writes, and the reads an action needs fresh (a node's pods before a drain)."""
        self.reads: Reads = reads if reads is not None else cluster
        """The snapshot's reads: the watch cache, so a tick makes no LIST."""
        self.monotonic = monotonic
        """Seconds that never go back: when the next tick is due."""
        self.metrics = metrics
        self.options = options
        self.clock = clock
        self.providers = Providers(options.fake_provider, clock, cluster_name=options.cluster_name)
        self.executor = PlanExecutor(cluster, self.providers, clock, serving_reads=self.reads)
        self.preflight = Preflight(_PreflightReads(cluster, self.reads), self.providers, options)
        """Whether the operator can work at all; started by the start-up handler."""
        self.idle_by_policy: dict[str, IdleTracker] = {}
        self.conversions_by_policy: dict[str, Conversions] = {}
        self.survival_by_policy: dict[str, SpotSurvival] = {}
        """What each policy has seen of its spot nodes' lives (the deadline rule's return)."""
        """Idle clocks by policy, then node: a policy's snapshot forgets only its own nodes."""
        self.tokens_by_policy: dict[str, TokenCounter] = {}
        """Last tokens counter values by policy (each reads on its own ticks)."""
        self.lease = LeaderLease(
            cluster, options.lease_namespace, LEASE_NAME, options.identity, options.lease_seconds
        )
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None
        self._wake: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.last: TickResult | None = None
        self.last_tick_at: float = 0.0
        self.tick_started_at: float | None = None
        """Monotonic start of the tick running now; None between ticks (liveness reads it)."""
        self.profile: cProfile.Profile | None = (
            cProfile.Profile() if options.profile_ticks else None
        )
        """Every tick's profile added up (options.profile_ticks), for benchmarks."""
        self._frozen_at_syncs = 0
        """Syncs of the Nodes' and pods' watch caches when the heap was last frozen."""

    # ------------------------------------------------------------------ lease
    def start_lease_renewal(self) -> None:
        """Renew (or try to take) the leader Lease on a thread of its own, a third of its
        duration apart (sooner after a failure), so that no tick waits for the round trip;
        taking it wakes the loops."""
        if self._lease_thread is None:
            self._lease_stop.clear()
            self._lease_thread = threading.Thread(
                target=self._renew_lease, name="lease-renewal", daemon=True
            )
            self._lease_thread.start()

    def stop_lease_renewal(self) -> None:
        self._lease_stop.set()
        if self._lease_thread is not None:
            self._lease_thread.join(10.0)
            self._lease_thread = None

    def _renew_lease(self) -> None:
        every = max(0.5, self.options.lease_seconds / 3)
        retry = max(0.5, min(2.0, self.options.lease_seconds / 5))
        while not self._lease_stop.is_set():
            was_held = self.lease.held()
            try:
                holding = self.lease.acquire(self.clock())
            except Exception as err:  # the apiserver is away: held() is false, try again
                log.warning("leader lease not renewed: %s", err)
                holding = False
            if holding and not was_held:
                self.trigger_all()
            self._lease_stop.wait(every if holding else retry)

    # --------------------------------------------------------------- triggers
    def wake_event(self, policy: str) -> threading.Event:
        """The event that wakes the loop of ``policy`` before its interval is up."""
        return self._wake.setdefault(policy, threading.Event())

    def forget_wake_event(self, policy: str) -> None:
        self._wake.pop(policy, None)
        self.metrics.forget_policy(policy)
        self.idle_by_policy.pop(policy, None)
        self.conversions_by_policy.pop(policy, None)
        self.survival_by_policy.pop(policy, None)
        self.tokens_by_policy.pop(policy, None)

    def trigger_all(self) -> None:
        """Wake every policy's loop (pending GPU pods, nodes that came or went)."""
        for event in list(self._wake.values()):
            event.set()

    def on_cache_event(
        self, kind: str, event: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """A watch cache changed: wake the loops for a GPU pod the scheduler cannot place,
        a node that came or went, a new ProvisioningRequest, or a store listed again (called
        on the watch's thread)."""
        if (
            (kind == "pods" and new is not None and unschedulable_since(new) is not None)
            or (kind == "nodes" and event in ("ADDED", "DELETED"))
            or (event == "RELISTED" and kind in ("pods", "nodes"))
            # Kueue waits on a new request's answer to admit its workload.
            or (kind == PROVREQ_PLURAL and event == "ADDED")
        ):
            self.trigger_all()

    # ------------------------------------------------------------------ tick
    def tick(self, policy_name: str) -> TickResult:
        with self.lock:  # one tick at a time per process: policies share nodes
            started = time.monotonic()
            self.tick_started_at = started
            watchdog = self._watch_tick(policy_name, threading.get_ident(), started)
            try:
                if self.profile is not None:
                    result = self.profile.runcall(self._tick, policy_name)
                else:
                    result = self._tick(policy_name)
            finally:
                self.tick_started_at = None
                watchdog.set()
                if self.profile is not None and self.options.profile_ticks:
                    self.profile.dump_stats(self.options.profile_ticks)
            result.seconds = time.monotonic() - started
            if result.leader:
                self.metrics.observe_reconcile(result.seconds)
            self.last = result
            self.last_tick_at = self.clock()
            if result.leader:
                self._freeze_heap()
            return result

    def _watch_tick(self, policy: str, thread: int, started: float) -> threading.Event:
        """Log the stack of a tick that runs longer than SLOW_TICK_SECONDS, every
        SLOW_TICK_SECONDS until it ends (set the returned event), so that a tick blocked on a
        call that never returns says which call; the liveness probe restarts the process
        after STUCK_TICK_SECONDS."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(SLOW_TICK_SECONDS):
                frame = sys._current_frames().get(thread)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
                log.warning(
                    "the tick of %s has run for %.0fs; it is at:\n%s",
                    policy,
                    time.monotonic() - started,
                    stack,
                )

        threading.Thread(target=watch, name=f"tick-watchdog-{policy}", daemon=True).start()
        return done

    def _freeze_heap(self) -> None:
        """``options.freeze_heap``: once per sync of the Nodes' and pods' watch caches, after
        a tick, collect garbage and freeze what is alive (see OperatorOptions.freeze_heap)."""
        if not self.options.freeze_heap:
            return
        reflectors = getattr(self.reads, "reflectors", None)
        if not isinstance(reflectors, dict):
            return  # no watch cache: nothing large and long-lived to leave out
        syncs = sum(r.counters.syncs for k, r in reflectors.items() if k in ("nodes", "pods"))
        if syncs == self._frozen_at_syncs:
            return
        gc.collect()
        gc.freeze()
        self._frozen_at_syncs = syncs
        log.info(
            "heap frozen after the watch caches' sync %d (%d objects)", syncs, gc.get_freeze_count()
        )

    def _tick(self, policy_name: str) -> TickResult:
        now = self.clock()
        if not self.preflight.checked:
            self.preflight.check()  # the first tick reports what the checks found
        # The renewal runs on its own thread (start_lease_renewal): a tick waits for the
        # Lease's round trip only when it does not hold it (first tick, a standby).
        if not self.lease.held() and not self.lease.acquire(now):
            return TickResult(policy=policy_name, leader=False)
        body = self.reads.get_policy(policy_name)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted: its pools' status says nobody ticks them (PolicyNotFound); a
            # last tick must not write them back to Reconciled.
            return TickResult(policy=policy_name, leader=True)
        try:
            policy = ScalingPolicySpec.model_validate(body.get("spec") or {})
        except ValidationError as err:
            return TickResult(policy=policy_name, leader=True, errors=[f"invalid spec: {err}"])
        pools, bodies, every_pool = self._pools(policy_name)
        deleted = self._deleted_cloud_pools(policy_name)
        self.providers.set_pools({**pools, **deleted})
        result = TickResult(policy=policy_name, leader=True)

        objects = self.reads.read_objects()
        # Any policy's tick may finish any move; a move is rolled back only when its target
        # pool exists nowhere (not merely under another policy).
        workloads = [*objects.jobs, *objects.workloads]
        if self.executor.advance_moves(workloads, every_pool) < sum(
            1 for j in workloads if "hybridgpu.io/move" in _annotations(j)
        ):
            objects = self.reads.read_objects()  # a move finished: see its new pods
        ended, rebalancing = self.executor.advance_rebalances(objects.nodes, every_pool)
        for outcome in ended:
            self.metrics.record_rebalance(
                outcome.namespace,
                _tier(every_pool, outcome.intent.from_pool),
                _tier(every_pool, outcome.intent.to_pool),
                outcome.result,
            )
        if ended or rebalancing:
            objects = self.reads.read_objects()  # a replica moved: see where it is now
        try:
            serving = read_serving(self.reads)
        except KubeError as err:  # e.g. no RBAC for Deployments: no rebalance, the rest works
            result.errors.append(f"serving workloads not read: {err}")
            serving = ServingObjects(deployments=[])

        measured = self._measure(policy_name, policy, pools, objects.nodes, body, now)
        # Unpinned pods are the "default" policy's demand, or everyone's when there is none.
        owns_unpinned = policy_name == DEFAULT_POLICY or DEFAULT_POLICY not in {
            p["metadata"]["name"] for p in self.reads.list_policies()
        }
        snapshot = build_snapshot(
            objects,
            pools,
            measured.measurements,
            self.idle_by_policy.setdefault(policy_name, IdleTracker()),
            now,
            unpinned_demand=owns_unpinned,
            conversions=self.conversions_by_policy.setdefault(policy_name, Conversions()),
        )
        snapshot = self.survival_by_policy.setdefault(policy_name, SpotSurvival()).observe(snapshot)
        snapshot = with_serving(snapshot, serving, objects.pods)
        # ProvisioningRequests (Kueue's admission check): each is a gang, placed whole or not.
        try:
            requests = requests_of_policy(
                read_requests(self.cluster, objects.pods, self.reads.list_provisioning_requests()),
                pools,
                owns_unpinned,
            )
        except KubeError as err:  # the rest of the tick works without them
            result.errors.append(f"ProvisioningRequests not read: {err}")
            requests = []
        snapshot = with_requests(snapshot, requests, now)
        plan = decide(snapshot, policy, now)
        result.plan = plan
        self.metrics.record_plan(
            plan,
            snapshot,
            now,
            budget_limit_dollars=policy.budget.monthly_limit,
            policy=policy_name,
        )
        for pool, tokens in tokens_by_pool(snapshot, measured.tokens_by_node).items():
            self.metrics.record_tokens(pool, tokens)
        execution = self.executor.execute(
            plan,
            snapshot,
            pools,
            policy=policy_name,
            dry_run=policy.dry_run,
            may_act=self.lease.held,
        )
        result.errors += execution.errors
        measured.provider_errors |= execution.provider_errors
        for reclaimed in execution.reclaimed:
            self.metrics.record_reclaimed(reclaimed, str(pools[reclaimed.pool].tier))
        for started in execution.rebalances:
            self.metrics.record_rebalance(
                started.namespace,
                _tier(every_pool, started.from_pool),
                _tier(every_pool, started.to_pool),
                RebalanceResult.STARTED.value,
            )
        if not policy.dry_run and self.lease.held():
            result.errors += answer_requests(self.cluster, requests, plan, now)
            result.errors += self.executor.finish_interrupted(snapshot, pools)
            self.executor.shape_nodes(objects.nodes, pools)
            try:
                self.executor.delete_orphan_nodes(snapshot, now)
            except KubeError as err:
                result.errors.append(str(err))
            result.errors += self._drain_deleted(deleted, pools, objects.nodes)
        self._report_unmanaged(objects.nodes)

        # The pools' ProviderError condition, as an Event `kubectl describe gpupool` lists.
        self.executor.warn_pools("ProviderError", measured.provider_errors)
        self._report(
            policy_name,
            body,
            policy,
            plan,
            snapshot,
            pools,
            bodies,
            measured,
        )
        if plan.actions or plan.blocked:
            log.info("tick %s: %s", policy_name, "; ".join(plan.explain()))
        return result

    def _pools(
        self, policy_name: str
    ) -> tuple[dict[str, GPUPoolSpec], dict[str, Any], dict[str, GPUPoolSpec]]:
        """This policy's pools and their bodies, and every live pool of any policy."""
        pools: dict[str, GPUPoolSpec] = {}
        bodies: dict[str, Any] = {}
        every: dict[str, GPUPoolSpec] = {}
        for raw in self.reads.list_pools():
            name = raw["metadata"]["name"]
            if raw["metadata"].get("deletionTimestamp"):
                continue
            try:
                spec = GPUPoolSpec.model_validate(raw.get("spec") or {})
            except ValidationError:
                continue  # the GPUPool handler reports it in the pool's conditions
            every[name] = spec
            if spec.policy == policy_name:
                pools[name] = spec
                bodies[name] = raw
        return pools, bodies, every

    def _deleted_cloud_pools(self, policy_name: str) -> dict[str, GPUPoolSpec]:
        """This policy's elastic and spot pools being deleted: their nodes are drained and
        released (``_drain_deleted``) before the finalizer lets the pool go. Owned (core)
        pools go at once and their nodes stay."""
        out: dict[str, GPUPoolSpec] = {}
        for raw in self.reads.list_pools():
            if not raw["metadata"].get("deletionTimestamp"):
                continue
            try:
                spec = GPUPoolSpec.model_validate(raw.get("spec") or {})
            except ValidationError:
                continue
            if spec.policy == policy_name and spec.tier != Tier.CORE:
                out[raw["metadata"]["name"]] = spec
        return out

    def drain_without_policy(self, name: str, spec: GPUPoolSpec) -> list[str]:
        """One pass over the nodes of the deleted cloud pool ``name`` whose ScalingPolicy is
        missing or being deleted, so no tick of it will drain them (`kubectl delete -f` of a
        file with the pools and their policy deletes both at once): the leader releases them
        as a tick would (``_drain_deleted``); a standby does nothing."""
        with self.lock:  # ticks and this share the providers' pool set and the nodes
            if not self.lease.held():
                return []
            deleted = {name: spec}
            self.providers.set_pools(deleted)
            return self._drain_deleted(deleted, {}, self.reads.read_objects().nodes)

    def _report_unmanaged(self, nodes: list[dict[str, Any]]) -> None:
        """The cloud nodes no GPUPool manages (``unmanaged_nodes``): the gauge
        hybridgpu_unmanaged_nodes by missing pool, and a Warning Event on each node (at
        most once per EVENT_REPEAT_SECONDS). Every policy's tick reports the same figures."""
        found = unmanaged_nodes(self.reads.list_pools(), nodes)
        self.metrics.record_unmanaged({pool: len(names) for pool, names in found.items()})
        self.executor.warn_nodes(
            "UnmanagedNode",
            {
                node: unmanaged_message(node, pool)
                for pool, names in found.items()
                for node in names
            },
        )

    def _drain_deleted(
        self,
        deleted: dict[str, GPUPoolSpec],
        pools: dict[str, GPUPoolSpec],
        nodes: list[dict[str, Any]],
    ) -> list[str]:
        """Release every node of a deleted cloud pool as an idle one is released (cordon, Jobs
        requeued, other pods evicted through PDBs, bare pods never: they keep the node), so no
        instance is left running and billed with nothing managing it."""
        if not deleted:
            return []
        errors: list[str] = []
        every = {**pools, **deleted}
        for name, node in nodes_of_deleted_pools(deleted, self.reads.list_pools(), nodes):
            try:
                if self.executor.release_node(name, node, every, Execution()):
                    log.info("deleted pool %s: node %s released", name, node)
            except KubeError as err:
                errors.append(f"deleted pool {name}: release {node}: {err}")
        return errors

    def _measure(
        self,
        policy_name: str,
        policy: ScalingPolicySpec,
        pools: dict[str, GPUPoolSpec],
        nodes: list[dict[str, Any]],
        body: dict[str, Any],
        now: float,
    ) -> Measured:
        errors: dict[str, str] = {}
        unhealthy: dict[str, list[str]] = {}
        utilization: dict[str, float] = {}
        stale: set[str] = set()
        pod_utilization: dict[str, float] = {}
        xid: dict[str, int] = {}
        gpu_prices: dict[str, float] = {}
        tokens: dict[str, float] = {}
        if policy.prometheus.url:
            client = PrometheusClient(policy.prometheus.url, clock=self.clock)
            readings = client.readings(policy.prometheus)
            health = readings.health
            for node, reading in readings.utilization.items():
                if reading.stale:
                    stale.add(node)
                else:
                    utilization[node] = reading.percent
            xid = dict(readings.xid_gpus)
            pod_utilization = {
                k: r.percent for k, r in readings.pod_utilization.items() if not r.stale
            }
            gpu_prices = dict(readings.gpu_hourly_cost_dollars)
            if readings.token_counters is not None:
                counter = self.tokens_by_policy.setdefault(policy_name, TokenCounter())
                tokens = counter.increase_by_node(readings.token_counters, client.node_of)
        else:
            # No Prometheus configured: idle means "no GPU pods", which is never blind.
            health = MetricsHealth(available=True, reason=NO_PROMETHEUS)
        selectors = {name: pool_selector(name, spec) for name, spec in pools.items()}
        provider_ids = {
            str(raw["spec"]["providerID"])
            for raw in nodes
            if (raw.get("spec") or {}).get("providerID")
        }
        for name in pools:
            try:
                unhealthy[name] = self.providers.replace_unregistered(
                    name, provider_ids, now, dry_run=policy.dry_run
                )
            except Exception as err:  # a failing provider must not stop the other pools
                errors[name] = str(err)
        terminated = self.providers.terminated_provider_ids()
        joined: dict[str, int] = {}
        members: dict[str, list[str]] = {}
        node_pools = self.conversions_by_policy.setdefault(policy_name, Conversions()).node_pools
        for raw, member in zip(nodes, node_pools.of(nodes, selectors), strict=True):
            if member is None:
                continue
            members.setdefault(member, []).append(str(raw["metadata"]["name"]))
            # Joined = part of the capacity the provider's target counts: not a Node being
            # deleted, nor one whose instance is terminated and still listed (targets leave
            # those out; counting them would hide a launch on its way and launch it again).
            if (raw.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if (raw.get("spec") or {}).get("providerID") in terminated:
                continue
            joined[member] = joined.get(member, 0) + 1
        provisioning: dict[str, int] = {}
        prices: dict[str, float] = {}
        for name in pools:
            if name in errors:
                continue
            try:
                provisioning[name] = self.providers.provisioning(name, joined.get(name, 0))
                price = self.providers.spot_price(name)
                if price is not None:
                    prices[name] = price
            except Exception as err:  # a failing provider must not stop the other pools
                errors[name] = str(err)
        for name, spec in pools.items():
            # A spot pool priced fromProvider whose provider has no price: OpenCost's.
            if spec.tier == Tier.SPOT and spec.pricing.from_provider and name not in prices:
                found = node_hour_from_gpu_prices(
                    spec, (gpu_prices[n] for n in members.get(name, []) if n in gpu_prices)
                )
                if found is not None:
                    prices[name] = found
        deadlines = self.providers.poll_interruptions(errors)
        _, hours_left = month_hours(now)
        budget = BudgetState(
            spent_this_month_dollars=spent_so_far(body.get("status") or {}, now),
            hours_left_in_month=hours_left,
        )
        return Measured(
            Measurements(
                utilization_by_node=utilization,
                stale_nodes=frozenset(stale),
                utilization_by_pod=pod_utilization,
                xid_errors_by_node=xid,
                metrics=health,
                provisioning_by_pool=provisioning,
                spot_price_by_pool=prices,
                unlaunchable_pools=self.providers.unlaunchable(),
                deadline_by_provider_id=deadlines,
                terminated_provider_ids=terminated,
                budget=budget,
            ),
            errors,
            unhealthy,
            tokens,
        )

    def _report(
        self,
        policy_name: str,
        body: dict[str, Any],
        policy: ScalingPolicySpec,
        plan: Plan,
        snapshot: Any,
        pools: dict[str, GPUPoolSpec],
        bodies: dict[str, Any],
        measured: Measured,
    ) -> None:
        budget = measured.measurements.budget
        status = body.get("status") or {}
        new_status = policy_status(
            plan,
            generation=body["metadata"].get("generation"),
            spent_this_month=budget.spent_this_month_dollars,
            hours_left_in_month=budget.hours_left_in_month,
            metrics_reason=measured.measurements.metrics.reason,
            dry_run=policy.dry_run,
            old_conditions=status.get("conditions") or [],
            operator_problems=self.preflight.problems,
            operator_reason=self.preflight.reason,
        )
        # Pools first, the policy (its lastTick) last: whoever sees a new lastTick sees
        # every status this tick wrote.
        allocated = gpus_allocated_by_node(snapshot)
        for name in pools:
            old = bodies[name].get("status") or {}
            new_pool_status = pool_status(
                name,
                snapshot,
                plan,
                generation=bodies[name]["metadata"].get("generation"),
                old_conditions=old.get("conditions") or [],
                provider_error=measured.provider_errors.get(name),
                unregistered=measured.unhealthy.get(name, []),
                last_scale_time=old.get("lastScaleTime"),
                allocated_by_node=allocated,
            )
            if not already_written(old, new_pool_status):
                self.cluster.patch_status(GPUPOOLS, name, new_pool_status)
            self.metrics.record_pool_conditions(
                name, str(pools[name].tier), new_pool_status.get("conditions") or []
            )
        self.cluster.patch_status(SCALINGPOLICIES, policy_name, new_status)
        self.metrics.record_policy_conditions(policy_name, new_status.get("conditions") or [])


def nodes_of_deleted_pools(
    deleted: dict[str, GPUPoolSpec], live: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """(pool, node) for every node of the ``deleted`` pools (by each one's selector) that is
    a provider's instance (it has a providerID), is not being deleted, is not labelled an
    owned (core) node, and belongs to none of the ``live`` pools (raw GPUPools; those being
    deleted are left out): a node another pool also selects is that pool's, never drained
    for this one."""
    selectors = {name: pool_selector(name, spec) for name, spec in deleted.items()}
    others: dict[str, dict[str, str]] = {}
    for raw in live:
        name = raw["metadata"]["name"]
        if name in deleted or raw["metadata"].get("deletionTimestamp"):
            continue
        try:
            others[name] = pool_selector(name, GPUPoolSpec.model_validate(raw.get("spec") or {}))
        except ValidationError:
            others[name] = {POOL_LABEL: name}
    out = []
    for raw in nodes:
        meta = raw.get("metadata") or {}
        if (
            meta.get("deletionTimestamp")
            or (meta.get("labels") or {}).get(TIER_LABEL) == "core"
            or not (raw.get("spec") or {}).get("providerID")
        ):
            continue
        pool = pool_of_node(raw, selectors)
        if pool is not None and pool_of_node(raw, others) is None:
            out.append((pool, str(meta["name"])))
    return out


def unmanaged_nodes(
    live: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> dict[str, list[str]]:
    """The cloud nodes no GPUPool manages, by the missing pool their label names: a node
    labelled ``hybridgpu.io/pool=P`` where no GPUPool P exists (not even one being deleted:
    its finalizer drains its own), that is a provider's instance (a providerID), is not an
    owned (core) node, is not being deleted, and that no other pool's selector takes. Such an
    instance is billed and nothing releases it: its pool was deleted before the operator put
    its finalizer on it, it was still booting when its pool was deleted, or the finalizer was
    removed by hand."""
    names = {raw["metadata"]["name"] for raw in live}
    selectors: dict[str, dict[str, str]] = {}
    for raw in live:
        name = raw["metadata"]["name"]
        if raw["metadata"].get("deletionTimestamp"):
            continue
        try:
            selectors[name] = pool_selector(name, GPUPoolSpec.model_validate(raw.get("spec") or {}))
        except ValidationError:
            selectors[name] = {POOL_LABEL: name}
    out: dict[str, list[str]] = {}
    for raw in nodes:
        meta = raw.get("metadata") or {}
        labels = meta.get("labels") or {}
        pool = labels.get(POOL_LABEL)
        if (
            not pool
            or pool in names
            or meta.get("deletionTimestamp")
            or labels.get(TIER_LABEL) == "core"
            or not (raw.get("spec") or {}).get("providerID")
            or pool_of_node(raw, selectors) is not None
        ):
            continue
        out.setdefault(str(pool), []).append(str(meta["name"]))
    return {pool: sorted(found) for pool, found in sorted(out.items())}


def unmanaged_message(node: str, pool: str) -> str:
    """What the Warning Event on a node ``unmanaged_nodes`` found says."""
    return (
        f"node {node} is labelled {POOL_LABEL}={pool}, but no GPUPool {pool!r} exists: nothing "
        "manages or releases it, and its instance is billed until it is released. Re-create "
        f"GPUPool {pool!r} (its policy then manages the node and releases it once idle), or "
        "terminate the instance through its provider: `kubectl delete node` removes only the "
        "Node object, not a cloud instance"
    )


def already_written(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether merge-patching ``new`` onto the status ``old`` (as the watch cache has it)
    would change nothing: then a steady tick skips the write (one request less per pool).
    A cache that trails only costs a write that was not needed."""
    return all(old.get(key) == value for key, value in new.items())


def _tier(pools: dict[str, GPUPoolSpec], pool: str) -> str:
    spec = pools.get(pool)
    return str(spec.tier) if spec is not None else "unknown"


class _PreflightReads:
    """The start-up checks' reads: pools from the watch cache once it is synced (no LIST
    every check), the CRDs and the server from the apiserver."""

    def __init__(self, cluster: KubeCluster, reads: Reads) -> None:
        self.cluster = cluster
        self.reads = reads

    def server(self) -> str:
        return self.cluster.server()

    def read_crd(self, name: str) -> dict[str, Any] | None:
        return self.cluster.read_crd(name)

    def list_pools(self) -> list[dict[str, Any]]:
        if isinstance(self.reads, WatchCache) and GPUPOOLS not in self.reads.unsynced():
            return self.reads.list_pools()
        return self.cluster.list_pools()


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})
