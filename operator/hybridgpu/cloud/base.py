"""The one interface every capacity provider implements; adapters raise the errors below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hybridgpu.errors import HybridGPUError
from hybridgpu.models.pool import GPUPoolSpec


class ProviderError(HybridGPUError):
    """The provider failed; ``retryable`` says whether trying again later may work."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class CapacityUnavailable(ProviderError):
    """The provider has no capacity for the pool now (EC2: InsufficientInstanceCapacity and
    the like): the launch may work later or elsewhere. decide() grows another pool meanwhile."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One machine of a pool as the provider sees it."""

    instance_id: str
    provider_id: str
    """Matches Node.spec.providerID, e.g. aws:///us-east-1a/i-0123."""
    state: str
    """pending | running | terminating | terminated.

    ``terminating``: on its way out and maybe still running (an Auto Scaling group's
    Terminating lifecycle states, a NodeClaim or Machine being deleted); ``terminated``: gone
    and no longer billed, but still listed (EC2 lists shutting-down and terminated instances
    for about an hour). Neither is capacity, and neither is ever terminated again."""
    launched_at: float


@dataclass(frozen=True, slots=True)
class InterruptionNotice:
    """The provider will take an instance away (spot interruption, rebalance, maintenance)."""

    instance_id: str
    provider_id: str
    deadline: float
    """Seconds since the epoch when the instance goes away."""
    kind: str
    """spot_interruption | rebalance | scheduled_change | state_change"""
    receipt: str
    """Opaque handle to acknowledge (delete) the message after it was handled."""


class CapacityProvider(Protocol):
    """Adds and removes nodes of one pool. Every method is safe to call again after a failure
    (a retried scale-up never doubles capacity)."""

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        """Instances of the pool that exist or are being launched, and those going or just
        gone that the provider still lists (their ``state`` says so)."""
        ...

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        """Instances the provider is asked to hold now (e.g. the ASG's desired capacity).

        Read this, not ``len(instances())``, to compute a new target: launches show up in
        ``instances()`` with a delay, and a target computed from them would double a scale-up.
        """
        ...

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        """Ask for ``nodes`` instances in total (never above spec.maxNodes). A target below
        the current one is ignored: nodes leave only through ``terminate``, drained first."""
        ...

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        """Terminate this one (drained) instance and lower the target by one."""
        ...

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        """Current spot price of one node, dollars/hour; None when unknown."""
        ...

    def interruptions(self) -> list[InterruptionNotice]:
        """Notices received and not yet acknowledged."""
        ...

    def acknowledge(self, notice: InterruptionNotice) -> None:
        """Forget a notice after it was handled (e.g. delete the SQS message)."""
        ...
