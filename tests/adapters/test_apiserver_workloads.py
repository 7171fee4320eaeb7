"""Jobs on fake GPU nodes against the real control plane: scheduling, completion, moving a Job.

These pin down the Kubernetes behaviour the operator builds on: GPU requests bind only to
nodes of the selected pool with free nvidia.com/gpu, Jobs complete on kwok nodes, and a
suspended Job's pod template can be re-pointed at another pool and resumed.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from support.controlplane import (
    POOL_LABEL,
    KubeTest,
    gpu_job,
    wait_until,
)

pytestmark = pytest.mark.adapters

SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


def job_pods(kube: KubeTest, job_name: str) -> list:
    return kube.core.list_namespaced_pod(
        kube.namespace, label_selector=f"batch.kubernetes.io/job-name={job_name}"
    ).items


def job_condition(kube: KubeTest, job_name: str, condition: str) -> bool:
    job = kube.batch.read_namespaced_job_status(job_name, kube.namespace)
    return any(c.type == condition and c.status == "True" for c in (job.status.conditions or []))


def wait_job_complete(kube: KubeTest, job_name: str, timeout_seconds: float = 90) -> None:
    def done() -> bool:
        if job_condition(kube, job_name, "Failed"):
            raise AssertionError(f"job {job_name} failed")
        return job_condition(kube, job_name, "Complete")

    wait_until(done, timeout_seconds=timeout_seconds, what=f"job {job_name} Complete")


def test_job_for_a_pool_runs_to_completion_on_that_pools_kwok_nodes(kube: KubeTest) -> None:
    pool_nodes = set(kube.create_gpu_nodes("elastic-a100", 2, tier="elastic", gpus=4))
    other_nodes = set(kube.create_gpu_nodes("core-v100", 2, tier="core", gpus=4))

    kube.create_job(gpu_job("train", gpus=2, pool="elastic-a100", completions=4, parallelism=4))
    wait_job_complete(kube, "train")

    job = kube.batch.read_namespaced_job_status("train", kube.namespace)
    assert job.status.succeeded == 4
    pods = job_pods(kube, "train")
    assert len(pods) == 4
    assert all(p.status.phase == "Succeeded" for p in pods)
    bound_to = {p.spec.node_name for p in pods}
    assert bound_to <= pool_nodes
    assert not bound_to & other_nodes


def test_pods_run_until_their_run_duration_then_succeed(kube: KubeTest) -> None:
    kube.create_gpu_nodes("elastic", 1, tier="elastic", gpus=8)
    kube.create_job(gpu_job("long", gpus=1, pool="elastic", run_duration="4s"))

    def running_pod() -> object | None:
        pods = [p for p in job_pods(kube, "long") if p.status.phase == "Running"]
        return pods[0] if pods else None

    wait_until(running_pod, timeout_seconds=30, what="the job's pod Running")
    assert not job_condition(kube, "long", "Complete")
    wait_job_complete(kube, "long", timeout_seconds=30)


def test_gpu_requests_beyond_node_capacity_stay_pending(kube: KubeTest) -> None:
    kube.create_gpu_nodes("small", 2, tier="elastic", gpus=2)
    kube.create_job(gpu_job("too-big", gpus=4, pool="small"))

    def unschedulable_reason() -> str | None:
        for pod in job_pods(kube, "too-big"):
            for c in pod.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False":
                    return f"{c.reason}: {c.message}"
        return None

    reason = wait_until(unschedulable_reason, timeout_seconds=30, what="FailedScheduling")
    assert "Unschedulable" in reason
    assert "nvidia.com/gpu" in reason
    assert all(not p.spec.node_name for p in job_pods(kube, "too-big"))


def test_spot_taint_keeps_jobs_without_toleration_off_spot_nodes(kube: KubeTest) -> None:
    kube.create_gpu_nodes("spot", 1, tier="spot", taints=[SPOT_TAINT])
    kube.create_job(gpu_job("intolerant", pool="spot"))
    kube.create_job(gpu_job("tolerant", pool="spot", tolerations=[SPOT_TOLERATION]))

    wait_job_complete(kube, "tolerant")
    pods = job_pods(kube, "intolerant")
    assert pods and all(not p.spec.node_name for p in pods)


def test_suspended_job_is_moved_to_another_pool_and_resumed(kube: KubeTest) -> None:
    kube.create_gpu_nodes("core", 1, tier="core", gpus=8)
    spot_nodes = set(kube.create_gpu_nodes("spot", 1, tier="spot", gpus=8, taints=[SPOT_TAINT]))
    kube.create_job(gpu_job("move-me", gpus=2, pool="core", suspend=True))

    # Suspended and never started: no pods, and the scheduling directives are mutable.
    assert job_pods(kube, "move-me") == []
    kube.batch.patch_namespaced_job(
        "move-me",
        kube.namespace,
        {
            "spec": {
                "template": {
                    "spec": {
                        "nodeSelector": {POOL_LABEL: "spot"},
                        "tolerations": [SPOT_TOLERATION],
                    }
                }
            }
        },
    )
    kube.batch.patch_namespaced_job("move-me", kube.namespace, {"spec": {"suspend": False}})
    wait_job_complete(kube, "move-me")
    assert {p.spec.node_name for p in job_pods(kube, "move-me")} <= spot_nodes


def test_running_job_moves_only_after_suspend_and_start_time_reset(kube: KubeTest) -> None:
    """The full move of a started Job: suspend, pods gone, clear startTime, re-point, resume.

    The apiserver allows pod-template scheduling changes only while the Job is suspended AND
    status.startTime is unset; a Job that ever ran keeps its startTime when suspended, so the
    mover must clear it through the status subresource (as Kueue does).
    """
    kube.create_gpu_nodes("core", 1, tier="core", gpus=8)
    spot_nodes = set(kube.create_gpu_nodes("spot", 1, tier="spot", gpus=8, taints=[SPOT_TAINT]))
    kube.create_job(gpu_job("running", gpus=2, pool="core", run_duration="1h"))
    wait_until(
        lambda: [p for p in job_pods(kube, "running") if p.status.phase == "Running"],
        timeout_seconds=30,
        what="pod Running on core",
    )

    kube.batch.patch_namespaced_job("running", kube.namespace, {"spec": {"suspend": True}})
    wait_until(
        lambda: job_pods(kube, "running") == [] and job_condition(kube, "running", "Suspended"),
        timeout_seconds=30,
        what="pods of the suspended job gone",
    )
    move: dict[str, Any] = {"spec": {"template": {"spec": {"nodeSelector": {POOL_LABEL: "spot"}}}}}
    with pytest.raises(ApiException) as rejected:
        kube.batch.patch_namespaced_job("running", kube.namespace, move)
    assert rejected.value.status == 422
    assert "spec.template" in rejected.value.body
    assert "immutable" in rejected.value.body

    kube.batch.patch_namespaced_job_status(
        "running", kube.namespace, {"status": {"startTime": None}}
    )
    move["spec"]["template"]["spec"]["tolerations"] = [SPOT_TOLERATION]
    move["spec"]["template"]["metadata"] = {"annotations": {"hybridgpu.io/run-duration": "1s"}}
    kube.batch.patch_namespaced_job("running", kube.namespace, move)
    kube.batch.patch_namespaced_job("running", kube.namespace, {"spec": {"suspend": False}})
    wait_job_complete(kube, "running")
    assert {p.spec.node_name for p in job_pods(kube, "running")} <= spot_nodes
