"""Workloads Kueue manages (label kueue.x-k8s.io/queue-name) are Kueue's to suspend, resume and
place: decide() never plans to move or reclaim them, and the executor refuses to, on every
path that could (a move, a move recorded earlier, an idle reclaim, a node release)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest
from tests.support.builders import NOW, STANDARD_POOLS, node, pending, policy, running, snapshot
from tests.support.fake_cluster import FakeCluster, gpu_node, gpu_pod

from hybridgpu.core.decide import decide
from hybridgpu.kube.cluster import ClusterObjects, KubeCluster
from hybridgpu.kube.convert import IdleTracker, job_state
from hybridgpu.kube.convert import gpu_pod as convert_pod
from hybridgpu.kube.executor import Execution, PlanExecutor
from hybridgpu.kube.moves import Move
from hybridgpu.kube.names import KUEUE_QUEUE_LABEL, MOVE_ANNOTATION
from hybridgpu.kube.snapshot import Measurements, build_snapshot
from hybridgpu.models.actions import MoveJob, Plan, ReclaimIdle, ReleaseNode
from hybridgpu.models.snapshot import ClusterSnapshot, GPUPod, JobState

pytestmark = pytest.mark.unit

QUEUE = {KUEUE_QUEUE_LABEL: "team-queue"}


def queued(workload: tuple[GPUPod, JobState | None]) -> tuple[GPUPod, JobState | None]:
    pod, job = workload
    return replace(pod, queued=True), (replace(job, queued=True) if job else None)


def moved_jobs(plan: Plan) -> list[str]:
    return [a.job_key for a in plan.actions if isinstance(a, MoveJob)]


# ------------------------------------------------------------------------ reading
def job_body(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "train",
            "namespace": "team",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}
            },
        },
    }


def test_a_job_with_a_queue_name_is_queued_and_its_recorded_move_is_not_read() -> None:
    move = Move("spot", "core", "repinned", NOW).annotation()
    state = job_state(job_body(QUEUE, {MOVE_ANNOTATION: move}))
    assert state is not None and state.queued and state.move is None
    plain = job_state(job_body({}, {MOVE_ANNOTATION: move}))
    assert plain is not None and not plain.queued and plain.move is not None
    empty = job_state(job_body({KUEUE_QUEUE_LABEL: " "}))
    assert empty is not None and not empty.queued


def test_pods_of_a_queued_job_and_pods_with_a_queue_name_are_queued() -> None:
    objects = ClusterObjects(
        nodes=[gpu_node("c1", "core")],
        pods=[
            gpu_pod("train-0", node="c1", job="train"),
            gpu_pod("solo", gpus=1, node="c1", labels=dict(QUEUE)),
            gpu_pod("other-0", gpus=1, node="c1", job="other"),
        ],
        jobs=[job_body(QUEUE)],
    )
    pools = {p.name: p.spec for p in STANDARD_POOLS}
    snap = build_snapshot(objects, pools, Measurements(), IdleTracker(), NOW)
    assert {p.name: p.queued for p in snap.pods} == {
        "train-0": True,
        "solo": True,
        "other-0": False,
    }
    assert convert_pod(gpu_pod("x", node="c1", job="train"), {}, None, {"team/train"}) is not None


# ------------------------------------------------------------------------ decide
def test_a_queued_preemptible_job_on_core_is_never_preempted() -> None:
    workloads = [
        running("batch", "c1", 8, "preemptible"),
        running("svc", "c2", 8, "critical"),
        pending("urgent", 4, "critical"),
    ]
    nodes = [node("c1", "core"), node("c2", "core")]
    before = decide(snapshot(STANDARD_POOLS, nodes, workloads), policy(), NOW)
    assert moved_jobs(before) == ["team/batch"]  # the same cluster without Kueue: preempted
    workloads[0] = queued(workloads[0])
    plan = decide(snapshot(STANDARD_POOLS, nodes, workloads), policy(), NOW)
    assert moved_jobs(plan) == []
    # The critical pod gets a new elastic node instead.
    assert [(a.kind.value, getattr(a, "pool", None)) for a in plan.actions] == [
        ("scale_up", "elastic")
    ]


def test_a_queued_job_is_never_consolidated_returned_to_core_or_reclaimed() -> None:
    nodes = [node("c1", "core"), node("c2", "core"), node("e1", "elastic"), node("e2", "elastic")]
    workloads = [
        running("batch", "e1", 8, "preemptible"),  # consolidation would move it to core
        running("back", "e2", 8, returns=True, checkpoint=60.0),  # returns to core
    ]
    before = decide(snapshot(STANDARD_POOLS, nodes, workloads), policy(), NOW)
    assert sorted(moved_jobs(before)) == ["team/back", "team/batch"]
    plan = decide(snapshot(STANDARD_POOLS, nodes, [queued(w) for w in workloads]), policy(), NOW)
    assert moved_jobs(plan) == []
    assert not [a for a in plan.actions if isinstance(a, ReleaseNode)]


def test_a_queued_idle_job_is_not_reclaimed() -> None:
    pod, job = running("nb", "c1", 2)
    idle_pod = replace(
        pod, idle_timeout_seconds=600.0, idle_since=NOW - 3600, utilization_percent=0.0
    )
    nodes = [node("c1", "core"), node("c2", "core")]
    before = decide(snapshot(STANDARD_POOLS, nodes, [(idle_pod, job)]), policy(), NOW)
    assert [type(a) for a in before.actions] == [ReclaimIdle]
    plan = decide(snapshot(STANDARD_POOLS, nodes, [queued((idle_pod, job))]), policy(), NOW)
    assert plan.actions == ()


# ------------------------------------------------------------------------ executor
POOLS = {p.name: p.spec for p in STANDARD_POOLS}
EMPTY = ClusterSnapshot(taken_at=NOW, pools=())


def executor(cluster: FakeCluster) -> PlanExecutor:
    return PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: NOW)


def kueue_job(cluster: FakeCluster, *, suspend: bool, annotations: dict[str, str]) -> None:
    body = job_body(QUEUE, annotations)
    body["spec"]["suspend"] = suspend
    cluster.jobs[("team", "train")] = body


def test_a_move_recorded_on_a_queued_job_is_dropped_and_the_job_stays_suspended() -> None:
    """A Job that carries a move when it gets its queue name (or an operator of an older
    release recorded one): finishing the move would resume work Kueue has not admitted."""
    cluster = FakeCluster()
    move = Move("spot", "core", "repinned", NOW - 10).annotation()
    kueue_job(cluster, suspend=True, annotations={MOVE_ANNOTATION: move})
    in_flight = executor(cluster).advance_moves(cluster.read_objects().jobs, POOLS)
    job = cluster.jobs[("team", "train")]
    assert in_flight == 0
    assert job["spec"]["suspend"] is True
    assert MOVE_ANNOTATION not in job["metadata"]["annotations"]


def test_the_executor_refuses_to_move_or_reclaim_a_queued_job() -> None:
    cluster = FakeCluster()
    kueue_job(cluster, suspend=False, annotations={})
    cluster.add_node(gpu_node("c1", "core"))
    cluster.add_pod(gpu_pod("train-0", node="c1", job="train"))
    move = MoveJob("team", "train", "core", "spot", 8, "a plan from a confused caller")
    reclaim = ReclaimIdle("team", "train", True, "core", "c1", 8, 3600.0, 1.0, "idle")
    executor(cluster).execute(
        Plan(NOW, actions=(move, reclaim)), EMPTY, POOLS, policy="default", dry_run=False
    )
    job = cluster.jobs[("team", "train")]
    assert job["spec"]["suspend"] is False
    assert job["metadata"]["annotations"] == {}
    assert ("patch_job", "team/train") not in cluster.writes


def test_a_node_running_a_queued_pod_is_kept_and_an_interrupted_one_evicts_it() -> None:
    cluster = FakeCluster()
    kueue_job(cluster, suspend=False, annotations={})
    cluster.add_node(gpu_node("e1", "elastic", provider_id="fake://e1"))
    cluster.add_pod(gpu_pod("train-0", node="e1", job="train"))
    run = executor(cluster)
    release = ReleaseNode("elastic", "e1", "idle")
    run.execute(Plan(NOW, actions=(release,)), EMPTY, POOLS, policy="default", dry_run=False)
    assert "e1" in cluster.nodes and not cluster.nodes["e1"]["spec"].get("unschedulable")
    cancelled = [e["message"] for e in cluster.events if e["reason"] == "ReleaseCancelled"]
    assert len(cancelled) == 1 and "admitted by Kueue" in cancelled[0]
    # The provider takes the node away: the pod is evicted, the Job is left to Kueue.
    run.release_node("elastic", "e1", POOLS, Execution(), cordon_as=None)
    assert ("evict", "team/train-0") in cluster.writes
    assert cluster.jobs[("team", "train")]["spec"]["suspend"] is False
    assert ("patch_job", "team/train") not in cluster.writes


def test_a_queued_serving_replica_is_not_rebalanced_to_core() -> None:
    from tests.unit.test_rebalance import one_replica_on_elastic, rebalances

    assert len(rebalances(one_replica_on_elastic())) == 1  # the same without Kueue: it moves
    snap = one_replica_on_elastic()
    queued_pods = tuple(replace(p, queued=True) if p.serving else p for p in snap.pods)
    plan = decide(replace(snap, pods=queued_pods), policy(), NOW)
    assert not [a for a in plan.actions if a.kind.value == "rebalance"]
    assert rebalances(replace(snap, pods=queued_pods)) == []
