"""A CapacityProvider over a Cluster API MachineDeployment: one adapter for every cloud and for
bare metal that Cluster API manages.

A pool with ``provider: {type: clusterapi, clusterapi: {machineDeployment: NS/NAME}}``:

- ``target()`` is the MachineDeployment's ``spec.replicas``; ``set_target(n)`` raises it (never
  above maxNodes, never lowered: nodes leave only through ``terminate``).
- ``terminate(machine)`` annotates exactly that Machine ``cluster.x-k8s.io/delete-machine`` (the
  MachineSet deletes annotated Machines first when it scales down), then lowers replicas to the
  live Machines not so marked. That value is the same on a retry, so a retried terminate never
  removes a second machine. Lowering below Machines still being created cancels them; the pool's
  pending pods make the next tick ask again.

Instances are the Machines labelled ``cluster.x-k8s.io/deployment-name=NAME`` in the namespace;
one is running once its Node joined (``status.nodeRef``), terminating once deleted or marked by
hybridgpu; the provider ID is ``spec.providerID``. Cluster API has no interruption notices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from hybridgpu.cloud import kubeapi
from hybridgpu.cloud.base import Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.kubeapi import api_problem, epoch_seconds, provider_error
from hybridgpu.models.pool import GPUPoolSpec

log = logging.getLogger(__name__)

GROUP, VERSION = "cluster.x-k8s.io", "v1beta2"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
"""Cluster API deletes Machines carrying it first when a MachineSet scales down (any value)."""
DELETE_MACHINE_VALUE = "hybridgpu"
"""Our value of it, so `kubectl get machines -o yaml` tells who marked a Machine."""
CONFLICT_RETRIES = 5


def machine_deployment(spec: GPUPoolSpec) -> tuple[str, str]:
    """(namespace, name) of the pool's MachineDeployment."""
    if spec.provider.clusterapi is None:
        raise ProviderError("provider.clusterapi.machineDeployment is not set", retryable=False)
    namespace, _, name = spec.provider.clusterapi.machine_deployment.partition("/")
    return namespace, name


class ClusterAPIProvider(kubeapi.CustomObjectsProvider):
    """CapacityProvider over Cluster API MachineDeployments (see the module docstring)."""

    # --- CapacityProvider -------------------------------------------------------------

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        return [self._instance(m) for m in self._machines(*machine_deployment(spec))]

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        namespace, name = machine_deployment(spec)
        return _replicas(self._read_deployment(namespace, name))

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        wanted = min(nodes, spec.max_nodes)
        self._update_replicas(
            *machine_deployment(spec), lambda now: wanted if wanted > now else None
        )

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        namespace, name = machine_deployment(spec)
        machines = self._machines(namespace, name)
        victim = next((m for m in machines if m["metadata"]["name"] == instance_id), None)
        if victim is None or _deleting(victim):
            return  # gone, going, or never of this MachineDeployment: nothing to do
        if not _marked(victim):
            patch = {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: DELETE_MACHINE_VALUE}}}
            try:
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, "machines", instance_id, patch
                )
            except ApiException as err:
                if err.status == 404:
                    return
                raise provider_error("clusterapi", f"mark Machine {instance_id}", err) from err
        keep = sum(
            1
            for m in machines
            if not _deleting(m) and not _marked(m) and m["metadata"]["name"] != instance_id
        )
        self._update_replicas(namespace, name, lambda now: keep if keep < now else None)

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        return None  # the infrastructure provider's price is not visible here: perNodeHour

    def interruptions(self) -> list[InterruptionNotice]:
        return []  # Cluster API announces none; a vanished machine is remediated by CAPI

    def acknowledge(self, notice: InterruptionNotice) -> None:
        return None

    def credentials_problem(self) -> str | None:
        """Why Machines cannot be read (Cluster API's CRDs missing, RBAC), for readiness."""
        try:
            self.custom.list_cluster_custom_object(GROUP, VERSION, "machines", limit=1)
        except ApiException as err:
            return api_problem("Cluster API", f"{GROUP}/{VERSION} Machines", err)
        return None

    # --- internals --------------------------------------------------------------------

    def _machines(self, namespace: str, name: str) -> list[dict[str, Any]]:
        try:
            listed = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "machines", label_selector=f"{DEPLOYMENT_LABEL}={name}"
            )
        except ApiException as err:
            raise provider_error("clusterapi", f"list Machines of {namespace}/{name}", err) from err
        return sorted(listed.get("items") or [], key=lambda m: m["metadata"]["name"])

    def _instance(self, machine: dict[str, Any]) -> Instance:
        meta = machine["metadata"]
        if _deleting(machine) or _marked(machine):
            state = "terminating"
        elif (machine.get("status") or {}).get("nodeRef"):
            state = "running"
        else:
            state = "pending"
        return Instance(
            instance_id=meta["name"],
            provider_id=(machine.get("spec") or {}).get("providerID") or "",
            state=state,
            launched_at=epoch_seconds(meta.get("creationTimestamp")),
        )

    def _read_deployment(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "machinedeployments", name
            )
        except ApiException as err:
            if err.status == 404:
                raise ProviderError(
                    f"clusterapi: MachineDeployment {namespace}/{name} does not exist",
                    retryable=False,
                ) from err
            raise provider_error(
                "clusterapi", f"read MachineDeployment {namespace}/{name}", err
            ) from err
        return found

    def _update_replicas(
        self, namespace: str, name: str, change: Callable[[int], int | None]
    ) -> None:
        """Set spec.replicas to ``change(current)`` (None: leave it), guarded by the
        resourceVersion read, so a concurrent writer makes us read again."""
        for _ in range(CONFLICT_RETRIES):
            deployment = self._read_deployment(namespace, name)
            current = _replicas(deployment)
            wanted = change(current)
            if wanted is None:
                return
            patch = {
                "metadata": {"resourceVersion": deployment["metadata"]["resourceVersion"]},
                "spec": {"replicas": wanted},
            }
            try:
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, "machinedeployments", name, patch
                )
            except ApiException as err:
                if err.status == 409:
                    continue  # changed since we read it: decide again on the new version
                raise provider_error(
                    "clusterapi", f"scale MachineDeployment {namespace}/{name}", err
                ) from err
            log.info(
                "clusterapi: MachineDeployment %s/%s replicas %d -> %d",
                namespace,
                name,
                current,
                wanted,
            )
            return
        raise ProviderError(
            f"clusterapi: MachineDeployment {namespace}/{name} kept changing", retryable=True
        )


def _replicas(deployment: dict[str, Any]) -> int:
    return int((deployment.get("spec") or {}).get("replicas") or 0)


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _marked(machine: dict[str, Any]) -> bool:
    """Marked for deletion, by us or anyone: Cluster API deletes every marked Machine first,
    so replicas that left one of them out would take a machine nobody chose instead."""
    return DELETE_MACHINE_ANNOTATION in (machine["metadata"].get("annotations") or {})
