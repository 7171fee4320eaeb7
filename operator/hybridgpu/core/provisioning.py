"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``): the answer to each, decided on data.

Kueue's ProvisioningRequest admission check asks an autoscaler for all-or-nothing capacity
before it admits a workload: it creates a ProvisioningRequest whose pod sets (PodTemplates
and counts) are the workload's pods, and admits the workload once the request is
``Provisioned``. hybridgpu turns each request into one gang (every pod at once or none) that
decide() places on free GPUs, on nodes on their way or on nodes it buys, and answers with the
conditions Kueue reads (the semantics of the API's documentation and of Cluster Autoscaler):

- ``Accepted``: hybridgpu read it and works on it;
- ``Provisioned``: True once every pod fits on nodes that exist (reason CapacityIsFound for
  check-capacity, CapacityIsProvisioned when hybridgpu bought nodes for it); False while nodes
  are on their way (CapacityIsProvisioning) or capacity is not found (CapacityIsNotFound);
- ``Failed``: no pool can ever host it, its PodTemplates cannot be read, or its
  ``ValidUntilSeconds`` passed before it was provisioned; Kueue then retries with a new request;
- ``BookingExpired``: provisioned capacity is booked (kept, and not given to other work) for
  :data:`BOOKING_SECONDS`; no pod consumed it by then;
- ``CapacityRevoked``: booked capacity went away before it was consumed (its nodes were
  removed or interrupted, or other work took it).

Classes: ``check-capacity.autoscaling.x-k8s.io`` only looks at nodes that exist (never buys);
``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` buys the nodes the whole gang needs, in
one scale-up, or none. Requests of other classes are left to other autoscalers. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridgpu.models.actions import GangPlacement, GangState

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CLASSES = (CHECK_CAPACITY, ATOMIC_SCALE_UP)

BOOKING_SECONDS = 600.0
"""How long provisioned capacity waits for the pods that consume it (Cluster Autoscaler's
default reservation time, 10 minutes)."""

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
FINAL = (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)
"""Conditions after which a request gets no more capacity and no more answers."""

POOL_DETAIL = "hybridgpu.io/pool"
"""The provisioningClassDetails key naming the pool that holds the capacity (when it is one
pool): a ProvisioningRequestConfig's podSetUpdates can pin the workload's pods to it."""


def gang_of(key: str) -> str:
    """The gang name decide() knows a request by (``namespace/name`` of the request)."""
    return f"provisioningrequest:{key}"


@dataclass(frozen=True, slots=True)
class RequestState:
    """A ProvisioningRequest as its spec and status say now."""

    key: str
    """``namespace/name``."""
    provisioning_class: str
    created_at: float
    """Seconds since the epoch."""
    provisioned_at: float | None = None
    """When ``Provisioned`` turned True; None while it is not."""
    final: str | None = None
    """The final condition that is True (Failed, BookingExpired, CapacityRevoked), if any."""
    accepted: bool = False
    consumed: bool = False
    """Pods that consume it exist (annotation autoscaling.x-k8s.io/consume-provisioning-request)."""
    valid_until_seconds: float | None = None
    """The ``ValidUntilSeconds`` parameter: how long after creation it may be provisioned."""
    gpus: int = 0
    """GPUs its pods ask for in all; 0: nothing for hybridgpu to provision."""
    error: str | None = None
    """Why it cannot be served (a PodTemplate missing, a parameter not understood)."""


@dataclass(frozen=True, slots=True)
class ConditionUpdate:
    """One condition to set on the request's status."""

    type: str
    status: bool
    reason: str
    message: str


def wants_capacity(state: RequestState, now: float) -> bool:
    """Whether the request's gang is demand this tick: it is being provisioned, or its
    capacity is booked and not consumed yet."""
    if state.final is not None or state.error is not None or state.consumed or state.gpus <= 0:
        return False
    if state.provisioned_at is not None:
        return now - state.provisioned_at < BOOKING_SECONDS
    return not _expired(state, now)


def answer(
    state: RequestState, placement: GangPlacement | None, now: float
) -> tuple[list[ConditionUpdate], dict[str, str]]:
    """The conditions to set on the request (only the ones that change what Kueue reads), and
    its provisioningClassDetails, from what decide() made of its gang (``placement``; None
    when decide() did not place it this tick, e.g. within the policy's grace period)."""
    if state.final is not None or (state.consumed and state.provisioned_at is not None):
        return [], {}
    if state.error is not None:
        return [ConditionUpdate(FAILED, True, "InvalidRequest", state.error)], {}
    updates: list[ConditionUpdate] = []
    if not state.accepted:
        updates.append(
            ConditionUpdate(
                ACCEPTED, True, "Accepted", "ProvisioningRequest is accepted by hybridgpu"
            )
        )
    if state.gpus <= 0:
        if state.provisioned_at is None:
            message = "its pods ask for no GPUs: hybridgpu has nothing to provision"
            updates.append(ConditionUpdate(PROVISIONED, True, "CapacityIsFound", message))
        return updates, {}
    if state.provisioned_at is not None:
        if now - state.provisioned_at >= BOOKING_SECONDS:
            message = (
                f"no pod consumed the capacity within {BOOKING_SECONDS:.0f}s of provisioning: "
                "the booking is released"
            )
            return [
                ConditionUpdate(BOOKING_EXPIRED, True, "CapacityReservationTimeExpired", message)
            ], {}
        if placement is not None and placement.state != GangState.PLACED:
            message = "the booked capacity is gone (its nodes were removed, interrupted or taken)"
            return [ConditionUpdate(CAPACITY_REVOKED, True, "CapacityRevoked", message)], {}
        return updates, {}
    if _expired(state, now):
        message = f"not provisioned within ValidUntilSeconds={state.valid_until_seconds:g}"
        return [*updates, ConditionUpdate(FAILED, True, "Expired", message)], {}
    if placement is None:
        return updates, {}
    pools = ", ".join(placement.pools)
    details = {POOL_DETAIL: placement.pools[0]} if len(placement.pools) == 1 else {}
    if placement.state == GangState.PLACED:
        reason = (
            "CapacityIsFound"
            if state.provisioning_class == CHECK_CAPACITY
            else "CapacityIsProvisioned"
        )
        message = f"all {state.gpus} GPU(s) are free for it on nodes of pool(s) {pools}: booked"
        updates.append(ConditionUpdate(PROVISIONED, True, reason, message))
        return updates, details
    if placement.state == GangState.COMING:
        message = f"nodes for all {state.gpus} GPU(s) are on their way in pool(s) {pools}"
        updates.append(ConditionUpdate(PROVISIONED, False, "CapacityIsProvisioning", message))
        return updates, {}
    if placement.state == GangState.WAITING:
        message = (
            f"owned GPUs for all {state.gpus} GPU(s) free up within the waitBudget in pool(s) "
            f"{pools}: no cloud node is bought; booked once they are free"
        )
        updates.append(ConditionUpdate(PROVISIONED, False, "WaitingForOwnedCapacity", message))
        return updates, {}
    if placement.cause == "no_pool" and state.provisioning_class == ATOMIC_SCALE_UP:
        message = "no GPUPool can host its pods (GPU count per pod, GPU model or pool pin)"
        return [*updates, ConditionUpdate(FAILED, True, "NoPoolFits", message)], {}
    message = (
        f"capacity for all {state.gpus} GPU(s) at once is not found ({placement.cause}); "
        "looked for again every tick"
    )
    updates.append(ConditionUpdate(PROVISIONED, False, "CapacityIsNotFound", message))
    return updates, {}


def _expired(state: RequestState, now: float) -> bool:
    limit = state.valid_until_seconds
    return limit is not None and now - state.created_at >= limit
