"""Suspendable batch workloads (batch/v1 Job, JobSet, RayJob, PyTorchJob, TrainJob) behind one
adapter interface (``base.WorkloadKind``), so the snapshot and the move protocol treat them
alike.

See docs/workloads.md for what each kind needs (RBAC, labels, annotations)."""

from __future__ import annotations

from hybridgpu.kube.convert import Obj
from hybridgpu.kube.workloads.base import (
    PodTemplate,
    WorkloadKind,
    WorkloadRef,
    api_version_of,
    child_job_repin_patch,
    finish_patch,
    from_pool,
    repin_patch,
    start_patch,
    workload_state,
)
from hybridgpu.kube.workloads.kinds import BatchJob, JobSet, PyTorchJob, RayJob, TrainJob

JOB: WorkloadKind = BatchJob()
CUSTOM_KINDS: tuple[WorkloadKind, ...] = (JobSet(), RayJob(), PyTorchJob(), TrainJob())
"""The kinds beyond batch/v1 Job, listed through their CRDs when those are installed."""
KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (JOB, *CUSTOM_KINDS)}


def kind_named(name: str | None) -> WorkloadKind:
    """The adapter of a kind by name (a Job when it is not one of ours or not said)."""
    return KINDS.get(name or "Job", JOB)


def kind_of(obj: Obj) -> WorkloadKind:
    """The adapter for a raw object (objects listed without a kind are Jobs)."""
    return kind_named(obj.get("kind"))


def owner_workload(pod: Obj) -> WorkloadRef | None:
    """The workload a pod belongs to: a JobSet, RayJob or PyTorchJob before the batch/v1
    Job that may run it for them (a JobSet's child Job); None for pods of none."""
    namespace = str((pod.get("metadata") or {}).get("namespace"))
    for kind in (*CUSTOM_KINDS, JOB):
        name = kind.owner_of(pod)
        if name:
            return WorkloadRef(kind.kind, namespace, name)
    return None


def owned_by_workload(obj: Obj) -> bool:
    """Whether a workload is run for one of the other kinds (a JobSet's child Job, a
    RayJob's submitter, a TrainJob's JobSet): it is moved through its owner, never by
    itself."""
    return workload_owner(obj) is not None


def workload_owner(obj: Obj) -> WorkloadRef | None:
    """The workload of one of the other kinds that owns ``obj`` (a TrainJob for its JobSet),
    if one."""
    meta = obj.get("metadata") or {}
    custom = {k.kind for k in CUSTOM_KINDS}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") in custom and ref.get("name"):
            return WorkloadRef(str(ref["kind"]), str(meta.get("namespace")), str(ref["name"]))
    return None


__all__ = [
    "CUSTOM_KINDS",
    "JOB",
    "KINDS",
    "PodTemplate",
    "WorkloadKind",
    "WorkloadRef",
    "api_version_of",
    "child_job_repin_patch",
    "finish_patch",
    "from_pool",
    "kind_named",
    "kind_of",
    "owned_by_workload",
    "owner_workload",
    "repin_patch",
    "start_patch",
    "workload_owner",
    "workload_state",
]
