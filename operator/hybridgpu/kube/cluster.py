"""``KubeCluster``: every call the operator makes to the apiserver, in one small class.

Reads return plain dicts (the JSON the apiserver sent, no model objects: a large cluster has
100,000 pods and the snapshot must be cheap). Every ``ApiException`` becomes a
:class:`~hybridgpu.kube.errors.KubeError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from hybridgpu import kubeclient
from hybridgpu.kube.convert import pod_spec_gpus, rfc3339
from hybridgpu.kube.errors import Conflict, KubeError, NotFound, from_api_exception
from hybridgpu.kube.names import (
    CORDONED_BY_ANNOTATION,
    EVENT_SOURCE,
    GPU_RESOURCE,
    GPUPOOLS,
    GROUP,
    JOB_NAME_LABEL,
    PROVREQ_GROUP,
    PROVREQ_PLURAL,
    PROVREQ_VERSION,
    SCALINGPOLICIES,
    VERSION,
)
from hybridgpu.kube.workloads import CUSTOM_KINDS, KINDS, WorkloadKind

log = logging.getLogger(__name__)

_CLUSTER_CUSTOM_PLURALS = {
    "GPUPool": GPUPOOLS,
    "ScalingPolicy": SCALINGPOLICIES,
    "CapacityPlan": "capacityplans",
}
"""Our cluster-scoped kinds, by kind: what an Event about one of them reads its uid from."""

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
EVENTS_NAMESPACE = "default"
"""Events about cluster-scoped objects (pools, policies, nodes) go here."""

T = TypeVar("T")
Obj = dict[str, Any]


load_api_client = kubeclient.api_client


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """The raw objects a snapshot is built from, read in one go."""

    nodes: list[Obj]
    pods: list[Obj]
    jobs: list[Obj]
    workloads: list[Obj] = field(default_factory=list)
    """JobSets, RayJobs and PyTorchJobs (each with its ``kind``), of the kinds installed."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    name: str
    api_version: str
    namespace: str | None = None
    uid: str | None = None


class KubeCluster:
    """The apiserver, as the operator uses it."""

    known_uids: Callable[[ObjectRef], str | None] | None = None
    """Where an Event's uid is looked up before it is read from the apiserver (the operator's
    watch caches): one request per Event instead of two."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.apiextensions = client.ApiextensionsV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.autoscaling = client.AutoscalingV2Api(api)
        self._forbidden_kinds: set[str] = set()

    def close(self) -> None:
        self.api.close()

    # ------------------------------------------------------------------ reads
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ApiException as exc:
            raise from_api_exception(exc, what) from exc
        except Exception as exc:  # urllib3 connection errors: the apiserver is unreachable
            if isinstance(exc, KubeError):
                raise
            raise KubeError(f"{what}: {exc}", retryable=True) from exc

    def _json(self, what: str, fn: Callable[[], Any]) -> Any:
        response = self._call(what, fn)
        return json.loads(response.data)

    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self.api.configuration.host)

    def read_crd(self, name: str) -> Obj | None:
        """The CustomResourceDefinition ``name`` as a dict; None when it is not installed.
        Bounded in time: it is how the operator finds out whether it can work at all."""
        try:
            return dict(
                self._json(
                    f"read CustomResourceDefinition {name}",
                    lambda: self.apiextensions.read_custom_resource_definition(
                        name, _preload_content=False, _request_timeout=(5, 10)
                    ),
                )
            )
        except NotFound:
            return None

    def list_pools(self) -> list[Obj]:
        """Every GPUPool, as dicts."""
        body = self._call(
            "list GPUPools",
            lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, GPUPOOLS),
        )
        return list(body.get("items", []))

    def list_policies(self) -> list[Obj]:
        body = self._call(
            "list ScalingPolicies",
            lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, SCALINGPOLICIES),
        )
        return list(body.get("items", []))

    def get_custom(self, plural: str, name: str) -> Obj | None:
        """A GPUPool or ScalingPolicy as it is now (None when gone): what a status write
        that replaces a list (conditions) starts from, not a watch event's older copy."""
        try:
            result: Obj = self._call(
                f"read {plural}/{name}",
                lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name),
            )
        except NotFound:
            return None
        return result

    def get_policy(self, name: str) -> Obj:
        result: Obj = self._call(
            f"read ScalingPolicy {name}",
            lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, SCALINGPOLICIES, name),
        )
        return result

    def read_objects(self) -> ClusterObjects:
        """Nodes, GPU pods and GPU Jobs of the whole cluster."""
        nodes = self._json("list nodes", lambda: self.core.list_node(_preload_content=False))[
            "items"
        ]
        pods = self._json(
            "list pods",
            lambda: self.core.list_pod_for_all_namespaces(
                _preload_content=False,
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
            ),
        )["items"]
        jobs = self._json(
            "list jobs", lambda: self.batch.list_job_for_all_namespaces(_preload_content=False)
        )["items"]
        return ClusterObjects(
            nodes=nodes,
            pods=[p for p in pods if pod_spec_gpus(p.get("spec") or {}) > 0],
            jobs=[
                j
                for j in jobs
                if pod_spec_gpus(((j.get("spec") or {}).get("template") or {}).get("spec") or {})
                > 0
            ],
            workloads=[w for kind in CUSTOM_KINDS for w in self.list_workloads(kind)],
        )

    def list_workloads(self, kind: WorkloadKind) -> list[Obj]:
        """Every object of a suspendable batch kind (JobSet, RayJob, PyTorchJob, TrainJob), each
        with its ``kind``; none when its CRD is not installed or the operator may not list it
        (docs/workloads.md says which RBAC each kind needs)."""
        try:
            body = self._json(
                f"list {kind.plural}",
                lambda: self.custom.list_cluster_custom_object(
                    kind.group, kind.version, kind.plural, _preload_content=False
                ),
            )
        except NotFound:
            return []
        except KubeError as err:
            if err.status != 403:
                raise
            if kind.kind not in self._forbidden_kinds:
                self._forbidden_kinds.add(kind.kind)
                log.warning("%s: not allowed to list %s; they are not managed", err, kind.plural)
            return []
        items: list[Obj] = body.get("items", [])
        for item in items:
            item.setdefault("kind", kind.kind)
        return items

    def get_workload(self, kind: WorkloadKind, namespace: str, name: str) -> Obj:
        """A Job, JobSet, RayJob or PyTorchJob as a dict (with its ``kind``)."""
        if kind.group == "batch":
            return self.get_job(namespace, name)
        result: Obj = self._json(
            f"read {kind.kind} {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name, _preload_content=False
            ),
        )
        result.setdefault("kind", kind.kind)
        return result

    def patch_workload(
        self, kind: WorkloadKind, namespace: str, name: str, patch: Obj | list[Obj]
    ) -> Obj:
        """Merge-patch (a dict) or JSON-patch (a list) a workload; returns it patched."""
        if kind.group == "batch":
            return self.patch_job(namespace, name, patch)
        content = JSON_PATCH if isinstance(patch, list) else MERGE
        result: Obj = self._json(
            f"patch {kind.kind} {namespace}/{name}",
            lambda: self.custom.patch_namespaced_custom_object(
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                name,
                patch,
                _content_type=content,
                _preload_content=False,
            ),
        )
        result.setdefault("kind", kind.kind)
        return result

    def pods_of_workload(self, kind: WorkloadKind, namespace: str, name: str) -> list[Obj]:
        """Pods of a workload that still exist and have not finished (terminating ones
        count)."""
        items: list[Obj] = self._json(
            f"list pods of {kind.kind} {namespace}/{name}",
            lambda: self.core.list_namespaced_pod(
                namespace, _preload_content=False, label_selector=kind.pod_selector(name)
            ),
        )["items"]
        if not getattr(kind, "selector_exact", True):
            # The selector picks more than the workload's pods (a RayJob's: every Ray pod).
            items = [p for p in items if kind.owner_of(p) == name]
        return [
            p for p in items if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def pods_on_node(self, node: str) -> list[Obj]:
        """Pods bound to ``node`` that have not finished."""
        items: list[Obj] = self._json(
            f"list pods on {node}",
            lambda: self.core.list_pod_for_all_namespaces(
                _preload_content=False,
                field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
            ),
        )["items"]
        return items

    def pods_of_job(self, namespace: str, job: str) -> list[Obj]:
        """Pods of a Job that still exist and have not finished (terminating ones count)."""
        items: list[Obj] = self._json(
            f"list pods of Job {namespace}/{job}",
            lambda: self.core.list_namespaced_pod(
                namespace, _preload_content=False, label_selector=f"{JOB_NAME_LABEL}={job}"
            ),
        )["items"]
        return [
            p for p in items if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def get_node(self, name: str) -> Obj | None:
        """The Node as a dict; None when it does not exist."""
        try:
            result: Obj = self._json(
                f"read node {name}", lambda: self.core.read_node(name, _preload_content=False)
            )
        except NotFound:
            return None
        return result

    def get_job(self, namespace: str, name: str) -> Obj:
        result: Obj = self._json(
            f"read Job {namespace}/{name}",
            lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False),
        )
        return result

    # ------------------------------------------------------------------ nodes
    def cordon(self, node: str, why: str, extra_annotations: dict[str, str] | None = None) -> None:
        """Mark the node unschedulable and say why in an annotation (idempotent)."""
        annotations = {CORDONED_BY_ANNOTATION: why, **(extra_annotations or {})}
        self._call(
            f"cordon node {node}",
            lambda: self.core.patch_node(
                node,
                {"spec": {"unschedulable": True}, "metadata": {"annotations": annotations}},
                _content_type=MERGE,
            ),
        )

    def uncordon(self, node: str) -> None:
        self._call(
            f"uncordon node {node}",
            lambda: self.core.patch_node(
                node,
                {
                    "spec": {"unschedulable": False},
                    "metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}},
                },
                _content_type=MERGE,
            ),
        )

    def patch_node_metadata(
        self,
        node: str,
        *,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> None:
        meta: Obj = {}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        if meta:
            self._call(
                f"label node {node}",
                lambda: self.core.patch_node(node, {"metadata": meta}, _content_type=MERGE),
            )

    def set_node_taints(self, node: str, taints: list[Obj]) -> None:
        self._call(
            f"taint node {node}",
            lambda: self.core.patch_node(node, {"spec": {"taints": taints}}, _content_type=MERGE),
        )

    def delete_node(self, node: str) -> None:
        """Delete a Node object (its instance is gone); a node already gone is fine."""
        with suppress(NotFound):
            self._call(f"delete node {node}", lambda: self.core.delete_node(node))

    def evict(self, namespace: str, pod: str) -> bool:
        """Evict through the Eviction API so PodDisruptionBudgets hold.

        Returns False when a PDB refuses it now (429); a pod already gone counts as evicted.
        """
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
        try:
            self._call(
                f"evict pod {namespace}/{pod}",
                lambda: self.core.create_namespaced_pod_eviction(pod, namespace, body),
            )
        except NotFound:
            return True
        except KubeError as err:
            if err.status == 429:
                return False
            raise
        return True

    # ------------------------------------------------------------------- jobs
    def patch_job(self, namespace: str, name: str, patch: Obj | list[Obj]) -> Obj:
        content = JSON_PATCH if isinstance(patch, list) else MERGE
        result: Obj = self._json(
            f"patch Job {namespace}/{name}",
            lambda: self.batch.patch_namespaced_job(
                name, namespace, patch, _content_type=content, _preload_content=False
            ),
        )
        return result

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        items: list[Obj] = self._json(
            f"list Jobs in {namespace} ({label_selector})",
            lambda: self.batch.list_namespaced_job(
                namespace, label_selector=label_selector, _preload_content=False
            ),
        )["items"]
        return items

    def clear_job_start_time(self, namespace: str, name: str) -> None:
        """Clear status.startTime of a suspended Job (the apiserver then allows repinning)."""
        self._call(
            f"clear startTime of Job {namespace}/{name}",
            lambda: self.batch.patch_namespaced_job_status(
                name, namespace, {"status": {"startTime": None}}, _content_type=MERGE
            ),
        )

    # ---------------------------------------------------------------- serving
    def list_deployments(self) -> list[Obj]:
        items: list[Obj] = self._json(
            "list deployments",
            lambda: self.apps.list_deployment_for_all_namespaces(_preload_content=False),
        )["items"]
        return items

    def list_replicasets(self) -> list[Obj]:
        items: list[Obj] = self._json(
            "list replicasets",
            lambda: self.apps.list_replica_set_for_all_namespaces(_preload_content=False),
        )["items"]
        return items

    def list_hpas(self) -> list[Obj]:
        items: list[Obj] = self._json(
            "list horizontalpodautoscalers",
            lambda: self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces(
                _preload_content=False
            ),
        )["items"]
        return items

    def get_deployment(self, namespace: str, name: str) -> Obj:
        result: Obj = self._json(
            f"read Deployment {namespace}/{name}",
            lambda: self.apps.read_namespaced_deployment(name, namespace, _preload_content=False),
        )
        return result

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Merge-patch; a ``metadata.resourceVersion`` in it makes it conditional (409)."""
        result: Obj = self._json(
            f"patch Deployment {namespace}/{name}",
            lambda: self.apps.patch_namespaced_deployment(
                name, namespace, patch, _content_type=MERGE, _preload_content=False
            ),
        )
        return result

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        items: list[Obj] = self._json(
            f"list pods in {namespace} ({label_selector})",
            lambda: self.core.list_namespaced_pod(
                namespace, label_selector=label_selector, _preload_content=False
            ),
        )["items"]
        return items

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self._call(
            f"annotate pod {namespace}/{name}",
            lambda: self.core.patch_namespaced_pod(
                name, namespace, {"metadata": {"annotations": annotations}}, _content_type=MERGE
            ),
        )

    # ----------------------------------------------------------------- status
    def patch_status(
        self, plural: str, name: str, status: Obj, *, resource_version: str | None = None
    ) -> None:
        """Merge-patch the status subresource of a GPUPool or ScalingPolicy; with
        ``resource_version``, only if the object is still at that version (else Conflict)."""
        body: Obj = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self._call(
                f"patch status of {plural}/{name}",
                lambda: self.custom.patch_cluster_custom_object_status(
                    GROUP, VERSION, plural, name, body, _content_type=MERGE
                ),
            )
        except NotFound:
            log.debug("%s/%s is gone; status not written", plural, name)

    # ------------------------------------------------------ provisioning requests
    def list_provisioning_requests(self) -> list[Obj]:
        """Every ProvisioningRequest (autoscaling.x-k8s.io/v1); none when the CRD is not
        installed."""
        try:
            body = self._json(
                "list ProvisioningRequests",
                lambda: self.custom.list_cluster_custom_object(
                    PROVREQ_GROUP, PROVREQ_VERSION, PROVREQ_PLURAL, _preload_content=False
                ),
            )
        except NotFound:
            return []  # the CRD is not installed: nobody asks
        except KubeError as err:
            if err.status != 403:
                raise
            log.warning("cannot list ProvisioningRequests (RBAC): %s", err)
            return []
        return list(body.get("items") or [])

    def read_pod_templates(self, namespace: str, names: list[str]) -> dict[str, Obj]:
        """The PodTemplates ``names`` of ``namespace`` that exist, by name."""
        out: dict[str, Obj] = {}
        for name in sorted(set(names)):
            try:
                out[name] = self._json(
                    f"read PodTemplate {namespace}/{name}",
                    lambda name=name: self.core.read_namespaced_pod_template(  # type: ignore[misc]
                        name, namespace, _preload_content=False
                    ),
                )
            except NotFound:
                continue
        return out

    def patch_provisioning_request_status(self, namespace: str, name: str, patch: Obj) -> None:
        """Merge-patch a ProvisioningRequest's status; a request deleted meanwhile is fine."""
        try:
            self._call(
                f"patch ProvisioningRequest {namespace}/{name} status",
                lambda: self.custom.patch_namespaced_custom_object_status(
                    PROVREQ_GROUP,
                    PROVREQ_VERSION,
                    namespace,
                    PROVREQ_PLURAL,
                    name,
                    patch,
                    _content_type=MERGE,
                ),
            )
        except NotFound:
            log.debug("ProvisioningRequest %s/%s is gone; status not written", namespace, name)

    # ----------------------------------------------------------------- events
    def post_event(
        self,
        ref: ObjectRef,
        *,
        reason: str,
        message: str,
        event_type: str = "Normal",
        now: float,
    ) -> None:
        """Post an Event; the same (object, reason, message) again bumps its count instead.

        The Event carries the object's uid (``known_uids``'s, else read here when ``ref``
        has none): `kubectl describe` lists only the Events whose involvedObject.uid is the
        object's."""
        namespace = ref.namespace or EVENTS_NAMESPACE
        known = self.known_uids
        uid = ref.uid or (known(ref) if known is not None else None) or self.uid_of(ref)
        digest = hashlib.sha1(
            f"{ref.kind}/{ref.name}/{uid}/{reason}/{message}".encode()
        ).hexdigest()
        name = f"{ref.name[:200]}.{digest[:16]}"
        stamp = rfc3339(now)
        involved = {"kind": ref.kind, "name": ref.name, "apiVersion": ref.api_version}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if uid:
            involved["uid"] = uid
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._call(
                f"post event {name}", lambda: self.core.create_namespaced_event(namespace, body)
            )
        except Conflict:
            existing = self._call(
                f"read event {name}", lambda: self.core.read_namespaced_event(name, namespace)
            )
            patch = {"count": (existing.count or 1) + 1, "lastTimestamp": stamp}
            self._call(
                f"bump event {name}",
                lambda: self.core.patch_namespaced_event(
                    name, namespace, patch, _content_type=MERGE
                ),
            )

    def uid_of(self, ref: ObjectRef) -> str | None:
        """The uid of the object ``ref`` names as it is now; None when it is gone, of a kind
        not known here, or cannot be read (the Event is posted without it)."""
        obj: Obj | None
        try:
            if ref.kind in _CLUSTER_CUSTOM_PLURALS:
                obj = self.get_custom(_CLUSTER_CUSTOM_PLURALS[ref.kind], ref.name)
            elif ref.kind == "Node":
                obj = self.get_node(ref.name)
            elif ref.namespace and ref.kind == "Pod":
                namespace = ref.namespace
                obj = self._json(
                    f"read pod {namespace}/{ref.name}",
                    lambda: self.core.read_namespaced_pod(
                        ref.name, namespace, _preload_content=False
                    ),
                )
            elif ref.namespace and ref.kind == "Deployment":
                obj = self.get_deployment(ref.namespace, ref.name)
            elif ref.namespace and ref.kind in KINDS:
                obj = self.get_workload(KINDS[ref.kind], ref.namespace, ref.name)
            else:
                return None
        except KubeError:
            return None
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def list_events(self, namespace: str | None = None) -> list[Obj]:
        items: list[Obj] = self._json(
            "list events",
            lambda: self.core.list_namespaced_event(
                namespace or EVENTS_NAMESPACE, _preload_content=False
            ),
        )["items"]
        return items

    # ------------------------------------------------------------------ lease
    def read_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            result: Obj = self._json(
                f"read lease {namespace}/{name}",
                lambda: self.coordination.read_namespaced_lease(
                    name, namespace, _preload_content=False
                ),
            )
            return result
        except NotFound:
            return None

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        """Create the Lease; the Lease as stored (its resourceVersion)."""
        result: Obj = self._json(
            "create lease",
            lambda: self.coordination.create_namespaced_lease(
                namespace, body, _preload_content=False
            ),
        )
        return result

    def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        """Replace the Lease, conditional on the body's resourceVersion (else Conflict); the
        Lease as stored."""
        result: Obj = self._json(
            "renew lease",
            lambda: self.coordination.replace_namespaced_lease(
                name, namespace, body, _preload_content=False
            ),
        )
        return result


__all__ = [
    "GPU_RESOURCE",
    "ClusterObjects",
    "KubeCluster",
    "ObjectRef",
    "load_api_client",
]
