"""One adapter per suspendable batch kind (the :class:`~.base.WorkloadKind` interface).

- batch/v1 Job: ``spec.suspend``; one template; ``parallelism`` pods.
- JobSet (jobset.x-k8s.io/v1alpha2): ``spec.suspend``; a template per replicated Job, run by
  ``replicas`` child Jobs of ``parallelism`` pods each; the JobSet controller copies template
  scheduling changes into its child Jobs when it resumes them.
- RayJob (ray.io/v1): ``spec.suspend`` (KubeRay requires ``shutdownAfterJobFinishes: true``
  with it); the head template plus each worker group's (``replicas`` pods); suspending deletes
  its RayCluster.
- PyTorchJob (kubeflow.org/v1): ``spec.runPolicy.suspend``; a template per replica type.
- TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2): ``spec.suspend``; no pod
  template of its own (its runtime has them): its demand is ``spec.trainer.numNodes`` pods of
  ``spec.trainer.resourcesPerNode``, and a move repoints its trainer job (``node``) through
  the field the cluster's Trainer serves: hybridgpu's own entry of ``spec.runtimePatches``
  (v2.2+), else its trainer's ``spec.podTemplateOverrides`` (v2.1) or
  ``spec.podSpecOverrides`` (v2.0) entry. Its pods run in a JobSet of the same name that it
  owns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hybridgpu.kube.convert import Obj, job_is_finished, owner_job
from hybridgpu.kube.names import JOB_NAME_LABEL
from hybridgpu.kube.workloads.base import PodTemplate, int_field


def conditions_true(obj: Obj, types: tuple[str, ...]) -> bool:
    """Whether the object's status has a condition of one of ``types`` with status True."""
    return any(
        c.get("type") in types and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _label(pod: Obj, key: str) -> str | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(key)
    return str(value) if value else None


class _SuspendInSpec:
    """Kinds suspended by ``spec.suspend`` (all but PyTorchJob, which uses ``runPolicy``)."""

    suspension_condition: str | None = None

    def suspended(self, obj: Obj) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"suspend": suspend}}


class BatchJob(_SuspendInSpec):
    kind = "Job"
    group = "batch"
    version = "v1"
    plural = "jobs"
    gang_by_default = False
    clears_start_time = True
    child_jobs_selector: str | None = None

    def finished(self, obj: Obj) -> bool:
        return job_is_finished(obj)

    def templates(self, obj: Obj) -> list[PodTemplate]:
        spec = obj.get("spec") or {}
        return [PodTemplate("/spec/template", spec.get("template") or {}, _parallelism(spec))]

    def owner_of(self, pod: Obj) -> str | None:
        key = owner_job(pod)
        return None if key is None else key.split("/", 1)[1]

    def pod_selector(self, name: str) -> str:
        return f"{JOB_NAME_LABEL}={name}"


def _parallelism(job_spec: Obj) -> int:
    """Pods a Job runs at once: its parallelism, no more than its completions."""
    parallelism = int_field(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return min(parallelism, int_field(completions, parallelism))


JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


class JobSet(_SuspendInSpec):
    kind = "JobSet"
    group = "jobset.x-k8s.io"
    version = "v1alpha2"
    plural = "jobsets"
    gang_by_default = True
    clears_start_time = False
    child_jobs_selector: str | None = JOBSET_NAME_LABEL + "={name}"

    def finished(self, obj: Obj) -> bool:
        return conditions_true(obj, ("Completed", "Failed"))

    def templates(self, obj: Obj) -> list[PodTemplate]:
        out = []
        for i, replicated in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
            job_spec = (replicated.get("template") or {}).get("spec") or {}
            replicas = int_field(replicated.get("replicas"), 1)
            out.append(
                PodTemplate(
                    f"/spec/replicatedJobs/{i}/template/spec/template",
                    job_spec.get("template") or {},
                    replicas * _parallelism(job_spec),
                )
            )
        return out

    def owner_of(self, pod: Obj) -> str | None:
        return _label(pod, JOBSET_NAME_LABEL)

    def pod_selector(self, name: str) -> str:
        return f"{JOBSET_NAME_LABEL}={name}"


RAY_CR_NAME_LABEL = "ray.io/originated-from-cr-name"
RAY_CRD_LABEL = "ray.io/originated-from-crd"
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_LABEL = "ray.io/is-ray-node"
RAY_CLUSTER_NAME = re.compile(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")
"""A RayCluster KubeRay made for a RayJob: ``<rayjob>-`` and 5 characters of the alphabet of
k8s.io/apimachinery's rand.String (utils.GenerateRayClusterName)."""


class RayJob(_SuspendInSpec):
    kind = "RayJob"
    group = "ray.io"
    version = "v1"
    plural = "rayjobs"
    gang_by_default = True
    clears_start_time = False
    child_jobs_selector: str | None = None

    def finished(self, obj: Obj) -> bool:
        status = (obj.get("status") or {}).get("jobDeploymentStatus")
        return status in ("Complete", "Failed")

    def templates(self, obj: Obj) -> list[PodTemplate]:
        cluster = (obj.get("spec") or {}).get("rayClusterSpec") or {}
        base = "/spec/rayClusterSpec"
        out = [
            PodTemplate(
                f"{base}/headGroupSpec/template",
                (cluster.get("headGroupSpec") or {}).get("template") or {},
                1,
            )
        ]
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            replicas = int_field(group.get("replicas"), int_field(group.get("minReplicas"), 1))
            hosts = int_field(group.get("numOfHosts"), 1)
            out.append(
                PodTemplate(
                    f"{base}/workerGroupSpecs/{i}/template",
                    group.get("template") or {},
                    replicas * hosts,
                )
            )
        return out

    # Its pods are selected as all Ray pods of the namespace, then by owner_of (cluster.py):
    # KubeRay's pods carry only their RayCluster's name.
    selector_exact = False

    def owner_of(self, pod: Obj) -> str | None:
        # KubeRay v1.5.0 labels the RayCluster it makes for a RayJob with the RayJob's name
        # (ray.io/originated-from-cr-name), but not the cluster's pods: they carry
        # ray.io/cluster, the RayCluster's name, which is the RayJob's name and a random
        # suffix. Pods labelled with the RayJob itself (as earlier versions did) say so.
        crd = _label(pod, RAY_CRD_LABEL)
        if crd is not None:
            return _label(pod, RAY_CR_NAME_LABEL) if crd == "RayJob" else None
        match = RAY_CLUSTER_NAME.match(_label(pod, RAY_CLUSTER_LABEL) or "")
        return match.group(1) if match else None

    def pod_selector(self, name: str) -> str:
        return f"{RAY_NODE_LABEL}=yes"


KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"


class PyTorchJob:
    kind = "PyTorchJob"
    group = "kubeflow.org"
    version = "v1"
    plural = "pytorchjobs"
    gang_by_default = True
    clears_start_time = False
    child_jobs_selector: str | None = None
    suspension_condition: str | None = "Suspended"

    def suspended(self, obj: Obj) -> bool:
        return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"))

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": suspend}}}

    def finished(self, obj: Obj) -> bool:
        return conditions_true(obj, ("Succeeded", "Failed"))

    def templates(self, obj: Obj) -> list[PodTemplate]:
        specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        return [
            PodTemplate(
                f"/spec/pytorchReplicaSpecs/{role}/template",
                (specs[role] or {}).get("template") or {},
                int_field((specs[role] or {}).get("replicas"), 1),
            )
            for role in sorted(specs)
        ]

    def owner_of(self, pod: Obj) -> str | None:
        owners = (pod.get("metadata") or {}).get("ownerReferences") or []
        if not any(r.get("kind") == "PyTorchJob" for r in owners):
            return None
        return _label(pod, KUBEFLOW_JOB_NAME_LABEL)

    def pod_selector(self, name: str) -> str:
        return f"{KUBEFLOW_JOB_NAME_LABEL}={name}"


TRAINER_JOB = "node"
"""The trainer's replicated job in Kubeflow Trainer v2's runtimes (its constants.Node)."""

RUNTIME_PATCHES = "runtimePatches"
"""Trainer v2.2+: ``spec.runtimePatches``, patches of the runtime's JobSet template keyed by
``manager``."""
POD_TEMPLATE_OVERRIDES = "podTemplateOverrides"
"""Trainer v2.1: ``spec.podTemplateOverrides`` (``targetJobs`` and a pod ``spec``)."""
POD_SPEC_OVERRIDES = "podSpecOverrides"
"""Trainer v2.0: ``spec.podSpecOverrides`` (``targetJobs`` and pod spec fields)."""
TRAINJOB_OVERRIDE_FIELDS = (RUNTIME_PATCHES, POD_TEMPLATE_OVERRIDES, POD_SPEC_OVERRIDES)
"""The fields of a TrainJob's spec a move can repoint it through, newest Trainer first."""
RUNTIME_PATCH_MANAGER = "hybridgpu.io/manager"
"""hybridgpu's ``manager`` in ``spec.runtimePatches``: it reads and writes only that entry."""
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"


def trainjob_override_field(crd: Obj | None) -> str | None:
    """The field of ``TRAINJOB_OVERRIDE_FIELDS`` (newest first) that the TrainJob CRD's
    v1alpha1 schema has; None when the CRD is missing or has none of them."""
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        if version.get("name") != TrainJob.version or not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        spec = (schema.get("properties") or {}).get("spec") or {}
        fields = spec.get("properties") or {}
        return next((f for f in TRAINJOB_OVERRIDE_FIELDS if f in fields), None)
    return None


def _targets_trainer_only(override: Obj) -> bool:
    targets = [str((t or {}).get("name")) for t in override.get("targetJobs") or []]
    return targets == [TRAINER_JOB]


def _dig(obj: Any, *keys: str) -> Obj:
    for key in keys:
        obj = (obj or {}).get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _own_runtime_patch(spec: Obj) -> int | None:
    patches = spec.get(RUNTIME_PATCHES) or []
    return next(
        (i for i, p in enumerate(patches) if (p or {}).get("manager") == RUNTIME_PATCH_MANAGER),
        None,
    )


def runtime_patch(pod_spec: Obj) -> Obj:
    """hybridgpu's entry of ``spec.runtimePatches``: ``pod_spec`` (its nodeSelector and
    tolerations) for the trainer job's pods."""
    return {
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": TRAINER_JOB,
                            "template": {"spec": {"template": {"spec": dict(pod_spec)}}},
                        }
                    ]
                }
            }
        },
    }


def trainer_tolerations(jobset: Obj | None) -> list[Obj] | None:
    """The tolerations the trainer job's pods have now in a TrainJob's JobSet (the runtime's,
    with every runtime patch applied), or None without a trainer job there."""
    for replicated in ((jobset or {}).get("spec") or {}).get("replicatedJobs") or []:
        if (replicated or {}).get("name") == TRAINER_JOB:
            pod_spec = _dig(replicated, "template", "spec", "template", "spec")
            return [dict(t) for t in pod_spec.get("tolerations") or []]
    return None


_RUNTIME_PATCH_POD_SPEC = (
    "trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/spec"
)
"""Where the trainer job's pod spec is in an entry made by :func:`runtime_patch`."""


@dataclass(frozen=True, slots=True)
class _Override:
    """Where a TrainJob's trainer pods get their scheduling fields, and what they are now."""

    pod_spec: Obj
    spec_path: str
    create: tuple[dict[str, Any], ...]


def _runtime_patch_override(spec: Obj) -> _Override:
    """Trainer v2.2+: hybridgpu's own ``spec.runtimePatches`` entry (manager
    ``hybridgpu.io/manager``), written whole on each move (so applying it again changes
    nothing, and a later move replaces it); the other managers' entries are never touched."""
    patches = spec.get(RUNTIME_PATCHES) or []
    index = _own_runtime_patch(spec)
    pod_spec: Obj = {}
    create: tuple[dict[str, Any], ...]
    if index is None:
        index = len(patches)
        path = f"/spec/{RUNTIME_PATCHES}/-" if patches else f"/spec/{RUNTIME_PATCHES}"
        value: Any = runtime_patch({}) if patches else [runtime_patch({})]
        create = ({"op": "add", "path": path, "value": value},)
    else:
        jobs = _dig(patches[index], "trainingRuntimeSpec", "template", "spec").get("replicatedJobs")
        job: Any = next((j for j in jobs or [] if (j or {}).get("name") == TRAINER_JOB), {})
        pod_spec = _dig(job, "template", "spec", "template", "spec")
        create = (
            # The entry is still ours where we read it (another manager's may have moved it).
            {
                "op": "test",
                "path": f"/spec/{RUNTIME_PATCHES}/{index}/manager",
                "value": RUNTIME_PATCH_MANAGER,
            },
            {
                "op": "replace",
                "path": f"/spec/{RUNTIME_PATCHES}/{index}",
                "value": runtime_patch({}),
            },
        )
    return _Override(pod_spec, f"/spec/{RUNTIME_PATCHES}/{index}/{_RUNTIME_PATCH_POD_SPEC}", create)


def _target_override(spec: Obj, field: str) -> _Override:
    """Trainer v2.0 (``podSpecOverrides``: the fields in the entry) and v2.1
    (``podTemplateOverrides``: under its ``spec``): the entry whose ``targetJobs`` is the
    trainer job alone, added when there is none; other entries and other fields are kept."""
    overrides = spec.get(field) or []
    index = next((i for i, o in enumerate(overrides) if _targets_trainer_only(o)), None)
    nested = field == POD_TEMPLATE_OVERRIDES
    create: tuple[dict[str, Any], ...] = ()
    if index is None:
        index = len(overrides)
        entry: dict[str, Any] = {"targetJobs": [{"name": TRAINER_JOB}]}
        if nested:
            entry["spec"] = {}
        create = ({"op": "add", "path": f"/spec/{field}", "value": [*overrides, entry]},)
        override: Obj = {}
    else:
        override = overrides[index] or {}
        if nested and not isinstance(override.get("spec"), dict):
            create = ({"op": "add", "path": f"/spec/{field}/{index}/spec", "value": {}},)
    path = f"/spec/{field}/{index}"
    if nested:
        return _Override(_dig(override, "spec"), f"{path}/spec", create)
    return _Override(override, path, create)


def _field_in_use(spec: Obj) -> str:
    """The field a TrainJob's trainer is pinned through now (to read it without knowing the
    cluster's Trainer): hybridgpu's runtime patch, else a trainer override of v2.1, else
    v2.0's."""
    if _own_runtime_patch(spec) is not None:
        return RUNTIME_PATCHES
    if any(_targets_trainer_only(o or {}) for o in spec.get(POD_TEMPLATE_OVERRIDES) or []):
        return POD_TEMPLATE_OVERRIDES
    return POD_SPEC_OVERRIDES


class TrainJob(_SuspendInSpec):
    kind = "TrainJob"
    group = "trainer.kubeflow.org"
    version = "v1alpha1"
    plural = "trainjobs"
    gang_by_default = True
    clears_start_time = False
    child_jobs_selector: str | None = JOBSET_NAME_LABEL + "={name}"

    def __init__(self, field: str | None = None) -> None:
        self.field = field
        """The field of ``TRAINJOB_OVERRIDE_FIELDS`` the cluster's TrainJob CRD serves, which
        a move writes (``trainjob_override_field``); None: the one the object uses now (for
        reading its pool; a move must know the served one)."""

    def served(self, field: str) -> TrainJob:
        """This adapter writing ``field`` (what the cluster's Trainer serves)."""
        return TrainJob(field)

    def finished(self, obj: Obj) -> bool:
        return conditions_true(obj, ("Complete", "Failed"))

    def templates(self, obj: Obj) -> list[PodTemplate]:
        """One template: the trainer's nodes, with the scheduling fields of its override."""
        spec = obj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        field = self.field or _field_in_use(spec)
        if field == RUNTIME_PATCHES:
            override = _runtime_patch_override(spec)
        else:
            override = _target_override(spec, field)
        pod_spec = {
            "containers": [
                {"name": TRAINER_JOB, "resources": trainer.get("resourcesPerNode") or {}}
            ],
            "nodeSelector": override.pod_spec.get("nodeSelector") or {},
            "tolerations": override.pod_spec.get("tolerations") or [],
        }
        return [
            PodTemplate(
                "/spec/trainer",
                {"metadata": {}, "spec": pod_spec},
                int_field(trainer.get("numNodes"), 1),
                spec_path=override.spec_path,
                create=override.create,
            )
        ]

    def owner_of(self, pod: Obj) -> str | None:
        # Its pods carry only their JobSet's labels: the JobSet of the same name, which the
        # TrainJob owns, stands for it (owned_by_workload, kube/workloads).
        return None

    def pod_selector(self, name: str) -> str:
        return f"{JOBSET_NAME_LABEL}={name}"
