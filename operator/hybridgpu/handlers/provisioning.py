"""ProvisioningRequests in the reconcile tick: their gangs join the snapshot before decide(),
and what decide() made of each is written back as the conditions Kueue reads.

A policy's tick serves the requests whose pods are pinned to its pools, and the requests
pinned to no pool when it owns unpinned demand (the ``default`` policy), as for pods.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from hybridgpu.core.provisioning import CHECK_CAPACITY, answer, wants_capacity
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.errors import KubeError
from hybridgpu.kube.provisioning import Request, status_patch
from hybridgpu.models.actions import Plan
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)


def requests_of_policy(
    requests: Sequence[Request], pools: Mapping[str, GPUPoolSpec], owns_unpinned: bool
) -> list[Request]:
    """The requests this policy's tick answers: every pod pinned to one of its pools, or
    (when it owns unpinned demand) pinned to none."""
    out = []
    for request in requests:
        pins = {p.pool for p in request.pods}
        if pins <= set(pools) or (owns_unpinned and pins <= {None, *pools}):
            out.append(request)
    return out


def with_requests(
    snapshot: ClusterSnapshot, requests: Sequence[Request], now: float
) -> ClusterSnapshot:
    """The snapshot with the gang of every request that wants capacity now as pending pods;
    check-capacity gangs are marked so decide() never buys nodes for them."""
    wanting = [r for r in requests if wants_capacity(r.state, now)]
    if not wanting:
        return snapshot
    return replace(
        snapshot,
        pods=snapshot.pods + tuple(p for r in wanting for p in r.pods),
        check_only_gangs=snapshot.check_only_gangs
        | {r.gang for r in wanting if r.state.provisioning_class == CHECK_CAPACITY},
    )


def answer_requests(
    cluster: KubeCluster, requests: Sequence[Request], plan: Plan, now: float
) -> list[str]:
    """Write each request's conditions from ``plan.gangs``; the errors, one line each."""
    errors: list[str] = []
    for request in requests:
        updates, details = answer(request.state, plan.gangs.get(request.gang), now)
        patch = status_patch(request, updates, details, now)
        if patch is None:
            continue
        try:
            cluster.patch_provisioning_request_status(request.namespace, request.name, patch)
        except KubeError as err:
            errors.append(f"answer ProvisioningRequest {request.key}: {err}")
            continue
        for update in updates:
            log.info(
                "ProvisioningRequest %s: %s=%s (%s) %s",
                request.key,
                update.type,
                update.status,
                update.reason,
                update.message,
            )
    return errors
