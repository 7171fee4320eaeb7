"""An in-memory CapacityProvider for tests and the simulator.

It behaves like the AWS adapter as far as the operator can observe (the adapter test
``tests/adapters/test_aws_moto.py`` runs one scenario against both): targets are capped at
maxNodes, a lower target is ignored, ``terminate`` removes exactly the named instance and
lowers the target by one, and repeating a call after a failure never adds capacity twice.
It records every call (``calls``), fails the next call on request (``next_error``) and
launches instances after ``provisioning_delay_seconds`` of the injected clock.

Like a real cloud it can be eventually consistent: with ``list_lag_seconds`` an instance
appears in ``instances()`` only that long after the target was raised, and a terminated
one stays listed (in its last state) for as long, while ``target()`` is exact at once (an
Auto Scaling group's desired capacity is; its instance list is not). After that, with
``terminated_listed_seconds``, a terminated instance is still listed, as ``terminated``, for
that long: EC2's DescribeInstances shows terminated instances for about an hour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hybridgpu.cloud.base import CapacityUnavailable, Instance, InterruptionNotice, ProviderError
from hybridgpu.models.pool import GPUPoolSpec

SPOT_NOTICE_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """One call made to the fake, as recorded in ``FakeProvider.calls``."""

    method: str
    pool: str | None
    args: tuple[object, ...] = ()


@dataclass(slots=True)
class _FakeInstance:
    instance_id: str
    zone: str
    requested_at: float
    terminated: bool = False
    terminated_at: float | None = None


@dataclass(slots=True)
class _FakePool:
    target: int = 0
    instances: list[_FakeInstance] = field(default_factory=list)


class FakeProvider:
    """CapacityProvider held in memory; time comes from ``clock`` (seconds since the epoch)."""

    def __init__(
        self,
        clock: Callable[[], float] = lambda: 0.0,
        *,
        provisioning_delay_seconds: float = 0.0,
        list_lag_seconds: float = 0.0,
        terminated_listed_seconds: float = 0.0,
        spot_prices_per_node_hour: dict[str, float] | None = None,
        zone: str = "fake-1a",
    ) -> None:
        self.clock = clock
        self.provisioning_delay_seconds = provisioning_delay_seconds
        self.list_lag_seconds = list_lag_seconds
        self.terminated_listed_seconds = terminated_listed_seconds
        self.spot_prices_per_node_hour: dict[str, float] = dict(spot_prices_per_node_hour or {})
        self.zone = zone
        self.calls: list[ProviderCall] = []
        self.next_error: ProviderError | None = None
        """Raised by the next call (then cleared), before the call has any effect."""
        self.no_capacity: set[str] = set()
        """Pools the cloud has no capacity for: growing them raises CapacityUnavailable."""
        self._pools: dict[str, _FakePool] = {}
        self._notices: dict[str, InterruptionNotice] = {}
        self._serial = 0

    def reset(self) -> None:
        """Forget every pool, instance, notice, recorded call and pending error."""
        self.calls.clear()
        self.next_error = None
        self._pools.clear()
        self._notices.clear()
        self._serial = 0

    # --- CapacityProvider -------------------------------------------------------------

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        self._enter("instances", pool)
        now = self.clock()
        out = []
        lag = self.list_lag_seconds
        for inst in self._pool(pool).instances:
            if now < inst.requested_at + lag:
                continue  # launched, but the list does not show it yet
            ready_at = inst.requested_at + self.provisioning_delay_seconds
            state = "running" if now >= ready_at else "pending"
            if inst.terminated:
                shown_until = (inst.terminated_at or 0.0) + lag  # the list is behind
                if now >= shown_until + self.terminated_listed_seconds:
                    continue
                if now >= shown_until:
                    state = "terminated"  # gone, and still listed for a while
            out.append(
                Instance(
                    instance_id=inst.instance_id,
                    provider_id=self.provider_id(inst.instance_id),
                    state=state,
                    launched_at=inst.requested_at,
                )
            )
        return out

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        self._enter("target", pool)
        return self._pool(pool).target

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        self._enter("set_target", pool, nodes)
        state = self._pool(pool)
        wanted = min(nodes, spec.max_nodes)
        if wanted <= state.target:
            return
        if pool in self.no_capacity:
            raise CapacityUnavailable(f"InsufficientInstanceCapacity: no capacity for {pool}")
        state.target = wanted
        now = self.clock()
        live = sum(1 for i in state.instances if not i.terminated)
        for _ in range(wanted - live):
            self._serial += 1
            state.instances.append(_FakeInstance(f"i-fake{self._serial:08d}", self.zone, now))

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        self._enter("terminate", pool, instance_id)
        state = self._pool(pool)
        for inst in state.instances:
            if inst.instance_id == instance_id and not inst.terminated:
                inst.terminated = True
                inst.terminated_at = self.clock()
                state.target = max(state.target - 1, 0)
                return
        # Already gone (or never ours): terminating again is a no-op, like the AWS adapter.

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        self._enter("spot_price_per_node_hour", pool)
        return self.spot_prices_per_node_hour.get(pool)

    def interruptions(self) -> list[InterruptionNotice]:
        self._enter("interruptions", None)
        return list(self._notices.values())

    def acknowledge(self, notice: InterruptionNotice) -> None:
        self._enter("acknowledge", None, notice.receipt)
        self._notices.pop(notice.receipt, None)

    # --- test controls ----------------------------------------------------------------

    def provider_id(self, instance_id: str) -> str:
        """The Node.spec.providerID a node of this instance carries."""
        return f"fake:///{self.zone}/{instance_id}"

    def interrupt(
        self,
        instance_id: str,
        *,
        kind: str = "spot_interruption",
        lead_seconds: float | None = None,
        provider_id: str | None = None,
    ) -> InterruptionNotice:
        """Announce that the provider takes ``instance_id`` away (default: in two minutes).

        ``provider_id`` overrides the one the notice names, e.g. "" for a notice whose
        instance the provider could not place (the AWS adapter when the zone lookup fails).
        """
        self._serial += 1
        lead = SPOT_NOTICE_SECONDS if lead_seconds is None else lead_seconds
        notice = InterruptionNotice(
            instance_id=instance_id,
            provider_id=self.provider_id(instance_id) if provider_id is None else provider_id,
            deadline=self.clock() + lead,
            kind=kind,
            receipt=f"fake-receipt-{self._serial}",
        )
        self._notices[notice.receipt] = notice
        return notice

    def reclaim(self, pool: str, instance_id: str) -> None:
        """The provider takes the instance away (spot reclaim); the target stays, as in an ASG."""
        for inst in self._pool(pool).instances:
            if inst.instance_id == instance_id:
                inst.terminated = True
                inst.terminated_at = self.clock()

    def _pool(self, pool: str) -> _FakePool:
        return self._pools.setdefault(pool, _FakePool())

    def _enter(self, method: str, pool: str | None, *args: object) -> None:
        self.calls.append(ProviderCall(method, pool, args))
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
