"""Consolidation: preemptible work alone on an elastic node moves to cheaper spot, and the
emptied elastic node is released."""

from __future__ import annotations

import pytest

from conftest import SPOT_TAINT, Cluster, Operators, wait_for
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e


def test_preemptible_job_on_elastic_moves_to_spot_and_elastic_node_goes(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy(
        preemption={"minRuntime": "0s", "restartOverhead": "1s"},
        consolidation={"enabled": True, "minSavingsPerHour": 0.5},
    )
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, idle_for="1s")
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, price=3.0, taints=[SPOT_TAINT], idle_for="10m"
    )
    (elastic_node,) = cluster.cloud_nodes(elastic, 1)
    cluster.kube.create_job(
        gpu_job(
            "sweep", gpus=4, run_duration="8s", labels={"hybridgpu.io/criticality": "preemptible"}
        )
    )
    wait_for(
        lambda: any(
            p.spec.node_name == elastic_node and p.status.phase == "Running"
            for p in cluster.job_pods("sweep")
        ),
        30,
        "Job running on elastic",
    )
    operators.start()

    wait_for(lambda: cluster.job_done("sweep"), 90, "consolidated Job complete")
    finished = [
        p.spec.node_name for p in cluster.job_pods("sweep") if p.status.phase == "Succeeded"
    ]
    assert finished and all(n.startswith(spot) for n in finished), finished
    wait_for(lambda: not cluster.pool_nodes(elastic), 30, "emptied elastic node released")
    consolidate = cluster.events("Consolidate")
    assert consolidate and "saves" in consolidate[0].message
