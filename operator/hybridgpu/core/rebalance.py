"""Rule 3c of ``decide``: serving replicas move from on-demand and spot nodes to GPUs paid for
whether used or not (owned, or committed cloud capacity) by surge.

Serving workloads (Deployments) are never disrupted, and they run for weeks: a replica that
landed on an on-demand node while core and the commitment were full stays there, billed by
the hour, long after owned or committed GPUs freed up. When the owned and committed GPUs free
now (after pending work took its share and none promised to a waiting pod) hold every GPU pod
of an on-demand or spot node, and every one of those pods is a Ready replica of a stable
Deployment, the node is emptied by surge: for each
workload with replicas there, the executor (kube/serving.py) cordons the node, adds as many
replicas, waits until they are Ready, then removes the cloud ones. The node is then
released.

Owned GPUs a rebalance takes are no longer free for the next arrival, which would then wait
for a cloud node to boot: a rebalance leaves ``rebalance.headroomPercent`` of the owned and
committed GPUs free (summed over those pools; GPUs promised to waiting pods are not free) and
takes only the free GPUs beyond them (measured in docs/benchmarks.md#serving-rebalance).

Not rebalanced, with a note saying why: workloads an HPA scales (a surge would fight it),
workloads mid-rollout or short of Ready replicas, replicas pinned to a cloud pool, and for an
hour workloads whose last rebalance was rolled back or aborted.

StatefulSets and LeaderWorkerSets are never rebalanced (a note says so): they cannot surge.
Raising a StatefulSet's replicas adds a new ordinal with its own identity and volumes, not a
second copy of the replica on the cloud node, and scaling back removes the highest ordinal,
wherever it runs; the only way to move replica k is to delete its pod and let the controller
recreate pod k elsewhere, which takes that replica down until the new pod is Ready (and a
volume bound to the cloud node's zone may not follow at all). Even when a
PodDisruptionBudget would allow it, that is a disruption, and serving is never disrupted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridgpu.core.cost import paid_whether_used
from hybridgpu.models.actions import RebalanceReplica
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.snapshot import GPUPod, ServingState

if TYPE_CHECKING:
    from hybridgpu.core.decide import _Decider

CORDONED_FOR_REBALANCE = "rebalance"
"""The node annotation hybridgpu.io/cordoned-by of a node a rebalance empties."""
BACKOFF_SECONDS = 3600.0
"""A workload whose last rebalance was rolled back or aborted is not tried again for this
long (a surge replica that cannot get Ready would otherwise surge every surgeTimeout)."""
KUEUE = "Kueue manages it (label kueue.x-k8s.io/queue-name): its placement is Kueue's"
"""Why a replica Kueue admitted is not rebalanced."""


def rebalance_serving(d: _Decider) -> None:
    """Append the RebalanceReplica actions worth doing now to ``d.actions``."""
    spec = d.policy.rebalance
    if not spec.enabled:
        return
    _note_stateful(d)
    serving = {w.key: w for w in d.snap.serving}
    if not serving:
        return
    in_flight = {w.rebalance.node for w in serving.values() if w.rebalance is not None}
    room = min(spec.max_per_tick, d.policy.disruption.max_nodes_per_tick) - len(in_flight)
    if room <= 0:
        return
    skipped: dict[str, str] = {}
    # Owned and committed GPUs: paid whether used or not, the targets; never a source (moving
    # off them saves nothing).
    paid = {name for name, ledger in d.pools.items() if paid_whether_used(ledger.state.spec)}
    candidates = _candidates(d, serving, paid, skipped)
    for key, why in sorted(skipped.items()):
        d.notes.append(
            f"Deployment {key} has a replica on a cloud node and is not rebalanced: {why}"
        )
    min_savings = d.policy.consolidation.min_savings_per_hour
    timeout = parse_duration_seconds(spec.surge_timeout)
    if not candidates:
        return
    # The most free GPUs on a paid node: a node whose largest pod needs more is skipped
    # (``_take_owned`` would take nothing); looked at again once GPUs were taken (taking
    # only lowers it).
    most_free_now = _most_free(d)
    most_free: int | None = most_free_now
    # Free paid GPUs beyond the headroom kept for arrivals (taking only lowers them).
    spare: int | None = None
    headroom = 0
    if spec.headroom_percent:
        free, total = paid_gpus(d)
        headroom = int(total * spec.headroom_percent / 100)
        spare = free - headroom
    kept = 0
    if not any(
        largest <= most_free_now and (spare is None or gpus <= spare)
        for _, _, largest, gpus in candidates
    ):
        # Nothing can be taken (most ticks of a large serving fleet): the loop below would
        # only count the nodes the headroom keeps, in any order.
        if spare is not None:
            kept = sum(1 for _, _, largest, _ in candidates if largest <= most_free_now)
        candidates = []
    pools, node_pool = d.pools, d.node_pool
    by_price = sorted((-pools[node_pool[c[0]]].node_price, *c) for c in candidates)
    for _, node_name, pods, largest, gpus in by_price:
        if room <= 0:
            break
        if most_free is None:
            most_free = _most_free(d)
        if largest > most_free:
            continue
        if spare is not None and gpus > spare:
            kept += 1
            continue
        taken = d._take_owned(pods)
        if taken is None:
            continue
        most_free = None
        source = d.pools[d.node_pool[node_name]]
        target = d.pools[d.node_pool[taken[0][0]]]
        savings = source.node_price - sum(g * d.pools[d.node_pool[n]].gpu_price for n, g in taken)
        if savings < min_savings:
            for where, taken_gpus in taken:
                d._adjust(where, taken_gpus)
            continue
        room -= 1
        if spare is not None:
            spare -= gpus
        by_workload: dict[str, list[GPUPod]] = {}
        for pod in pods:
            assert pod.serving is not None
            by_workload.setdefault(pod.serving, []).append(pod)
        for key, replicas in sorted(by_workload.items()):
            workload = serving[key]
            names = tuple(sorted(p.name for p in replicas))
            surge = workload.replicas + len(names)
            d.actions.append(
                RebalanceReplica(
                    namespace=workload.namespace,
                    workload=workload.name,
                    pods=names,
                    node=node_name,
                    from_pool=source.name,
                    to_pool=target.name,
                    gpus=sum(p.gpus for p in replicas),
                    replicas=workload.replicas,
                    timeout_seconds=timeout,
                    reason=f"{'committed' if target.tier != 'core' else 'owned'} GPUs of "
                    f"{target.name} are free for the {gpus} GPU(s) of "
                    f"serving replicas on {source.tier} node {node_name}: surge "
                    f"{workload.kind} {workload.key} to {surge} replicas, remove "
                    f"{', '.join(names)} once the new ones are Ready, then release the node, "
                    f"saving ${savings:.2f}/h",
                )
            )
        d.reserved.add(node_name)  # no other rule empties or fills it this tick
    if kept:
        d.notes.append(
            f"{kept} cloud node(s) of serving replicas not rebalanced: the owned and committed "
            f"GPUs free beyond the {headroom} kept free for new arrivals "
            f"(rebalance.headroomPercent {spec.headroom_percent:g}%) do not hold them"
        )


def _most_free(d: _Decider) -> int:
    """The most GPUs free now on one node paid for whether used or not."""
    return max((ledger.buckets.most_free for ledger in d._paid_pools()), default=0)


def paid_gpus(d: _Decider) -> tuple[int, int]:
    """GPUs free now on the existing nodes of pools paid for whether used or not (less those
    promised to pods that wait for them), and all the GPUs of those nodes."""
    paid = d._paid_pools()
    free = sum(ledger.buckets.total for ledger in paid)
    total = sum(ledger.per_node * len(ledger.buckets) for ledger in paid)
    if d.claimed:
        names = {ledger.name for ledger in paid}
        for node, claimed in d.claimed.items():
            if d.node_pool.get(node) in names and node not in d.future_nodes:
                free -= min(claimed, d.node_free.get(node, 0))
    return free, total


def _note_stateful(d: _Decider) -> None:
    """A note for each StatefulSet or LeaderWorkerSet with a replica on an on-demand or spot
    node: it stays there (module docstring)."""
    seen: set[str] = set()
    for pod in d.snap.pods:
        if pod.stateful is None or pod.node is None or pod.stateful in seen:
            continue
        ledger = d.pools.get(d.node_pool.get(pod.node, ""))
        if ledger is None or paid_whether_used(ledger.state.spec):
            continue
        seen.add(pod.stateful)
        d.notes.append(
            f"{pod.stateful} has a replica on {ledger.tier} node {pod.node} and is not "
            "rebalanced: it cannot surge (a new replica is a new ordinal), and moving the "
            "replica would take it down"
        )


def _candidates(
    d: _Decider, serving: dict[str, ServingState], paid: set[str], skipped: dict[str, str]
) -> list[tuple[str, list[GPUPod], int, int]]:
    """The on-demand and spot nodes a rebalance may empty now, as (name, GPU pods, the GPUs
    of the largest, all their GPUs): open nodes
    (``_schedulable``), neither reserved this tick nor unhealthy, whose every GPU pod is a
    Ready replica that may surge to owned or committed GPUs now (one surge per workload at a
    time). A workload that may not surge gets in ``skipped`` why, from the first pod that
    stops a node (in ``d.pods_on``'s order, the last node's word kept).

    Called every tick on hundreds of cloud nodes (the DLRM trace): the open nodes are
    ``d.unpaid_open`` less the reserved and unhealthy ones, and the workload's own reasons
    are found once per workload."""
    open_nodes = set(d.unpaid_open).difference(d.reserved, d.unhealthy)
    now = d.now
    # Per workload: why it may not surge whatever the pod (None: it may).
    why_of: dict[str, str | None] = {}
    candidates: list[tuple[str, list[GPUPod], int, int]] = []
    for node_name, pods in d.pods_on.items():
        if node_name not in open_nodes:
            continue
        largest = pods[0].gpus
        gpus = 0
        for pod in pods:
            key = pod.serving
            if key is None:
                break
            workload = serving.get(key)
            if workload is None or pod.terminating or pod.started_at is None:
                break
            if workload.rebalance is not None:
                break
            if pod.queued:
                why: str | None = KUEUE
            else:
                if key in why_of:
                    why = why_of[key]
                else:
                    why = why_of[key] = _why_not(workload, now)
                if why is None and pod.pool is not None and pod.pool not in paid:
                    why = f"its pods are pinned to pool {pod.pool}"
            if why is not None:
                skipped[workload.key] = why
                break
            gpus += pod.gpus
            if pod.gpus > largest:
                largest = pod.gpus
        else:
            candidates.append((node_name, pods, largest, gpus))
    return candidates


def _why_not(workload: ServingState, now: float) -> str | None:
    """Why no replica of ``workload`` may surge now, whatever the pod (None: they may)."""
    if workload.autoscaled:
        return "a HorizontalPodAutoscaler scales it (a surge would fight the autoscaler)"
    if not workload.stable or workload.ready < workload.replicas:
        return f"{workload.ready} of {workload.replicas} replicas Ready or a rollout in progress"
    if workload.given_up_at is not None and now - workload.given_up_at < BACKOFF_SECONDS:
        left = (workload.given_up_at + BACKOFF_SECONDS - now) / 60
        return f"its last rebalance was given up; tried again in {left:.0f} min"
    return None
