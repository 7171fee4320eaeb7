"""The core tier's provider: owned hardware is what it is; the operator never adds or removes it."""

from __future__ import annotations

from hybridgpu.cloud.base import Instance, InterruptionNotice, ProviderError
from hybridgpu.models.pool import GPUPoolSpec


class StaticProvider:
    """CapacityProvider of owned (core) pools: nodes come from Kubernetes, not from a cloud.

    Reads report nothing (the pool's nodes are whatever carries its label); scaling raises a
    non-retryable ProviderError, since retrying cannot buy a server.
    """

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        return []

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        return 0

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        raise ProviderError(
            f"pool {pool} is owned hardware (provider static): the operator cannot add nodes "
            "to it; add servers and label them hybridgpu.io/pool=" + pool,
            retryable=False,
        )

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        raise ProviderError(
            f"pool {pool} is owned hardware (provider static): the operator never terminates "
            f"its nodes ({instance_id})",
            retryable=False,
        )

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        return None

    def interruptions(self) -> list[InterruptionNotice]:
        return []

    def acknowledge(self, notice: InterruptionNotice) -> None:
        return None
