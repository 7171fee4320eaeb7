"""Nodes kept for a Job the deadline rule moved to on-demand (docs/concepts.md, "Deadlines").

A Job moved there at the last moment needs the node launched for it: kube-scheduler gives a
new node to the pending pod it pops first, by priority, and a standard pod that starts to wait
in the pool shortly before the node is Ready outranks the preemptible Job's. So the first new,
empty node of the pool is kept for the Job while it waits: the operator taints it (only the
Job's pods, which the move gave a toleration, and critical pods tolerate the taint) as soon
as it sees the node, which a kubelet registers NotReady, before the node can take any pod.
The node stays kept while the Job's pods run on it: they keep their preemptible priority, and
kube-scheduler preempts pods of lower priority for a waiting pod on any node whose taints
that pod tolerates, so without the taint a standard pod waiting in the pool would take the
node from the Job after all (seen on the real control plane: bound, then deleted by
kube-scheduler 157 ms later). The reservation ends when the Job neither waits for the node
nor runs on it (done, gone, suspended, moved elsewhere), when another (critical) pod took the
node before the Job did, and, while the Job still waits, RESERVATION_SECONDS after the node
appeared. Pure predicates; decide() turns them into ReserveNode actions and the simulator
applies the same ones when one of its nodes comes up.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridgpu.core.deadline import BOOT_ALLOWANCE_SECONDS
from hybridgpu.models.snapshot import Criticality, GPUPod, JobState, NodeState

RESERVATION_SECONDS = 2 * BOOT_ALLOWANCE_SECONDS
"""How long after a node appears (its creation) it may be kept for a Job: a reservation
never outlives it, so a Job whose pods cannot land there after all (some other constraint)
does not keep the node from everyone else."""


def awaits_reserved_node(job: JobState, on_demand: bool, pods: Sequence[GPUPod]) -> bool:
    """Whether ``job`` waits for a node kept for it: a preemptible batch/v1 Job (not a gang,
    not queued by Kueue) with a deadline that the operator pinned to an on-demand pool
    (``on_demand``: its pool's tier is elastic), not suspended nor mid-move, with pods and
    none of them on a node. ``pods``: its pods."""
    return (
        job.deadline_at is not None
        and job.kind == "Job"  # its move gives its pods the toleration (kube/reserve.py)
        and not job.gang
        and not job.queued
        and job.criticality == Criticality.PREEMPTIBLE
        and job.pinned_by_operator
        and on_demand
        and not job.suspended
        and job.move is None
        and bool(pods)
        and all(p.node is None for p in pods)
    )


def reservable(node: NodeState, busy: bool, now: float) -> bool:
    """Whether ``node`` may be kept for a Job: nobody's yet, nothing on it (``busy``: a GPU
    pod is on it), schedulable and young enough (RESERVATION_SECONDS)."""
    return (
        node.reserved_for is None
        and not busy
        and not node.cordoned
        and not node.releasing
        and node.interruption_deadline is None
        and not node.leaving
        and now - node.created_at < RESERVATION_SECONDS
    )


def reservation_ends(
    node: NodeState, job_runs_here: bool, others_on_it: bool, job_waits: bool, now: float
) -> bool:
    """Whether the reservation of ``node`` ends. Never while its Job's pods run on it
    (``job_runs_here``). Otherwise once the Job no longer waits for it (``job_waits`` False:
    it is done, gone, suspended, moved elsewhere), another pod took it (``others_on_it``: a
    critical pod, which tolerates the taint), or it has lasted."""
    if job_runs_here:
        return False
    return not job_waits or others_on_it or now - node.created_at >= RESERVATION_SECONDS
