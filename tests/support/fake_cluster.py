"""An in-memory stand-in for ``kube.cluster.KubeCluster``, for unit tests of whole ticks.

It keeps nodes, pods, Jobs, GPUPools and ScalingPolicies as the dicts the apiserver would
send, applies the operator's writes to them, and records every write in ``writes`` as
``(verb, name)`` so a test can ask what the operator did to which object. It is not a
scheduler: tests bind pods themselves.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from hybridgpu.kube.cluster import ClusterObjects, ObjectRef
from hybridgpu.kube.convert import pod_spec_gpus, rfc3339
from hybridgpu.kube.errors import Conflict, Invalid, NotFound
from hybridgpu.kube.names import CORDONED_BY_ANNOTATION, JOB_NAME_LABEL, POOL_LABEL
from hybridgpu.kube.workloads import WorkloadKind
from hybridgpu.models.crd import all_crds

Obj = dict[str, Any]


def _merge(into: Obj, patch: Obj) -> None:
    """RFC 7386 merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _apply(obj: Obj, patch: Obj | list[Obj]) -> None:
    """A merge patch (a dict) or a JSON patch (a list), as the apiserver applies them (a failed
    RFC 6902 "test" fails it all)."""
    if isinstance(patch, dict):
        _merge(obj, patch)
    else:
        patched = jsonpatch.apply_patch(obj, patch)
        obj.clear()
        obj.update(patched)


def _selected(obj: Obj, label_selector: str) -> bool:
    """Whether ``obj``'s labels match an equality label selector ("k=v,k2=v2")."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    terms = (term.split("=", 1) for term in label_selector.split(",") if term)
    return all(labels.get(k) == v for k, v in terms)


def gpu_node(
    name: str,
    pool: str,
    *,
    gpus: int = 8,
    provider_id: str | None = None,
    ready: bool = True,
    created: float = 0.0,
    ready_since: float | None = None,
) -> Obj:
    """A Node of ``pool`` as the apiserver sends it."""
    spec: Obj = {}
    if provider_id is not None:
        spec["providerID"] = provider_id
    return {
        "metadata": {
            "name": name,
            "labels": {POOL_LABEL: pool},
            "annotations": {},
            "creationTimestamp": rfc3339(created),
        },
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": rfc3339(created if ready_since is None else ready_since),
                }
            ],
        },
    }


def gpu_pod(
    name: str,
    *,
    gpus: int = 8,
    node: str | None = None,
    namespace: str = "team",
    job: str | None = None,
    unschedulable_since: float = 0.0,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A pod requesting ``gpus``; pending (Unschedulable) unless bound to ``node``."""
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if job is not None:
        meta["ownerReferences"] = [{"kind": "Job", "apiVersion": "batch/v1", "name": job}]
        meta["labels"][JOB_NAME_LABEL] = job
    status: Obj = {"phase": "Running" if node else "Pending"}
    if node is None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": rfc3339(unschedulable_since),
            }
        ]
    spec: Obj = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": status}


def custom_object(name: str, spec: Obj) -> Obj:
    return {"metadata": {"name": name, "generation": 1}, "spec": spec, "status": {}}


class FakeCluster:
    """The apiserver as ``KubeCluster`` exposes it, in memory."""

    def __init__(self) -> None:
        self.nodes: dict[str, Obj] = {}
        self.now = 0.0
        """Epoch seconds a deletion is stamped with."""
        self.pods: dict[tuple[str, str], Obj] = {}
        self.jobs: dict[tuple[str, str], Obj] = {}
        self.workloads: dict[tuple[str, str, str], Obj] = {}
        """JobSets, RayJobs, PyTorchJobs by (kind, namespace, name)."""
        self.pools: dict[str, Obj] = {}
        self.policies: dict[str, Obj] = {}
        self.events: list[Obj] = []
        self.leases: dict[tuple[str, str], Obj] = {}
        self.deployments: dict[tuple[str, str], Obj] = {}
        self.replicasets: list[Obj] = []
        self.hpas: list[Obj] = []
        self.writes: list[tuple[str, str]] = []
        self.provisioning_requests: dict[tuple[str, str], Obj] = {}
        self.pod_templates: dict[tuple[str, str], Obj] = {}
        self.crds: dict[str, Obj] = {
            crd["metadata"]["name"]: copy.deepcopy(crd) for crd in all_crds().values()
        }
        """Installed CustomResourceDefinitions by name: this release's, unless a test says."""

    # --- test setup ---------------------------------------------------------------------
    def add_node(self, node: Obj) -> None:
        self.nodes[node["metadata"]["name"]] = node

    def add_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.pods[(meta["namespace"], meta["name"])] = pod

    def add_pool(self, name: str, spec: Obj) -> None:
        self.pools[name] = custom_object(name, spec)

    def add_policy(self, name: str, spec: Obj) -> None:
        self.policies[name] = custom_object(name, spec)

    def writes_to(self, name: str) -> list[str]:
        """Verbs the operator applied to the object called ``name``."""
        return [verb for verb, target in self.writes if target == name]

    # --- KubeCluster --------------------------------------------------------------------
    def close(self) -> None:
        return None

    def server(self) -> str:
        return "https://fake-apiserver"

    def read_crd(self, name: str) -> Obj | None:
        crd = self.crds.get(name)
        return copy.deepcopy(crd) if crd is not None else None

    def list_pools(self) -> list[Obj]:
        return copy.deepcopy(list(self.pools.values()))

    def list_policies(self) -> list[Obj]:
        return copy.deepcopy(list(self.policies.values()))

    def get_policy(self, name: str) -> Obj:
        if name not in self.policies:
            raise NotFound(f"ScalingPolicy {name} not found", status=404)
        return copy.deepcopy(self.policies[name])

    def read_objects(self) -> ClusterObjects:
        pods = [
            p
            for p in self.pods.values()
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            and pod_spec_gpus(p.get("spec") or {}) > 0
        ]
        return ClusterObjects(
            nodes=copy.deepcopy(list(self.nodes.values())),
            pods=copy.deepcopy(pods),
            jobs=copy.deepcopy(list(self.jobs.values())),
            workloads=copy.deepcopy(list(self.workloads.values())),
        )

    def pods_on_node(self, node: str) -> list[Obj]:
        return copy.deepcopy(
            [
                p
                for p in self.pods.values()
                if (p.get("spec") or {}).get("nodeName") == node
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
        )

    def pods_of_job(self, namespace: str, job: str) -> list[Obj]:
        return copy.deepcopy(
            [
                p
                for (ns, _), p in self.pods.items()
                if ns == namespace
                and p["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == job
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
        )

    def list_deployments(self) -> list[Obj]:
        return copy.deepcopy(list(self.deployments.values()))

    def list_replicasets(self) -> list[Obj]:
        return copy.deepcopy(self.replicasets)

    def list_hpas(self) -> list[Obj]:
        return copy.deepcopy(self.hpas)

    def get_deployment(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.deployments:
            raise NotFound(f"Deployment {namespace}/{name} not found", status=404)
        return copy.deepcopy(self.deployments[(namespace, name)])

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.writes.append(("deployment", f"{namespace}/{name}"))
        _merge(self.deployments[(namespace, name)], copy.deepcopy(patch))
        return copy.deepcopy(self.deployments[(namespace, name)])

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        return copy.deepcopy(
            [
                p
                for (ns, _), p in self.pods.items()
                if ns == namespace and _selected(p, label_selector)
            ]
        )

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self.writes.append(("pod", f"{namespace}/{name}"))
        _merge(self.pods[(namespace, name)], {"metadata": {"annotations": annotations}})

    def get_workload(self, kind: WorkloadKind, namespace: str, name: str) -> Obj:
        if kind.kind == "Job":
            return self.get_job(namespace, name)
        found = self.workloads.get((kind.kind, namespace, name))
        if found is None:
            raise NotFound(f"{kind.kind} {namespace}/{name} not found", status=404)
        return copy.deepcopy(found)

    def patch_workload(
        self, kind: WorkloadKind, namespace: str, name: str, patch: Obj | list[Obj]
    ) -> Obj:
        if kind.kind == "Job":
            return self.patch_job(namespace, name, patch)
        self.writes.append((f"patch_{kind.kind}", f"{namespace}/{name}"))
        found = self.workloads.get((kind.kind, namespace, name))
        if found is None:
            raise NotFound(f"{kind.kind} {namespace}/{name} not found", status=404)
        _apply(found, patch)
        return copy.deepcopy(found)

    def pods_of_workload(self, kind: WorkloadKind, namespace: str, name: str) -> list[Obj]:
        return copy.deepcopy(
            [
                p
                for (ns, _), p in self.pods.items()
                if ns == namespace
                and _selected(p, kind.pod_selector(name))
                and p["status"].get("phase") not in ("Succeeded", "Failed")
                and (getattr(kind, "selector_exact", True) or kind.owner_of(p) == name)
            ]
        )

    def get_node(self, name: str) -> Obj | None:
        node = self.nodes.get(name)
        return copy.deepcopy(node) if node is not None else None

    def get_job(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.jobs:
            raise NotFound(f"Job {namespace}/{name} not found", status=404)
        return copy.deepcopy(self.jobs[(namespace, name)])

    def cordon(self, node: str, why: str, extra_annotations: dict[str, str] | None = None) -> None:
        self.writes.append(("cordon", node))
        annotations = {CORDONED_BY_ANNOTATION: why, **(extra_annotations or {})}
        self._patch_node(
            node, {"spec": {"unschedulable": True}, "metadata": {"annotations": annotations}}
        )

    def uncordon(self, node: str) -> None:
        self.writes.append(("uncordon", node))
        self._patch_node(
            node,
            {
                "spec": {"unschedulable": False},
                "metadata": {"annotations": {CORDONED_BY_ANNOTATION: None}},
            },
        )

    def patch_node_metadata(
        self,
        node: str,
        *,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> None:
        self.writes.append(("patch_metadata", node))
        meta: Obj = {}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        self._patch_node(node, {"metadata": meta})

    def set_node_taints(self, node: str, taints: list[Obj]) -> None:
        self.writes.append(("taint", node))
        self._patch_node(node, {"spec": {"taints": taints}})

    def delete_node(self, node: str) -> None:
        """Delete a Node; one with finalizers (Karpenter's karpenter.sh/termination while it
        drains and terminates the machine) stays, marked with a deletionTimestamp, until
        ``lift_finalizers``."""
        self.writes.append(("delete", node))
        found = self.nodes.get(node)
        if found is not None and found["metadata"].get("finalizers"):
            found["metadata"].setdefault("deletionTimestamp", rfc3339(self.now))
            return
        self.nodes.pop(node, None)

    def lift_finalizers(self, node: str) -> None:
        """The finalizers' owner is done: a Node being deleted goes now."""
        found = self.nodes.get(node)
        if found is None:
            return
        found["metadata"].pop("finalizers", None)
        if found["metadata"].get("deletionTimestamp"):
            del self.nodes[node]

    def evict(self, namespace: str, pod: str) -> bool:
        self.writes.append(("evict", f"{namespace}/{pod}"))
        self.pods.pop((namespace, pod), None)
        return True

    def patch_job(self, namespace: str, name: str, patch: Obj | list[Obj]) -> Obj:
        self.writes.append(("patch_job", f"{namespace}/{name}"))
        job = self.jobs.get((namespace, name))
        if job is None:
            raise NotFound(f"Job {namespace}/{name} not found", status=404)
        before = copy.deepcopy(job)
        _apply(job, patch)
        template_changed = (job.get("spec") or {}).get("template") != (
            before.get("spec") or {}
        ).get("template")
        started = (before.get("status") or {}).get("startTime")
        if template_changed and (not (before.get("spec") or {}).get("suspend") or started):
            # The apiserver lets a Job's pod template change only while it is suspended and
            # has no startTime (the mutable scheduling directives of suspended Jobs).
            job.clear()
            job.update(before)
            raise Invalid(f"Job {namespace}/{name}: spec.template: field is immutable", status=422)
        return copy.deepcopy(job)

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        return copy.deepcopy(
            [
                j
                for (ns, _), j in self.jobs.items()
                if ns == namespace and _selected(j, label_selector)
            ]
        )

    def clear_job_start_time(self, namespace: str, name: str) -> None:
        self.patch_job(namespace, name, {"status": {"startTime": None}})

    def patch_status(self, plural: str, name: str, status: Obj) -> None:
        store = self.pools if plural == "gpupools" else self.policies
        if name in store:
            store[name]["status"] = copy.deepcopy(status)

    def post_event(
        self,
        ref: ObjectRef,
        *,
        reason: str,
        message: str,
        event_type: str = "Normal",
        now: float,
    ) -> None:
        self.events.append(
            {
                "kind": ref.kind,
                "name": ref.name,
                "reason": reason,
                "message": message,
                "type": event_type,
            }
        )

    def list_events(self, namespace: str | None = None) -> list[Obj]:
        return list(self.events)

    def list_provisioning_requests(self) -> list[Obj]:
        return copy.deepcopy(list(self.provisioning_requests.values()))

    def read_pod_templates(self, namespace: str, names: list[str]) -> dict[str, Obj]:
        return {
            name: copy.deepcopy(self.pod_templates[(namespace, name)])
            for name in names
            if (namespace, name) in self.pod_templates
        }

    def patch_provisioning_request_status(self, namespace: str, name: str, patch: Obj) -> None:
        self.writes.append(("patch_provisioning_request", f"{namespace}/{name}"))
        request = self.provisioning_requests.get((namespace, name))
        if request is not None:
            _merge(request, patch)

    def read_lease(self, namespace: str, name: str) -> Obj | None:
        lease = self.leases.get((namespace, name))
        return copy.deepcopy(lease) if lease is not None else None

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        key = (namespace, body["metadata"]["name"])
        if key in self.leases:
            raise Conflict(f"lease {key} exists", status=409)
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = "1"
        self.leases[key] = body
        return copy.deepcopy(body)

    def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        """Conditional on the body's resourceVersion, as the apiserver's replace is."""
        old = self.leases.get((namespace, name))
        if old is None:
            raise NotFound(f"lease {namespace}/{name} not found", status=404)
        version = old["metadata"].get("resourceVersion")
        if body["metadata"].get("resourceVersion") not in (None, version):
            raise Conflict(f"lease {namespace}/{name} changed", status=409)
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(int(version or "0") + 1)
        self.leases[(namespace, name)] = body
        return copy.deepcopy(body)

    def _patch_node(self, node: str, patch: Obj) -> None:
        if node not in self.nodes:
            raise NotFound(f"node {node} not found", status=404)
        _merge(self.nodes[node], patch)
