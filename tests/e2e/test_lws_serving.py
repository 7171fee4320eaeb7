"""A LeaderWorkerSet with the real LeaderWorkerSet controller (built from sigs.k8s.io/lws,
hack/lws.sh, its webhooks registered) and the operator as a subprocess, on the real control
plane: a serving group (a leader and its worker, 8 GPUs each) gets capacity as a gang, both
nodes in one scale-up or none, and once it serves on on-demand nodes it is never disrupted or
rebalanced, though owned GPUs are free for it (core/rebalance.py: a group cannot surge)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import ControlPlane, KubeTest
from support.customobjects import CreatedObjects, created_objects
from support.lws import lws_controller
from support.workloads import pod_template

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


@pytest.fixture(scope="module")
def lws_running(
    kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    with lws_controller(kube_cluster, tmp_path_factory.mktemp("lws")):
        yield


@pytest.fixture
def leaderworkersets(kube: KubeTest, lws_running: None) -> Iterator[CreatedObjects]:
    """The LeaderWorkerSets the test created: deleted (with their pods) after it."""
    with created_objects(
        kube,
        GROUP,
        VERSION,
        PLURAL,
        gone=lambda o: (
            not o.kube.core.list_namespaced_pod(o.kube.namespace, label_selector=NAME_LABEL).items
        ),
        timeout_seconds=90,
        what="the LeaderWorkerSets' pods gone",
    ) as objects:
        yield objects


def leaderworkerset(name: str, size: int, gpus: int) -> dict[str, Any]:
    """A critical LeaderWorkerSet of one group: a leader and ``size - 1`` workers, ``gpus``
    GPUs each."""
    labels = {"hybridgpu.io/criticality": "critical"}
    template = pod_template(gpus, labels=labels, container="serve")
    template["spec"]["restartPolicy"] = "Always"
    template["spec"]["terminationGracePeriodSeconds"] = 0
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template,
                "workerTemplate": template,
            },
        },
    }


def group_pods(kube: KubeTest, name: str) -> list[Any]:
    return [
        p
        for p in kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"{NAME_LABEL}={name}"
        ).items
        if p.metadata.deletion_timestamp is None
    ]


def test_an_lws_group_gets_its_nodes_as_a_gang_and_is_never_rebalanced(
    cluster: Cluster, operators: Operators, leaderworkersets: CreatedObjects
) -> None:
    kube = cluster.kube
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, per_node=8, max_nodes=1)
    operators.start()
    cluster.wait_ticking(policy)

    name = cluster.name("llm")
    body = leaderworkerset(name, size=2, gpus=8)
    leaderworkersets.create(body)
    # The controller made the leader, and (through its pod webhook's group label) the worker.
    wait_for(lambda: len(group_pods(kube, name)) == 2, 90, "the group's leader and worker")
    # maxNodes=1 cannot hold the group: no node is bought for half of it.
    wait_for(lambda: cluster.events("ScalingBlocked"), 60, "the group reported blocked")
    cluster.wait_ticks(policy, 2)
    assert cluster.pool_nodes(elastic) == []
    assert all(p.spec.node_name is None for p in group_pods(kube, name))

    cluster.kube.custom.patch_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", "gpupools", elastic, {"spec": {"maxNodes": 2}}
    )

    def serving() -> bool:
        pods = group_pods(kube, name)
        return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

    wait_for(serving, 150, "the group running on two new nodes")
    messages = [e.message for e in cluster.events("ScaleUp") if e.involved_object.name == elastic]
    assert messages and all("add 2 " in m for m in messages), messages
    before = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in group_pods(kube, name)}
    cloud_nodes = {node for _, node in before.values()}
    assert cloud_nodes == {n.metadata.name for n in cluster.pool_nodes(elastic)}

    # Owned GPUs free up for both pods: a Deployment's replicas would now surge to them.
    core = cluster.pool("core", tier="core", policy=policy, per_node=8, max_nodes=2)
    cluster.core_nodes(core, 2, gpus=8)
    note = f"LeaderWorkerSet {kube.namespace}/{name} has a replica on elastic node"

    def noted() -> bool:
        plan = cluster.policy_status(policy).get("lastPlan") or []
        return any(line.startswith(note) for line in plan)

    wait_for(noted, 60, "the plan saying why the LeaderWorkerSet is not rebalanced")
    cluster.wait_ticks(policy, 3)
    after = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in group_pods(kube, name)}
    assert after == before
    assert {n.metadata.name for n in cluster.pool_nodes(elastic)} == cloud_nodes
    assert not any(kube.core.read_node(n).spec.unschedulable for n in cloud_nodes)
    assert not cluster.events("Rebalance")
