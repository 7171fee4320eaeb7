"""Stand-ins for Karpenter and Cluster API on the test control plane, and their CRDs.

The CRDs are the real ones, from the Go modules sigs.k8s.io/karpenter and sigs.k8s.io/cluster-api
(hack/provider-crds.sh caches them by version). The controllers are small stand-ins that do, on
those objects, what the real controllers do as far as hybridgpu can observe, and turn machines
into kwok Nodes (as the kwok provider does):

- ``StandInKarpenter`` keeps each NodePool it manages at its GPU limit: it creates NodeClaims
  while the claims' GPUs (deleting ones included, as Karpenter counts them) stay within
  ``spec.limits[nvidia.com/gpu]`` (Karpenter does so while the pods that made hybridgpu raise
  the limit are pending; with no limit set it creates none). A claim is launched (providerID,
  Launched) and its Node registered (Registered) after the boot delay; a deleted claim's Node
  is deleted and Karpenter's termination finalizer lifted. Node labels and taints come from the
  NodePool's template, GPUs per node from its ``karpenter.k8s.aws/instance-gpu-count``
  requirement (the instance type Karpenter would pick).
- ``StandInClusterAPI`` plays the MachineDeployment, MachineSet and Machine controllers of a
  MachineDeployment it manages: Machines follow ``spec.replicas`` (a scale-down deletes deleting
  Machines first, then those annotated ``cluster.x-k8s.io/delete-machine``, then the newest, as
  Cluster API's deletion order does); a Machine gets its providerID, then its Node (Node labels as
  a bootstrap config's kubelet ``--node-labels`` would set them), then ``status.nodeRef``; a
  deleted Machine's Node is deleted and the finalizer lifted.

``reconcile()`` makes one pass (adapter tests call it, deterministically); ``start()`` runs
passes in a thread (e2e). ``close()`` stops and deletes everything it manages.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from hybridgpu.cloud import clusterapi, karpenter
from hybridgpu.cloud.kubeapi import epoch_seconds
from support.controlplane import REPO_ROOT, ControlPlane, install_crds

log = logging.getLogger(__name__)

PROVIDER_CRDS_SCRIPT = REPO_ROOT / "hack" / "provider-crds.sh"
KARPENTER_FINALIZER = "karpenter.sh/termination"
MACHINE_FINALIZER = "machine.cluster.x-k8s.io"
GPU_COUNT_REQUIREMENT = "karpenter.k8s.aws/instance-gpu-count"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

_installed: set[str] = set()


def provider_crd_dirs() -> dict[str, Path]:
    """KARPENTER_CRDS and CLUSTER_API_CRDS: the cached CRD directories (downloaded on first
    use by hack/provider-crds.sh, a no-op once cached)."""
    result = subprocess.run(
        [str(PROVIDER_CRDS_SCRIPT), "fetch"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"hack/provider-crds.sh fetch failed:\n{result.stderr}")
    dirs = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return {key: Path(value) for key, value in dirs.items()}


def install_provider_crds(plane: ControlPlane, which: str) -> list[str]:
    """Install KARPENTER_CRDS or CLUSTER_API_CRDS into the control plane (once per process)."""
    if which in _installed:
        return []
    names = install_crds(plane, provider_crd_dirs()[which])
    _installed.add(which)
    return names


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _kwok_node(
    name: str, provider_id: str, gpus: int, labels: dict[str, str], taints: list[Any]
) -> dict[str, Any]:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
        },
        "spec": {"providerID": provider_id, "taints": taints},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


@dataclass
class _Loop:
    """Runs ``reconcile`` every ``interval`` seconds in a daemon thread until stopped."""

    reconcile: Callable[[], None]
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def start(self, interval_seconds: float) -> None:
        def run() -> None:
            while not self.stop_event.wait(interval_seconds):
                try:
                    self.reconcile()
                except Exception as err:  # a test's teardown may race a pass: keep going
                    self.errors.append(repr(err))
                    log.warning("stand-in pass failed: %r", err)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=10)


class StandInKarpenter:
    """Karpenter as far as hybridgpu can see it, for the NodePools it was given."""

    def __init__(self, plane: ControlPlane, *, boot_delay_seconds: float = 0.0) -> None:
        self.custom = plane.custom
        self.core = plane.core
        self.boot_delay_seconds = boot_delay_seconds
        self.node_pools: set[str] = set()
        self._loop = _Loop(self.reconcile)

    def create_node_pool(
        self,
        name: str,
        *,
        gpus_per_node: int,
        labels: dict[str, str],
        limits: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """A NodePool as a user would write it for hybridgpu (docs/providers.md), managed here."""
        body = {
            "apiVersion": f"{karpenter.GROUP}/{karpenter.VERSION}",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "limits": limits if limits is not None else {"nvidia.com/gpu": "0"},
                "disruption": {"consolidateAfter": "Never"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.k8s.aws",
                            "kind": "EC2NodeClass",
                            "name": "gpu",
                        },
                        "requirements": [
                            {
                                "key": GPU_COUNT_REQUIREMENT,
                                "operator": "In",
                                "values": [str(gpus_per_node)],
                            },
                            {
                                "key": "karpenter.sh/capacity-type",
                                "operator": "In",
                                "values": ["on-demand"],
                            },
                        ],
                        "taints": taints or [],
                    },
                },
            },
        }
        created: dict[str, Any] = self.custom.create_cluster_custom_object(
            karpenter.GROUP, karpenter.VERSION, "nodepools", body
        )
        self.node_pools.add(name)
        return created

    def node_pool(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_cluster_custom_object(
            karpenter.GROUP, karpenter.VERSION, "nodepools", name
        )
        return found

    def claims(self, node_pool: str) -> list[dict[str, Any]]:
        listed = self.custom.list_cluster_custom_object(
            karpenter.GROUP,
            karpenter.VERSION,
            "nodeclaims",
            label_selector=f"{karpenter.NODE_POOL_LABEL}={node_pool}",
        )
        return list(listed.get("items") or [])

    def reconcile(self) -> None:
        """One pass over every managed NodePool: claims progress, then new ones up to the limit."""
        for name in sorted(self.node_pools):
            try:
                node_pool = self.node_pool(name)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            template = node_pool["spec"]["template"]
            gpus = next(
                int(r["values"][0])
                for r in template["spec"]["requirements"]
                if r["key"] == GPU_COUNT_REQUIREMENT
            )
            claims = self.claims(name)
            for claim in claims:
                self._progress(claim, gpus)
            limit = karpenter.limit_nodes(node_pool, gpus)
            for _ in range(len(claims), limit or 0):
                self._create_claim(node_pool, template)

    def _create_claim(self, node_pool: dict[str, Any], template: dict[str, Any]) -> None:
        name = node_pool["metadata"]["name"]
        body = {
            "apiVersion": f"{karpenter.GROUP}/{karpenter.VERSION}",
            "kind": "NodeClaim",
            "metadata": {
                "generateName": f"{name}-",
                "labels": {**template["metadata"]["labels"], karpenter.NODE_POOL_LABEL: name},
                "finalizers": [KARPENTER_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": f"{karpenter.GROUP}/{karpenter.VERSION}",
                        "kind": "NodePool",
                        "name": name,
                        "uid": node_pool["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeClassRef": template["spec"]["nodeClassRef"],
                "requirements": template["spec"]["requirements"],
                "taints": template["spec"].get("taints") or [],
            },
        }
        self.custom.create_cluster_custom_object(
            karpenter.GROUP, karpenter.VERSION, "nodeclaims", body
        )

    def _progress(self, claim: dict[str, Any], gpus: int) -> None:
        name = claim["metadata"]["name"]
        status = claim.get("status") or {}
        if _deleting(claim):
            _delete_node(self.core, status.get("nodeName"))
            _lift_finalizers(
                lambda patch: self.custom.patch_cluster_custom_object(
                    karpenter.GROUP, karpenter.VERSION, "nodeclaims", name, patch
                )
            )
            return
        age = time.time() - epoch_seconds(claim["metadata"]["creationTimestamp"])
        if status.get("nodeName") or age < self.boot_delay_seconds:
            return
        provider_id = f"karpenter-standin:///{name}"
        labels = dict(claim["metadata"].get("labels") or {})
        _create_node(
            self.core,
            _kwok_node(name, provider_id, gpus, labels, claim["spec"].get("taints") or []),
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions = [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
            for t in ("Launched", karpenter.REGISTERED, "Initialized", "Ready")
        ]
        patch = {
            "status": {
                "providerID": provider_id,
                "nodeName": name,
                "capacity": {"nvidia.com/gpu": str(gpus)},
                "conditions": conditions,
            }
        }
        self.custom.patch_cluster_custom_object_status(
            karpenter.GROUP, karpenter.VERSION, "nodeclaims", name, patch
        )

    def start(self, interval_seconds: float = 0.5) -> None:
        self._loop.start(interval_seconds)

    def close(self) -> None:
        """Stop, then delete every managed NodePool's claims and Nodes, and the NodePools."""
        self._loop.stop()
        for name in sorted(self.node_pools):
            for claim in self.claims(name):
                claim_name = claim["metadata"]["name"]
                _delete_node(self.core, (claim.get("status") or {}).get("nodeName"))
                _ignore_missing(
                    partial(
                        self.custom.delete_cluster_custom_object,
                        karpenter.GROUP,
                        karpenter.VERSION,
                        "nodeclaims",
                        claim_name,
                    )
                )
                _lift_finalizers(
                    partial(
                        self.custom.patch_cluster_custom_object,
                        karpenter.GROUP,
                        karpenter.VERSION,
                        "nodeclaims",
                        claim_name,
                    )
                )
            _ignore_missing(
                partial(
                    self.custom.delete_cluster_custom_object,
                    karpenter.GROUP,
                    karpenter.VERSION,
                    "nodepools",
                    name,
                )
            )


@dataclass(frozen=True)
class _ManagedDeployment:
    namespace: str
    name: str
    gpus_per_node: int
    node_labels: dict[str, str]


class StandInClusterAPI:
    """Cluster API's MachineDeployment, MachineSet and Machine controllers as far as hybridgpu
    can see them, for the MachineDeployments it was given."""

    def __init__(self, plane: ControlPlane, *, boot_delay_seconds: float = 0.0) -> None:
        self.custom = plane.custom
        self.core = plane.core
        self.boot_delay_seconds = boot_delay_seconds
        self.deployments: dict[str, _ManagedDeployment] = {}
        self._loop = _Loop(self.reconcile)

    def create_machine_deployment(
        self,
        namespace: str,
        name: str,
        *,
        gpus_per_node: int,
        node_labels: dict[str, str],
        replicas: int = 0,
    ) -> dict[str, Any]:
        """A MachineDeployment as a user would write it for hybridgpu, managed here."""
        cluster = "gpu-cluster"
        selector = {clusterapi.DEPLOYMENT_LABEL: name, CLUSTER_NAME_LABEL: cluster}
        body = {
            "apiVersion": f"{clusterapi.GROUP}/{clusterapi.VERSION}",
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "clusterName": cluster,
                "replicas": replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector},
                    "spec": {
                        "clusterName": cluster,
                        "version": "v1.34.4",
                        "bootstrap": {
                            "configRef": {
                                "apiGroup": "bootstrap.cluster.x-k8s.io",
                                "kind": "KubeadmConfigTemplate",
                                "name": f"{name}-gpu",
                            }
                        },
                        "infrastructureRef": {
                            "apiGroup": "infrastructure.cluster.x-k8s.io",
                            "kind": "Metal3MachineTemplate",
                            "name": f"{name}-gpu",
                        },
                    },
                },
            },
        }
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            clusterapi.GROUP, clusterapi.VERSION, namespace, "machinedeployments", body
        )
        key = f"{namespace}/{name}"
        self.deployments[key] = _ManagedDeployment(namespace, name, gpus_per_node, node_labels)
        return created

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            clusterapi.GROUP, clusterapi.VERSION, namespace, "machinedeployments", name
        )
        return found

    def machines(self, namespace: str, name: str) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            clusterapi.GROUP,
            clusterapi.VERSION,
            namespace,
            "machines",
            label_selector=f"{clusterapi.DEPLOYMENT_LABEL}={name}",
        )
        return list(listed.get("items") or [])

    def reconcile(self) -> None:
        """One pass: surplus Machines are deleted (MachineSet), every Machine progresses (a
        deleted one is gone, a new one joins), then missing Machines are created (MachineSet):
        those join on the next pass."""
        for managed in list(self.deployments.values()):
            try:
                deployment = self.deployment(managed.namespace, managed.name)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            machines = self.machines(managed.namespace, managed.name)
            replicas = int(deployment["spec"].get("replicas") or 0)
            surplus = len(machines) - replicas
            for machine in sorted(machines, key=_deletion_order)[: max(surplus, 0)]:
                if not _deleting(machine):
                    self._delete_machine(managed.namespace, machine["metadata"]["name"])
            for machine in self.machines(managed.namespace, managed.name):
                self._progress(managed, machine)
            for _ in range(-surplus):
                self._create_machine(deployment)

    def _create_machine(self, deployment: dict[str, Any]) -> None:
        meta, template = deployment["metadata"], deployment["spec"]["template"]
        body = {
            "apiVersion": f"{clusterapi.GROUP}/{clusterapi.VERSION}",
            "kind": "Machine",
            "metadata": {
                "generateName": f"{meta['name']}-",
                "namespace": meta["namespace"],
                "labels": dict(template["metadata"]["labels"]),
                "finalizers": [MACHINE_FINALIZER],
            },
            "spec": template["spec"],
        }
        self.custom.create_namespaced_custom_object(
            clusterapi.GROUP, clusterapi.VERSION, meta["namespace"], "machines", body
        )

    def _delete_machine(self, namespace: str, name: str) -> None:
        _ignore_missing(
            lambda: self.custom.delete_namespaced_custom_object(
                clusterapi.GROUP, clusterapi.VERSION, namespace, "machines", name
            )
        )

    def _progress(self, managed: _ManagedDeployment, machine: dict[str, Any]) -> None:
        name, namespace = machine["metadata"]["name"], managed.namespace

        def patch(body: dict[str, Any]) -> Any:
            return self.custom.patch_namespaced_custom_object(
                clusterapi.GROUP, clusterapi.VERSION, namespace, "machines", name, body
            )

        node_ref = (machine.get("status") or {}).get("nodeRef") or {}
        if _deleting(machine):
            _delete_node(self.core, node_ref.get("name"))
            _lift_finalizers(patch)
            return
        age = time.time() - epoch_seconds(machine["metadata"]["creationTimestamp"])
        if node_ref or age < self.boot_delay_seconds:
            return
        provider_id = f"capi-standin:///{namespace}/{name}"
        patch({"spec": {"providerID": provider_id}})
        _create_node(
            self.core, _kwok_node(name, provider_id, managed.gpus_per_node, managed.node_labels, [])
        )
        self.custom.patch_namespaced_custom_object_status(
            clusterapi.GROUP,
            clusterapi.VERSION,
            namespace,
            "machines",
            name,
            {"status": {"nodeRef": {"name": name}, "phase": "Running"}},
        )

    def start(self, interval_seconds: float = 0.5) -> None:
        self._loop.start(interval_seconds)

    def close(self) -> None:
        """Stop, then delete every managed MachineDeployment's Machines and Nodes, and it."""
        self._loop.stop()
        for managed in self.deployments.values():
            ns = managed.namespace
            for machine in self.machines(ns, managed.name):
                name = machine["metadata"]["name"]
                _delete_node(
                    self.core, ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
                )
                self._delete_machine(ns, name)
                _lift_finalizers(
                    partial(
                        self.custom.patch_namespaced_custom_object,
                        clusterapi.GROUP,
                        clusterapi.VERSION,
                        ns,
                        "machines",
                        name,
                    )
                )
            _ignore_missing(
                partial(
                    self.custom.delete_namespaced_custom_object,
                    clusterapi.GROUP,
                    clusterapi.VERSION,
                    ns,
                    "machinedeployments",
                    managed.name,
                )
            )


def _deletion_order(machine: dict[str, Any]) -> tuple[int, float]:
    """Cluster API's order for a scale-down: deleting, then marked, then the newest first."""
    annotations = machine["metadata"].get("annotations") or {}
    rank = (
        0 if _deleting(machine) else 1 if clusterapi.DELETE_MACHINE_ANNOTATION in annotations else 2
    )
    created = epoch_seconds(machine["metadata"]["creationTimestamp"])
    return rank, -created


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as err:
        if err.status != 404:
            raise


def _lift_finalizers(patch: Callable[[dict[str, Any]], Any]) -> None:
    _ignore_missing(lambda: patch({"metadata": {"finalizers": None}}))


def _create_node(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    try:
        core.create_node(body)
    except ApiException as err:
        if err.status != 409:  # created by an earlier pass whose status write failed
            raise


def _delete_node(core: client.CoreV1Api, name: str | None) -> None:
    if name:
        _ignore_missing(lambda: core.delete_node(name))
