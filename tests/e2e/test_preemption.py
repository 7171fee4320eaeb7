"""Scenario 1: core is full of preemptible work and a critical Job arrives: a preemptible Job
is suspended, moved to the spot pool (which scales up), both complete, and the critical Job
is never touched."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import (
    Cluster,
    Operators,
    core_full_of_preemptible_work,
    pod_unschedulable,
    record_reaction,
    wait_for,
)
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e

MOVE = "hybridgpu.io/move"


def test_critical_job_preempts_preemptible_job_to_spot(
    cluster: Cluster, operators: Operators
) -> None:
    # Long enough to still run when the critical Job arrives, however slowly the operator
    # starts (at load average 20 an 8 s Job finished first and nothing was left to preempt).
    policy, core, spot = core_full_of_preemptible_work(cluster, run_duration="40s")
    core_nodes = {n.metadata.name for n in cluster.pool_nodes(core)}
    operators.start()
    cluster.wait_ticking(policy)

    touched: list[str] = []
    stop = threading.Event()

    def watch_critical() -> None:
        while not stop.is_set():
            job = cluster.job("urgent")
            if job.spec.suspend or MOVE in (job.metadata.annotations or {}):
                touched.append(str(job.spec.suspend))
            time.sleep(0.1)

    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=4, run_duration="3s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )
    watcher = threading.Thread(target=watch_critical, daemon=True)
    watcher.start()
    try:
        wait_for(
            lambda: any(pod_unschedulable(p) for p in cluster.job_pods("urgent")),
            30,
            "critical pod Unschedulable",
            interval=0.05,
        )
        pending_seen = time.monotonic()
        wait_for(
            lambda: (
                MOVE in (cluster.job("batch").metadata.annotations or {})
                or cluster.job("batch").spec.suspend
            ),
            30,
            "preemptible Job suspended",
            interval=0.05,
        )
        record_reaction("preempt", time.monotonic() - pending_seen)

        wait_for(lambda: cluster.job_done("urgent"), 60, "critical Job complete")
        wait_for(lambda: cluster.job_done("batch"), 150, "preemptible Job complete")
    finally:
        stop.set()
        watcher.join(timeout=5)

    assert not touched, "the critical Job was suspended or moved"
    urgent_nodes = {p.spec.node_name for p in cluster.job_pods("urgent")}
    assert urgent_nodes <= core_nodes
    batch = cluster.job("batch")
    assert not batch.spec.suspend
    assert MOVE not in (batch.metadata.annotations or {})
    assert batch.spec.template.spec.node_selector == {"hybridgpu.io/pool": spot}
    finished_on = {
        p.spec.node_name for p in cluster.job_pods("batch") if p.status.phase == "Succeeded"
    }
    assert finished_on and all(n.startswith(spot) for n in finished_on), finished_on
    assert cluster.events("Preempt"), "no Preempt Event on the Job"
