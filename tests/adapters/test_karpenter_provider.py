"""The Karpenter provider (hybridgpu.cloud.karpenter) on the real control plane with Karpenter's
own CRDs (sigs.k8s.io/karpenter), a stand-in Karpenter acting on them: it keeps the shared
CapacityProvider contract, steers Karpenter only through the NodePool's GPU limit and releases
exactly the NodeClaim it was told to."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.karpenter import KarpenterProvider
from hybridgpu.handlers.capacity import Providers
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import ControlPlane, KubeTest
from support.provider_contract import CAPACITY_CONTRACT, ProviderHarness
from support.provider_standins import StandInKarpenter, install_provider_crds

pytestmark = pytest.mark.adapters

GPUS_PER_NODE = 8


def pool_spec(node_pool: str, max_nodes: int = 4) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": GPUS_PER_NODE},
            "maxNodes": max_nodes,
            "provider": {"type": "karpenter", "karpenter": {"nodePool": node_pool}},
            "pricing": {"perNodeHour": 32.0},
        }
    )


class KarpenterHarness:
    """The provider under the shared contract; one NodePool per pool, Karpenter in step."""

    def __init__(self, plane: ControlPlane, karpenter: StandInKarpenter) -> None:
        self.karpenter = karpenter
        self.provider: CapacityProvider = KarpenterProvider(kubeconfig=str(plane.kubeconfig))

    def new_pool(self, max_nodes: int, **node_pool: Any) -> tuple[str, GPUPoolSpec]:
        name = f"karp-{uuid.uuid4().hex[:6]}"
        self.karpenter.create_node_pool(
            name, gpus_per_node=GPUS_PER_NODE, labels={"hybridgpu.io/pool": name}, **node_pool
        )
        return name, pool_spec(name, max_nodes)

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        self.karpenter.reconcile()

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        self.karpenter.reconcile()  # no boot delay: one pass registers every launched claim

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        raise NotImplementedError("Karpenter handles interruptions itself")


@pytest.fixture(scope="module")
def karpenter_crds(kube_cluster: ControlPlane) -> None:
    install_provider_crds(kube_cluster, "KARPENTER_CRDS")


@pytest.fixture
def harness(kube: KubeTest, karpenter_crds: None) -> Iterator[KarpenterHarness]:
    karpenter = StandInKarpenter(kube.plane)
    try:
        yield KarpenterHarness(kube.plane, karpenter)
    finally:
        karpenter.close()


def gpu_limit(h: KarpenterHarness, node_pool: str) -> str:
    return str(h.karpenter.node_pool(node_pool)["spec"]["limits"]["nvidia.com/gpu"])


def claim_names(h: KarpenterHarness, node_pool: str) -> list[str]:
    return sorted(c["metadata"]["name"] for c in h.karpenter.claims(node_pool))


@pytest.mark.parametrize("check", CAPACITY_CONTRACT, ids=lambda check: check.__name__)
def test_the_karpenter_provider_keeps_the_provider_contract(
    check: Callable[[ProviderHarness], None], harness: KarpenterHarness
) -> None:
    check(harness)


def test_a_scale_up_sets_only_the_gpu_limit_capped_at_max_nodes(harness: KarpenterHarness) -> None:
    pool, spec = harness.new_pool(3, limits={"nvidia.com/gpu": "0", "cpu": "1000"})

    harness.provider.set_target(pool, spec, 2)
    assert gpu_limit(harness, pool) == "16"
    harness.provider.set_target(pool, spec, 9)

    limits = harness.karpenter.node_pool(pool)["spec"]["limits"]
    assert limits == {"nvidia.com/gpu": "24", "cpu": "1000"}  # 3 nodes x 8 GPUs; cpu untouched
    assert claim_names(harness, pool) == []  # Karpenter launches, not hybridgpu


def test_terminate_lowers_the_limit_so_karpenter_does_not_replace_the_node(
    harness: KarpenterHarness,
) -> None:
    pool, spec = harness.new_pool(4)
    harness.provider.set_target(pool, spec, 3)
    harness.settle(pool, spec)
    harness.wait_booted(pool, spec)
    victim, *kept = claim_names(harness, pool)

    harness.provider.terminate(pool, spec, victim)
    harness.settle(pool, spec)
    harness.settle(pool, spec)

    assert gpu_limit(harness, pool) == "16"
    assert claim_names(harness, pool) == kept
    # A retry after the claim is gone changes nothing.
    harness.provider.terminate(pool, spec, victim)
    assert gpu_limit(harness, pool) == "16"


def test_instances_carry_the_claims_provider_id_and_their_nodes_join_the_pool(
    kube: KubeTest, harness: KarpenterHarness
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
    assert node.status.capacity["nvidia.com/gpu"] == "8"


def test_terminate_never_deletes_a_claim_of_another_node_pool(harness: KarpenterHarness) -> None:
    pool, spec = harness.new_pool(2)
    other, other_spec = harness.new_pool(2)
    harness.provider.set_target(other, other_spec, 1)
    harness.settle(other, other_spec)
    (theirs,) = claim_names(harness, other)

    harness.provider.terminate(pool, spec, theirs)

    (still,) = harness.karpenter.claims(other)
    assert still["metadata"]["name"] == theirs and "deletionTimestamp" not in still["metadata"]
    assert gpu_limit(harness, other) == "8"


def test_a_missing_node_pool_is_an_error_retrying_cannot_fix(harness: KarpenterHarness) -> None:
    spec = pool_spec("no-such-nodepool")

    with pytest.raises(ProviderError, match="NodePool no-such-nodepool does not exist") as raised:
        harness.provider.set_target("pool", spec, 1)

    assert raised.value.retryable is False


def test_the_operators_scale_up_repeated_before_karpenter_acts_never_doubles_the_limit(
    harness: KarpenterHarness, kube: KubeTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a tick does (handlers.capacity.Providers.scale_up, target() + nodes): Karpenter has
    not created the NodeClaims of the first request when the second tick asks again."""
    monkeypatch.setenv("KUBECONFIG", str(kube.plane.kubeconfig))
    pool, spec = harness.new_pool(6)
    providers = Providers("hybridgpu.cloud.fake:FakeProvider")
    providers.set_pools({pool: spec})

    providers.scale_up(pool, 2)
    providers.scale_up(pool, 2)  # the next tick, before Karpenter acted
    assert gpu_limit(harness, pool) == "16"
    harness.settle(pool, spec)
    providers.scale_up(pool, 1)  # new demand after Karpenter caught up

    assert gpu_limit(harness, pool) == "24"
    assert providers.provisioning(pool, joined_nodes=0) == 2


def test_readiness_finds_karpenters_api_once_its_crds_are_installed(
    harness: KarpenterHarness,
) -> None:
    provider = harness.provider
    assert isinstance(provider, KarpenterProvider)
    assert provider.credentials_problem() is None
