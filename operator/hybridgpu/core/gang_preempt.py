"""Rule 2c of ``decide`` for gangs: a critical or standard gang that fits on no free GPUs that
exist takes owned GPUs from preemptible work, whole or not at all, before new cloud nodes are
bought for it.

A single pod preempts one node's preemptible Jobs (``_Decider._preempt_for``); a gang needs
room for every pod at once, so the victims are chosen for the whole gang first, on a copy of
the owned nodes' free GPUs, and only when they make room for all of it are they moved (each
victim Job, or victim gang, whole: suspended, repointed to spot or queued, resumed) and the
gang's pods placed on the GPUs they free. Victims are taken cheapest to restart first (least
work thrown away, then the fewest GPUs), as for single pods, and no more moves than
``preemption.maxMovesPerTick`` allows. When even every movable victim would leave the gang
short, nothing is preempted and the gang goes on to nodes on their way or new nodes.
ProvisioningRequests (Kueue's capacity bookings) never preempt.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from hybridgpu.core.provisioning import gang_of
from hybridgpu.models.actions import GangPlacement, GangState
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import Criticality

if TYPE_CHECKING:
    from hybridgpu.core.decide import _Decider, _Demand

CORE = Tier.CORE.value


def preempt_for_gang(d: _Decider, gang: list[_Demand]) -> bool:
    """Place every pod of ``gang`` on owned GPUs freed by moving preemptible work, or none
    (nothing changed); True when placed."""
    if not d.policy.preemption.enabled or d.moves_left <= 0:
        return False
    if any(m.criticality == Criticality.PREEMPTIBLE for m in gang):
        return False
    name = gang[0].gang or ""
    if name.startswith(gang_of("")):
        # A ProvisioningRequest books capacity for pods that do not exist yet: it is answered
        # with free or new capacity, never by moving running work.
        return False
    ordered = sorted(gang, key=attrgetter("order"))
    # The owned nodes each pod may use (its pools' order, core only) and their free GPUs.
    by_pool: dict[str, list[str]] = {}
    for name in sorted(d.node_free):
        if name not in d.future_nodes:
            by_pool.setdefault(d.node_pool[name], []).append(name)
    allowed: list[list[str]] = []
    free: dict[str, int] = {}
    for demand in ordered:
        nodes = [
            name
            for ledger in d._free_order(demand)
            if ledger.tier == CORE
            for name in by_pool.get(ledger.name, [])
        ]
        if not nodes:
            return False
        allowed.append(nodes)
        for name in nodes:
            free[name] = d.node_free[name]
    victims = _victims(d, free)
    chosen: list[str] = []
    while True:
        placed = _fit(ordered, allowed, dict(free))
        if placed is not None:
            break
        if not victims or len(chosen) >= d.moves_left:
            return False
        key = victims.pop(0)
        chosen.append(key)
        for pod in d.pods_of_job.get(key, []):
            if pod.node in free:
                free[pod.node] += pod.gpus
    if not chosen:
        return False  # it fits without preemption: not this rule's to place
    first = len(d.requeued_by_preemption)
    jobs = [d.jobs[key] for key in chosen]
    for job in jobs:
        d._release_job_pods(job, None)
    for node_name in placed:
        d.reserved.add(node_name)
    for demand, node_name in zip(ordered, placed, strict=True):
        d._adjust(node_name, -demand.gpus)
    requeued = d.requeued_by_preemption[first:]
    for job in jobs:
        d._move_job(job, placed[0], ordered[0], [r for r in requeued if r.job == job.key])
    d.gangs[ordered[0].gang or ""] = GangPlacement(
        GangState.PLACED, pools=tuple(sorted({d.node_pool[n] for n in placed}))
    )
    d.notes.append(
        f"gang {ordered[0].gang}: {len(ordered)} pod(s) on owned GPUs freed by moving "
        f"{len(chosen)} preemptible workload(s) ({', '.join(chosen)}), not on new cloud nodes"
    )
    return True


def _victims(d: _Decider, free: dict[str, int]) -> list[str]:
    """Movable preemptible workloads with pods on these owned nodes, cheapest to restart
    first."""
    keys: set[str] = set()
    for name in free:
        for pod in d.pods_on.get(name, []):
            if pod.job is not None and d._movable(pod.job) is not None:
                keys.add(pod.job)
    return sorted(
        keys,
        key=lambda k: (
            d._restart_gpu_hours(k),
            d._job_gpus(k),
            -(d.jobs[k].started_at or 0.0),
            k,
        ),
    )


def _fit(
    ordered: list[_Demand], allowed: list[list[str]], free: dict[str, int]
) -> list[str] | None:
    """A node for each pod, largest first, best fit (the node left with the fewest free GPUs);
    None when one does not fit. ``free`` is used up."""
    placed: list[str] = []
    for demand, nodes in zip(ordered, allowed, strict=True):
        best: str | None = None
        for name in nodes:
            left = free[name] - demand.gpus
            if left >= 0 and (best is None or left < free[best] - demand.gpus):
                best = name
        if best is None:
            return None
        free[best] -= demand.gpus
        placed.append(best)
    return placed
