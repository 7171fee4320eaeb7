"""Scenario 3: a spot interruption notice on a node: the node is cordoned and drained, its
preemptible Job requeues and completes on another node; the drained node is removed."""

from __future__ import annotations

import time

import pytest

from conftest import (
    KUBE_SECONDS,
    SPOT_TAINT,
    SPOT_TOLERATION,
    TICKS_TO_ACT,
    Cluster,
    Operators,
    wait_for,
)
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
    # The operator is up before the Job runs: it took up to 50 s to start at load 26, and a
    # Job started before it finished on the first node before any interruption was announced.
    operators.start()
    cluster.wait_ticking(policy)
    # Keep the second node out of the way until the first one is busy.
    cluster.kube.core.patch_node(second, {"spec": {"unschedulable": True}})
    cluster.kube.create_job(
        gpu_job(
            "train",
            gpus=4,
            pool=spot,
            # Long enough to still run when the operator's next tick handles the notice.
            run_duration="20s",
            tolerations=[SPOT_TOLERATION],
            labels={"hybridgpu.io/criticality": "preemptible"},
        )
    )
    wait_for(
        lambda: any(
            p.spec.node_name == first and p.status.phase == "Running"
            for p in cluster.job_pods("train")
        ),
        KUBE_SECONDS,
        "Job running on the first spot node",
    )
    cluster.kube.core.patch_node(second, {"spec": {"unschedulable": False}})

    cluster.kube.core.patch_node(
        first, {"metadata": {"annotations": {INTERRUPTION_ANNOTATION: f"{time.time() + 120:.0f}"}}}
    )
    # Deadlines in the operator's ticks: at load 20+ a tick takes seconds, and 20 s for the
    # cordon (60 s for the whole requeue) failed there while the operator was on its way.
    cluster.within_ticks(
        policy,
        lambda: cluster.kube.core.read_node(first).spec.unschedulable,
        "interrupted node cordoned",
    )

    cluster.within_ticks(
        policy,
        lambda: any(p.spec.node_name == second for p in cluster.job_pods("train")),
        "the Job requeued onto the second node",
        ticks=2 * TICKS_TO_ACT,  # suspend, pods gone, resume, then the scheduler binds it
    )
    wait_for(lambda: cluster.job_done("train"), KUBE_SECONDS, "requeued Job complete")
    succeeded = [p for p in cluster.job_pods("train") if p.status.phase == "Succeeded"]
    assert [p.spec.node_name for p in succeeded] == [second]
    cluster.within_ticks(
        policy,
        lambda: first not in {n.metadata.name for n in cluster.pool_nodes(spot)},
        "drained interrupted node removed",
    )
    assert cluster.events("SpotInterruption"), "no SpotInterruption Event"
    job = cluster.job("train")
    assert not job.spec.suspend
