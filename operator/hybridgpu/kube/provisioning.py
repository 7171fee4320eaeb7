"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) read from and answered on the apiserver.

Each request of a class hybridgpu serves (core/provisioning.py) becomes one gang of pending
GPU pods in the snapshot, built from its PodTemplates (one pod per count of each pod set):
decide() places the gang whole or not at all, and :func:`status_patch` turns what it found
into the conditions Kueue reads. The conversion functions are pure; :func:`read_requests`
reads through ``KubeCluster``. Without the CRD installed there is simply nothing to read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridgpu.core.provisioning import (
    ACCEPTED,
    CLASSES,
    FINAL,
    PROVISIONED,
    ConditionUpdate,
    RequestState,
    gang_of,
)
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import (
    Obj,
    epoch_of,
    parse_criticality,
    pod_spec_gpu_models,
    pod_spec_gpus,
    rfc3339,
)
from hybridgpu.kube.names import CRITICALITY_LABEL, POOL_LABEL
from hybridgpu.models.snapshot import Criticality, GPUPod

CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
"""On a pod: the ProvisioningRequest whose capacity it uses (Kueue sets it on admission)."""
VALID_UNTIL_PARAMETER = "ValidUntilSeconds"


@dataclass(frozen=True, slots=True)
class Request:
    """One ProvisioningRequest read: its state, and its pods as a gang for decide()."""

    namespace: str
    name: str
    generation: int | None
    state: RequestState
    pods: tuple[GPUPod, ...]
    conditions: tuple[Obj, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang(self) -> str:
        return gang_of(self.key)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def served(request: Obj) -> bool:
    """Whether hybridgpu answers this request (its class is one it serves)."""
    return str((request.get("spec") or {}).get("provisioningClassName") or "") in CLASSES


def consumed_requests(pods: Iterable[Obj]) -> set[str]:
    """``namespace/name`` of the requests whose capacity pods (not finished) consume."""
    out: set[str] = set()
    for pod in pods:
        meta = _meta(pod)
        name = (meta.get("annotations") or {}).get(CONSUME_ANNOTATION)
        phase = (pod.get("status") or {}).get("phase")
        if name and phase not in ("Succeeded", "Failed"):
            out.add(f"{meta.get('namespace')}/{name}")
    return out


def _true_since(conditions: Sequence[Obj], kind: str) -> float | None:
    for cond in conditions:
        if cond.get("type") == kind and cond.get("status") == "True":
            return epoch_of(cond.get("lastTransitionTime")) or 0.0
    return None


def read_request(request: Obj, templates: Mapping[str, Obj], consumed: bool) -> Request:
    """The request as a state and a gang of pending pods: one per count of each pod set
    whose PodTemplate asks for GPUs, pinned to the pool its nodeSelector names, pending since
    the request was created. ``templates``: its namespace's PodTemplates by name."""
    meta = _meta(request)
    spec = request.get("spec") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    conditions = tuple((request.get("status") or {}).get("conditions") or [])
    created = epoch_of(meta.get("creationTimestamp")) or 0.0
    key = f"{namespace}/{name}"
    errors: list[str] = []
    valid_until: float | None = None
    raw_valid = (spec.get("parameters") or {}).get(VALID_UNTIL_PARAMETER)
    if raw_valid is not None:
        try:
            valid_until = float(raw_valid)
            if valid_until <= 0:
                raise ValueError
        except ValueError:
            valid_until = None
            errors.append(f"parameter {VALID_UNTIL_PARAMETER}={raw_valid!r} is not seconds > 0")
    shapes: list[tuple[Obj, int]] = []
    for index, pod_set in enumerate(spec.get("podSets") or []):
        ref = str((pod_set.get("podTemplateRef") or {}).get("name") or "")
        template = templates.get(ref)
        if template is None:
            errors.append(f"podSets[{index}]: PodTemplate {namespace}/{ref} not found")
            continue
        shapes.append((template.get("template") or {}, int(pod_set.get("count") or 0)))
    pods: list[GPUPod] = []
    total = sum(count for t, count in shapes if pod_spec_gpus(t.get("spec") or {}) > 0)
    for index, (template, count) in enumerate(shapes):
        pod_spec = template.get("spec") or {}
        gpus = pod_spec_gpus(pod_spec)
        if gpus <= 0:
            continue  # pods without GPUs are not hybridgpu's to provision
        labels = (template.get("metadata") or {}).get("labels") or {}
        criticality = parse_criticality(labels.get(CRITICALITY_LABEL)) or Criticality.STANDARD
        for i in range(count):
            pods.append(
                GPUPod(
                    namespace=namespace,
                    name=f"{name}#{index}-{i}",
                    gpus=gpus,
                    criticality=criticality,
                    pool=(pod_spec.get("nodeSelector") or {}).get(POOL_LABEL),
                    pending_since=created,
                    gpu_models=pod_spec_gpu_models(pod_spec),
                    gang=gang_of(key),
                    gang_size=total,
                )
            )
    final = next((c.get("type") for c in conditions if _is(c, FINAL)), None)
    state = RequestState(
        key=key,
        provisioning_class=str(spec.get("provisioningClassName") or ""),
        created_at=created,
        provisioned_at=_true_since(conditions, PROVISIONED),
        final=str(final) if final else None,
        accepted=_true_since(conditions, ACCEPTED) is not None,
        consumed=consumed,
        valid_until_seconds=valid_until,
        gpus=sum(p.gpus for p in pods),
        error="; ".join(errors) or None,
    )
    return Request(namespace, name, meta.get("generation"), state, tuple(pods), conditions)


def _is(condition: Obj, kinds: Sequence[str]) -> bool:
    return condition.get("type") in kinds and condition.get("status") == "True"


def status_patch(
    request: Request, updates: Sequence[ConditionUpdate], details: Mapping[str, str], now: float
) -> dict[str, Any] | None:
    """The merge patch of the request's status that sets ``updates`` (a condition keeps its
    lastTransitionTime while its status does not change); None when nothing changes."""
    by_type = {str(c.get("type")): dict(c) for c in request.conditions}
    changed = False
    for update in updates:
        status = "True" if update.status else "False"
        old = by_type.get(update.type)
        if (
            old is not None
            and old.get("status") == status
            and old.get("reason") == update.reason
            and old.get("message") == update.message
        ):
            continue
        changed = True
        by_type[update.type] = {
            "type": update.type,
            "status": status,
            "reason": update.reason,
            "message": update.message,
            "observedGeneration": request.generation or 0,
            "lastTransitionTime": old["lastTransitionTime"]
            if old is not None and old.get("status") == status and old.get("lastTransitionTime")
            else rfc3339(now),
        }
    if not changed and not details:
        return None
    new_status: dict[str, Any] = {"conditions": list(by_type.values())}
    if details:
        new_status["provisioningClassDetails"] = dict(details)
    return {"status": new_status}


def read_requests(
    cluster: KubeCluster, pods: Iterable[Obj], listed: Iterable[Obj] | None = None
) -> list[Request]:
    """Every ProvisioningRequest of a class hybridgpu serves, with its gang; none without the
    CRD. ``pods``: the cluster's GPU pods (to find the requests they consume); ``listed``:
    the requests as the watch cache holds them (None: listed from the apiserver). Their
    PodTemplates are read from the apiserver."""
    requests = cluster.list_provisioning_requests() if listed is None else listed
    ours = [r for r in requests if served(r)]
    if not ours:
        return []  # no pass over the pods (thousands of them) when there is no request
    consumed = consumed_requests(pods)
    out: list[Request] = []
    for raw in ours:
        meta = _meta(raw)
        namespace = str(meta.get("namespace"))
        refs = [
            str((s.get("podTemplateRef") or {}).get("name") or "")
            for s in (raw.get("spec") or {}).get("podSets") or []
        ]
        key = f"{namespace}/{meta.get('name')}"
        templates = cluster.read_pod_templates(namespace, refs)
        out.append(read_request(raw, templates, key in consumed))
    return out
