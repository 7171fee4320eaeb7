"""The workload adapter interface: what the operator needs from any suspendable batch kind.

A kind is described by a :class:`WorkloadKind`: where its API lives, how to read whether it is
suspended or finished, where its pod templates are and how many pods each runs, which pods
belong to it, and the merge patch that suspends or resumes it. Everything else (reading its
demand and criticality into a ``JobState``, the move protocol's patches that repoint every pod
template to a pool) is written once, here, over that interface. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hybridgpu.kube.convert import (
    Obj,
    annotations_of,
    checkpoint_interval,
    epoch_of,
    is_queued,
    job_deadline,
    labels_of,
    parse_criticality,
    parse_move,
    pod_spec_gpu_models,
    pod_spec_gpus,
    restarts_of,
)
from hybridgpu.kube.moves import STEP_REPINNED, Move, repin_template
from hybridgpu.kube.names import (
    CRITICALITY_LABEL,
    GANG_ANNOTATION,
    MOVE_ANNOTATION,
    PINNED_ANNOTATION,
    POOL_LABEL,
    RESTARTS_ANNOTATION,
    RETURN_TO_CORE_ANNOTATION,
)
from hybridgpu.kube.reserve import job_toleration
from hybridgpu.models.pool import GPUPoolSpec, Tier
from hybridgpu.models.snapshot import Criticality, JobState


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod template of a workload: where it is, what it says, how many pods run it."""

    path: str
    """JSON pointer to the template (``/spec/template``); its pod spec is ``path + /spec``."""
    template: Obj
    pods: int
    """Pods that run from it at once (replicas times parallelism)."""
    spec_path: str | None = None
    """JSON pointer to where a move writes its ``nodeSelector`` and ``tolerations`` (None:
    ``path + /spec``); a TrainJob's is in the entry for its trainer of the override field its
    Trainer serves (``spec.runtimePatches``, ``podTemplateOverrides`` or ``podSpecOverrides``)."""
    create: tuple[dict[str, Any], ...] = ()
    """JSON-patch operations that make ``spec_path`` exist first (a TrainJob without an
    override for its trainer yet, or hybridgpu's runtime patch written afresh)."""

    @property
    def pod_spec(self) -> Obj:
        return self.template.get("spec") or {}


class WorkloadKind(Protocol):
    """One suspendable batch kind (batch/v1 Job, JobSet, RayJob, PyTorchJob, TrainJob)."""

    kind: str
    group: str
    """API group; "batch" for Jobs."""
    version: str
    plural: str
    gang_by_default: bool
    """Whether its pods must all run at once unless it says otherwise (annotation
    hybridgpu.io/gang: "false"): distributed training kinds do."""
    clears_start_time: bool
    """Whether the move must clear status.startTime before the templates may change (batch/v1
    Jobs; the other kinds' controllers do it on their child Jobs)."""
    child_jobs_selector: str | None
    """A label selector template (``{name}`` is the workload's name) for the child Jobs of a
    JobSet that runs its pods and that the JobSet controller merges, not replaces, the
    templates into on resume (JobSet and TrainJob, whose JobSet has its name); None for kinds
    whose controller rebuilds the pods from the templates."""
    suspension_condition: str | None
    """The status condition its controller sets True once it has suspended the workload, which
    a move waits for before it changes the templates and resumes (``SUSPENSION_WAIT_SECONDS``
    at most); None for kinds whose move does not wait for one. The training operator writes
    the condition after deleting the pods; a move that resumed before the write landed made
    the write conflict, and the controller then never saw the workload suspended: no
    ``Suspended``/``Resumed`` record, ``Running`` left True, its start time not reset."""

    def suspended(self, obj: Obj) -> bool:
        """Whether the workload is suspended now."""
        ...

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        """The merge patch that suspends (True) or resumes (False) it."""
        ...

    def finished(self, obj: Obj) -> bool:
        """Whether it has finished (nothing to run, nothing to move)."""
        ...

    def templates(self, obj: Obj) -> list[PodTemplate]:
        """Its pod templates, in a stable order."""
        ...

    def owner_of(self, pod: Obj) -> str | None:
        """The name of the workload of this kind the pod belongs to (in the pod's
        namespace); None when it belongs to none."""
        ...

    def pod_selector(self, name: str) -> str:
        """A label selector for the pods of the workload ``name`` (a kind whose
        ``selector_exact`` is False selects more, and its pods are those ``owner_of`` names
        ``name``)."""
        ...


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """A workload a pod belongs to."""

    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def api_version_of(kind: WorkloadKind) -> str:
    return f"{kind.group}/{kind.version}" if kind.group != "batch" else "batch/v1"


def workload_criticality(obj: Obj, templates: Sequence[PodTemplate]) -> Criticality:
    """Its label, else the first pod template's label that names one, else standard."""
    found = parse_criticality(labels_of(obj).get(CRITICALITY_LABEL))
    for template in templates:
        if found is not None:
            break
        labels = (template.template.get("metadata") or {}).get("labels") or {}
        found = parse_criticality(labels.get(CRITICALITY_LABEL))
    return found or Criticality.STANDARD


def is_gang(kind: WorkloadKind, obj: Obj, gpu_pods: int) -> bool:
    """Whether its GPU pods must run at once: the kind's default, or the annotation
    hybridgpu.io/gang ("true"/"false"); a single pod is no gang."""
    raw = str(annotations_of(obj).get(GANG_ANNOTATION, "")).strip().lower()
    gang = kind.gang_by_default if raw not in ("true", "false") else raw == "true"
    return gang and gpu_pods > 1


def workload_state(kind: WorkloadKind, obj: Obj) -> JobState | None:
    """The snapshot view of a workload that runs GPU pods; None when finished or GPU-less.

    ``gpus_per_pod`` is its largest pod's GPUs and ``parallelism`` the number of its GPU
    pods: a workload whose pods differ (a 1-GPU head and 8-GPU workers) is counted as that
    many of its largest pods when it moves (an over-estimate, never an under-estimate)."""
    if kind.finished(obj):
        return None
    templates = kind.templates(obj)
    gpu_templates = [t for t in templates if pod_spec_gpus(t.pod_spec) > 0]
    if not gpu_templates:
        return None
    gpus = max(pod_spec_gpus(t.pod_spec) for t in gpu_templates)
    pods = sum(t.pods for t in gpu_templates)
    meta = obj.get("metadata") or {}
    notes = annotations_of(obj)
    pins = {(t.pod_spec.get("nodeSelector") or {}).get(POOL_LABEL) for t in gpu_templates}
    pool = pins.pop() if len(pins) == 1 else None
    models = sorted({m for t in gpu_templates for m in pod_spec_gpu_models(t.pod_spec)})
    checkpoint, error = checkpoint_interval(notes)
    created = epoch_of(meta.get("creationTimestamp"))
    deadline = job_deadline(notes, created)
    errors = "; ".join(e for e in (error, deadline.error) if e) or None
    queued = is_queued(obj)
    return JobState(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        criticality=workload_criticality(obj, templates),
        gpus_per_pod=gpus,
        parallelism=max(pods, 1),
        suspended=kind.suspended(obj),
        pool=pool,
        started_at=epoch_of((obj.get("status") or {}).get("startTime")),
        # Kueue owns a queued workload's suspend flag: a move recorded on it is dropped.
        move=None if queued else parse_move(notes.get(MOVE_ANNOTATION)),
        pinned_by_operator=pool is not None and notes.get(PINNED_ANNOTATION) == pool,
        gpu_models=tuple(models),
        checkpoint_seconds=checkpoint,
        created_at=created,
        deadline_at=deadline.deadline_at,
        expected_duration_seconds=deadline.expected_seconds,
        progress_seconds=deadline.progress_seconds,
        restarts=restarts_of(notes),
        return_to_core=str(notes.get(RETURN_TO_CORE_ANNOTATION, "")).strip().lower() == "true",
        gang=is_gang(kind, obj, pods),
        kind=kind.kind,
        input_error=errors,
        queued=queued,
    )


def start_patch(kind: WorkloadKind, move: Move, obj: Obj) -> dict[str, Any]:
    """One merge patch that records the move's intent, counts it (its next run is a restart)
    and suspends the workload ``obj`` (atomic)."""
    patch = kind.suspend_patch(True)
    patch.setdefault("metadata", {})["annotations"] = {
        MOVE_ANNOTATION: move.annotation(),
        RESTARTS_ANNOTATION: str(restarts_of(annotations_of(obj)) + 1),
    }
    return patch


def finish_patch(kind: WorkloadKind) -> dict[str, Any]:
    """One merge patch that resumes the workload and forgets the intent."""
    patch = kind.suspend_patch(False)
    patch.setdefault("metadata", {})["annotations"] = {MOVE_ANNOTATION: None}
    return patch


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def repin_patch(
    kind: WorkloadKind, obj: Obj, move: Move, pools: Mapping[str, GPUPoolSpec]
) -> list[dict[str, Any]]:
    """JSON patch that points every pod template of the workload at the move's target pool
    (back at the pool it came from when the target is gone) and records step repinned."""
    to_pool = move.target(pools)
    ops: list[dict[str, Any]] = []
    own = _reservation_toleration(kind, obj, pools.get(to_pool or ""))
    for template in kind.templates(obj):
        selector, tolerations = repin_template(template.pod_spec, to_pool, pools)
        if own is not None and own not in tolerations:
            tolerations.append(own)
        ops.extend(template.create)
        spec_path = template.spec_path or f"{template.path}/spec"
        ops.append({"op": "add", "path": f"{spec_path}/nodeSelector", "value": selector})
        ops.append({"op": "add", "path": f"{spec_path}/tolerations", "value": tolerations})
    done = Move(move.to_pool, move.from_pool, STEP_REPINNED, move.since)
    ops.append(
        {
            "op": "add",
            "path": f"/metadata/annotations/{_escape(MOVE_ANNOTATION)}",
            "value": done.annotation(),
        }
    )
    if to_pool is not None and to_pool in pools and to_pool != move.from_pool:
        ops.append(
            {
                "op": "add",
                "path": f"/metadata/annotations/{_escape(PINNED_ANNOTATION)}",
                "value": to_pool,
            }
        )
    return ops


def _reservation_toleration(
    kind: WorkloadKind, obj: Obj, target: GPUPoolSpec | None
) -> dict[str, Any] | None:
    """The toleration of nodes kept for this workload (kube/reserve.py) when it is a batch/v1
    Job moved into an on-demand pool: only there does decide() keep a node for a Job."""
    meta = obj.get("metadata") or {}
    if kind.kind != "Job" or target is None or target.tier != Tier.ELASTIC:
        return None
    if not meta.get("namespace") or not meta.get("name"):
        return None
    return job_toleration(f"{meta['namespace']}/{meta['name']}")


def child_job_repin_patch(
    child: Obj, move: Move, pools: Mapping[str, GPUPoolSpec]
) -> list[dict[str, Any]] | None:
    """JSON patch that points a suspended child Job of a moved JobSet at the move's target pool
    (as :func:`repin_patch` points the JobSet), or None when it already points there.

    The JobSet controller merges a resumed JobSet's template ``nodeSelector`` and tolerations
    into the child Jobs it kept while suspended instead of replacing them, so a child would keep
    the selector keys of the pool the JobSet left. When the two pools select their nodes by
    different label keys, its pods would ask for both pools' labels and never schedule. The
    child's template is therefore repointed first, with the same rules as the JobSet's.
    """
    to_pool = move.target(pools)
    pod_spec = ((child.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector, tolerations = repin_template(pod_spec, to_pool, pools)
    if selector == (pod_spec.get("nodeSelector") or {}) and tolerations == (
        pod_spec.get("tolerations") or []
    ):
        return None
    return [
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": selector},
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": tolerations},
    ]


def from_pool(kind: WorkloadKind, obj: Obj) -> str | None:
    """The pool the workload's GPU pod templates are pinned to now, if one."""
    pins = {
        (t.pod_spec.get("nodeSelector") or {}).get(POOL_LABEL)
        for t in kind.templates(obj)
        if pod_spec_gpus(t.pod_spec) > 0
    }
    return pins.pop() if len(pins) == 1 else None


def int_field(value: Any, default: int) -> int:
    """An integer field of a spec (absent: ``default``)."""
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
