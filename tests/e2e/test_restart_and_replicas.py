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
    KUBE_SECONDS,
    SPOT_TOLERATION,
    TICKS_TO_ACT,
    Cluster,
    Operators,
    core_full_of_preemptible_work,
    pod_unschedulable,
    wait_for,
)
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e

MOVE = "hybridgpu.io/move"
LEASE = "hybridgpu-operator"


def move_annotation(cluster: Cluster, job: str) -> dict[str, Any] | None:
    raw = (cluster.job(job).metadata.annotations or {}).get(MOVE)
    return json.loads(raw) if raw else None


def assert_moved_and_complete(cluster: Cluster, policy: str, spot: str) -> None:
    """The (re)started operator finishes the move within a few of its ticks; the control
    plane then runs the Job on spot (a hang guard, not a deadline: 90 s for both, counted
    from an operator start that took up to 50 s at load 26, failed while on its way)."""
    cluster.wait_ticking(policy)

    def moved() -> bool:
        job = cluster.job("batch")
        return MOVE not in (job.metadata.annotations or {}) and not job.spec.suspend

    cluster.within_ticks(policy, moved, "move finished, Job resumed", ticks=2 * TICKS_TO_ACT)
    wait_for(lambda: cluster.job_done("batch"), KUBE_SECONDS, "moved Job complete")
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
    # The operator ticks before the preemptible Job starts: with the Job started first, an
    # operator slow to start (50 s at load 26) found it finished, and nothing to move.
    first = operators.start("replica-a")
    policy, _, spot = core_full_of_preemptible_work(
        cluster, run_duration="20s", before_the_job=cluster.wait_ticking
    )
    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=4, run_duration="2s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )
    cluster.within_ticks(
        policy, lambda: move_annotation(cluster, "batch"), "move recorded", interval=0.05
    )
    first.kill()
    intent = move_annotation(cluster, "batch")
    assert intent is not None and intent["to"] == spot
    assert cluster.job("batch").spec.suspend, "the move must suspend the Job first"

    operators.start("replica-a")  # same pod name after a container restart
    assert_moved_and_complete(cluster, policy, spot)
    wait_for(lambda: cluster.job_done("urgent"), KUBE_SECONDS, "critical Job complete")


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
    # Not suspended, the intent-only Job runs on core until the operator moves it; an
    # operator started after the intent raced it (one took 50 s to start at load 26, and a
    # 20 s Job had finished on core): there, the operator is up first and the intent comes
    # while it ticks, which is what it reads after a restart too (moves live on the Jobs).
    duration = "20s" if step == "intent-only" else "6s"
    if step == "intent-only":
        operators.start()
    policy, _, spot = core_full_of_preemptible_work(
        cluster,
        run_duration=duration,
        before_the_job=cluster.wait_ticking if step == "intent-only" else None,
    )
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
    if step != "intent-only":
        operators.start()
    assert_moved_and_complete(cluster, policy, spot)


def test_move_into_a_deleted_pool_rolls_back(cluster: Cluster, operators: Operators) -> None:
    policy, core, _ = core_full_of_preemptible_work(cluster)
    intent = {"to": "no-such-pool", "from": core, "step": "suspend", "since": time.time()}
    cluster.kube.batch.patch_namespaced_job(
        "batch",
        cluster.kube.namespace,
        {"metadata": {"annotations": {MOVE: json.dumps(intent)}}, "spec": {"suspend": True}},
    )
    operators.start()
    cluster.wait_ticking(policy)
    cluster.within_ticks(
        policy,
        lambda: MOVE not in (cluster.job("batch").metadata.annotations or {}),
        "move rolled back",
        ticks=2 * TICKS_TO_ACT,
    )
    wait_for(lambda: cluster.job_done("batch"), KUBE_SECONDS, "rolled-back Job complete")
    job = cluster.job("batch")
    assert not job.spec.suspend and MOVE not in (job.metadata.annotations or {})
    assert job.spec.template.spec.node_selector == {"hybridgpu.io/pool": core}


def test_two_replicas_only_the_lease_holder_acts(cluster: Cluster, operators: Operators) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, max_nodes=4)
    a = operators.start("replica-a")
    b = operators.start("replica-b")
    cluster.wait_ticking(policy)
    # The first Job holds its node to the end of the test, so the second one needs a node of
    # its own. (With a 60 s Job, on a loaded machine the first one ended before the standby
    # took over, the second Job ran on its node, and "two nodes" never came.)
    cluster.kube.create_job(
        gpu_job(
            "one-node", gpus=4, run_duration="1h", labels={"hybridgpu.io/criticality": "standard"}
        )
    )
    cluster.within_ticks(policy, lambda: len(cluster.pool_nodes(elastic)) == 1, "one elastic node")
    # ... and the first Job's pod on it: a pod the scheduler had found no room for waits out
    # its back-off before it is tried again, and a new pod created meanwhile took the node
    # first (seen: the second Job ran there, so no second node was needed, and CI failed).
    wait_for(
        lambda: any(p.spec.node_name for p in cluster.job_pods("one-node")),
        KUBE_SECONDS,
        "the first Job's pod on the elastic node",
    )
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
    # The ticks are counted from when the scheduler has found no room for the new pod: how
    # fast the Job controller and the scheduler get there is not the operator's doing (at
    # the end of a full run, with many namespaces being deleted, it took longer than the
    # standby's first ticks, which then had nothing to act on and the count ran out).
    wait_for(
        lambda: any(pod_unschedulable(p) or p.spec.node_name for p in cluster.job_pods("second")),
        KUBE_SECONDS,
        "the second Job's pod Unschedulable (or, if the standby was that quick, placed)",
    )
    # No tick while nobody leads: the standby takes the lease once it expires (3 s).
    cluster.within_ticks(policy, lambda: len(cluster.pool_nodes(elastic)) == 2, "standby scaled up")
    assert "scale_up" in standby.log()
