"""Pure conversion of Kubernetes objects (JSON dicts as the apiserver sends them) into the
snapshot types ``core.decide`` reads. No I/O here: every function is unit-tested on dicts."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hybridgpu.kube.names import (
    CHECKPOINT_ANNOTATION,
    CORDONED_BY_ANNOTATION,
    CRITICALITY_LABEL,
    DEADLINE_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    GANG_ANNOTATION,
    GPU_RESOURCE,
    IDLE_RECLAIM_CRITICAL_ANNOTATION,
    IDLE_TIMEOUT_ANNOTATION,
    INTERRUPTION_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    MOVE_ANNOTATION,
    PINNED_ANNOTATION,
    POOL_LABEL,
    PROGRESS_ANNOTATION,
    RELEASING_ANNOTATION,
    RESTARTS_ANNOTATION,
    RETURN_TO_CORE_ANNOTATION,
)
from hybridgpu.kube.reserve import reserved_for
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import (
    LWS_GANG_MARK,
    Criticality,
    GPUPod,
    JobState,
    MoveIntent,
    NodeState,
)
from hybridgpu.models.timestamps import format_rfc3339, parse_rfc3339

Obj = Mapping[str, Any]

TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def epoch_of(timestamp: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as Kubernetes writes it; None if absent."""
    if not timestamp:
        return None
    return parse_rfc3339(timestamp)


def rfc3339(epoch_seconds: float) -> str:
    """RFC 3339 UTC time (second precision, ``Z``) of ``epoch_seconds``."""
    return format_rfc3339(epoch_seconds)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def labels_of(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def parse_criticality(value: str | None) -> Criticality | None:
    """The criticality a label value names; None when absent or not one of ours."""
    if value is None:
        return None
    try:
        return Criticality(value.strip().lower())
    except ValueError:
        return None


def gpu_count(resources: Obj | None) -> int:
    """nvidia.com/gpu of a container's resources (requests, else limits, which imply them)."""
    if not resources:
        return 0
    for key in ("requests", "limits"):
        value = (resources.get(key) or {}).get(GPU_RESOURCE)
        if value is not None:
            return int(str(value))
    return 0


def pod_spec_gpus(pod_spec: Obj) -> int:
    """GPUs a pod with this spec requests: the sum over containers, or the largest init
    container when that is larger (the scheduler's effective request)."""
    main = sum(gpu_count(c.get("resources")) for c in pod_spec.get("containers") or [])
    init = max(
        (gpu_count(c.get("resources")) for c in pod_spec.get("initContainers") or []), default=0
    )
    return max(main, init)


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The node label GPU feature discovery sets to the GPU model; compared with gpu.model."""


def pod_spec_gpu_models(pod_spec: Obj) -> tuple[str, ...]:
    """GPU models a pod may run on, from its node selector or required node affinity on
    nvidia.com/gpu.product; empty when it names none (any model will do). With several
    affinity terms (ORed), the union of their models."""
    chosen = (pod_spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if chosen:
        return (str(chosen),)
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    models: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                models.update(str(v) for v in expr.get("values") or [])
    return tuple(sorted(models))


def owner_job(pod: Obj) -> str | None:
    """``namespace/name`` of the batch/v1 Job that owns the pod, or None."""
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return f"{_meta(pod).get('namespace')}/{ref.get('name')}"
    return None


def is_queued(obj: Obj) -> bool:
    """Whether Kueue manages the workload (label kueue.x-k8s.io/queue-name, non-empty): Kueue
    then owns its suspend flag and placement."""
    return bool(str(labels_of(obj).get(KUEUE_QUEUE_LABEL) or "").strip())


def is_bare(pod: Obj) -> bool:
    """A pod owned by nothing: never evicted (nothing would recreate it)."""
    return not (_meta(pod).get("ownerReferences") or [])


LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"


def lws_group(pod: Obj) -> tuple[str, int] | None:
    """The gang of a LeaderWorkerSet pod, ``namespace/<lws>#group-<index>``, and how many
    pods its group runs (the leader and its workers: the size annotation the LeaderWorkerSet
    controller puts on them); None for any other pod. A group serves only when all its pods
    run, so its capacity is found all at once or not at all."""
    labels = labels_of(pod)
    lws, index = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if not lws or index is None:
        return None
    try:
        size = max(int(str(annotations_of(pod).get(LWS_SIZE_ANNOTATION, "1"))), 1)
    except ValueError:
        size = 1
    return f"{_meta(pod).get('namespace')}/{lws}{LWS_GANG_MARK}{index}", size


def is_lws_leader(pod: Obj) -> bool:
    """A LeaderWorkerSet group's leader (worker index 0)."""
    return labels_of(pod).get(LWS_WORKER_INDEX_LABEL) == "0" and lws_group(pod) is not None


def stateful_owner(pod: Obj) -> str | None:
    """``Kind namespace/name`` of the StatefulSet, or of the LeaderWorkerSet (whose leader
    and worker StatefulSets label their pods with its name), the pod is a replica of."""
    namespace = _meta(pod).get("namespace")
    lws = labels_of(pod).get(LWS_NAME_LABEL)
    if lws:
        return f"LeaderWorkerSet {namespace}/{lws}"
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("kind") == "StatefulSet" and str(ref.get("apiVersion", "")).startswith("apps/"):
            return f"StatefulSet {namespace}/{ref.get('name')}"
    return None


def is_daemonset_pod(pod: Obj) -> bool:
    return any(r.get("kind") == "DaemonSet" for r in _meta(pod).get("ownerReferences") or [])


def unschedulable_since(pod: Obj) -> float | None:
    """When the scheduler marked the pod Unschedulable; None when it has not (yet)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return epoch_of(cond.get("lastTransitionTime")) or epoch_of(
                _meta(pod).get("creationTimestamp")
            )
    return None


def gpu_pod(
    pod: Obj,
    job_criticality: Mapping[str, Criticality],
    job_annotations: Mapping[str, Mapping[str, str]] | None = None,
    queued_jobs: Collection[str] = frozenset(),
) -> GPUPod | None:
    """The snapshot view of a pod, or None when it holds and wants no GPU.

    Terminal pods hold nothing. A pod not bound to a node counts only once the scheduler
    said it fits nowhere (Unschedulable): a pod it has not tried yet may well fit. Idle
    reclaim annotations are read from the pod, else from its Job (``job_annotations``). A
    pod is queued when it, or its Job (``queued_jobs``, ``namespace/name``), is Kueue's.
    """
    status = pod.get("status") or {}
    if status.get("phase") in TERMINAL_POD_PHASES:
        return None
    spec = pod.get("spec") or {}
    gpus = pod_spec_gpus(spec)
    if gpus <= 0:
        return None
    meta = _meta(pod)
    node = spec.get("nodeName") or None
    pending_since = 0.0
    if node is None:
        if meta.get("deletionTimestamp"):
            return None
        since = unschedulable_since(pod)
        if since is None:
            return None
        pending_since = since
    job = owner_job(pod)
    criticality = parse_criticality(labels_of(pod).get(CRITICALITY_LABEL))
    if criticality is None and job is not None:
        criticality = job_criticality.get(job)
    notes = annotations_of(pod)
    if job is not None and job_annotations and IDLE_TIMEOUT_ANNOTATION not in notes:
        notes = job_annotations.get(job) or {}
    idle_timeout, error = idle_timeout_of(notes)
    return GPUPod(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        gpus=gpus,
        criticality=criticality or Criticality.STANDARD,
        node=node,
        job=job,
        pool=(spec.get("nodeSelector") or {}).get(POOL_LABEL),
        pending_since=pending_since,
        started_at=epoch_of(status.get("startTime")),
        gpu_models=pod_spec_gpu_models(spec),
        bare=is_bare(pod),
        terminating=bool(meta.get("deletionTimestamp")),
        idle_timeout_seconds=idle_timeout,
        reclaim_critical=_is_true(notes.get(IDLE_RECLAIM_CRITICAL_ANNOTATION)),
        input_error=error,
        queued=is_queued(pod) or (job is not None and job in queued_jobs),
        stateful=stateful_owner(pod),
        **_lws_gang(pod),
    )


def _lws_gang(pod: Obj) -> dict[str, Any]:
    group = lws_group(pod)
    return {} if group is None else {"gang": group[0], "gang_size": group[1]}


def idle_timeout_of(annotations: Mapping[str, str]) -> tuple[float | None, str | None]:
    """The idle-timeout opt-in in seconds (None when absent), and why it was not understood
    (then it is None too: a workload is never reclaimed on a value we could not read)."""
    raw = annotations.get(IDLE_TIMEOUT_ANNOTATION)
    if raw is None:
        return None, None
    try:
        seconds = parse_duration_seconds(str(raw).strip())
    except ValueError as err:
        return None, f"annotation {IDLE_TIMEOUT_ANNOTATION}: {err}; not reclaimed"
    if seconds <= 0:
        return None, f"annotation {IDLE_TIMEOUT_ANNOTATION}: {raw!r} must be longer than 0"
    return seconds, None


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def job_is_finished(job: Obj) -> bool:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return True
    return False


def parse_move(value: str | None) -> MoveIntent | None:
    """The move intent recorded in the ``hybridgpu.io/move`` annotation; None if absent or
    unreadable (an unreadable intent is treated as no move, and the Job is resumed)."""
    if not value:
        return None
    try:
        data = json.loads(value)
        return MoveIntent(
            to_pool=data.get("to") or None, step=str(data["step"]), since=float(data["since"])
        )
    except (ValueError, KeyError, TypeError):
        return None


def job_criticality(job: Obj) -> Criticality:
    """Criticality of a Job: its label, else its pod template's label, else standard."""
    template_labels = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return (
        parse_criticality(labels_of(job).get(CRITICALITY_LABEL))
        or parse_criticality((template_labels.get("labels") or {}).get(CRITICALITY_LABEL))
        or Criticality.STANDARD
    )


def job_state(job: Obj) -> JobState | None:
    """The snapshot view of a Job that runs GPU pods; None for finished or GPU-less Jobs."""
    if job_is_finished(job):
        return None
    spec = job.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    gpus = pod_spec_gpus(pod_spec)
    if gpus <= 0:
        return None
    meta = _meta(job)
    status = job.get("status") or {}
    pool = (pod_spec.get("nodeSelector") or {}).get(POOL_LABEL)
    checkpoint, error = checkpoint_interval(annotations_of(job))
    created = epoch_of(meta.get("creationTimestamp"))
    deadline = job_deadline(annotations_of(job), created)
    errors = "; ".join(e for e in (error, deadline.error) if e) or None
    queued = is_queued(job)
    parallelism = int(spec.get("parallelism") or 1)
    return JobState(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        criticality=job_criticality(job),
        gpus_per_pod=gpus,
        parallelism=parallelism,
        suspended=bool(spec.get("suspend")),
        pool=pool,
        started_at=epoch_of(status.get("startTime")),
        # Kueue owns a queued Job's suspend flag: a move recorded on it is dropped, not run.
        move=None if queued else parse_move(annotations_of(job).get(MOVE_ANNOTATION)),
        # The pin is ours (so we may move the Job again) only while it is the one we set.
        pinned_by_operator=pool is not None and annotations_of(job).get(PINNED_ANNOTATION) == pool,
        gpu_models=pod_spec_gpu_models(pod_spec),
        checkpoint_seconds=checkpoint,
        created_at=created,
        deadline_at=deadline.deadline_at,
        expected_duration_seconds=deadline.expected_seconds,
        progress_seconds=deadline.progress_seconds,
        restarts=restarts_of(annotations_of(job)),
        return_to_core=str(annotations_of(job).get(RETURN_TO_CORE_ANNOTATION, "")).strip().lower()
        == "true",
        # A Job whose pods must all run at once says so (hybridgpu.io/gang: "true").
        gang=parallelism > 1
        and str(annotations_of(job).get(GANG_ANNOTATION, "")).strip().lower() == "true",
        input_error=errors,
        queued=queued,
    )


@dataclass(frozen=True, slots=True)
class JobDeadline:
    """A Job's deadline annotations, read: all None (and progress 0) when absent or bad."""

    deadline_at: float | None = None
    expected_seconds: float | None = None
    progress_seconds: float = 0.0
    error: str | None = None


def job_deadline(annotations: Mapping[str, str], created_at: float | None) -> JobDeadline:
    """hybridgpu.io/deadline (an RFC 3339 time, or a duration counted from ``created_at``),
    hybridgpu.io/expected-duration and hybridgpu.io/progress of a Job. A deadline needs an
    expected duration; a value that cannot be read is reported and the deadline ignored
    (the Job then behaves as one without), never guessed."""
    raw_deadline = annotations.get(DEADLINE_ANNOTATION)
    raw_expected = annotations.get(EXPECTED_DURATION_ANNOTATION)
    raw_progress = annotations.get(PROGRESS_ANNOTATION)
    errors: list[str] = []
    progress = 0.0
    if raw_progress is not None:
        try:
            progress = float(raw_progress)
            if not math.isfinite(progress) or progress < 0:
                raise ValueError
        except ValueError:
            progress = 0.0
            errors.append(
                f"annotation {PROGRESS_ANNOTATION}: {raw_progress!r} is not a number of seconds "
                ">= 0; counted as 0"
            )
    if raw_deadline is None:
        # Without a deadline an expected duration still says when the Job's GPUs free up:
        # decide() may wait for them rather than buy a node (ScalingPolicy waitBudget).
        stated, why = _expected_seconds(raw_expected) if raw_expected is not None else (None, None)
        if why is not None:
            errors.append(f"annotation {EXPECTED_DURATION_ANNOTATION}: {why}; ignored")
        return JobDeadline(
            expected_seconds=stated, progress_seconds=progress, error="; ".join(errors) or None
        )
    deadline = _deadline_epoch(str(raw_deadline).strip(), created_at)
    expected: float | None = None
    if deadline is None:
        errors.append(
            f"annotation {DEADLINE_ANNOTATION}: {raw_deadline!r} is neither an RFC 3339 time "
            "nor a duration from creation (e.g. 2025-07-01T18:00:00Z or 36h); ignored"
        )
    if raw_expected is None:
        errors.append(
            f"annotation {DEADLINE_ANNOTATION} needs {EXPECTED_DURATION_ANNOTATION} (the run time "
            "the Job needs, e.g. 6h); the deadline is ignored"
        )
    else:
        expected, why = _expected_seconds(raw_expected)
        if why is not None:
            errors.append(f"annotation {EXPECTED_DURATION_ANNOTATION}: {why}; deadline ignored")
    error = "; ".join(errors) or None
    if deadline is None or expected is None:
        return JobDeadline(progress_seconds=progress, error=error)
    return JobDeadline(deadline, expected, progress, error)


def _expected_seconds(raw: str) -> tuple[float | None, str | None]:
    """An expected duration in seconds (> 0), or why it is not one."""
    try:
        expected = parse_duration_seconds(str(raw).strip())
    except ValueError as err:
        return None, str(err)
    if expected <= 0:
        return None, f"{raw!r} must be longer than 0"
    return expected, None


def _deadline_epoch(text: str, created_at: float | None) -> float | None:
    try:
        return parse_duration_seconds(text) + created_at if created_at is not None else None
    except ValueError:
        pass
    try:
        # a time without a zone is ambiguous: RFC 3339 requires one
        return parse_rfc3339(text, naive="reject")
    except ValueError:
        return None


def checkpoint_interval(annotations: Mapping[str, str]) -> tuple[float | None, str | None]:
    """The Job's checkpoint interval in seconds from its annotation (None when absent), and
    why the annotation was not understood (then the interval is None too)."""
    raw = annotations.get(CHECKPOINT_ANNOTATION)
    if raw is None:
        return None, None
    text = str(raw).strip()
    try:
        return (0.0 if text == "0" else parse_duration_seconds(text)), None
    except ValueError as err:
        return None, f"annotation {CHECKPOINT_ANNOTATION}: {err}; 0 means never"


def restarts_of(annotations: Mapping[str, str]) -> int:
    """How many moves the operator started for the workload (hybridgpu.io/restarts; 0 when
    absent or not a count: only the operator writes it)."""
    raw = str(annotations.get(RESTARTS_ANNOTATION, "")).strip()
    return int(raw) if raw.isdigit() else 0


def pool_selector(name: str, spec: GPUPoolSpec) -> dict[str, str]:
    """Labels that select the pool's nodes."""
    return dict(spec.node_selector) if spec.node_selector else {POOL_LABEL: name}


def pool_of_node(node: Obj, selectors: Mapping[str, Mapping[str, str]]) -> str | None:
    """The pool whose selector matches the node's labels (first by name), or None."""
    labels = labels_of(node)
    for pool in sorted(selectors):
        selector = selectors[pool]
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            return pool
    return None


def node_is_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_gpus(node: Obj) -> int:
    status = node.get("status") or {}
    value = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    if value is None:
        value = (status.get("capacity") or {}).get(GPU_RESOURCE, 0)
    return int(str(value))


def node_state(
    node: Obj,
    pool: str,
    *,
    idle_since: float | None,
    utilization_percent: float | None = None,
    utilization_stale: bool = False,
    interruption_deadline: float | None = None,
    xid_errors: int = 0,
    instance_terminated: bool = False,
) -> NodeState:
    """The snapshot view of a GPU node of ``pool``."""
    meta = _meta(node)
    notes = annotations_of(node)
    deadline = interruption_deadline
    if deadline is None and notes.get(INTERRUPTION_ANNOTATION):
        try:
            deadline = float(notes[INTERRUPTION_ANNOTATION])
        except ValueError:
            deadline = None
    return NodeState(
        name=str(meta.get("name")),
        pool=pool,
        gpus=node_gpus(node),
        ready=node_is_ready(node),
        cordoned=bool((node.get("spec") or {}).get("unschedulable")),
        releasing=RELEASING_ANNOTATION in notes,
        created_at=epoch_of(meta.get("creationTimestamp")) or 0.0,
        idle_since=idle_since,
        utilization_percent=utilization_percent,
        utilization_stale=utilization_stale,
        interruption_deadline=deadline,
        xid_errors=xid_errors,
        provider_id=(node.get("spec") or {}).get("providerID") or None,
        cordoned_by=notes.get(CORDONED_BY_ANNOTATION) or None,
        not_ready_since=not_ready_since(node),
        deleting=bool(meta.get("deletionTimestamp")),
        instance_terminated=instance_terminated,
        reserved_for=reserved_for(node),
    )


def not_ready_since(node: Obj) -> float | None:
    """When the node's Ready condition last left True (None while Ready); a node with no
    Ready condition yet counts from its creation."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return None
            return epoch_of(cond.get("lastTransitionTime")) or epoch_of(
                _meta(node).get("creationTimestamp")
            )
    return epoch_of(_meta(node).get("creationTimestamp"))


class IdleTracker:
    """Remembers since when each node has been idle (no GPU pods, or utilization below the
    pool's threshold). Kept in memory: after a restart every idle clock starts again, which
    only delays a release."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def observe(self, node: str, idle: bool, now: float) -> float | None:
        """Record whether ``node`` is idle at ``now``; return the start of its idle stretch."""
        if not idle:
            self._since.pop(node, None)
            return None
        return self._since.setdefault(node, now)

    def forget_all_but(self, nodes: Iterable[str]) -> None:
        keep = set(nodes)
        for name in list(self._since):
            if name not in keep:
                del self._since[name]


def is_idle(
    gpu_pods_on_node: int, utilization_percent: float | None, threshold_percent: float
) -> bool:
    """A node is idle when no GPU pod runs on it, or its GPUs are used below the threshold."""
    if gpu_pods_on_node == 0:
        return True
    return utilization_percent is not None and utilization_percent < threshold_percent
