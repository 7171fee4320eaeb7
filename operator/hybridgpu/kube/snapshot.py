"""Assemble a ClusterSnapshot from raw objects plus what the other adapters measured. Pure."""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import (
    IdleTracker,
    Obj,
    gpu_pod,
    is_idle,
    is_lws_leader,
    job_criticality,
    job_state,
    labels_of,
    lws_group,
    node_state,
    pod_spec_gpus,
    pool_of_node,
    pool_selector,
)
from hybridgpu.kube.names import CRITICALITY_LABEL
from hybridgpu.kube.workloads import (
    kind_of,
    owned_by_workload,
    owner_workload,
    workload_state,
)
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import (
    BudgetState,
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    MetricsHealth,
    NodeState,
    PoolState,
)


@dataclass(frozen=True, slots=True)
class Measurements:
    """What Prometheus and the providers said this tick (all optional)."""

    utilization_by_node: Mapping[str, float] = field(default_factory=dict)
    """Average GPU utilization per node, percent."""
    stale_nodes: frozenset[str] = frozenset()
    metrics: MetricsHealth = field(default_factory=MetricsHealth)
    provisioning_by_pool: Mapping[str, int] = field(default_factory=dict)
    spot_price_by_pool: Mapping[str, float] = field(default_factory=dict)
    unlaunchable_pools: frozenset[str] = frozenset()
    """Pools the provider has no capacity for now (their last launch failed for it)."""
    deadline_by_provider_id: Mapping[str, float] = field(default_factory=dict)
    terminated_provider_ids: frozenset[str] = frozenset()
    """Provider IDs of instances the provider still lists but says are terminated, or that
    this operator terminated: their Nodes are no capacity and no longer billed."""
    xid_errors_by_node: Mapping[str, int] = field(default_factory=dict)
    budget: BudgetState = field(default_factory=BudgetState)
    utilization_by_pod: Mapping[str, float] = field(default_factory=dict)
    """Average GPU utilization of each pod's GPUs (``namespace/name``), percent; fresh only."""


_UNSET: Any = object()


class NodePools:
    """The pool of each Node object (``convert.pool_of_node``), kept by the object's identity
    (the watch cache replaces a changed Node, never mutates it) while the pools' selectors
    are unchanged. Not thread-safe: one per policy, used by one tick at a time."""

    def __init__(self) -> None:
        self._selectors: Any = None
        self._by_id: dict[int, tuple[Obj, str | None]] = {}

    def of(
        self, nodes: Sequence[Obj], selectors: Mapping[str, Mapping[str, str]]
    ) -> list[str | None]:
        """The pool of each of ``nodes``, in their order (None: none of these pools')."""
        signature = tuple(sorted((n, tuple(sorted(s.items()))) for n, s in selectors.items()))
        old: dict[int, tuple[Obj, str | None]] = self._by_id
        if signature != self._selectors:
            old, self._selectors = {}, signature
        kept: dict[int, tuple[Obj, str | None]] = {}
        out: list[str | None] = []
        for raw in nodes:
            ident = id(raw)
            entry = old.get(ident)
            if entry is None or entry[0] is not raw:
                entry = (raw, pool_of_node(raw, selectors))
            kept[ident] = entry
            out.append(entry[1])
        self._by_id = kept
        return out


class Conversions:
    """Per-object conversions kept from one snapshot build to the next, so that a tick
    converts only the objects that changed since the last (the watch caches hand it the same
    20,000 pods and 5,000 nodes every tick; parsing each one again was most of a tick's CPU).

    The watch cache never changes a stored object: a change replaces it with a new one (of a
    new ``resourceVersion``). So a conversion is kept by the object's identity (the very dict
    the last build read) and reused while that object is still the one read and everything
    else it was computed from is unchanged: for a pod, its Job's criticality, annotations and
    queued state (the Jobs whose inputs changed since the last build are found once, then each
    pod of theirs is converted again); for a node, its pool (the pools' selectors) and this
    tick's measurements of it. Objects read afresh (a LIST) are converted every time. Entries
    of objects no longer read are dropped at each build (an entry holds its object, so its
    identity cannot be reused by another meanwhile). Not thread-safe: one per policy, used
    by one tick at a time."""

    def __init__(self) -> None:
        self._pods: dict[int, tuple[Obj, str | None, GPUPod | None]] = {}
        self._nodes: dict[int, tuple[Obj, tuple[Any, ...], NodeState]] = {}
        self._old_pods: dict[int, tuple[Obj, str | None, GPUPod | None]] = {}
        self._old_nodes: dict[int, tuple[Obj, tuple[Any, ...], NodeState]] = {}
        self.node_pools = NodePools()
        """The pool of each Node (the tick's other passes over the Nodes read it too)."""
        self._jobs: tuple[dict[str, Criticality], dict[str, Mapping[str, str]], set[str]] = (
            {},
            {},
            set(),
        )
        self._changed_jobs: Container[str | None] = set()
        """Jobs whose criticality, annotations or queued state changed since the last build."""
        self.hits = 0
        self.misses = 0

    def begin(
        self,
        criticality: Mapping[str, Criticality],
        job_notes: Mapping[str, Mapping[str, str]],
        queued: Collection[str],
    ) -> None:
        """Start a build: what the last build kept is what this one may reuse."""
        self._old_pods, self._pods = self._pods, {}
        self._old_nodes, self._nodes = self._nodes, {}
        jobs = (dict(criticality), dict(job_notes), set(queued))
        last_criticality, last_notes, last_queued = self._jobs
        changed: set[str | None] = set()
        if bool(jobs[1]) != bool(last_notes):
            # gpu_pod reads a pod's own annotations only while there are no Jobs' to read
            self._changed_jobs = _EVERY_JOB
            self._jobs = jobs
            return
        if jobs[0] != last_criticality:
            changed.update(_changed_keys(jobs[0], last_criticality))
        if jobs[1] != last_notes:
            changed.update(_changed_keys(jobs[1], last_notes))
        changed.update(jobs[2] ^ last_queued)
        self._jobs = jobs
        self._changed_jobs = changed

    def gpu_pod(
        self,
        raw: Obj,
        criticality: Mapping[str, Criticality],
        job_notes: Mapping[str, Mapping[str, str]],
        queued: Collection[str],
    ) -> GPUPod | None:
        """``convert.gpu_pod`` of ``raw``, kept from the last build when it may be."""
        ident = id(raw)
        entry = self._old_pods.get(ident)
        if entry is not None and entry[0] is raw and entry[1] not in self._changed_jobs:
            self.hits += 1
            self._pods[ident] = entry
            return entry[2]
        self.misses += 1
        pod = gpu_pod(raw, criticality, job_notes, queued)
        self._pods[ident] = (raw, None if pod is None else pod.job, pod)
        return pod

    def node_state(
        self,
        raw: Obj,
        pool: str,
        idle_since: float | None,
        utilization_percent: float | None,
        utilization_stale: bool,
        interruption_deadline: float | None,
        xid_errors: int,
        instance_terminated: bool,
    ) -> NodeState:
        """``convert.node_state`` of ``raw`` with these measurements, kept from the last build
        when the node and all of them are the same."""
        ident = id(raw)
        inputs = (
            pool,
            idle_since,
            utilization_percent,
            utilization_stale,
            interruption_deadline,
            xid_errors,
            instance_terminated,
        )
        entry = self._old_nodes.get(ident)
        if entry is not None and entry[0] is raw and entry[1] == inputs:
            self.hits += 1
            self._nodes[ident] = entry
            return entry[2]
        self.misses += 1
        state = node_state(
            raw,
            pool,
            idle_since=idle_since,
            utilization_percent=utilization_percent,
            utilization_stale=utilization_stale,
            interruption_deadline=interruption_deadline,
            xid_errors=xid_errors,
            instance_terminated=instance_terminated,
        )
        self._nodes[ident] = (raw, inputs, state)
        return state


class _EveryJob:
    """Contains every Job: each pod of one is converted again."""

    def __contains__(self, job: object) -> bool:
        return True


_EVERY_JOB = _EveryJob()


def _changed_keys(now: Mapping[str, Any], last: Mapping[str, Any]) -> set[str]:
    """Keys whose value differs between the two mappings (present in one only included)."""
    return {k for k in now.keys() | last.keys() if now.get(k, _UNSET) != last.get(k, _UNSET)}


def build_snapshot(
    objects: ClusterObjects,
    pools: Mapping[str, GPUPoolSpec],
    measured: Measurements,
    idle: IdleTracker,
    now: float,
    *,
    unpinned_demand: bool = True,
    conversions: Conversions | None = None,
) -> ClusterSnapshot:
    """The snapshot ``core.decide`` reads, at ``now`` (epoch seconds), for one policy's
    ``pools``.

    Pods of a Job in the middle of a move are left out: they are on their way out, and the
    Job's demand is counted on its target pool instead (decide reads the move intent).
    Pending pods pinned to another policy's pool, and Jobs moving into one, are that
    policy's demand; pending pods pinned to no pool count only with ``unpinned_demand``.

    ``conversions`` (one per policy, kept between ticks) reuses the pods and nodes converted
    by the last build that have not changed since; the snapshot is the same without it.
    """
    selectors = {name: pool_selector(name, spec) for name, spec in pools.items()}
    convert = conversions if conversions is not None else Conversions()
    jobs: list[JobState] = []
    criticality: dict[str, Criticality] = {}
    job_notes: dict[str, Mapping[str, str]] = {}
    moving: set[str] = set()
    queued: set[str] = set()
    custom: dict[str, JobState] = {}
    """JobSets, RayJobs, PyTorchJobs by key: their pods are theirs, not their child Jobs'."""
    gangs: dict[str, JobState] = {}
    for raw in [*objects.jobs, *objects.workloads]:
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        kind = kind_of(raw)
        if owned_by_workload(raw):
            continue  # a JobSet's child Job, a TrainJob's JobSet: moved through their owner
        if kind.kind == "Job":
            criticality[key] = job_criticality(raw)
            state = job_state(raw)
        else:
            state = workload_state(kind, raw)
            if state is not None:
                criticality[key] = state.criticality
                custom[key] = state
        job_notes[key] = meta.get("annotations") or {}
        if state is None:
            continue
        if state.queued:
            queued.add(key)
        if state.gang:
            gangs[key] = state
        if state.move is not None:
            moving.add(key)
            if state.move.to_pool not in (None, *pools):
                continue  # moving into another policy's pool: its demand, not ours
        jobs.append(state)

    convert.begin(criticality, job_notes, queued)
    pods: list[GPUPod] = []
    gpu_pods_on: dict[str, int] = {}
    leaders_without_gpus: set[str] = set()
    for raw in objects.pods:
        pod = convert.gpu_pod(raw, criticality, job_notes, queued)
        if pod is None and is_lws_leader(raw):
            group = lws_group(raw)
            if group is not None and pod_spec_gpus(raw.get("spec") or {}) <= 0:
                leaders_without_gpus.add(group[0])
        if pod is not None and custom:
            pod = _of_workload(pod, raw, custom, queued)
        if pod is None or (pod.job is not None and pod.job in moving):
            continue
        if pod.job is not None and pod.job in gangs:
            pod = replace(pod, gang=pod.job, gang_size=gangs[pod.job].parallelism)
        if pod.node is None and not _is_demand_of(pod.pool, pools, unpinned_demand):
            continue
        pods.append(pod)
        if pod.node is not None:
            gpu_pods_on[pod.node] = gpu_pods_on.get(pod.node, 0) + 1

    if leaders_without_gpus:
        # A LeaderWorkerSet group whose leader asks for no GPU needs GPUs for its workers only.
        pods = [
            replace(p, gang_size=p.gang_size - 1) if p.gang in leaders_without_gpus else p
            for p in pods
        ]
    if custom:
        jobs = _with_start_times(jobs, custom, pods)
    pool_of = convert.node_pools.of(objects.nodes, selectors)
    pods = _with_pod_idleness(pods, objects.nodes, pool_of, pools, measured, idle, now)
    nodes: list[NodeState] = []
    for raw, pool in zip(objects.nodes, pool_of, strict=True):
        if pool is None:
            continue
        name = str((raw.get("metadata") or {}).get("name"))
        util = measured.utilization_by_node.get(name)
        threshold = pools[pool].scale_down.idle_utilization_percent
        since = idle.observe(name, is_idle(gpu_pods_on.get(name, 0), util, threshold), now)
        provider_id = (raw.get("spec") or {}).get("providerID")
        # Matched to a notice only by an exact, non-empty provider ID: owned nodes have none.
        deadline = measured.deadline_by_provider_id.get(provider_id) if provider_id else None
        nodes.append(
            convert.node_state(
                raw,
                pool,
                since,
                util,
                name in measured.stale_nodes,
                deadline,
                measured.xid_errors_by_node.get(name, 0),
                bool(provider_id) and provider_id in measured.terminated_provider_ids,
            )
        )
    idle.forget_all_but(
        [n.name for n in nodes]
        + [_pod_clock(p.key) for p in pods if p.idle_timeout_seconds is not None]
    )

    return ClusterSnapshot(
        taken_at=now,
        pools=tuple(
            PoolState(
                name=name,
                spec=spec,
                provisioning_nodes=measured.provisioning_by_pool.get(name, 0),
                spot_price_per_node_hour=measured.spot_price_by_pool.get(name),
                launchable=name not in measured.unlaunchable_pools,
            )
            for name, spec in sorted(pools.items())
        ),
        nodes=tuple(nodes),
        pods=tuple(pods),
        jobs=tuple(jobs),
        metrics=measured.metrics,
        budget=measured.budget,
    )


def _of_workload(
    pod: GPUPod, raw: Obj, custom: Mapping[str, JobState], queued: Collection[str]
) -> GPUPod:
    """A pod of a JobSet, RayJob or PyTorchJob belongs to it (not to the child Job that runs
    it), takes its criticality unless the pod names its own, and is Kueue's when it is."""
    ref = owner_workload(raw)
    if ref is None or ref.kind == "Job":
        return pod
    state = custom.get(ref.key)
    if state is None:
        return pod
    labelled = CRITICALITY_LABEL in labels_of(raw)
    return replace(
        pod,
        job=ref.key,
        criticality=pod.criticality if labelled else state.criticality,
        queued=pod.queued or ref.key in queued,
    )


def _with_start_times(
    jobs: list[JobState], custom: Mapping[str, JobState], pods: list[GPUPod]
) -> list[JobState]:
    """Kinds whose status says no start time started when their first pod still running
    did (decide's minRuntime and checkpoint arithmetic count from there)."""
    first: dict[str, float] = {}
    for pod in pods:
        key = pod.job
        if key is not None and key in custom and pod.started_at is not None and pod.node:
            first[key] = min(first.get(key, pod.started_at), pod.started_at)
    return [
        replace(j, started_at=first[j.key])
        if j.key in custom and j.started_at is None and j.key in first
        else j
        for j in jobs
    ]


def _pod_clock(key: str) -> str:
    """The IdleTracker key of a pod's idle clock (nodes are keyed by bare name)."""
    return f"pod:{key}"


def _with_pod_idleness(
    pods: list[GPUPod],
    nodes: Sequence[Obj],
    pools_of_nodes: Sequence[str | None],
    pools: Mapping[str, GPUPoolSpec],
    measured: Measurements,
    idle: IdleTracker,
    now: float,
) -> list[GPUPod]:
    """Bound pods that opted in to idle reclaim, with their per-pod utilization and the start
    of their idle stretch (fresh utilization below their node's pool threshold). A pod with
    no fresh reading is never idle: its clock starts again, so stale metrics can only delay
    a reclaim. Other pods are left as they are (no per-pod work for them)."""
    if not any(p.idle_timeout_seconds is not None for p in pods):
        return pods
    pool_of: dict[str, str] = {}
    for raw, pool in zip(nodes, pools_of_nodes, strict=True):
        if pool is not None:
            pool_of[str((raw.get("metadata") or {}).get("name"))] = pool
    out: list[GPUPod] = []
    for pod in pods:
        pool = pool_of.get(pod.node) if pod.node is not None else None
        if pool is None or pod.idle_timeout_seconds is None:
            out.append(pod)
            continue
        used = measured.utilization_by_pod.get(pod.key)
        threshold = pools[pool].scale_down.idle_utilization_percent
        since = idle.observe(_pod_clock(pod.key), used is not None and used < threshold, now)
        out.append(replace(pod, utilization_percent=used, idle_since=since))
    return out


def _is_demand_of(pinned_to: str | None, pools: Mapping[str, GPUPoolSpec], unpinned: bool) -> bool:
    return unpinned if pinned_to is None else pinned_to in pools
