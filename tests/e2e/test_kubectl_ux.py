"""What an SRE sees with kubectl while the operator runs on the real control plane.

`kubectl describe` lists only the Events whose involvedObject.uid is the object's, so an Event
posted without it is invisible there (it shows only in `kubectl get events`). A pool that
names a ScalingPolicy that does not exist (or no longer does) is ticked by nobody: its status
must say so instead of staying "spec is valid" or showing the last tick's counts as current.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from conftest import (
    FINALIZER,
    GROUP,
    KUBE_SECONDS,
    SPOT_TAINT,
    VERSION,
    Cluster,
    Operators,
    wait_for,
)
from support.controlplane import gpu_job

pytestmark = pytest.mark.e2e


def ready(cluster: Cluster, pool: str) -> dict[str, Any]:
    status = cluster.pool_object(pool).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def events_section(cluster: Cluster, kind: str, name: str) -> str:
    """The Events part of `kubectl describe` of one object."""
    text = cluster.kube.kubectl("describe", kind, name).stdout
    return text.split("\nEvents:", 1)[1] if "\nEvents:" in text else ""


def test_describe_shows_the_operators_events_and_a_pool_nobody_ticks_says_why(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, max_nodes=1)
    later = cluster.name("later")  # a ScalingPolicy not created yet
    waiting = cluster.pool(
        "waiting", tier="spot", policy=later, max_nodes=1, taints=[SPOT_TAINT], price=3.0
    )
    op = operators.start()
    cluster.wait_ticking(policy)

    # A pool naming a missing policy: Ready=False PolicyNotFound, and a Warning Event that
    # `kubectl describe` shows.
    wait_for(
        lambda: ready(cluster, waiting).get("reason") == "PolicyNotFound",
        60,
        f"{waiting} Ready=False PolicyNotFound",
    )
    cond = ready(cluster, waiting)
    assert cond["status"] == "False"
    assert f"ScalingPolicy {later!r}, which does not exist" in cond["message"]
    assert "PolicyNotFound" in events_section(cluster, "gpupool", waiting)
    row = cluster.kube.kubectl("get", "gpupool", waiting, "--no-headers").stdout.split()
    assert row[:3] == [waiting, "spot", "PolicyNotFound"], row

    # Two 4-GPU pods, one node of 4 allowed: one scale-up, then blocked by maxNodes. Both
    # are Events on the pool that `kubectl describe gpupool` lists.
    cluster.kube.create_job(
        gpu_job(
            "two",
            gpus=4,
            completions=2,
            parallelism=2,
            run_duration="120s",
            labels={"hybridgpu.io/criticality": "standard"},
        )
    )
    described = cluster.within_ticks(
        policy,
        lambda: (
            (text := events_section(cluster, "gpupool", elastic))
            and "ScaleUp" in text
            and "ScalingBlocked" in text
            and text
        ),
        f"ScaleUp and ScalingBlocked in `kubectl describe gpupool {elastic}`",
        ticks=12,
    )
    assert "maxNodes=1" in described, described
    assert "ScalingBlocked" in events_section(cluster, "scalingpolicy", policy)

    # The policy is created: its first tick takes the waiting pool over.
    cluster.policy("later")
    wait_for(
        lambda: ready(cluster, waiting).get("reason") == "Reconciled",
        60,
        f"{waiting} reconciled once {later} exists",
    )
    assert ready(cluster, waiting)["status"] == "True"

    # The running policy is deleted while its pool has a busy node: the pool says nobody
    # ticks it, and its node is left as it is (nothing releases it behind the user's back).
    nodes = wait_for(
        lambda: [n.metadata.name for n in cluster.pool_nodes(elastic)],
        KUBE_SECONDS,
        f"the node launched for {elastic}",
    )
    assert len(nodes) == 1, nodes
    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "scalingpolicies", policy)
    wait_for(
        lambda: ready(cluster, elastic).get("reason") == "PolicyNotFound",
        60,
        f"{elastic} Ready=False PolicyNotFound after {policy} was deleted",
    )
    assert [n.metadata.name for n in cluster.pool_nodes(elastic)] == nodes
    assert op.alive(), op.log()[-3000:]


def wait_for_finalizers(cluster: Cluster, *pools: str) -> None:
    """Until the operator has put its finalizer on each pool (a deletion before that is not
    the operator's to hold)."""
    wait_for(
        lambda: all(
            FINALIZER in (cluster.pool_object(p)["metadata"].get("finalizers") or []) for p in pools
        ),
        60,
        f"the operator's finalizer on {', '.join(pools)}",
    )


def gone(cluster: Cluster, plural: str, name: str) -> bool:
    try:
        cluster.kube.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_a_cloud_pool_releases_its_nodes_first_and_a_core_pool_leaves_its_own(
    cluster: Cluster, operators: Operators
) -> None:
    """Deleting an elastic pool used to drop it at once and leave its instances running,
    billed and managed by nothing (a rename is a delete and a create: the same). Its nodes are
    now released first (the finalizer waits, the pool says why); an owned pool's nodes are
    never touched."""
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, max_nodes=2)
    core = cluster.pool("core", tier="core", policy=policy, max_nodes=1)
    cloud_nodes = cluster.cloud_nodes(elastic, 1)
    core_nodes = cluster.core_nodes(core, 1)
    operators.start()
    cluster.wait_ticking(policy)
    wait_for_finalizers(cluster, elastic, core)

    for pool in (elastic, core):
        cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
    wait_for(lambda: gone(cluster, "gpupools", core), 60, f"{core} deleted")
    cluster.within_ticks(
        policy,
        lambda: gone(cluster, "gpupools", elastic) and not cluster.pool_nodes(elastic),
        f"{elastic} deleted after its node {cloud_nodes} was released",
        ticks=15,
    )
    assert [n.metadata.name for n in cluster.pool_nodes(core)] == core_nodes
    assert not any(n.spec.unschedulable for n in cluster.pool_nodes(core)), (
        "an owned node was cordoned"
    )


def test_a_pool_deleted_with_its_policy_still_releases_its_nodes_and_dry_run_never_holds_one(
    cluster: Cluster, operators: Operators
) -> None:
    """`kubectl delete -f` of a file with a cloud pool and its policy deletes both at once:
    no tick of the policy is left to drain the pool, so its deletion waited forever (and
    `kubectl delete` with it). The pool's own deletion now releases its nodes. A pool of a
    dryRun policy, which never releases a node, goes at once and says what it left."""
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, max_nodes=2)
    trial = cluster.policy("trial", dryRun=True)
    tried = cluster.pool("tried", tier="elastic", policy=trial, max_nodes=2)
    cloud_nodes = cluster.cloud_nodes(elastic, 1)
    tried_nodes = cluster.cloud_nodes(tried, 1)
    operators.start()
    cluster.wait_ticking(policy)
    cluster.wait_ticking(trial)
    wait_for_finalizers(cluster, elastic, tried)

    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", elastic)
    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "scalingpolicies", policy)
    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", tried)
    wait_for(lambda: gone(cluster, "gpupools", tried), 60, f"{tried} (dryRun) deleted")
    assert [n.metadata.name for n in cluster.pool_nodes(tried)] == tried_nodes
    assert "NodesLeftRunning" in " ".join(
        e.reason or ""
        for e in cluster.kube.core.list_event_for_all_namespaces().items
        if e.involved_object.name == tried
    )
    wait_for(
        lambda: gone(cluster, "gpupools", elastic) and not cluster.pool_nodes(elastic),
        90,
        f"{elastic} deleted with its policy after its node {cloud_nodes} was released",
    )


def test_a_deleted_pool_requeues_the_job_on_its_busy_node_and_a_bare_pod_holds_its_node(
    cluster: Cluster, operators: Operators
) -> None:
    """Deleting an elastic pool whose nodes are in use: the Job on one node is requeued (not
    failed) and that node released; a bare pod is never evicted (nothing would recreate it),
    so its node stays, and the pool, still Draining, names the pod to delete. Nothing is
    launched into the pool being deleted for the requeued Job, which still selects it. Once
    the bare pod is deleted, the last node goes and so does the pool."""
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, max_nodes=3)
    nodes = cluster.cloud_nodes(elastic, 2)
    ns = cluster.kube.namespace
    job = "busy"
    cluster.kube.create_job(gpu_job(job, gpus=4, pool=elastic, run_duration="1h"))
    placed = wait_for(
        lambda: [p.spec.node_name for p in cluster.job_pods(job) if p.spec.node_name],
        KUBE_SECONDS,
        f"the pod of {job} placed on a node of {elastic}",
    )
    busy = placed[0]
    free = next(n for n in nodes if n != busy)
    template = gpu_job("held", gpus=1)["spec"]["template"]
    bare = "bare"
    cluster.kube.core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": bare, **template["metadata"]},
            "spec": {**template["spec"], "nodeName": free},
        },
    )
    wait_for(
        lambda: cluster.kube.core.read_namespaced_pod(bare, ns).status.phase == "Running",
        KUBE_SECONDS,
        f"bare pod {bare} running on {free}",
    )
    operators.start()
    cluster.wait_ticking(policy)
    wait_for_finalizers(cluster, elastic)

    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", elastic)
    cluster.within_ticks(
        policy,
        lambda: busy not in [n.metadata.name for n in cluster.pool_nodes(elastic)],
        f"{busy}, the node of {job}, released",
        ticks=15,
    )
    failed = [c.message for c in cluster.job(job).status.conditions or [] if c.type == "Failed"]
    assert not failed, f"{job} failed instead of being requeued: {failed}"
    assert not [p.metadata.name for p in cluster.job_pods(job) if p.spec.node_name == busy]
    cluster.within_ticks(
        policy,
        lambda: (
            ready(cluster, elastic).get("reason") == "Draining"
            and f"{ns}/{bare} on {free}" in ready(cluster, elastic).get("message", "")
        ),
        f"{elastic} Draining and naming the bare pod {bare} that keeps {free}",
    )
    cluster.wait_ticks(policy, ticks=3)
    assert [n.metadata.name for n in cluster.pool_nodes(elastic)] == [free], (
        "the bare pod's node went, or a node was launched into the pool being deleted"
    )
    assert cluster.kube.core.read_namespaced_pod(bare, ns).spec.node_name == free
    assert not gone(cluster, "gpupools", elastic)

    cluster.kube.core.delete_namespaced_pod(bare, ns, grace_period_seconds=0)
    cluster.within_ticks(
        policy,
        lambda: gone(cluster, "gpupools", elastic) and not cluster.pool_nodes(elastic),
        f"{elastic} deleted after the bare pod and its node {free} went",
        ticks=15,
    )


def test_nodes_of_a_pool_deleted_before_the_operator_held_it_are_reported_then_adopted(
    cluster: Cluster, operators: Operators
) -> None:
    """A cloud pool deleted while no operator ran (so before any finalizer held it) leaves its
    instances running, billed, managed by nothing: the operator now reports each (a Warning
    Event on the Node, the gauge by missing pool) and says how to get it released. A node of
    a live pool is not reported. Re-creating the pool under its name adopts the node, which
    is then released once idle."""
    policy = cluster.policy()
    ghost = cluster.pool("ghost", tier="elastic", policy=policy, max_nodes=2)
    left = cluster.cloud_nodes(ghost, 1)
    live = cluster.pool("live", tier="elastic", policy=policy, max_nodes=2, idle_for="1h")
    kept = cluster.cloud_nodes(live, 1)
    cluster.kube.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", ghost)
    wait_for(lambda: gone(cluster, "gpupools", ghost), 30, f"{ghost} deleted (no finalizer)")
    op = operators.start()
    cluster.wait_ticking(policy)

    series = f'hybridgpu_unmanaged_nodes{{pool="{ghost}"}} 1.0'
    cluster.within_ticks(
        policy,
        lambda: (
            series in op.metrics()
            and any(e.involved_object.name == left[0] for e in cluster.events("UnmanagedNode"))
        ),
        f"{left[0]} reported: the gauge and an UnmanagedNode Event",
    )
    event = next(e for e in cluster.events("UnmanagedNode") if e.involved_object.name == left[0])
    assert event.type == "Warning" and f"no GPUPool '{ghost}' exists" in event.message
    assert event.involved_object.uid, "the Event carries the node's uid (kubectl describe)"
    assert not [e for e in cluster.events("UnmanagedNode") if e.involved_object.name in kept]
    assert f'hybridgpu_unmanaged_nodes{{pool="{live}"}}' not in op.metrics()
    assert [n.metadata.name for n in cluster.pool_nodes(ghost)] == left

    cluster.pool("ghost", tier="elastic", policy=policy, max_nodes=2)
    cluster.within_ticks(
        policy,
        lambda: (
            not cluster.pool_nodes(ghost)
            and f'hybridgpu_unmanaged_nodes{{pool="{ghost}"}}' not in op.metrics()
        ),
        f"{left[0]} adopted by the re-created {ghost} and released once idle",
        ticks=15,
    )
    assert [n.metadata.name for n in cluster.pool_nodes(live)] == kept
