"""A CapacityProvider that steers a Karpenter NodePool instead of launching machines itself.

For teams that already provision GPU nodes with Karpenter (EKS, AKS, ...): a pool with
``provider: {type: karpenter, karpenter: {nodePool: NAME}}`` leaves launching to Karpenter and
keeps for hybridgpu what Karpenter does not know: how many nodes the pool may have now (tier,
maxNodes, budget). That number is the NodePool's ``spec.limits[nvidia.com/gpu]``, in GPUs of the
pool's node shape (nodes x ``gpu.perNode``):

- ``set_target(n)`` raises the limit to n nodes (never above maxNodes, never lowered); Karpenter
  then launches for the pending pods that fit the NodePool, up to the limit.
- ``terminate(claim)`` lowers the limit to the NodePool's other live NodeClaims (so Karpenter
  does not replace the node) and deletes exactly that NodeClaim; Karpenter drains and removes it.
- ``target()`` is the NodeClaims not being deleted: what Karpenter has decided to hold. A raised
  limit Karpenter has not acted on yet is not counted, so the next tick asks again, for the same
  absolute limit: repeating never doubles capacity.

Instances are the NodeClaims labelled ``karpenter.sh/nodepool=NAME``; their provider ID is
``status.providerID`` (empty until the cloud instance exists). Karpenter handles interruptions
itself (its interruption queue cordons, drains and replaces), so this provider announces none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from hybridgpu.cloud import kubeapi
from hybridgpu.cloud.base import Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.kubeapi import api_problem, condition_true, epoch_seconds, provider_error
from hybridgpu.models.pool import GPUPoolSpec

log = logging.getLogger(__name__)

GROUP, VERSION = "karpenter.sh", "v1"
NODE_POOL_LABEL = "karpenter.sh/nodepool"
GPU_RESOURCE = "nvidia.com/gpu"
REGISTERED = "Registered"
"""The NodeClaim condition Karpenter sets once the instance's Node has joined."""
CONFLICT_RETRIES = 5


def node_pool_name(spec: GPUPoolSpec) -> str:
    """The NodePool a karpenter pool names; a ProviderError that retrying cannot fix if none."""
    if spec.provider.karpenter is None:
        raise ProviderError("provider.karpenter.nodePool is not set", retryable=False)
    return spec.provider.karpenter.node_pool


def limit_nodes(node_pool: dict[str, Any], gpus_per_node: int) -> int | None:
    """Whole nodes of ``gpus_per_node`` GPUs the NodePool's GPU limit allows; None when it sets
    no GPU limit (Karpenter then launches without bound)."""
    raw = ((node_pool.get("spec") or {}).get("limits") or {}).get(GPU_RESOURCE)
    if raw is None:
        return None
    return max(0, int(parse_quantity(str(raw))) // gpus_per_node)


class KarpenterProvider(kubeapi.CustomObjectsProvider):
    """CapacityProvider over Karpenter NodePools and NodeClaims (see the module docstring)."""

    # --- CapacityProvider -------------------------------------------------------------

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        return [self._instance(claim) for claim in self._claims(node_pool_name(spec))]

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        return sum(1 for claim in self._claims(node_pool_name(spec)) if not _deleting(claim))

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        name = node_pool_name(spec)

        def raised(current: int | None) -> int | None:
            wanted = min(max(current or 0, nodes), spec.max_nodes)
            return None if wanted == current else wanted

        self._update_limit(name, spec, raised)

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        name = node_pool_name(spec)
        claims = self._claims(name)
        victim = next((c for c in claims if c["metadata"]["name"] == instance_id), None)
        if victim is None or _deleting(victim):
            return  # gone, going, or never of this NodePool: nothing to do
        others = sum(1 for c in claims if not _deleting(c) and c is not victim)

        # The limit first, so Karpenter cannot replace the node in between; the same value on
        # a retry (the victim is left out by name), so a retry never lowers it twice.
        def lowered(current: int | None) -> int | None:
            wanted = others if current is None else min(current, others)
            return None if wanted == current else wanted

        self._update_limit(name, spec, lowered)
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", instance_id)
        except ApiException as err:
            if err.status != 404:
                raise provider_error("karpenter", f"delete NodeClaim {instance_id}", err) from err

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        return None  # Karpenter chooses the instance type: pools are priced by perNodeHour

    def interruptions(self) -> list[InterruptionNotice]:
        return []  # Karpenter's own interruption handling drains and replaces the node

    def acknowledge(self, notice: InterruptionNotice) -> None:
        return None

    def credentials_problem(self) -> str | None:
        """Why NodeClaims cannot be read (Karpenter's CRDs missing, RBAC), for readiness."""
        try:
            self.custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims", limit=1)
        except ApiException as err:
            return api_problem("Karpenter", f"{GROUP}/{VERSION} NodeClaims", err)
        return None

    # --- internals --------------------------------------------------------------------

    def _claims(self, node_pool: str) -> list[dict[str, Any]]:
        try:
            listed = self.custom.list_cluster_custom_object(
                GROUP, VERSION, "nodeclaims", label_selector=f"{NODE_POOL_LABEL}={node_pool}"
            )
        except ApiException as err:
            raise provider_error("karpenter", f"list NodeClaims of {node_pool}", err) from err
        return sorted(listed.get("items") or [], key=lambda c: c["metadata"]["name"])

    def _instance(self, claim: dict[str, Any]) -> Instance:
        meta = claim["metadata"]
        if _deleting(claim):
            state = "terminating"
        elif condition_true(claim, REGISTERED):
            state = "running"
        else:
            state = "pending"
        return Instance(
            instance_id=meta["name"],
            provider_id=(claim.get("status") or {}).get("providerID") or "",
            state=state,
            launched_at=epoch_seconds(meta.get("creationTimestamp")),
        )

    def _update_limit(
        self, name: str, spec: GPUPoolSpec, change: Callable[[int | None], int | None]
    ) -> None:
        """Set the NodePool's GPU limit to ``change(current nodes)`` nodes (None: leave it),
        guarded by the resourceVersion read, so a concurrent writer makes us read again."""
        per_node = spec.gpu.per_node
        for _ in range(CONFLICT_RETRIES):
            try:
                node_pool = self.custom.get_cluster_custom_object(GROUP, VERSION, "nodepools", name)
            except ApiException as err:
                if err.status == 404:
                    raise ProviderError(
                        f"karpenter: NodePool {name} does not exist", retryable=False
                    ) from err
                raise provider_error("karpenter", f"read NodePool {name}", err) from err
            current = limit_nodes(node_pool, per_node)
            wanted = change(current)
            if wanted is None:
                return
            patch = {
                "metadata": {"resourceVersion": node_pool["metadata"]["resourceVersion"]},
                "spec": {"limits": {GPU_RESOURCE: str(wanted * per_node)}},
            }
            try:
                self.custom.patch_cluster_custom_object(GROUP, VERSION, "nodepools", name, patch)
            except ApiException as err:
                if err.status == 409:
                    continue  # changed since we read it: decide again on the new version
                raise provider_error("karpenter", f"set the limit of NodePool {name}", err) from err
            log.info(
                "karpenter: NodePool %s limit %s=%d (%s nodes, was %s)",
                name,
                GPU_RESOURCE,
                wanted * per_node,
                wanted,
                "unset" if current is None else current,
            )
            return
        raise ProviderError(f"karpenter: NodePool {name} kept changing", retryable=True)


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))
