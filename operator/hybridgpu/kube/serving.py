"""Serving workloads (Deployments) on the cluster: what the snapshot needs to know of them,
and the surge rebalance that moves a replica from a cloud node to owned GPUs.

The rebalance of a Deployment's ``k`` replicas on one cloud node, each step one patch, its
intent in the Deployment's ``hybridgpu.io/rebalance`` annotation as JSON ``{node, pods,
fromPool, toPool, replicas, step, since, stepSince, timeout}``:

1. ``start``: cordon the cloud node (``hybridgpu.io/cordoned-by: rebalance``), then in one
   patch conditional on the Deployment's resourceVersion, record the intent (step
   ``surge``) and scale it to ``replicas + k``. The new replicas can only land elsewhere:
   on the owned GPUs decide() found free.
2. ``surge``: once ``replicas`` pods off the cloud node are Ready, mark the cloud pods with
   ``controller.kubernetes.io/pod-deletion-cost`` far below any other and scale back to
   ``replicas`` (step ``scale-down``): the ReplicaSet controller removes exactly those
   pods, so the Ready count never drops below ``replicas`` (a PodDisruptionBudget of the
   workload never sees an unavailable replica). Not Ready within ``timeout``: scale back
   (the unready surge pods are the ones the ReplicaSet removes first), uncordon; rolled
   back.
3. ``scale-down``: once the cloud pods are gone, drop the intent; an emptied node is
   released, else uncordoned.

Somebody else changing ``spec.replicas`` mid-surge (a person, an autoscaler) wins: the intent
is dropped and the replicas left as they are. A restarted operator reads the annotation and
carries on; a node cordoned for a rebalance that no intent names (the operator stopped
between the two patches of step 1) is uncordoned. So no Deployment stays scaled up and no
node stays cordoned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hybridgpu.core.rebalance import CORDONED_FOR_REBALANCE
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import annotations_of, is_daemonset_pod, pod_spec_gpus
from hybridgpu.kube.errors import Conflict, NotFound
from hybridgpu.kube.names import (
    CORDONED_BY_ANNOTATION,
    REBALANCE_ANNOTATION,
    REBALANCE_GIVEN_UP_ANNOTATION,
    RELEASING_ANNOTATION,
)
from hybridgpu.models.actions import RebalanceReplica, RebalanceResult
from hybridgpu.models.snapshot import ClusterSnapshot, RebalanceIntent, ServingState

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
LOWEST_DELETION_COST = str(-(2**31))
"""The lowest int32: the ReplicaSet controller removes this pod before any other Ready one."""
STEP_SURGE = "surge"
STEP_SCALE_DOWN = "scale-down"

COMPLETED = RebalanceResult.COMPLETED.value
ROLLED_BACK = RebalanceResult.ROLLED_BACK.value
ABORTED = RebalanceResult.ABORTED.value


# --------------------------------------------------------------------------- reading
@dataclass(frozen=True, slots=True)
class ServingObjects:
    """Deployments whose pods request GPUs, the ReplicaSets that link their pods to them,
    and which of them a HorizontalPodAutoscaler scales."""

    deployments: list[Obj]
    owner_of_replicaset: dict[str, str] = field(default_factory=dict)
    """``namespace/replicaset`` -> ``namespace/deployment``."""
    autoscaled: frozenset[str] = frozenset()
    """``namespace/deployment`` targets of HPAs."""


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class ServingReads(Protocol):
    """Where Deployments, ReplicaSets and HPAs are read: the operator's watch cache
    (kube.cache.WatchCache, no request), or the apiserver (KubeCluster, one LIST each)."""

    def list_deployments(self) -> list[Obj]: ...

    def list_replicasets(self) -> list[Obj]: ...

    def list_hpas(self) -> list[Obj]: ...


def read_serving(cluster: ServingReads) -> ServingObjects:
    """GPU Deployments, their ReplicaSets and HPAs, cluster-wide."""
    deployments = [
        d
        for d in cluster.list_deployments()
        if pod_spec_gpus(((d.get("spec") or {}).get("template") or {}).get("spec") or {}) > 0
    ]
    if not deployments:
        return ServingObjects(deployments=[])
    wanted = {_key(d) for d in deployments}
    owners: dict[str, str] = {}
    for rs in cluster.list_replicasets():
        meta = rs.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            owner = f"{meta.get('namespace')}/{ref.get('name')}"
            if ref.get("kind") == "Deployment" and owner in wanted:
                owners[_key(rs)] = owner
    autoscaled: set[str] = set()
    for hpa in cluster.list_hpas():
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") == "Deployment":
            autoscaled.add(f"{(hpa.get('metadata') or {}).get('namespace')}/{target.get('name')}")
    return ServingObjects(deployments, owners, frozenset(autoscaled))


@dataclass(frozen=True, slots=True)
class Intent:
    """A rebalance recorded on a Deployment."""

    node: str
    pods: tuple[str, ...]
    from_pool: str
    to_pool: str
    replicas: int
    step: str
    since: float
    step_since: float
    timeout: float

    def annotation(self) -> str:
        return json.dumps(
            {
                "node": self.node,
                "pods": list(self.pods),
                "fromPool": self.from_pool,
                "toPool": self.to_pool,
                "replicas": self.replicas,
                "step": self.step,
                "since": round(self.since, 3),
                "stepSince": round(self.step_since, 3),
                "timeout": self.timeout,
            },
            sort_keys=True,
        )


def read_intent(annotations: Mapping[str, str]) -> Intent | None:
    """The rebalance recorded in a Deployment's annotations; None when none or unreadable."""
    raw = annotations.get(REBALANCE_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        step = str(data["step"])
        if step not in (STEP_SURGE, STEP_SCALE_DOWN):
            return None
        return Intent(
            node=str(data["node"]),
            pods=tuple(str(p) for p in data["pods"]),
            from_pool=str(data["fromPool"]),
            to_pool=str(data["toPool"]),
            replicas=int(data["replicas"]),
            step=step,
            since=float(data["since"]),
            step_since=float(data.get("stepSince", data["since"])),
            timeout=float(data["timeout"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def serving_state(deployment: Obj, autoscaled: bool) -> ServingState:
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    stable = (
        int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and int(status.get("replicas") or 0) == replicas
        and int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("availableReplicas") or 0) >= replicas
    )
    notes = annotations_of(deployment)
    intent = read_intent(notes)
    try:
        given_up: float | None = float(notes[REBALANCE_GIVEN_UP_ANNOTATION])
    except (KeyError, ValueError):
        given_up = None
    return ServingState(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        replicas=replicas,
        ready=int(status.get("readyReplicas") or 0),
        stable=stable,
        autoscaled=autoscaled,
        given_up_at=given_up,
        rebalance=None
        if intent is None
        else RebalanceIntent(
            node=intent.node, pods=intent.pods, step=intent.step, since=intent.since
        ),
    )


def with_serving(
    snapshot: ClusterSnapshot, objects: ServingObjects, pods: Iterable[Obj]
) -> ClusterSnapshot:
    """``snapshot`` with its serving workloads, and each replica's pod naming its workload.

    A pending replica of a workload being rebalanced is its surge replica: no demand (it may
    only use owned GPUs that were free; if it cannot, the surge times out and rolls back)."""
    if not objects.deployments:
        return snapshot
    states = {_key(d): serving_state(d, _key(d) in objects.autoscaled) for d in objects.deployments}
    workload_of: dict[str, str] = {}
    for raw in pods:
        meta = raw.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "ReplicaSet":
                rs = f"{meta.get('namespace')}/{ref.get('name')}"
                owner = objects.owner_of_replicaset.get(rs)
                if owner is not None:
                    workload_of[_key(raw)] = owner
    out = []
    for pod in snapshot.pods:
        owner = workload_of.get(pod.key)
        if owner is None:
            out.append(pod)
            continue
        if pod.node is None and states[owner].rebalance is not None:
            continue
        out.append(replace(pod, serving=owner))
    return replace(snapshot, pods=tuple(out), serving=tuple(states[k] for k in sorted(states)))


# --------------------------------------------------------------------------- moving
@dataclass(frozen=True, slots=True)
class Outcome:
    """A rebalance that ended this tick."""

    namespace: str
    name: str
    intent: Intent
    result: str
    """completed, rolled_back or aborted."""
    message: str
    release: bool = False
    """The cloud node is empty now: release it."""


class ServingMover:
    """Starts and advances surge rebalances (see the module docstring)."""

    def __init__(
        self,
        cluster: KubeCluster,
        clock: Callable[[], float],
        reads: ServingReads | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.reads: ServingReads = reads if reads is not None else cluster
        """Where Deployments with an intent are found: the watch cache in the operator. Each
        step's patch is conditional on the resourceVersion read, so a cache that trails
        only costs a 409 and a retry next tick."""

    # -------------------------------------------------------------- api calls
    def list_with_intent(self) -> list[Obj]:
        return [
            d for d in self.reads.list_deployments() if REBALANCE_ANNOTATION in annotations_of(d)
        ]

    def _patch(self, deployment: Obj, patch: Obj) -> Obj:
        """Merge-patch conditional on the resourceVersion read (409 when it moved on)."""
        meta = deployment.get("metadata") or {}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
        return self.cluster.patch_deployment(
            str(meta.get("namespace")), str(meta.get("name")), patch
        )

    def _pods(self, deployment: Obj) -> list[Obj]:
        meta = deployment.get("metadata") or {}
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return self.cluster.list_pods(str(meta.get("namespace")), selector)

    def _annotate_pod(self, namespace: str, name: str, value: str | None) -> None:
        with suppress(NotFound):
            self.cluster.annotate_pod(namespace, name, {DELETION_COST_ANNOTATION: value})

    # ----------------------------------------------------------------- steps
    def start(self, action: RebalanceReplica) -> bool:
        """Cordon the node, record the intent and surge by one; False when the Deployment
        changed since the plan (or has a rebalance already): the next tick decides again."""
        try:
            deployment = self.cluster.get_deployment(action.namespace, action.workload)
        except NotFound:
            return False
        if read_intent(annotations_of(deployment)) is not None:
            return False
        if int((deployment.get("spec") or {}).get("replicas", 1)) != action.replicas:
            return False
        now = self.clock()
        self.cluster.cordon(action.node, CORDONED_FOR_REBALANCE)
        intent = Intent(
            node=action.node,
            pods=action.pods,
            from_pool=action.from_pool,
            to_pool=action.to_pool,
            replicas=action.replicas,
            step=STEP_SURGE,
            since=now,
            step_since=now,
            timeout=action.timeout_seconds,
        )
        try:
            self._patch(
                deployment,
                {
                    "metadata": {"annotations": {REBALANCE_ANNOTATION: intent.annotation()}},
                    "spec": {"replicas": action.replicas + len(action.pods)},
                },
            )
        except Conflict:
            # Changed since it was read: the next tick decides again. The cordon stays only
            # while another workload's intent names the node (uncordon_orphans).
            return False
        log.info(
            "rebalance of %s started: surge to %d",
            action.workload_key,
            action.replicas + len(action.pods),
        )
        return True

    def advance(self, deployment: Obj) -> Outcome | None:
        """Take the rebalance recorded on ``deployment`` one step; the outcome once it ended."""
        meta = deployment.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        intent = read_intent(annotations_of(deployment))
        if intent is None:
            # Unreadable: we cannot know the replicas it had; leave them, drop the intent.
            self._patch(deployment, {"metadata": {"annotations": {REBALANCE_ANNOTATION: None}}})
            return None
        now = self.clock()
        replicas = int((deployment.get("spec") or {}).get("replicas", 1))
        pods = self._pods(deployment)
        leaving = [
            str((p.get("metadata") or {}).get("name"))
            for p in pods
            if (p.get("metadata") or {}).get("name") in intent.pods
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        which = ", ".join(intent.pods)
        surge = intent.replicas + len(intent.pods)

        def end(result: str, message: str, patch: Obj) -> Outcome:
            notes = patch.setdefault("metadata", {}).setdefault("annotations", {})
            notes[REBALANCE_ANNOTATION] = None
            if result != COMPLETED:
                notes[REBALANCE_GIVEN_UP_ANNOTATION] = f"{now:.0f}"
            self._patch(deployment, patch)
            if result != COMPLETED:
                for pod in leaving:
                    self._annotate_pod(namespace, pod, None)
            return Outcome(namespace, name, intent, result, message)

        if intent.step == STEP_SURGE:
            if replicas != surge:
                return end(
                    ABORTED,
                    f"replicas were changed to {replicas} by someone else during the surge "
                    f"of {namespace}/{name} to {surge}: they are left as they are",
                    {},
                )
            if not leaving:
                return end(
                    COMPLETED,
                    f"replicas {which} left node {intent.node} by themselves: scaled back to "
                    f"{intent.replicas}",
                    {"spec": {"replicas": intent.replicas}},
                )
            ready_elsewhere = sum(
                1
                for p in pods
                if _is_ready(p) and (p.get("spec") or {}).get("nodeName") != intent.node
            )
            if ready_elsewhere >= intent.replicas:
                # The ReplicaSet removes unready pods first, then the lowest deletion cost:
                # with this many Ready elsewhere, the ones it keeps are all Ready.
                for pod in leaving:
                    self._annotate_pod(namespace, pod, LOWEST_DELETION_COST)
                moved = replace(intent, step=STEP_SCALE_DOWN, step_since=now)
                self._patch(
                    deployment,
                    {
                        "metadata": {"annotations": {REBALANCE_ANNOTATION: moved.annotation()}},
                        "spec": {"replicas": intent.replicas},
                    },
                )
                return None
            if now - intent.since >= intent.timeout:
                return end(
                    ROLLED_BACK,
                    f"the surge replicas of {namespace}/{name} were not Ready within "
                    f"{intent.timeout:.0f} s: scaled back to {intent.replicas}, node "
                    f"{intent.node} kept",
                    {"spec": {"replicas": intent.replicas}},
                )
            return None
        # scale-down: the ReplicaSet controller removes the cloud pods.
        if not leaving:
            outcome = end(
                COMPLETED,
                f"replicas {which} of {namespace}/{name} moved from {intent.from_pool} node "
                f"{intent.node} to {intent.to_pool} with no replica unavailable",
                {},
            )
            return replace(outcome, release=True)
        if now - intent.step_since >= intent.timeout:
            return end(
                ABORTED,
                f"the ReplicaSet did not remove {', '.join(leaving)} of {namespace}/{name} "
                f"within {intent.timeout:.0f} s: node {intent.node} kept",
                {},
            )
        return None

    def uncordon_orphans(self, nodes: Iterable[Obj], busy: set[str]) -> list[str]:
        """Uncordon nodes cordoned for a rebalance that no intent in flight names (``busy``)."""
        done = []
        for raw in nodes:
            meta = raw.get("metadata") or {}
            notes = meta.get("annotations") or {}
            name = str(meta.get("name"))
            if (
                notes.get(CORDONED_BY_ANNOTATION) == CORDONED_FOR_REBALANCE
                and RELEASING_ANNOTATION not in notes
                and name not in busy
            ):
                self.cluster.uncordon(name)
                done.append(name)
        return done

    def node_is_empty(self, node: str) -> bool:
        """No pod left on ``node`` but DaemonSet pods."""
        return not [
            p
            for p in self.cluster.pods_on_node(node)
            if not is_daemonset_pod(p) and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]


def _is_ready(pod: Obj) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
