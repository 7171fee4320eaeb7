"""A StatefulSet serving replica on an on-demand node is never rebalanced (core/rebalance.py: a
StatefulSet cannot surge, and moving a replica takes it down), even with owned GPUs free for
it and a PodDisruptionBudget that would allow one unavailable replica: on the real control
plane (the StatefulSet controller of kube-controller-manager), the pod keeps its node and its
uid, the node is neither cordoned nor released, and the plan says why."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import Cluster, Operators, wait_for

pytestmark = pytest.mark.e2e


def statefulset(name: str, gpus: int) -> dict[str, Any]:
    labels = {"app": name, "hybridgpu.io/criticality": "critical"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "serve",
                            "image": "registry.invalid/model-server:1",
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_a_statefulset_replica_on_demand_stays_where_it_is(
    cluster: Cluster, operators: Operators
) -> None:
    kube = cluster.kube
    name = cluster.name("db")
    apps = client.AppsV1Api(kube.plane.api)
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy)
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, idle_for="1s")
    (cloud_node,) = cluster.cloud_nodes(elastic, 1)
    apps.create_namespaced_stateful_set(kube.namespace, statefulset(name, 4))
    client.PolicyV1Api(kube.plane.api).create_namespaced_pod_disruption_budget(
        kube.namespace,
        {
            "metadata": {"name": name},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
        },
    )
    try:
        wait_for(
            lambda: (
                apps.read_namespaced_stateful_set_status(name, kube.namespace).status.ready_replicas
                == 1
            ),
            60,
            "the replica Ready",
        )
        pod = kube.core.read_namespaced_pod(f"{name}-0", kube.namespace)
        assert pod.spec.node_name == cloud_node
        # Owned GPUs free up: a Deployment replica would now be surged to them.
        cluster.core_nodes(core, 1, gpus=4)
        operators.start()
        cluster.wait_ticking(policy)
        note = f"StatefulSet {kube.namespace}/{name} has a replica on elastic node {cloud_node}"

        def noted() -> bool:
            plan = cluster.policy_status(policy).get("lastPlan") or []
            return any(line.startswith(note) for line in plan)

        wait_for(noted, 60, "the plan saying why the StatefulSet is not rebalanced")
        cluster.wait_ticks(policy, 3)
        now = kube.core.read_namespaced_pod(f"{name}-0", kube.namespace)
        assert (now.metadata.uid, now.spec.node_name) == (pod.metadata.uid, cloud_node)
        assert now.metadata.deletion_timestamp is None
        assert [n.metadata.name for n in cluster.pool_nodes(elastic)] == [cloud_node]
        assert not kube.core.read_node(cloud_node).spec.unschedulable
        assert not cluster.events("Rebalance")
    finally:
        operators.stop_all()
        try:
            apps.delete_namespaced_stateful_set(name, kube.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
