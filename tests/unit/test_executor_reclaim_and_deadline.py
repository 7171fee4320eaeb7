"""The executor carries out idle reclaims and records a stopped Job's progress; the exported
metric counts only reclaims that were carried out."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry
from tests.support.fake_cluster import FakeCluster, gpu_node, gpu_pod

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models import GPUPoolSpec
from hybridgpu.models.actions import ActionKind, MoveJob, Plan, ReclaimIdle
from hybridgpu.models.snapshot import ClusterSnapshot

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
POOLS = {
    "core": GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 1,
            "pricing": {"capexPerNode": 1},
        }
    ),
    "od": GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 24},
        }
    ),
}
EMPTY = ClusterSnapshot(taken_at=NOW, pools=())


def cluster_with_notebook() -> FakeCluster:
    cluster = FakeCluster()
    cluster.add_node(gpu_node("n1", "core"))
    cluster.add_pod(gpu_pod("nb-abc", gpus=1, node="n1", job="nb"))
    cluster.add_pod(gpu_pod("scratch", gpus=1, node="n1"))
    cluster.jobs[("team", "nb")] = {
        "metadata": {"name": "nb", "namespace": "team", "annotations": {}},
        "spec": {"suspend": False, "template": {"spec": {}}},
        "status": {"startTime": "2026-01-01T00:00:00Z"},
    }
    return cluster


def reclaim(job: bool = True) -> ReclaimIdle:
    return ReclaimIdle(
        namespace="team",
        name="nb" if job else "scratch",
        job=job,
        pool="core",
        node="n1",
        gpus=1,
        idle_seconds=5400,
        held_dollars=1.23,
        reason="Job team/nb held 1 GPU(s) ... for 1h30m ...: $1.23 of GPU time held idle",
    )


def executor(cluster: FakeCluster) -> PlanExecutor:
    return PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: NOW)


def test_an_idle_job_is_suspended_with_the_reason_on_it_and_an_event() -> None:
    cluster = cluster_with_notebook()
    run = executor(cluster).execute(
        Plan(NOW, actions=(reclaim(),)), EMPTY, POOLS, policy="default", dry_run=False
    )
    job = cluster.jobs[("team", "nb")]
    assert job["spec"]["suspend"] is True
    record = json.loads(job["metadata"]["annotations"]["hybridgpu.io/reclaimed"])
    assert record == {"at": NOW, "gpus": 1, "heldDollars": 1.23, "idleSeconds": 5400}
    assert [(e["kind"], e["name"], e["reason"]) for e in cluster.events] == [
        ("Job", "nb", "IdleReclaimed")
    ]
    assert "1h30m" in cluster.events[0]["message"] and "$1.23" in cluster.events[0]["message"]
    assert run.reclaimed == [reclaim()]
    # The same plan again (pods still exiting): nothing more is done or counted.
    again = executor(cluster).execute(
        Plan(NOW, actions=(reclaim(),)), EMPTY, POOLS, policy="default", dry_run=False
    )
    assert again.reclaimed == []


def test_an_idle_bare_pod_is_evicted() -> None:
    cluster = cluster_with_notebook()
    run = executor(cluster).execute(
        Plan(NOW, actions=(reclaim(job=False),)), EMPTY, POOLS, policy="default", dry_run=False
    )
    assert ("evict", "team/scratch") in cluster.writes
    assert ("team", "scratch") not in cluster.pods
    assert cluster.events[0]["kind"] == "Pod" and cluster.events[0]["reason"] == "IdleReclaimed"
    assert len(run.reclaimed) == 1


def test_a_dry_run_reports_the_reclaim_and_does_nothing() -> None:
    cluster = cluster_with_notebook()
    run = executor(cluster).execute(
        Plan(NOW, actions=(reclaim(), reclaim(job=False))),
        EMPTY,
        POOLS,
        policy="default",
        dry_run=True,
    )
    assert cluster.jobs[("team", "nb")]["spec"]["suspend"] is False
    assert ("team", "scratch") in cluster.pods
    assert not [w for w in cluster.writes if w[0] in ("patch_job", "evict")]
    assert run.reclaimed == []
    assert all(e["message"].startswith("dry run, not done: ") for e in cluster.events)


def test_a_stopped_job_gets_its_saved_progress_recorded() -> None:
    cluster = cluster_with_notebook()
    move = MoveJob(
        namespace="team",
        job="nb",
        from_pool="core",
        to_pool="od",
        gpus=1,
        kind=ActionKind.DEADLINE,
        reason="deadline",
    )
    plan = Plan(NOW, actions=(move,), progress_seconds_by_job={"team/nb": 5400.0})
    executor(cluster).execute(plan, EMPTY, POOLS, policy="default", dry_run=False)
    notes = cluster.jobs[("team", "nb")]["metadata"]["annotations"]
    assert notes["hybridgpu.io/progress"] == "5400"
    assert cluster.events[0]["reason"] == "DeadlineOnDemand"


def test_the_metric_counts_reclaimed_idle_gpu_hours_by_namespace_and_tier() -> None:
    registry = CollectorRegistry()
    metrics = ExportedMetrics(registry)
    metrics.record_reclaimed(reclaim(), "core")
    metrics.record_reclaimed(reclaim(), "core")
    value = registry.get_sample_value(
        "hybridgpu_reclaimed_gpu_hours_total", {"namespace": "team", "tier": "core"}
    )
    assert value == pytest.approx(3.0)  # twice 1 GPU for 1.5 h
