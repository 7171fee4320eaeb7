"""Carry out a Plan on the cluster, idempotently: running the same plan twice changes nothing
the second time (moves are recorded on the Job, releases on the Node).

Cloud capacity is reached through :class:`PoolCapacity`, a small interface the handlers
implement on top of the pool's CapacityProvider (``kube`` does not import ``cloud``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hybridgpu.core.cost import is_cloud, powered
from hybridgpu.kube.cluster import KubeCluster, ObjectRef
from hybridgpu.kube.convert import (
    annotations_of,
    is_bare,
    is_daemonset_pod,
    is_queued,
    node_is_ready,
    pool_of_node,
    pool_selector,
)
from hybridgpu.kube.errors import KubeError, NotFound
from hybridgpu.kube.moves import (
    STEP_SUSPEND,
    SUSPENSION_WAIT_SECONDS,
    Move,
    next_step,
    read_move,
    repin_template,
)
from hybridgpu.kube.names import (
    CORDONED_BY_ANNOTATION,
    GROUP,
    INTERRUPTION_ANNOTATION,
    MOVE_ANNOTATION,
    PROGRESS_ANNOTATION,
    RECLAIMED_ANNOTATION,
    RELEASING_ANNOTATION,
    RESERVED_ANNOTATION,
    TIER_LABEL,
    VERSION,
)
from hybridgpu.kube.reserve import with_reservation
from hybridgpu.kube.serving import COMPLETED, Outcome, ServingMover, ServingReads, read_intent
from hybridgpu.kube.workloads import (
    JOB,
    KINDS,
    WorkloadKind,
    WorkloadRef,
    api_version_of,
    child_job_repin_patch,
    finish_patch,
    from_pool,
    kind_named,
    kind_of,
    owner_workload,
    repin_patch,
    start_patch,
    workload_owner,
)
from hybridgpu.kube.workloads.kinds import (
    RUNTIME_PATCHES,
    TRAINJOB_CRD,
    TRAINJOB_OVERRIDE_FIELDS,
    TrainJob,
    conditions_true,
    trainer_tolerations,
    trainjob_override_field,
)
from hybridgpu.models.actions import (
    Action,
    CordonUnhealthy,
    HandleInterruption,
    MoveJob,
    Plan,
    RebalanceReplica,
    ReclaimIdle,
    ReleaseNode,
    ReserveNode,
    ScaleUp,
)
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

API_VERSION = f"{GROUP}/{VERSION}"
EVENT_REASONS = {
    "handle_interruption": "SpotInterruption",
    "preempt": "Preempt",
    "scale_up": "ScaleUp",
    "consolidate": "Consolidate",
    "release_node": "ReleaseNode",
    "cordon_unhealthy": "CordonUnhealthy",
    "deadline": "DeadlineOnDemand",
    "reclaim_idle": "IdleReclaimed",
    "rebalance": "Rebalance",
    "power_on": "PowerOn",
    "power_off": "PowerOff",
    "reserve_node": "NodeReserved",
    "unreserve_node": "NodeReservationEnded",
}
REBALANCE_EVENT_REASONS = {
    "completed": "Rebalanced",
    "rolled_back": "RebalanceRolledBack",
    "aborted": "RebalanceAborted",
}
EVENT_REPEAT_SECONDS = 60.0
"""The same state Event (blocked, metrics unavailable) is bumped at most this often: ticks
triggered by pod churn would otherwise write one per tick. Actions are always recorded."""
TRAINJOB_FIELD_SECONDS = 300.0
"""How long the TrainJob CRD's override field, read from the CRD, is taken as known: a
Trainer upgraded while the operator runs is seen within this long (and at once when a move's
patch comes back without the pin it wrote)."""
ORPHAN_NODE_GRACE_SECONDS = 60.0
"""A node whose instance the provider does not know is deleted only after this long (it may
just have been created and the provider's list may lag)."""


class PoolCapacity(Protocol):
    """Adding and removing machines of a pool (the handlers wrap a CapacityProvider)."""

    def scale_up(self, pool: str, nodes: int) -> None:
        """Ask for ``nodes`` more nodes than the pool has now."""
        ...

    def terminate(self, pool: str, node: str, provider_id: str | None) -> bool:
        """Terminate the (drained) instance behind ``node``; acknowledge its notices.

        False when the pool has no instances to terminate (owned hardware) or the node
        names no provider ID: then the Node object must stay too."""
        ...

    def known_provider_ids(self, pool: str) -> set[str] | None:
        """Provider IDs of the pool's live instances; None when the pool has no provider."""
        ...


@dataclass
class Execution:
    """What one run of the executor did."""

    done: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provider_errors: dict[str, str] = field(default_factory=dict)
    events: int = 0
    reclaimed: list[ReclaimIdle] = field(default_factory=list)
    """Idle reclaims carried out this run (not the ones already done, nor dry runs)."""
    rebalances: list[RebalanceReplica] = field(default_factory=list)
    """Surge rebalances started this run."""


def pool_ref(name: str) -> ObjectRef:
    return ObjectRef(kind="GPUPool", name=name, api_version=API_VERSION)


def policy_ref(name: str) -> ObjectRef:
    return ObjectRef(kind="ScalingPolicy", name=name, api_version=API_VERSION)


def node_ref(name: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=name, api_version="v1")


def job_ref(namespace: str, name: str, kind: WorkloadKind = JOB) -> ObjectRef:
    return ObjectRef(
        kind=kind.kind, name=name, api_version=api_version_of(kind), namespace=namespace
    )


def deployment_ref(namespace: str, name: str) -> ObjectRef:
    return ObjectRef(kind="Deployment", name=name, api_version="apps/v1", namespace=namespace)


class PlanExecutor:
    """Runs plans against one cluster."""

    def __init__(
        self,
        cluster: KubeCluster,
        capacity: PoolCapacity,
        clock: Callable[[], float],
        serving_reads: ServingReads | None = None,
    ) -> None:
        self.cluster = cluster
        self.capacity = capacity
        self.clock = clock
        self._posted: dict[tuple[str, str, str, str], float] = {}
        self._progress: Mapping[str, float] = {}
        """The plan being executed's saved progress by Job, recorded on Jobs it stops."""
        self.serving = ServingMover(cluster, clock, serving_reads)
        self._kinds: dict[str, str] = {}
        """The kind of each workload of the plan's snapshot that is not a batch/v1 Job."""
        self._trainjob_field: tuple[float, str] | None = None
        """When the TrainJob CRD was read, and the override field it serves."""
        self._shaped: dict[tuple[str, ...], tuple[dict[str, GPUPoolSpec], dict[int, Any]]] = {}
        """By the pools of a shape_nodes call (their names): those pools' specs, and the Node
        objects (by identity) found already labelled and tainted as those specs say."""

    # ------------------------------------------------------------------ plan
    def execute(
        self,
        plan: Plan,
        snapshot: ClusterSnapshot,
        pools: Mapping[str, GPUPoolSpec],
        *,
        policy: str,
        dry_run: bool,
        may_act: Callable[[], bool] = lambda: True,
    ) -> Execution:
        """Carry out ``plan`` (or, with ``dry_run``, only post what would happen). Before
        each action ``may_act`` says whether we still lead: once it says no, the rest is
        left to whoever leads next, which decides afresh."""
        result = Execution()
        prefix = "dry run, not done: " if dry_run else ""
        self._progress = plan.progress_seconds_by_job
        self._kinds = {j.key: j.kind for j in snapshot.jobs if j.kind != JOB.kind}
        for done, action in enumerate(plan.actions):
            if not dry_run and not may_act():
                left = len(plan.actions) - done
                log.warning("leader lease may have expired: %d action(s) not done", left)
                result.errors.append(
                    f"leader lease may have expired mid-tick: {left} action(s) left to the "
                    "next leader"
                )
                break
            if not dry_run:
                try:
                    self._act(action, snapshot, pools, result)
                    result.done.append(action.reason)
                except KubeError as err:
                    log.warning("%s failed: %s", action.kind.value, err)
                    result.errors.append(f"{action.kind.value}: {err}")
                    continue
            self._event(
                result,
                self._ref_of(action),
                EVENT_REASONS[action.kind.value],
                prefix + action.reason,
                action=True,
            )
        for blocked in plan.blocked:
            reason = "BudgetExceeded" if blocked.cause.startswith("budget") else "ScalingBlocked"
            self._event(result, policy_ref(policy), reason, blocked.reason, "Warning")
            if blocked.pool in pools:
                self._event(result, pool_ref(blocked.pool), reason, blocked.reason, "Warning")
        if not plan.metrics_available:
            self._event(
                result,
                policy_ref(policy),
                "MetricsUnavailable",
                "; ".join(plan.notes) or "utilization data unavailable: nothing is released",
                "Warning",
            )
        return result

    def warn_pools(self, reason: str, messages: Mapping[str, str]) -> None:
        """A Warning Event on each pool of ``messages`` (pool -> message), repeated at most
        once per EVENT_REPEAT_SECONDS while the same message holds: what `kubectl describe
        gpupool` shows beside the pool's condition (a provider that fails, say)."""
        for pool, message in messages.items():
            self._event(Execution(), pool_ref(pool), reason, message, "Warning")

    def warn_nodes(self, reason: str, messages: Mapping[str, str]) -> None:
        """``warn_pools`` for Nodes (node -> message): `kubectl describe node` shows it."""
        for node, message in messages.items():
            self._event(Execution(), node_ref(node), reason, message, "Warning")

    def _ref_of(self, action: Action) -> ObjectRef:
        if isinstance(action, MoveJob):
            return job_ref(action.namespace, action.job, self._kind(action.job_key))
        if isinstance(action, RebalanceReplica):
            return deployment_ref(action.namespace, action.workload)
        if isinstance(action, ReclaimIdle):
            if action.job:
                key = f"{action.namespace}/{action.name}"
                return job_ref(action.namespace, action.name, self._kind(key))
            return ObjectRef(
                kind="Pod", name=action.name, api_version="v1", namespace=action.namespace
            )
        if isinstance(action, HandleInterruption | CordonUnhealthy | ReserveNode):
            return node_ref(action.node)
        return pool_ref(action.pool)

    def _kind(self, key: str) -> WorkloadKind:
        """The adapter of the workload ``namespace/name`` of the plan's snapshot."""
        return kind_named(self._kinds.get(key))

    def _event(
        self,
        result: Execution,
        ref: ObjectRef,
        reason: str,
        message: str,
        event_type: str = "Normal",
        *,
        action: bool = False,
    ) -> None:
        now = self.clock()
        key = (ref.kind, ref.name, reason, message)
        # An action done again is news: the same Event again bumps the existing one's count
        # (post_event), so the second scale-up of a burst is seen. A state that persists
        # (blocked, blind) is repeated at most once per EVENT_REPEAT_SECONDS.
        if not action and now - self._posted.get(key, float("-inf")) < EVENT_REPEAT_SECONDS:
            return
        if len(self._posted) > 10_000:
            self._posted = {k: t for k, t in self._posted.items() if now - t < EVENT_REPEAT_SECONDS}
        try:
            self.cluster.post_event(
                ref, reason=reason, message=message, event_type=event_type, now=now
            )
            self._posted[key] = now
            result.events += 1
        except KubeError as err:
            log.warning("could not post event %s: %s", reason, err)

    def _act(
        self,
        action: Action,
        snapshot: ClusterSnapshot,
        pools: Mapping[str, GPUPoolSpec],
        result: Execution,
    ) -> None:
        if isinstance(action, ScaleUp):
            try:
                self.capacity.scale_up(action.pool, action.nodes)
            except Exception as err:  # provider failures are reported, never crash the tick
                result.provider_errors[action.pool] = str(err)
                raise KubeError(f"scale up {action.pool}: {err}") from err
        elif isinstance(action, MoveJob):
            kind = self._kind(action.job_key)
            self.start_move(action.namespace, action.job, action.to_pool, pools, kind)
        elif isinstance(action, ReleaseNode):
            self.release_node(action.pool, action.node, pools, result)
        elif isinstance(action, ReserveNode):
            self.reserve_node(action.node, action.job)
        elif isinstance(action, HandleInterruption):
            spec = pools.get(action.pool)
            if spec is None or not is_cloud(spec.tier):
                raise KubeError(f"refusing to drain owned node {action.node} for an interruption")
            node = next((n for n in snapshot.nodes if n.name == action.node), None)
            deadline = node.interruption_deadline if node else None
            extra = {INTERRUPTION_ANNOTATION: str(deadline)} if deadline is not None else {}
            self.cluster.cordon(action.node, "interruption", extra)
            self.release_node(action.pool, action.node, pools, result, cordon_as=None)
        elif isinstance(action, CordonUnhealthy):
            self.cluster.cordon(action.node, "xid-errors")
        elif isinstance(action, ReclaimIdle) and self.reclaim(action):
            result.reclaimed.append(action)
        elif isinstance(action, RebalanceReplica) and self.serving.start(action):
            result.rebalances.append(action)

    # ------------------------------------------------------------- rebalance
    def advance_rebalances(
        self, nodes: list[dict[str, Any]], pools: Mapping[str, GPUPoolSpec]
    ) -> tuple[list[Outcome], int]:
        """Advance every surge rebalance recorded on a Deployment (kube/serving.py), release
        the cloud nodes they emptied, and uncordon nodes cordoned for a rebalance no intent
        names any more. Returns the rebalances that ended and how many are still in flight."""
        result = Execution()
        ended: list[Outcome] = []
        busy: set[str] = set()
        in_flight = 0
        try:
            deployments = self.serving.list_with_intent()
        except KubeError as err:
            log.warning("cannot list Deployments to advance rebalances: %s", err)
            return [], 0
        for deployment in deployments:
            intent = read_intent(annotations_of(deployment))
            try:
                outcome = self.serving.advance(deployment)
            except KubeError as err:
                log.warning("rebalance of %s: %s", deployment["metadata"].get("name"), err)
                outcome = None
            if outcome is None:
                if intent is not None:
                    busy.add(intent.node)
                    in_flight += 1
                continue
            ended.append(outcome)
            self._event(
                result,
                deployment_ref(outcome.namespace, outcome.name),
                REBALANCE_EVENT_REASONS[outcome.result],
                outcome.message,
                "Normal" if outcome.result == COMPLETED else "Warning",
                action=True,
            )
        for outcome in ended:
            node = outcome.intent.node
            if node in busy:
                continue  # another replica still leaves it
            busy.add(node)
            try:
                if outcome.release and self.serving.node_is_empty(node):
                    self.release_node(outcome.intent.from_pool, node, pools, result)
                else:
                    self.cluster.uncordon(node)
            except KubeError as err:
                log.warning("after the rebalance off %s: %s", node, err)
        try:
            self.serving.uncordon_orphans(nodes, busy)
        except KubeError as err:
            log.warning("uncordon after a rebalance: %s", err)
        return ended, in_flight

    def reserve_node(self, node: str, job: str | None) -> None:
        """Keep ``node`` for the pods of Job ``job`` (``namespace/name``): the annotation
        naming it, then the taint only its pods and critical pods tolerate (kube/reserve.py);
        ``job`` None takes both off. Idempotent; a node gone is left alone."""
        raw = self.cluster.get_node(node)
        if raw is None:
            return
        taints = list((raw.get("spec") or {}).get("taints") or [])
        wanted = with_reservation(taints, job)
        noted = annotations_of(raw).get(RESERVED_ANNOTATION)
        if job is not None and noted != job:
            self.cluster.patch_node_metadata(node, annotations={RESERVED_ANNOTATION: job})
        if wanted != taints:
            self.cluster.set_node_taints(node, wanted)
        if job is None and noted is not None:
            self.cluster.patch_node_metadata(node, annotations={RESERVED_ANNOTATION: None})

    def reclaim(self, action: ReclaimIdle) -> bool:
        """Suspend the idle Job (recording why on it) or evict the idle bare pod through the
        Eviction API (PodDisruptionBudgets hold); False when it was already done."""
        if not action.job:
            return self.cluster.evict(action.namespace, action.name)
        kind = self._kind(f"{action.namespace}/{action.name}")
        try:
            job = self.cluster.get_workload(kind, action.namespace, action.name)
        except NotFound:
            return False
        if kind.suspended(job):
            return False
        if is_queued(job):
            log.warning("not reclaiming Job %s/%s: Kueue manages it", action.namespace, action.name)
            return False
        record = {
            "at": round(self.clock()),
            "idleSeconds": round(action.idle_seconds),
            "gpus": action.gpus,
            "heldDollars": round(action.held_dollars, 2),
        }
        patch = kind.suspend_patch(True)
        patch["metadata"] = {
            "annotations": {RECLAIMED_ANNOTATION: json.dumps(record, sort_keys=True)}
        }
        self.cluster.patch_workload(kind, action.namespace, action.name, patch)
        return True

    # ------------------------------------------------------------- releasing
    def release_node(
        self,
        pool: str,
        node: str,
        pools: Mapping[str, GPUPoolSpec],
        result: Execution,
        cordon_as: str | None = "release",
    ) -> bool:
        """Cordon, drain and, once empty, terminate ``node``; True when it is gone.

        Pods of Jobs requeue through the move protocol (an evicted Job pod would count as a
        failure); other owned pods are evicted through the Eviction API (PDBs hold); bare
        pods are never evicted, so a node with one is kept. Pods Kueue admitted are never
        moved: a node with one is kept too, unless the provider takes it away (an
        interruption, ``cordon_as`` None), when they are evicted and their controller
        recreates them. Nodes of owned (core) pools are never released, whatever the plan
        says; an owned pool with power has a node powered off only while no pod (other than
        a DaemonSet's) is on it: it is never drained.
        """
        spec = pools.get(pool)
        if spec is None or not (is_cloud(spec.tier) or powered(spec)):
            raise KubeError(f"refusing to release {node}: pool {pool} is not a cloud pool")
        pods = self.cluster.pods_on_node(node)
        if not is_cloud(spec.tier):
            return self._power_off(pool, node, pods, result)
        queued_jobs: dict[str, bool] = {}
        if cordon_as is not None:
            kept = [
                p
                for p in pods
                if (is_bare(p) or self._is_queued_pod(p, queued_jobs))
                and not (p.get("metadata") or {}).get("deletionTimestamp")
            ]
            if kept:
                # A bare or queued pod is never evicted for a release: keep the node instead.
                self._keep_for_pod(node, kept[0], result)
                return False
            self.cluster.cordon(node, cordon_as, {RELEASING_ANNOTATION: f"{self.clock():.0f}"})
        # On a NotReady node no kubelet confirms a deletion: the Node's removal does.
        unreachable = not node_is_ready(self.cluster.get_node(node) or {})
        left = 0
        for pod in pods:
            meta = pod.get("metadata") or {}
            if is_daemonset_pod(pod):
                continue
            if meta.get("deletionTimestamp"):
                left += 0 if unreachable else 1
                continue
            left += 1
            workload = self._mover_of(owner_workload(pod))
            if self._is_queued_pod(pod, queued_jobs):
                # The node goes away anyway; Kueue owns the workload's suspend flag, so its pod
                # is evicted (PDBs hold) and its controller recreates it elsewhere.
                self.cluster.evict(str(meta.get("namespace")), str(meta.get("name")))
            elif workload is not None:
                kind = kind_named(workload.kind)
                self.start_move(workload.namespace, workload.name, None, pools, kind)
            elif is_bare(pod):
                result.errors.append(
                    f"bare pod {meta.get('namespace')}/{meta.get('name')} keeps {node}: "
                    "bare pods are never evicted"
                )
            else:
                self.cluster.evict(str(meta.get("namespace")), str(meta.get("name")))
        if left:
            return False
        self._remove_machine(
            pool,
            node,
            result,
            f"terminate {node}",
            f"node {node} of pool {pool} has no instance to terminate: kept",
        )
        return True

    def _power_off(
        self, pool: str, node: str, pods: list[dict[str, Any]], result: Execution
    ) -> bool:
        """Power off an owned node with no pods: cordon it, then have the provider remove its
        machine (Cluster API: the delete-machine annotation, replicas lowered). A pod that
        arrived since the snapshot keeps the node on: owned nodes are never drained."""
        if _occupied(pods):
            self._keep_on(node, _occupied(pods)[0], result)
            return False
        self.cluster.cordon(node, "power-off", {RELEASING_ANNOTATION: f"{self.clock():.0f}"})
        # A pod bound between the list and the cordon keeps the node on too.
        late = _occupied(self.cluster.pods_on_node(node))
        if late:
            self._keep_on(node, late[0], result)
            return False
        self._remove_machine(
            pool,
            node,
            result,
            f"power off {node}",
            f"owned node {node} of pool {pool} has no machine to power off: kept",
        )
        return True

    def _remove_machine(
        self, pool: str, node: str, result: Execution, doing: str, missing: str
    ) -> None:
        """Have the provider remove the node's machine (by its providerID), then delete the
        Node object; a provider error is the pool's, and a machine it cannot find keeps the
        Node (``missing`` says so)."""
        raw = self.cluster.get_node(node)
        provider_id = ((raw or {}).get("spec") or {}).get("providerID")
        try:
            terminated = self.capacity.terminate(pool, node, provider_id)
        except Exception as err:
            result.provider_errors[pool] = str(err)
            raise KubeError(f"{doing}: {err}") from err
        if not terminated:
            raise KubeError(missing)
        self.cluster.delete_node(node)

    def _keep_on(self, node: str, pod: dict[str, Any], result: Execution) -> None:
        """End a power-off: a pod runs on the owned node (owned nodes are never drained)."""
        notes = annotations_of(self.cluster.get_node(node) or {})
        if notes.get(CORDONED_BY_ANNOTATION) == "power-off":
            self.cluster.uncordon(node)
        if RELEASING_ANNOTATION in notes:
            self.cluster.patch_node_metadata(node, annotations={RELEASING_ANNOTATION: None})
        meta = pod.get("metadata") or {}
        self._event(
            result,
            node_ref(node),
            "PowerOffCancelled",
            f"pod {meta.get('namespace')}/{meta.get('name')} runs on owned node {node}: it "
            "stays on (owned nodes are never drained to power them off)",
        )

    def _is_queued_pod(self, pod: dict[str, Any], queued_jobs: dict[str, bool]) -> bool:
        """Whether Kueue manages the pod (its label) or its workload (read once, kept in
        ``queued_jobs``)."""
        if is_queued(pod):
            return True
        workload = self._mover_of(owner_workload(pod))
        if workload is None:
            return False
        key = f"{workload.kind}:{workload.key}"
        if key not in queued_jobs:
            kind = kind_named(workload.kind)
            try:
                queued_jobs[key] = is_queued(
                    self.cluster.get_workload(kind, workload.namespace, workload.name)
                )
            except NotFound:
                queued_jobs[key] = False
        return queued_jobs[key]

    def _mover_of(self, ref: WorkloadRef | None) -> WorkloadRef | None:
        """The workload that is moved for a pod's owner: its owner when another kind owns it
        (a TrainJob's JobSet), else itself."""
        if ref is None or ref.kind != "JobSet":
            return ref
        try:
            raw = self.cluster.get_workload(kind_named(ref.kind), ref.namespace, ref.name)
        except NotFound:
            return ref
        return workload_owner(raw) or ref

    def _keep_for_pod(self, node: str, pod: dict[str, Any], result: Execution) -> None:
        """End the release of ``node``: drop the releasing mark, and the cordon when it was
        the release's own (a cordon for GPU errors or by a person stays)."""
        raw = self.cluster.get_node(node) or {}
        notes = annotations_of(raw)
        if notes.get(CORDONED_BY_ANNOTATION) == "release":
            self.cluster.uncordon(node)
        if RELEASING_ANNOTATION in notes:
            self.cluster.patch_node_metadata(node, annotations={RELEASING_ANNOTATION: None})
        meta = pod.get("metadata") or {}
        what = "bare pod" if is_bare(pod) else "pod admitted by Kueue"
        self._event(
            result,
            node_ref(node),
            "ReleaseCancelled",
            f"{what} {meta.get('namespace')}/{meta.get('name')} runs on {node} and is never "
            "evicted: the node is kept",
        )

    # ----------------------------------------------------------------- moves
    def start_move(
        self,
        namespace: str,
        name: str,
        to_pool: str | None,
        pools: Mapping[str, GPUPoolSpec],
        kind: WorkloadKind = JOB,
    ) -> None:
        """Record the move on the workload and suspend it (one patch), then advance it. The
        whole workload moves: every pod template is repointed, all its pods restart."""
        try:
            job = self.cluster.get_workload(kind, namespace, name)
        except NotFound:
            return
        job.setdefault("kind", kind.kind)
        if is_queued(job):
            # Kueue owns its suspend flag: suspending it here would fight Kueue's admission.
            log.warning("not moving %s %s/%s: Kueue manages it", kind.kind, namespace, name)
            self.advance_move(job, pools)
            return
        if read_move(annotations_of(job)) is not None:
            self.advance_move(job, pools)
            return
        move = Move(
            to_pool=to_pool, from_pool=from_pool(kind, job), step=STEP_SUSPEND, since=self.clock()
        )
        patch = start_patch(kind, move, job)
        saved = self._progress.get(f"{namespace}/{name}")
        if saved is not None:
            # Its next run's deadline arithmetic starts from what its checkpoints saved.
            patch["metadata"]["annotations"][PROGRESS_ANNOTATION] = f"{saved:.0f}"
        job = self.cluster.patch_workload(kind, namespace, name, patch)
        self.advance_move(job, pools)

    def advance_moves(self, jobs: list[dict[str, Any]], pools: Mapping[str, GPUPoolSpec]) -> int:
        """Advance every move recorded on ``jobs`` (Jobs, and JobSets, RayJobs, PyTorchJobs,
        TrainJobs with their ``kind``); returns how many are still in flight."""
        in_flight = 0
        for job in jobs:
            if MOVE_ANNOTATION not in annotations_of(job):
                continue
            try:
                if not self.advance_move(job, pools):
                    in_flight += 1
            except KubeError as err:
                meta = job.get("metadata") or {}
                log.warning("move of Job %s/%s: %s", meta.get("namespace"), meta.get("name"), err)
                in_flight += 1
        return in_flight

    def advance_move(self, job: dict[str, Any], pools: Mapping[str, GPUPoolSpec]) -> bool:
        """Take the move recorded on ``job`` (a Job, or another kind said by its ``kind``) as
        far as it can go now; True when finished."""
        kind = kind_of(job)
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        move = read_move(annotations_of(job))
        status = job.get("status") or {}
        if kind.finished(job) or is_queued(job):
            # A queued workload's suspend flag is Kueue's: a move recorded on it is dropped,
            # never carried on (resuming it would start work Kueue has not admitted).
            if MOVE_ANNOTATION in annotations_of(job):
                self.cluster.patch_workload(
                    kind, namespace, name, {"metadata": {"annotations": {MOVE_ANNOTATION: None}}}
                )
            return True
        if move is None:
            # An intent we cannot read: never leave the workload suspended because of it.
            self.cluster.patch_workload(kind, namespace, name, finish_patch(kind))
            return True
        pods = self.cluster.pods_of_workload(kind, namespace, name)
        step = next_step(
            move,
            suspended=kind.suspended(job),
            pods_left=len(pods),
            has_start_time=kind.clears_start_time and bool(status.get("startTime")),
            suspension_recorded=self._suspension_recorded(kind, job, move),
        )
        if step == "suspend":
            self.cluster.patch_workload(kind, namespace, name, kind.suspend_patch(True))
            return False
        if step == "wait":
            return False
        if step == "clear_start_time":
            self.cluster.clear_job_start_time(namespace, name)
            step = "repin"
        if step == "repin":
            if kind.child_jobs_selector and not self._repin_child_jobs(kind, job, move, pools):
                return False
            if isinstance(kind, TrainJob):
                return self._repin_trainjob(kind, job, move, pools)
            self.cluster.patch_workload(kind, namespace, name, repin_patch(kind, job, move, pools))
        self.cluster.patch_workload(kind, namespace, name, finish_patch(kind))
        log.info("moved %s %s/%s to %s", kind.kind, namespace, name, move.to_pool or "its queue")
        return True

    def _suspension_recorded(self, kind: WorkloadKind, job: dict[str, Any], move: Move) -> bool:
        """Whether the controller has recorded the suspension (``kind.suspension_condition``
        True), or the move has waited SUSPENSION_WAIT_SECONDS for it."""
        condition = kind.suspension_condition
        return (
            condition is None
            or conditions_true(job, (condition,))
            or self.clock() - move.since >= SUSPENSION_WAIT_SECONDS
        )

    def _repin_child_jobs(
        self, kind: WorkloadKind, job: dict[str, Any], move: Move, pools: Mapping[str, GPUPoolSpec]
    ) -> bool:
        """Repoint the suspended child Jobs a JobSet kept (see ``child_job_repin_patch``)
        before the workload is resumed; False (the move waits a tick) while one of them is not
        suspended yet."""
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        selector = str(kind.child_jobs_selector).format(name=name)
        for child in self.cluster.list_jobs(namespace, selector):
            ops = child_job_repin_patch(child, move, pools)
            if ops is None:
                continue
            child_name = str((child.get("metadata") or {}).get("name"))
            if not (child.get("spec") or {}).get("suspend"):
                log.info(
                    "move of %s %s/%s waits for Job %s to suspend",
                    kind.kind,
                    namespace,
                    name,
                    child_name,
                )
                return False
            if (child.get("status") or {}).get("startTime"):
                self.cluster.clear_job_start_time(namespace, child_name)
            self.cluster.patch_job(namespace, child_name, ops)
        return True

    def _keep_runtime_tolerations(
        self,
        ops: list[dict[str, Any]],
        namespace: str,
        name: str,
        target: str | None,
        pools: Mapping[str, GPUPoolSpec],
    ) -> None:
        """Trainer v2.2 applies each runtime patch as a strategic merge patch, in which a pod's
        ``tolerations`` list replaces the runtime's: so hybridgpu's entry carries the
        tolerations the trainer pods have now in the TrainJob's JobSet (the runtime's and
        the earlier entries'), other pools' dropped and the target's added, instead of the
        target's alone. Without a JobSet to read, the target's alone."""
        try:
            jobset = self.cluster.get_workload(KINDS["JobSet"], namespace, name)
        except NotFound:
            return
        now = trainer_tolerations(jobset)
        if now is None:
            return
        _, tolerations = repin_template({"tolerations": now}, target, pools)
        for op in ops:
            if str(op["path"]).endswith("/tolerations"):
                op["value"] = tolerations

    def _trainjob_override_field(self) -> tuple[str | None, str]:
        """The field the cluster's TrainJob CRD serves for a move's pin (read from the CRD,
        kept for ``TRAINJOB_FIELD_SECONDS``), or None and why not."""
        now = time.monotonic()
        if self._trainjob_field is not None and now - self._trainjob_field[0] < (
            TRAINJOB_FIELD_SECONDS
        ):
            return self._trainjob_field[1], ""
        try:
            crd = self.cluster.read_crd(TRAINJOB_CRD)
        except KubeError as err:
            return None, f"its CRD {TRAINJOB_CRD} could not be read ({err})"
        served = trainjob_override_field(crd)
        if served is None:
            fields = ", ".join(f"spec.{f}" for f in TRAINJOB_OVERRIDE_FIELDS)
            return None, f"its CRD {TRAINJOB_CRD} serves none of {fields}"
        self._trainjob_field = (now, served)
        return served, ""

    def _repin_trainjob(
        self, kind: TrainJob, job: dict[str, Any], move: Move, pools: Mapping[str, GPUPoolSpec]
    ) -> bool:
        """Repoint a suspended TrainJob through the override field its Trainer serves, then
        resume it. When the CRD serves none (or drops the pin, as a Trainer upgraded under us
        does), the TrainJob stays suspended with its move recorded and a Warning Event
        ``MoveBlocked`` says why; the move goes on once the field is served."""
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        target = move.target(pools)
        served, why = self._trainjob_override_field()
        if served is not None:
            writer = kind.served(served)
            ops = repin_patch(writer, job, move, pools)
            if served == RUNTIME_PATCHES:
                self._keep_runtime_tolerations(ops, namespace, name, target, pools)
            patched = self.cluster.patch_workload(writer, namespace, name, ops)
            wrote = [o["value"] for o in ops if str(o["path"]).endswith("/nodeSelector")]
            kept = [t.pod_spec.get("nodeSelector") or {} for t in writer.templates(patched)]
            if wrote == kept:
                self.cluster.patch_workload(writer, namespace, name, finish_patch(writer))
                log.info("moved TrainJob %s/%s to %s (spec.%s)", namespace, name, target, served)
                return True
            # The apiserver pruned what we wrote: the CRD changed since we read it. Take the
            # recorded step back so the next tick writes the pin again, through the new field.
            self._trainjob_field = None
            self.cluster.patch_workload(
                writer,
                namespace,
                name,
                {"metadata": {"annotations": {MOVE_ANNOTATION: move.annotation()}}},
            )
            why = f"the apiserver dropped the spec.{served} entry the move wrote"
        message = (
            f"TrainJob {namespace}/{name} cannot be repointed to pool {target}: {why}; it stays "
            "suspended until its Trainer serves spec.runtimePatches (v2.2+), "
            "spec.podTemplateOverrides (v2.1) or spec.podSpecOverrides (v2.0) "
            "(docs/workloads.md#trainjob)"
        )
        log.error("%s", message)
        self._event(Execution(), job_ref(namespace, name, kind), "MoveBlocked", message, "Warning")
        return False

    def finish_interrupted(
        self, snapshot: ClusterSnapshot, pools: Mapping[str, GPUPoolSpec]
    ) -> list[str]:
        """Terminate interrupted nodes that are cordoned and drained of GPU pods, so the
        notice is acknowledged and the Node object goes before the provider reclaims it."""
        busy = {p.node for p in snapshot.pods if p.node is not None}
        result = Execution()
        for node in snapshot.nodes:
            if node.interruption_deadline is None or not node.cordoned or node.name in busy:
                continue
            spec = pools.get(node.pool)
            if spec is None or not is_cloud(spec.tier):
                continue
            try:
                self.release_node(node.pool, node.name, pools, result, cordon_as=None)
            except KubeError as err:
                result.errors.append(f"finish interrupted {node.name}: {err}")
        return result.errors

    # ------------------------------------------------------------ node shape
    def shape_nodes(self, nodes: list[dict[str, Any]], pools: Mapping[str, GPUPoolSpec]) -> None:
        """Put each pool's labels and taints on its nodes where they are missing.

        A Node object (the watch cache's: replaced on every change, never mutated) found
        with nothing missing is not looked at again while it is the one read and its pools'
        specs are unchanged: the answer would be the same."""
        names = tuple(sorted(pools))
        specs, done = self._shaped.get(names, ({}, {}))
        if specs != pools:
            specs, done = dict(pools), {}
        shaped: dict[int, Any] = {}
        selectors = {name: pool_selector(name, spec) for name, spec in pools.items()}
        for raw in nodes:
            if done.get(id(raw)) is raw:
                shaped[id(raw)] = raw
                continue
            pool = pool_of_node(raw, selectors)
            if pool is None:
                shaped[id(raw)] = raw
                continue
            spec = pools[pool]
            name = str((raw.get("metadata") or {}).get("name"))
            labels = (raw.get("metadata") or {}).get("labels") or {}
            # The tier label is what admission holds preemptible pods to (core or spot).
            wanted = {**spec.labels, TIER_LABEL: str(spec.tier)}
            missing: dict[str, str | None] = {k: v for k, v in wanted.items() if labels.get(k) != v}
            taints = list((raw.get("spec") or {}).get("taints") or [])
            have = {(t.get("key"), t.get("value"), t.get("effect")) for t in taints}
            want = [t.to_wire() for t in spec.taints if (t.key, t.value, t.effect) not in have]
            if not missing and not want:
                shaped[id(raw)] = raw
                continue
            try:
                if missing:
                    self.cluster.patch_node_metadata(name, labels=missing)
                if want:
                    # The taints as they are now, not as the watch cache last had them: this
                    # tick may have kept the node for a Job (reserve_node) after the cache's read.
                    live = list(
                        ((self.cluster.get_node(name) or raw).get("spec") or {}).get("taints") or []
                    )
                    have = {(t.get("key"), t.get("value"), t.get("effect")) for t in live}
                    add = [t for t in want if (t["key"], t.get("value"), t["effect"]) not in have]
                    if add:
                        self.cluster.set_node_taints(name, live + add)
            except KubeError as err:
                log.warning("could not label/taint node %s: %s", name, err)
        if names not in self._shaped and len(self._shaped) >= 16:
            self._shaped.clear()  # pools renamed again and again: forget the old sets
        self._shaped[names] = (specs, shaped)

    def delete_orphan_nodes(self, snapshot: ClusterSnapshot, now: float) -> list[str]:
        """Delete Node objects of cloud instances the provider no longer has."""
        deleted = []
        known: dict[str, set[str] | None] = {}
        for node in snapshot.nodes:
            if node.provider_id is None or now - node.created_at < ORPHAN_NODE_GRACE_SECONDS:
                continue
            if node.pool not in known:
                try:
                    known[node.pool] = self.capacity.known_provider_ids(node.pool)
                except Exception as err:
                    log.warning("cannot list instances of %s: %s", node.pool, err)
                    known[node.pool] = None
            ids = known[node.pool]
            if ids is not None and node.provider_id not in ids:
                self.cluster.delete_node(node.name)
                deleted.append(node.name)
        return deleted


def _occupied(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods that keep an owned node on: every one but DaemonSet pods and pods going away."""
    return [
        p
        for p in pods
        if not is_daemonset_pod(p) and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
