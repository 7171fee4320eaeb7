"""decide() counts a Job's run from its pods' start on a node, not from the Job's own
``status.startTime``: Kubernetes sets that when the Job is created or resumed, before its pods
have a node, by a whole boot when the node is bought for them. Found for the deadline
return (1b496f7) and return to core (00af4c2); this is the rest of that class: minRuntime,
the victims' order, a Job's delay and consolidation's time run."""

from __future__ import annotations

from dataclasses import replace

from tests.support.builders import NOW, STANDARD_POOLS, node, pending, policy, running, snapshot

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import MoveJob

CORE_NODES = [node("c1", "core"), node("c2", "core")]


def _preempted(job_started: float, pod_started: float) -> list[str]:
    """Jobs preempted for an urgent critical pod when the preemptible Job on c1 was resumed
    at ``job_started`` and its pod started on c1 at ``pod_started``."""
    pod, job = running("batch", "c1", 8, "preemptible", started=pod_started)
    assert job is not None
    snap = snapshot(
        list(STANDARD_POOLS),
        CORE_NODES,
        [
            (pod, replace(job, started_at=job_started)),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
    )
    plan = decide(snap, policy(preemption={"minRuntime": "10m"}), NOW)
    return [a.job_key for a in plan.actions if isinstance(a, MoveJob)]


def test_min_runtime_counts_from_the_pods_start_not_the_jobs() -> None:
    # Resumed 15 minutes ago, its pod started 5 minutes ago after a 10-minute boot: it has
    # run 5 minutes, under minRuntime, so it is not preempted.
    assert _preempted(job_started=NOW - 900, pod_started=NOW - 300) == []
    # Its pod has run 15 minutes: past minRuntime, it is the victim.
    assert _preempted(job_started=NOW - 900, pod_started=NOW - 900) == ["team/batch"]
