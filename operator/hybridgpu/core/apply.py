"""What the cluster should look like once a plan has been carried out (pure).

The no-flap property (tests/unit/test_decide_properties.py) decides again on the result and
checks that the second plan does not undo the first.
"""

from __future__ import annotations

from dataclasses import replace

from hybridgpu.models.actions import (
    CordonUnhealthy,
    HandleInterruption,
    MoveJob,
    Plan,
    ReleaseNode,
    ScaleUp,
)
from hybridgpu.models.snapshot import ClusterSnapshot, GPUPod, JobState


def apply_plan(snapshot: ClusterSnapshot, plan: Plan, now: float) -> ClusterSnapshot:
    """The snapshot after ``plan``: scale-ups are provisioning, released nodes are gone and
    their pods pending, moved Jobs' pods pending on their target pool, interrupted and
    unhealthy nodes cordoned. Pending pods are not scheduled here: that is the scheduler's
    work, which happens after."""
    added: dict[str, int] = {}
    removed: set[str] = set()
    cordoned: set[str] = set()
    moves: dict[str, str | None] = {}
    for action in plan.actions:
        if isinstance(action, ScaleUp):
            added[action.pool] = added.get(action.pool, 0) + action.nodes
        elif isinstance(action, ReleaseNode):
            removed.add(action.node)
        elif isinstance(action, HandleInterruption | CordonUnhealthy):
            cordoned.add(action.node)
        elif isinstance(action, MoveJob):
            moves[action.job_key] = action.to_pool
    pools = tuple(
        replace(p, provisioning_nodes=p.provisioning_nodes + added.get(p.name, 0))
        if p.name in added
        else p
        for p in snapshot.pools
    )
    nodes = tuple(
        replace(n, cordoned=True) if n.name in cordoned else n
        for n in snapshot.nodes
        if n.name not in removed
    )
    drained = removed | {a.node for a in plan.actions if isinstance(a, HandleInterruption)}
    pods: list[GPUPod] = []
    for pod in snapshot.pods:
        if pod.job is not None and pod.job in moves:
            pods.append(
                replace(pod, node=None, pool=moves[pod.job], pending_since=now, started_at=None)
            )
        elif pod.node is not None and pod.node in drained:
            if pod.job is None:
                continue  # a bare pod on a drained node is gone
            pods.append(replace(pod, node=None, pending_since=now, started_at=None))
        else:
            pods.append(pod)
    jobs: list[JobState] = [
        replace(j, pool=moves[j.key], started_at=None) if j.key in moves else j
        for j in snapshot.jobs
    ]
    return replace(
        snapshot,
        taken_at=now,
        pools=pools,
        nodes=nodes,
        pods=tuple(pods),
        jobs=tuple(jobs),
    )
