"""Faults of the control plane under a running operator: kube-apiserver restarted in the
middle of a Job's move, etcd restarted while a scale-up boots.

These tests restart components, so the module runs on a control plane of its own (started
here, stopped at the end) instead of the session's.

Afterwards every Job completes, none is left suspended or with its move open, and no pool
got a second node for the same demand.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from conftest import Cluster, Operators, core_full_of_preemptible_work, wait_for
from support.controlplane import (
    ControlPlane,
    gpu_job,
    install_crds,
    restart_component,
    start_control_plane,
    stop_control_plane,
)

pytestmark = pytest.mark.e2e

MOVE = "hybridgpu.io/move"
HOLD = "hybridgpu.io/test-hold"
CRITICALITY = "hybridgpu.io/criticality"
T = TypeVar("T")


@pytest.fixture(scope="module")
def kube_cluster() -> Iterator[ControlPlane]:
    """A control plane for this module alone: its components are restarted."""
    plane = start_control_plane(f"pytest-faults-{os.getpid()}")
    try:
        install_crds(plane)
        yield plane
    finally:
        stop_control_plane(plane)


def tolerant(probe: Callable[[], T]) -> Callable[[], T | None]:
    """``probe``, or None while the apiserver does not answer (it is being restarted)."""

    def call() -> T | None:
        try:
            return probe()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            status = err.status if isinstance(err, ApiException) else None
            if status and 400 <= status < 500 and status != 429:
                raise
            return None

    return call


class NodeNames:
    """Every Node name a pool has had, polled in the background through apiserver outages."""

    def __init__(self, cluster: Cluster, pool: str) -> None:
        self.cluster = cluster
        self.pool = pool
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> NodeNames:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.poll()

    def poll(self) -> None:
        names = tolerant(lambda: [n.metadata.name for n in self.cluster.pool_nodes(self.pool)])()
        self.seen.update(names or [])

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.poll()


def hold_pod(cluster: Cluster, pod: str, hold: bool) -> bool:
    """Put the test's finalizer on ``pod`` (it stays Terminating when deleted) or lift it."""
    try:
        cluster.kube.core.patch_namespaced_pod(
            pod, cluster.kube.namespace, {"metadata": {"finalizers": [HOLD] if hold else None}}
        )
    except ApiException as err:
        if err.status != 404:
            raise
    return True


def job_annotations(cluster: Cluster, name: str) -> dict[str, str]:
    return dict(cluster.job(name).metadata.annotations or {})


def test_apiserver_restarted_mid_move_leaves_no_job_suspended_and_launches_once(
    cluster: Cluster, operators: Operators, kube_cluster: ControlPlane
) -> None:
    # The preemptible Job must still run when the critical one arrives, however long the
    # operator takes to start on a loaded machine (it took 50 s at load average 26).
    policy, core, spot = core_full_of_preemptible_work(cluster, run_duration="40s")
    core_nodes = {n.metadata.name for n in cluster.pool_nodes(core)}
    operator = operators.start()
    cluster.wait_ticking(policy, timeout_seconds=180)

    # A finalizer of the test holds the preemptible pod: the move stops at "wait for the
    # pods to go" until the test lets it go, so the apiserver is down mid-move for certain.
    (held,) = [p.metadata.name for p in cluster.job_pods("batch")]
    hold_pod(cluster, held, True)
    try:
        with NodeNames(cluster, spot) as spot_nodes:
            cluster.kube.create_job(
                gpu_job("urgent", gpus=4, run_duration="3s", labels={CRITICALITY: "critical"})
            )
            wait_for(
                lambda: MOVE in job_annotations(cluster, "batch"),
                60,
                "the preemptible Job's move recorded",
                interval=0.05,
            )
            restart_component(kube_cluster, "kube-apiserver")
            batch = wait_for(tolerant(lambda: cluster.job("batch")), 60, "the apiserver back")
            assert MOVE in (batch.metadata.annotations or {}), "the move was not open"
            assert batch.spec.suspend
            hold_pod(cluster, held, False)

            wait_for(tolerant(lambda: cluster.job_done("urgent")), 120, "critical Job complete")
            wait_for(tolerant(lambda: cluster.job_done("batch")), 300, "moved Job complete")
    finally:
        tolerant(lambda: hold_pod(cluster, held, False))()

    batch = cluster.job("batch")
    assert not batch.spec.suspend
    assert MOVE not in (batch.metadata.annotations or {})
    assert batch.spec.template.spec.node_selector == {"hybridgpu.io/pool": spot}
    assert {p.spec.node_name for p in cluster.job_pods("urgent")} <= core_nodes
    assert len(spot_nodes.seen) == 1, f"spot nodes launched for one Job: {spot_nodes.seen}"
    finished_on = {
        p.spec.node_name for p in cluster.job_pods("batch") if p.status.phase == "Succeeded"
    }
    assert finished_on == spot_nodes.seen
    assert operator.alive(), operator.log()[-3000:]
    core_node = cluster.kube.core.read_node(sorted(core_nodes)[0])
    assert not core_node.spec.unschedulable


def test_etcd_restarted_while_a_scale_up_boots_launches_once_and_the_job_completes(
    cluster: Cluster, operators: Operators, kube_cluster: ControlPlane
) -> None:
    policy = cluster.policy()
    elastic = cluster.pool(
        "elastic",
        tier="elastic",
        policy=policy,
        per_node=4,
        max_nodes=3,
        idle_for="10m",
        provider={"type": "kwok", "kwok": {"bootDelay": "4s"}},
    )
    operator = operators.start()
    cluster.wait_ticking(policy, timeout_seconds=180)

    def provisioning() -> int:
        status: dict[str, Any] = cluster.pool_object(elastic).get("status") or {}
        return int((status.get("nodes") or {}).get("provisioning") or 0)

    with NodeNames(cluster, elastic) as elastic_nodes:
        cluster.kube.create_job(
            gpu_job(
                "train", gpus=4, pool=elastic, run_duration="5s", labels={CRITICALITY: "standard"}
            )
        )
        wait_for(provisioning, 60, "a node of the elastic pool provisioning")
        restart_component(kube_cluster, "etcd")
        wait_for(tolerant(lambda: cluster.job_done("train")), 180, "the Job complete")
        # Ticks that began after the Job completed saw no demand left: nothing more launches.
        wait_for(tolerant(lambda: cluster.policy_status(policy).get("lastTick")), 60, "a tick")
        cluster.wait_ticks(policy, 2)

    assert len(elastic_nodes.seen) == 1, f"elastic nodes for one Job: {elastic_nodes.seen}"
    assert not cluster.job("train").spec.suspend
    assert operator.alive(), operator.log()[-3000:]
