"""Scenario 3: a spot interruption notice on a node: the node is cordoned and drained, its
preemptible Job requeues and completes on another node; the drained node is removed."""

from __future__ import annotations

import time

import pytest

from conftest import SPOT_TAINT, SPOT_TOLERATION, Cluster, Operators, wait_for
from hybridgpu.cloud.kwok import INTERRUPTION_ANNOTATION
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e


def test_interrupted_spot_node_is_drained_and_its_job_completes_elsewhere(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy()
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=4,
        max_nodes=3,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="10m",
    )
    first, second = cluster.cloud_nodes(spot, 2)
    # Keep the second node out of the way until the first one is busy.
    cluster.kube.core.patch_node(second, {"spec": {"unschedulable": True}})
    cluster.kube.create_job(
        gpu_job(
            "train",
            gpus=4,
            pool=spot,
            run_duration="6s",
            tolerations=[SPOT_TOLERATION],
            labels={"hybridgpu.io/criticality": "preemptible"},
        )
    )
    wait_for(
        lambda: any(
            p.spec.node_name == first and p.status.phase == "Running"
            for p in cluster.job_pods("train")
        ),
        30,
        "Job running on the first spot node",
    )
    cluster.kube.core.patch_node(second, {"spec": {"unschedulable": False}})
    operators.start()
    cluster.wait_ticking(policy)

    cluster.kube.core.patch_node(
        first, {"metadata": {"annotations": {INTERRUPTION_ANNOTATION: f"{time.time() + 120:.0f}"}}}
    )
    wait_for(
        lambda: cluster.kube.core.read_node(first).spec.unschedulable,
        20,
        "interrupted node cordoned",
    )
    wait_for(lambda: cluster.job_done("train"), 60, "requeued Job complete")
    succeeded = [p for p in cluster.job_pods("train") if p.status.phase == "Succeeded"]
    assert [p.spec.node_name for p in succeeded] == [second]
    wait_for(
        lambda: first not in {n.metadata.name for n in cluster.pool_nodes(spot)},
        30,
        "drained interrupted node removed",
    )
    assert cluster.events("SpotInterruption"), "no SpotInterruption Event"
    job = cluster.job("train")
    assert not job.spec.suspend
