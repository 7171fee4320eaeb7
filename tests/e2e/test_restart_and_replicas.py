"""Scenario 5: the operator is SIGKILLed in the middle of a move and restarted: the move
completes, no Job is left suspended, none is lost (live, and from each recorded step).
Scenario 6: two replicas, only the lease holder acts."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from conftest import (
    SPOT_TOLERATION,
    Cluster,
    Operators,
    core_full_of_preemptible_work,
    wait_for,
)
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e

MOVE = "hybridgpu.io/move"
LEASE = "hybridgpu-operator"


def move_annotation(cluster: Cluster, job: str) -> dict[str, Any] | None:
    raw = (cluster.job(job).metadata.annotations or {}).get(MOVE)
    return json.loads(raw) if raw else None


def assert_moved_and_complete(cluster: Cluster, spot: str) -> None:
    wait_for(lambda: cluster.job_done("batch"), 90, "moved Job complete")
    job = cluster.job("batch")
    assert not job.spec.suspend, "Job left suspended"
    assert MOVE not in (job.metadata.annotations or {}), "move intent left on the Job"
    assert job.spec.template.spec.node_selector == {"hybridgpu.io/pool": spot}
    succeeded = [
        p.spec.node_name for p in cluster.job_pods("batch") if p.status.phase == "Succeeded"
    ]
    assert succeeded and all(n.startswith(spot) for n in succeeded), succeeded


def test_sigkill_in_the_middle_of_a_move_then_restart_completes_it(
    cluster: Cluster, operators: Operators
) -> None:
    policy, _, spot = core_full_of_preemptible_work(cluster)
    first = operators.start("replica-a")
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=4, run_duration="2s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )
    wait_for(lambda: move_annotation(cluster, "batch"), 30, "move recorded", interval=0.05)
    first.kill()
    intent = move_annotation(cluster, "batch")
    assert intent is not None and intent["to"] == spot
    assert cluster.job("batch").spec.suspend, "the move must suspend the Job first"

    operators.start("replica-a")  # same pod name after a container restart
    assert_moved_and_complete(cluster, spot)
    wait_for(lambda: cluster.job_done("urgent"), 60, "critical Job complete")


def suspend_with_intent(cluster: Cluster, spot: str) -> None:
    intent = {"to": spot, "from": None, "step": "suspend", "since": time.time()}
    cluster.kube.batch.patch_namespaced_job(
        "batch",
        cluster.kube.namespace,
        {"metadata": {"annotations": {MOVE: json.dumps(intent)}}, "spec": {"suspend": True}},
    )


@pytest.mark.parametrize("step", ["intent-only", "suspended", "pods-gone", "repinned"])
def test_restart_finishes_a_move_from_each_recorded_step(
    cluster: Cluster, operators: Operators, step: str
) -> None:
    """The state a killed operator leaves behind at each step, then an operator starts."""
    # Not suspended, the Job keeps running on core until the operator moves it: long enough
    # for an operator starting on a loaded machine (6 s was not always).
    duration = "20s" if step == "intent-only" else "6s"
    _, _, spot = core_full_of_preemptible_work(cluster, run_duration=duration)
    ns = cluster.kube.namespace
    intent = {"to": spot, "from": None, "step": "suspend", "since": time.time()}
    if step == "intent-only":  # intent written, suspend lost (e.g. undone by a person)
        cluster.kube.batch.patch_namespaced_job(
            "batch", ns, {"metadata": {"annotations": {MOVE: json.dumps(intent)}}}
        )
    else:
        suspend_with_intent(cluster, spot)
    if step in ("pods-gone", "repinned"):
        wait_for(lambda: not cluster.job_pods("batch"), 30, "suspended Job's pods gone")
    if step == "repinned":
        cluster.kube.batch.patch_namespaced_job_status("batch", ns, {"status": {"startTime": None}})
        intent["step"] = "repinned"
        cluster.kube.batch.patch_namespaced_job(
            "batch",
            ns,
            {
                "metadata": {"annotations": {MOVE: json.dumps(intent)}},
                "spec": {
                    "template": {
                        "spec": {
                            "nodeSelector": {"hybridgpu.io/pool": spot},
                            "tolerations": [SPOT_TOLERATION],
                        }
                    }
                },
            },
        )
    operators.start()
    assert_moved_and_complete(cluster, spot)


def test_move_into_a_deleted_pool_rolls_back(cluster: Cluster, operators: Operators) -> None:
    _, core, _ = core_full_of_preemptible_work(cluster)
    intent = {"to": "no-such-pool", "from": core, "step": "suspend", "since": time.time()}
    cluster.kube.batch.patch_namespaced_job(
        "batch",
        cluster.kube.namespace,
        {"metadata": {"annotations": {MOVE: json.dumps(intent)}}, "spec": {"suspend": True}},
    )
    operators.start()
    wait_for(lambda: cluster.job_done("batch"), 60, "rolled-back Job complete")
    job = cluster.job("batch")
    assert not job.spec.suspend and MOVE not in (job.metadata.annotations or {})
    assert job.spec.template.spec.node_selector == {"hybridgpu.io/pool": core}


def test_two_replicas_only_the_lease_holder_acts(cluster: Cluster, operators: Operators) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, max_nodes=4)
    a = operators.start("replica-a")
    b = operators.start("replica-b")
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "one-node", gpus=4, run_duration="60s", labels={"hybridgpu.io/criticality": "standard"}
        )
    )
    wait_for(lambda: len(cluster.pool_nodes(elastic)) == 1, 30, "one elastic node")
    cluster.wait_ticks(policy)  # the leader's ticks after the node came: still exactly one
    assert len(cluster.pool_nodes(elastic)) == 1

    leases = client.CoordinationV1Api(cluster.kube.plane.api)
    holder = leases.read_namespaced_lease(LEASE, cluster.kube.namespace).spec.holder_identity
    leader, standby = (a, b) if holder == "replica-a" else (b, a)
    assert holder in ("replica-a", "replica-b")
    assert "scale_up" in leader.log()
    assert "scale_up" not in standby.log()

    # The leader dies: the standby takes the lease over and acts.
    leader.kill()
    cluster.kube.create_job(
        gpu_job(
            "second", gpus=4, run_duration="2s", labels={"hybridgpu.io/criticality": "standard"}
        )
    )
    wait_for(lambda: len(cluster.pool_nodes(elastic)) == 2, 30, "standby scaled up")
    assert "scale_up" in standby.log()
