"""Serving rebalance on the real control plane: a Deployment replica on an on-demand node moves
to owned GPUs that freed up by surge (the new replica Ready before the cloud one goes), with
its Ready replicas never below what it asks for, and the emptied cloud node is released. A
restarted operator finishes a rebalance it started; a Deployment an HPA scales is left alone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import Cluster, Operators, wait_for
from support.controlplane import KubeTest

pytestmark = pytest.mark.e2e

REBALANCE = "hybridgpu.io/rebalance"


def deployment(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    labels = {"app": name, "hybridgpu.io/criticality": "critical"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
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


class ReadyWatch:
    """Polls a Deployment's readyReplicas and its Ready pods in a thread, throughout a
    test: the lowest of each it saw."""

    def __init__(self, kube: KubeTest, name: str) -> None:
        self.kube = kube
        self.name = name
        self.apps = client.AppsV1Api(kube.plane.api)
        self.min_ready_replicas = 1 << 30
        self.min_ready_pods = 1 << 30
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            dep = self.apps.read_namespaced_deployment_status(self.name, self.kube.namespace)
            pods = self.kube.core.list_namespaced_pod(
                self.kube.namespace, label_selector=f"app={self.name}"
            ).items
            ready = sum(
                1
                for p in pods
                if p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            )
            self.min_ready_replicas = min(self.min_ready_replicas, dep.status.ready_replicas or 0)
            self.min_ready_pods = min(self.min_ready_pods, ready)
            self.samples += 1
            self._stop.wait(0.05)

    @contextmanager
    def running(self) -> Iterator[ReadyWatch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)


def _setup(
    cluster: Cluster, name: str, *, replicas: int = 2, gpus: int = 4, first_core_gpus: int = 4
) -> tuple[str, str, str]:
    """One core node and one on-demand node (4 GPUs), holding the replicas of a Deployment
    of ``gpus``-GPU pods: the core node what fits, the on-demand node the rest (a
    PodDisruptionBudget allows no unavailable replica); then a second core node with 4 GPUs
    appears (owned GPUs free up)."""
    kube = cluster.kube
    policy_name = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy_name)
    elastic = cluster.pool("elastic", tier="elastic", policy=policy_name, idle_for="1h")
    cluster.core_nodes(core, 1, gpus=first_core_gpus)
    (cloud_node,) = cluster.cloud_nodes(elastic, 1)
    apps = client.AppsV1Api(kube.plane.api)
    apps.create_namespaced_deployment(kube.namespace, deployment(name, replicas, gpus))
    client.PolicyV1Api(kube.plane.api).create_namespaced_pod_disruption_budget(
        kube.namespace,
        {
            "metadata": {"name": name},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": name}}},
        },
    )
    wait_for(
        lambda: (
            (apps.read_namespaced_deployment_status(name, kube.namespace).status.ready_replicas)
            == replicas
        ),
        60,
        "every replica Ready",
    )
    on_cloud = [p for p in _pods(kube, name) if p.spec.node_name == cloud_node]
    assert len(on_cloud) == replicas - first_core_gpus // gpus, on_cloud
    kube.create_gpu_nodes(core, 1, tier="core", gpus=4, name_prefix=f"{cluster.prefix}-free-")
    return policy_name, elastic, cloud_node


def _pods(kube: KubeTest, name: str) -> list[Any]:
    return [
        p
        for p in kube.core.list_namespaced_pod(kube.namespace, label_selector=f"app={name}").items
        if p.metadata.deletion_timestamp is None
    ]


def _delete(kube: KubeTest, apps: client.AppsV1Api, name: str) -> None:
    try:
        apps.delete_namespaced_deployment(name, kube.namespace, propagation_policy="Foreground")
    except ApiException as exc:
        if exc.status != 404:
            raise
    wait_for(lambda: not _pods(kube, name), 60, f"pods of {name} gone")


def _annotations(apps: client.AppsV1Api, kube: KubeTest, name: str) -> dict[str, str]:
    return dict(apps.read_namespaced_deployment(name, kube.namespace).metadata.annotations or {})


def test_a_replica_on_demand_moves_to_owned_gpus_with_none_unavailable(
    cluster: Cluster, operators: Operators
) -> None:
    kube = cluster.kube
    name = cluster.name("web")
    apps = client.AppsV1Api(kube.plane.api)
    try:
        policy, elastic, cloud_node = _setup(cluster, name)
        with ReadyWatch(kube, name).running() as watch:
            op = operators.start()
            wait_for(lambda: not cluster.pool_nodes(elastic), 120, "the cloud node released")
            wait_for(
                lambda: (
                    REBALANCE not in _annotations(apps, kube, name)
                    and apps.read_namespaced_deployment(name, kube.namespace).spec.replicas == 2
                ),
                30,
                "the rebalance finished",
            )
        assert watch.samples > 10
        assert watch.min_ready_replicas >= 2, watch.min_ready_replicas
        assert watch.min_ready_pods >= 2, watch.min_ready_pods
        pods = _pods(kube, name)
        assert len(pods) == 2
        assert all(p.spec.node_name != cloud_node for p in pods)
        nodes = {n.metadata.name: n for n in kube.core.list_node().items}
        assert all(
            nodes[p.spec.node_name].metadata.labels["hybridgpu.io/tier"] == "core" for p in pods
        )
        started = cluster.events("Rebalance")
        assert started and "surge Deployment" in started[0].message, started
        done = cluster.events("Rebalanced")
        assert done and "no replica unavailable" in done[0].message, done
        metrics = op.metrics()
        assert "hybridgpu_rebalances_total{" in metrics
        assert any(
            line.startswith("hybridgpu_rebalances_total{")
            and 'result="completed"' in line
            and line.endswith(" 1.0")
            for line in metrics.splitlines()
        ), [m for m in metrics.splitlines() if "rebalances" in m]
        assert cluster.policy_status(policy).get("lastTick")
    finally:
        operators.stop_all()
        _delete(kube, apps, name)


def test_two_replicas_on_one_cloud_node_surge_together(
    cluster: Cluster, operators: Operators
) -> None:
    kube = cluster.kube
    name = cluster.name("two")
    apps = client.AppsV1Api(kube.plane.api)
    try:
        _, elastic, cloud_node = _setup(cluster, name, replicas=3, gpus=2, first_core_gpus=2)
        with ReadyWatch(kube, name).running() as watch:
            operators.start()
            wait_for(lambda: REBALANCE in _annotations(apps, kube, name), 60, "a rebalance started")
            intent = json.loads(_annotations(apps, kube, name)[REBALANCE])
            assert len(intent["pods"]) == 2 and intent["replicas"] == 3, intent
            wait_for(lambda: not cluster.pool_nodes(elastic), 120, "the cloud node released")
            wait_for(
                lambda: (
                    REBALANCE not in _annotations(apps, kube, name)
                    and apps.read_namespaced_deployment(name, kube.namespace).spec.replicas == 3
                ),
                30,
                "the rebalance finished",
            )
        assert watch.min_ready_replicas >= 3 and watch.min_ready_pods >= 3
        pods = _pods(kube, name)
        assert len(pods) == 3 and all(p.spec.node_name != cloud_node for p in pods)
    finally:
        operators.stop_all()
        _delete(kube, apps, name)


def test_a_restarted_operator_finishes_the_surge_it_started(
    cluster: Cluster, operators: Operators
) -> None:
    kube = cluster.kube
    name = cluster.name("api")
    apps = client.AppsV1Api(kube.plane.api)
    try:
        _, elastic, cloud_node = _setup(cluster, name)
        with ReadyWatch(kube, name).running() as watch:
            first = operators.start()
            wait_for(lambda: REBALANCE in _annotations(apps, kube, name), 60, "a rebalance started")
            first.kill()  # SIGKILL mid-move: nothing is cleaned up
            dep = apps.read_namespaced_deployment(name, kube.namespace)
            assert dep.spec.replicas in (2, 3)
            operators.start()
            wait_for(lambda: not cluster.pool_nodes(elastic), 120, "the cloud node released")
            wait_for(
                lambda: (
                    REBALANCE not in _annotations(apps, kube, name)
                    and apps.read_namespaced_deployment(name, kube.namespace).spec.replicas == 2
                ),
                30,
                "the rebalance finished",
            )
        assert watch.min_ready_replicas >= 2 and watch.min_ready_pods >= 2
        assert all(p.spec.node_name != cloud_node for p in _pods(kube, name))
    finally:
        operators.stop_all()
        _delete(kube, apps, name)


def test_an_autoscaled_deployment_is_left_where_it_is(
    cluster: Cluster, operators: Operators
) -> None:
    kube = cluster.kube
    name = cluster.name("hpa")
    apps = client.AppsV1Api(kube.plane.api)
    try:
        policy, elastic, cloud_node = _setup(cluster, name)
        client.AutoscalingV2Api(kube.plane.api).create_namespaced_horizontal_pod_autoscaler(
            kube.namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": name,
                    },
                    "minReplicas": 2,
                    "maxReplicas": 4,
                },
            },
        )
        operators.start()
        cluster.wait_ticking(policy)
        cluster.wait_ticks(policy, 2)
        assert REBALANCE not in _annotations(apps, kube, name)
        assert cloud_node in {p.spec.node_name for p in _pods(kube, name)}
        assert [n.metadata.name for n in cluster.pool_nodes(elastic)] == [cloud_node]
        assert not kube.core.read_node(cloud_node).spec.unschedulable
        plan = cluster.policy_status(policy).get("lastPlan") or []
        assert any("HorizontalPodAutoscaler" in line for line in plan), plan
    finally:
        operators.stop_all()
        _delete(kube, apps, name)
