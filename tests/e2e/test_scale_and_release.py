"""Scenario 2: pending standard work beyond core scales the elastic pool by the bin-packed
node count, never above maxNodes; idle nodes are cordoned, drained and removed afterwards."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e


def test_elastic_scales_by_bin_packing_within_max_then_releases_idle_nodes(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy()
    core = cluster.pool(
        "core", tier="core", policy=policy, per_node=4, max_nodes=1, labels={"team": "ml"}
    )
    elastic = cluster.pool(
        "elastic", tier="elastic", policy=policy, per_node=4, max_nodes=2, idle_for="2s"
    )
    (core_node,) = cluster.core_nodes(core, 1, gpus=4)
    operators.start()
    # The pool's labels are put on its nodes.
    wait_for(
        lambda: (cluster.kube.core.read_node(core_node).metadata.labels or {}).get("team") == "ml",
        20,
        "pool label on the core node",
    )

    seen_max = 0
    seen_names: set[str] = set()
    stop = threading.Event()

    def watch_node_count() -> None:
        nonlocal seen_max
        while not stop.is_set():
            nodes = cluster.pool_nodes(elastic)
            seen_max = max(seen_max, len(nodes))
            seen_names.update(n.metadata.name for n in nodes)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_node_count, daemon=True)
    watcher.start()
    try:
        # 4 pods x 4 GPUs: one fits core, three need elastic nodes but maxNodes is 2.
        cluster.kube.create_job(
            gpu_job(
                "wide",
                gpus=4,
                completions=4,
                parallelism=4,
                run_duration="6s",
                labels={"hybridgpu.io/criticality": "standard"},
            )
        )
        wait_for(lambda: len(cluster.pool_nodes(elastic)) == 2, 30, "2 elastic nodes")

        def status_shows_two_nodes_and_the_cap() -> dict[str, Any] | None:
            pool = cluster.pool_object(elastic)
            status = pool.get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            blocked = conds.get("ScalingBlocked", {})
            if (status.get("nodes") or {}).get("total") == 2 and blocked.get("status") == "True":
                return pool
            return None

        pool = wait_for(status_shows_two_nodes_and_the_cap, 20, "GPUPool status")
        status = pool["status"]
        assert status["observedGeneration"] == pool["metadata"]["generation"]
        assert status["gpus"]["total"] == 8
        assert status["costPerHour"] == 20.0
        blocked = next(c for c in status["conditions"] if c["type"] == "ScalingBlocked")
        assert "maxNodes=2" in blocked["message"]
        assert blocked["observedGeneration"] == pool["metadata"]["generation"]
        wait_for(lambda: cluster.job_done("wide"), 90, "Job wide complete")
        pods = cluster.job_pods("wide")
        used_elastic = {p.spec.node_name for p in pods} & seen_names
        assert used_elastic, "no pod ran on the elastic nodes"
        # Work is over: idle nodes go after idleFor (2s), within a few ticks.
        wait_for(lambda: cluster.pool_nodes(elastic) == [], 60, "elastic nodes released")
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert seen_max == 2, f"elastic pool reached {seen_max} nodes with maxNodes=2"
    assert cluster.events("ScaleUp"), "no ScaleUp Event"
    assert cluster.events("ReleaseNode"), "no ReleaseNode Event"
    blocked = cluster.events("ScalingBlocked")
    assert any("maxNodes=2" in e.message for e in blocked), [e.message for e in blocked]
