"""Pools whose capacity the user already provisions another way: a GPUPool backed by a Karpenter
NodePool and one backed by a Cluster API MachineDeployment each scale up for pending GPU work,
never above maxNodes, and release the node once it is idle.

The operator runs as in every e2e test (``hybridgpu run``); Karpenter's and Cluster API's CRDs
are the real ones, their controllers the stand-ins of tests/support/provider_standins.py, which
turn NodeClaims and Machines into kwok Nodes after a boot delay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from conftest import Cluster, Operators, wait_for
from support.controlplane import ControlPlane, KubeTest, gpu_job
from support.provider_standins import StandInClusterAPI, StandInKarpenter, install_provider_crds

pytestmark = pytest.mark.e2e

GPUS_PER_NODE = 4
BOOT_DELAY_SECONDS = 1.0


@dataclass
class Backend:
    """How one test reads the capacity behind its pool."""

    provider: dict[str, Any]
    machines: Callable[[], list[str]]
    """Names of the NodeClaims or Machines behind the pool, deleting ones included."""
    allowed_nodes: Callable[[], int]
    """Nodes the provider object allows: the NodePool's GPU limit / GPUs per node, or replicas."""


@pytest.fixture
def karpenter(kube_cluster: ControlPlane, kube: KubeTest) -> Iterator[StandInKarpenter]:
    install_provider_crds(kube_cluster, "KARPENTER_CRDS")
    standin = StandInKarpenter(kube.plane, boot_delay_seconds=BOOT_DELAY_SECONDS)
    standin.start()
    try:
        yield standin
    finally:
        standin.close()


@pytest.fixture
def cluster_api(kube_cluster: ControlPlane, kube: KubeTest) -> Iterator[StandInClusterAPI]:
    install_provider_crds(kube_cluster, "CLUSTER_API_CRDS")
    standin = StandInClusterAPI(kube.plane, boot_delay_seconds=BOOT_DELAY_SECONDS)
    standin.start()
    try:
        yield standin
    finally:
        standin.close()


def karpenter_backend(karpenter: StandInKarpenter, pool: str) -> Backend:
    karpenter.create_node_pool(
        pool, gpus_per_node=GPUS_PER_NODE, labels={"hybridgpu.io/pool": pool}
    )

    def allowed_nodes() -> int:
        limits = karpenter.node_pool(pool)["spec"].get("limits") or {}
        return int(limits.get("nvidia.com/gpu", 0)) // GPUS_PER_NODE

    return Backend(
        provider={"type": "karpenter", "karpenter": {"nodePool": pool}},
        machines=lambda: [c["metadata"]["name"] for c in karpenter.claims(pool)],
        allowed_nodes=allowed_nodes,
    )


def cluster_api_backend(capi: StandInClusterAPI, namespace: str, pool: str) -> Backend:
    capi.create_machine_deployment(
        namespace, pool, gpus_per_node=GPUS_PER_NODE, node_labels={"hybridgpu.io/pool": pool}
    )
    return Backend(
        provider={"type": "clusterapi", "clusterapi": {"machineDeployment": f"{namespace}/{pool}"}},
        machines=lambda: [m["metadata"]["name"] for m in capi.machines(namespace, pool)],
        allowed_nodes=lambda: int(capi.deployment(namespace, pool)["spec"].get("replicas") or 0),
    )


@contextmanager
def high_water_marks(cluster: Cluster, backend: Backend, pool: str) -> Iterator[dict[str, int]]:
    """The most machines, allowed nodes and Nodes the pool had at any moment while the block
    ran (polled every 0.2 s), to check a cap was never exceeded, even briefly."""
    seen = {"machines": 0, "allowed": 0, "nodes": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen["machines"] = max(seen["machines"], len(backend.machines()))
            seen["allowed"] = max(seen["allowed"], backend.allowed_nodes())
            seen["nodes"] = max(seen["nodes"], len(cluster.pool_nodes(pool)))
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join(timeout=5)


def provider_pool(
    cluster: Cluster,
    short: str,
    policy: str,
    backend_for: Callable[[str], Backend],
    **spec: Any,
) -> tuple[str, Backend]:
    """An elastic pool of ``GPUS_PER_NODE``-GPU nodes behind the backend's provider."""
    backend = backend_for(cluster.name(short))
    pool = cluster.pool(
        short,
        tier="elastic",
        policy=policy,
        per_node=GPUS_PER_NODE,
        provider=backend.provider,
        **spec,
    )
    assert backend.allowed_nodes() == 0 and backend.machines() == []
    return pool, backend


def scales_up_for_pending_work_within_max_nodes_then_releases_the_idle_node(
    cluster: Cluster, operators: Operators, short: str, backend_for: Callable[[str], Backend]
) -> None:
    policy = cluster.policy()
    pool, backend = provider_pool(cluster, short, policy, backend_for, max_nodes=1, idle_for="2s")
    operators.start()
    with high_water_marks(cluster, backend, pool) as seen:
        # Two pods of one node each; maxNodes is 1, so they take turns on one node.
        cluster.kube.create_job(
            gpu_job(
                "work",
                gpus=GPUS_PER_NODE,
                completions=2,
                parallelism=2,
                run_duration="3s",
                labels={"hybridgpu.io/criticality": "standard"},
            )
        )
        (node,) = wait_for(lambda: cluster.pool_nodes(pool), 60, f"a node of {pool}")
        wait_for(lambda: cluster.job_done("work"), 120, "Job work complete")
        assert {p.spec.node_name for p in cluster.job_pods("work")} == {node.metadata.name}
        # Idle now: released after idleFor (2s), within a few ticks, the machine with it.
        wait_for(lambda: cluster.pool_nodes(pool) == [], 90, f"the idle node of {pool} released")
        wait_for(lambda: backend.machines() == [], 30, f"the machine behind {pool} gone")
    assert backend.allowed_nodes() == 0, "the provider still allows a node nobody asked for"
    assert seen == {"machines": 1, "allowed": 1, "nodes": 1}, seen
    assert cluster.events("ScaleUp"), "no ScaleUp Event"
    assert cluster.events("ReleaseNode"), "no ReleaseNode Event"


def test_a_pool_backed_by_a_karpenter_node_pool_scales_up_and_releases(
    cluster: Cluster, karpenter: StandInKarpenter, operators: Operators
) -> None:
    scales_up_for_pending_work_within_max_nodes_then_releases_the_idle_node(
        cluster, operators, "karp", lambda pool: karpenter_backend(karpenter, pool)
    )


def test_a_pool_backed_by_a_machine_deployment_scales_up_and_releases(
    cluster: Cluster, cluster_api: StandInClusterAPI, operators: Operators
) -> None:
    namespace = cluster.kube.namespace
    scales_up_for_pending_work_within_max_nodes_then_releases_the_idle_node(
        cluster, operators, "capi", lambda pool: cluster_api_backend(cluster_api, namespace, pool)
    )


def budget_caps_what_the_provider_is_allowed(
    cluster: Cluster, operators: Operators, short: str, backend_for: Callable[[str], Backend]
) -> None:
    """The policy's budget holds through the provider: with room for one $10/h node in a
    $15/h budget and work for three, the NodePool's limit or the MachineDeployment's replicas
    never allow a second node, while maxNodes (4) would."""
    policy = cluster.policy(budget={"maxHourlyCost": 15})
    pool, backend = provider_pool(
        cluster, short, policy, backend_for, price=10.0, max_nodes=4, idle_for="10m"
    )
    operators.start()
    cluster.wait_ticking(policy)
    with high_water_marks(cluster, backend, pool) as seen:
        cluster.kube.create_job(
            gpu_job(
                "over",
                gpus=GPUS_PER_NODE,
                completions=3,
                parallelism=3,
                run_duration="1h",
                labels={"hybridgpu.io/criticality": "standard"},
            )
        )
        wait_for(lambda: cluster.pool_nodes(pool), 60, f"a node of {pool}")

        def exceeded() -> bool:
            cond = cluster.condition(policy, "BudgetExceeded")
            return bool(cond and cond["status"] == "True")

        wait_for(exceeded, 60, "BudgetExceeded=True")
        cluster.wait_ticks(policy, 3)  # ticks that saw the pending pods and the budget
    assert len(cluster.pool_nodes(pool)) == 1
    assert seen == {"machines": 1, "allowed": 1, "nodes": 1}, seen
    pending = [p for p in cluster.job_pods("over") if not p.spec.node_name]
    assert len(pending) == 2, "two pods should still wait for budget"


def test_a_budget_holds_through_a_karpenter_node_pool(
    cluster: Cluster, karpenter: StandInKarpenter, operators: Operators
) -> None:
    budget_caps_what_the_provider_is_allowed(
        cluster, operators, "karpb", lambda pool: karpenter_backend(karpenter, pool)
    )


def test_a_budget_holds_through_a_machine_deployment(
    cluster: Cluster, cluster_api: StandInClusterAPI, operators: Operators
) -> None:
    namespace = cluster.kube.namespace
    budget_caps_what_the_provider_is_allowed(
        cluster, operators, "capib", lambda pool: cluster_api_backend(cluster_api, namespace, pool)
    )


def test_owned_machines_behind_a_machine_deployment_are_powered_off_and_on(
    cluster: Cluster, cluster_api: StandInClusterAPI, operators: Operators
) -> None:
    """A core pool of three owned machines behind a MachineDeployment (two on at the start)
    with power: idle nodes with no pods are powered off down to minPoweredOn (1); work for
    two nodes powers one machine on again instead of buying the elastic pool's node; once the
    work is done the extra machine is powered off again. The cloud pool never gets a node."""
    namespace = cluster.kube.namespace
    policy = cluster.policy()
    name = cluster.name("owned")
    cluster_api.create_machine_deployment(
        namespace,
        name,
        gpus_per_node=GPUS_PER_NODE,
        node_labels={"hybridgpu.io/pool": name},
        replicas=2,
    )
    wait_for(lambda: len(cluster.pool_nodes(name)) == 2, 60, "two owned nodes on")
    pool = cluster.pool(
        "owned",
        tier="core",
        policy=policy,
        per_node=GPUS_PER_NODE,
        max_nodes=3,
        provider={"type": "clusterapi", "clusterapi": {"machineDeployment": f"{namespace}/{name}"}},
        power={"minPoweredOn": 1, "idleFor": "2s", "bootTime": "1s"},
    )
    assert pool == name
    cloud = cluster.pool("cloud", tier="elastic", policy=policy, per_node=GPUS_PER_NODE)
    backend = Backend(
        provider={},
        machines=lambda: [m["metadata"]["name"] for m in cluster_api.machines(namespace, name)],
        allowed_nodes=lambda: int(
            cluster_api.deployment(namespace, name)["spec"].get("replicas") or 0
        ),
    )

    def powered_on(count: int) -> Callable[[], bool]:
        return lambda: (
            backend.allowed_nodes() == count
            and len(backend.machines()) == count
            and len(cluster.pool_nodes(pool)) == count
        )

    operators.start()
    with high_water_marks(cluster, backend, pool) as seen:
        wait_for(powered_on(1), 90, "the idle owned nodes powered off down to minPoweredOn=1")
        assert cluster.events("PowerOff"), "no PowerOff Event"
        cluster.wait_ticks(policy, 2)
        assert powered_on(1)(), "powered off below minPoweredOn"
        cluster.kube.create_job(
            gpu_job(
                "work",
                gpus=GPUS_PER_NODE,
                completions=2,
                parallelism=2,
                run_duration="15s",
                labels={"hybridgpu.io/criticality": "standard"},
            )
        )
        wait_for(
            lambda: (
                len({p.spec.node_name for p in cluster.job_pods("work") if p.spec.node_name}) == 2
            ),
            90,
            "both pods of work running on owned nodes",
        )
        assert cluster.events("PowerOn"), "no PowerOn Event"
        owned_nodes = {n.metadata.name for n in cluster.pool_nodes(pool)}
        assert {p.spec.node_name for p in cluster.job_pods("work")} <= owned_nodes
        wait_for(lambda: cluster.job_done("work"), 120, "Job work complete")
        wait_for(powered_on(1), 90, "the extra owned machine powered off again")
    assert cluster.pool_nodes(cloud) == [], "a cloud node was bought while owned machines were off"
    assert seen == {"machines": 2, "allowed": 2, "nodes": 2}, seen
