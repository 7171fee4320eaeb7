"""The Cluster API provider (hybridgpu.cloud.clusterapi) on the real control plane with Cluster
API's own CRDs (sigs.k8s.io/cluster-api), a stand-in MachineSet controller acting on them: it
keeps the shared CapacityProvider contract, scales only through the MachineDeployment's replicas
and removes exactly the Machine it was told to, through the delete-machine annotation."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.clusterapi import DELETE_MACHINE_ANNOTATION, ClusterAPIProvider
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import ControlPlane, KubeTest
from support.provider_contract import CAPACITY_CONTRACT, ProviderHarness
from support.provider_standins import StandInClusterAPI, install_provider_crds

pytestmark = pytest.mark.adapters

GPUS_PER_NODE = 4


def pool_spec(machine_deployment: str, max_nodes: int = 4) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "L40S", "perNode": GPUS_PER_NODE},
            "maxNodes": max_nodes,
            "provider": {
                "type": "clusterapi",
                "clusterapi": {"machineDeployment": machine_deployment},
            },
            "pricing": {"perNodeHour": 12.0},
        }
    )


class ClusterAPIHarness:
    """The provider under the shared contract; one MachineDeployment per pool."""

    def __init__(self, kube: KubeTest, capi: StandInClusterAPI) -> None:
        self.kube = kube
        self.capi = capi
        self.provider: CapacityProvider = ClusterAPIProvider(kubeconfig=str(kube.plane.kubeconfig))

    def new_pool(self, max_nodes: int, replicas: int = 0) -> tuple[str, GPUPoolSpec]:
        name = f"capi-{uuid.uuid4().hex[:6]}"
        self.capi.create_machine_deployment(
            self.kube.namespace,
            name,
            gpus_per_node=GPUS_PER_NODE,
            node_labels={"hybridgpu.io/pool": name},
            replicas=replicas,
        )
        return name, pool_spec(f"{self.kube.namespace}/{name}", max_nodes)

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        self.capi.reconcile()

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        self.capi.reconcile()  # no boot delay: one pass joins every Machine's Node

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        raise NotImplementedError("Cluster API announces no interruptions")

    def replicas(self, pool: str) -> int:
        return int(self.capi.deployment(self.kube.namespace, pool)["spec"]["replicas"])

    def machine_names(self, pool: str) -> list[str]:
        return sorted(m["metadata"]["name"] for m in self.capi.machines(self.kube.namespace, pool))


@pytest.fixture(scope="module")
def cluster_api_crds(kube_cluster: ControlPlane) -> None:
    install_provider_crds(kube_cluster, "CLUSTER_API_CRDS")


@pytest.fixture
def harness(kube: KubeTest, cluster_api_crds: None) -> Iterator[ClusterAPIHarness]:
    capi = StandInClusterAPI(kube.plane)
    try:
        yield ClusterAPIHarness(kube, capi)
    finally:
        capi.close()


@pytest.mark.parametrize("check", CAPACITY_CONTRACT, ids=lambda check: check.__name__)
def test_the_clusterapi_provider_keeps_the_provider_contract(
    check: Callable[[ProviderHarness], None], harness: ClusterAPIHarness
) -> None:
    check(harness)


def test_terminate_marks_exactly_that_machine_before_lowering_replicas(
    harness: ClusterAPIHarness,
) -> None:
    pool, spec = harness.new_pool(4)
    harness.provider.set_target(pool, spec, 3)
    harness.settle(pool, spec)
    harness.wait_booted(pool, spec)
    first, victim, last = harness.machine_names(pool)

    harness.provider.terminate(pool, spec, victim)

    marked = {
        m["metadata"]["name"]: (m["metadata"].get("annotations") or {}).get(
            DELETE_MACHINE_ANNOTATION
        )
        for m in harness.capi.machines(harness.kube.namespace, pool)
    }
    assert marked == {first: None, victim: "hybridgpu", last: None}
    assert harness.replicas(pool) == 2
    # The newest Machine would go first without the annotation; the marked one goes instead.
    harness.settle(pool, spec)
    assert harness.machine_names(pool) == [first, last]
    harness.provider.terminate(pool, spec, victim)  # a late retry lowers nothing
    assert harness.replicas(pool) == 2


def test_a_machine_being_created_is_pending_and_running_once_its_node_joined(
    kube: KubeTest, harness: ClusterAPIHarness
) -> None:
    pool, spec = harness.new_pool(2)
    harness.provider.set_target(pool, spec, 1)
    harness.settle(pool, spec)
    (launching,) = harness.provider.instances(pool, spec)
    assert (launching.state, launching.provider_id) == ("pending", "")

    harness.wait_booted(pool, spec)

    (instance,) = harness.provider.instances(pool, spec)
    (node,) = kube.core.list_node(label_selector=f"hybridgpu.io/pool={pool}").items
    assert instance.state == "running"
    assert instance.provider_id == node.spec.provider_id != ""
    assert node.status.capacity["nvidia.com/gpu"] == str(GPUS_PER_NODE)


def test_replicas_set_above_max_nodes_by_someone_else_are_not_lowered_by_a_scale_up(
    harness: ClusterAPIHarness,
) -> None:
    pool, spec = harness.new_pool(2, replicas=3)

    harness.provider.set_target(pool, spec, 2)

    # Lowering replicas would let Cluster API pick machines, perhaps busy ones: never.
    assert harness.replicas(pool) == 3


def test_terminate_never_touches_a_machine_of_another_deployment(
    harness: ClusterAPIHarness,
) -> None:
    pool, spec = harness.new_pool(2)
    other, other_spec = harness.new_pool(2)
    harness.provider.set_target(other, other_spec, 1)
    harness.settle(other, other_spec)
    (theirs,) = harness.machine_names(other)

    harness.provider.terminate(pool, spec, theirs)

    (machine,) = harness.capi.machines(harness.kube.namespace, other)
    assert DELETE_MACHINE_ANNOTATION not in (machine["metadata"].get("annotations") or {})
    assert harness.replicas(other) == 1


def test_a_missing_machine_deployment_is_an_error_retrying_cannot_fix(
    harness: ClusterAPIHarness,
) -> None:
    spec = pool_spec(f"{harness.kube.namespace}/no-such-md")

    with pytest.raises(ProviderError, match="no-such-md does not exist") as raised:
        harness.provider.set_target("pool", spec, 1)

    assert raised.value.retryable is False


def test_readiness_finds_cluster_apis_api_once_its_crds_are_installed(
    harness: ClusterAPIHarness,
) -> None:
    provider = harness.provider
    assert isinstance(provider, ClusterAPIProvider)
    assert provider.credentials_problem() is None
