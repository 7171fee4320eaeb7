"""The kwok provider (hybridgpu.cloud.kwok) against the real control plane: it keeps the same
CapacityProvider contract as the fake, and its instances are kwok Nodes shaped like the pool
that kwok makes Ready, so pods of the pool can run on them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice
from hybridgpu.cloud.kwok import INTERRUPTION_ANNOTATION, KwokProvider
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import KubeTest, gpu_job, node_is_ready, wait_until
from support.provider_contract import CONTRACT, NOT_LIVE, ProviderHarness

pytestmark = pytest.mark.adapters

BOOT_DELAY_SECONDS = 0.5
SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}


def pool_spec(max_nodes: int = 4, **changes: Any) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 8},
            "maxNodes": max_nodes,
            "provider": {"type": "kwok"},
            "pricing": {"perNodeHour": 32.0},
            **changes,
        }
    )


class KwokHarness:
    """The kwok provider under the shared contract; its nodes are the test's to delete."""

    def __init__(self, kube: KubeTest, termination_seconds: float = 0.0) -> None:
        self.kube = kube
        self.kwok = KwokProvider(
            boot_delay_seconds=BOOT_DELAY_SECONDS,
            termination_seconds=termination_seconds,
            kubeconfig=str(kube.plane.kubeconfig),
        )
        self.provider: CapacityProvider = self.kwok

    def new_pool(self, max_nodes: int) -> tuple[str, GPUPoolSpec]:
        return f"kwok-{uuid.uuid4().hex[:6]}", pool_spec(max_nodes)

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        pass  # launches are counted from the request on

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        wait_until(
            lambda: all(
                i.state in ("running", *NOT_LIVE) for i in self.provider.instances(pool, spec)
            ),
            timeout_seconds=30,
            what=f"instances of {pool} running",
        )

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        self.kube.core.patch_node(
            instance.instance_id,
            {"metadata": {"annotations": {INTERRUPTION_ANNOTATION: f"{deadline:.0f}"}}},
        )
        notices = [
            n for n in self.provider.interruptions() if n.instance_id == instance.instance_id
        ]
        assert len(notices) == 1, notices
        return notices[0]


@pytest.fixture
def harness(kube: KubeTest) -> Iterator[KwokHarness]:
    built = KwokHarness(kube)
    try:
        yield built
    finally:
        built.kwok.close()


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_the_kwok_provider_keeps_the_provider_contract(
    check: Callable[[ProviderHarness], None], harness: KwokHarness
) -> None:
    check(harness)


@pytest.fixture
def lingering(kube: KubeTest) -> Iterator[KwokHarness]:
    """Terminated Nodes stay, deleting, for 3 s (HYBRIDGPU_KWOK_TERMINATION_SECONDS)."""
    built = KwokHarness(kube, termination_seconds=3.0)
    try:
        yield built
    finally:
        built.kwok.close()


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_the_kwok_provider_keeps_the_contract_while_terminated_nodes_linger(
    check: Callable[[ProviderHarness], None], lingering: KwokHarness
) -> None:
    check(lingering)


def test_a_terminated_node_lingers_deleting_then_goes(
    kube: KubeTest, lingering: KwokHarness
) -> None:
    pool, spec = lingering.new_pool(2)
    lingering.provider.set_target(pool, spec, 1)
    lingering.wait_booted(pool, spec)
    (instance,) = lingering.provider.instances(pool, spec)

    lingering.provider.terminate(pool, spec, instance.instance_id)

    node = kube.core.read_node(instance.instance_id)
    assert node.metadata.deletion_timestamp is not None
    assert [i.state for i in lingering.provider.instances(pool, spec)] == ["terminating"]
    assert lingering.provider.target(pool, spec) == 0
    wait_until(
        lambda: lingering.provider.instances(pool, spec) == [],
        timeout_seconds=60,
        what=f"the terminated node of {pool} gone",
    )


def test_instances_are_ready_kwok_nodes_shaped_like_the_pool_and_run_its_pods(
    kube: KubeTest, harness: KwokHarness
) -> None:
    pool = f"kwok-{uuid.uuid4().hex[:6]}"
    spec = pool_spec(
        max_nodes=2,
        tier="spot",
        gpu={"model": "L4", "perNode": 4},
        taints=[SPOT_TAINT],
        labels={"team": "ml"},
    )
    launched = time.time()

    harness.provider.set_target(pool, spec, 1)
    assert kube.core.list_node(label_selector=f"hybridgpu.io/pool={pool}").items == []
    harness.wait_booted(pool, spec)

    (node,) = kube.core.list_node(label_selector=f"hybridgpu.io/pool={pool}").items
    (instance,) = harness.provider.instances(pool, spec)
    assert instance.provider_id == node.spec.provider_id == f"kwok://{pool}/{node.metadata.name}"
    assert launched <= instance.launched_at + 1  # creation timestamps have whole seconds
    assert node.status.capacity["nvidia.com/gpu"] == "4"
    assert node.metadata.labels["hybridgpu.io/tier"] == "spot"
    assert node.metadata.labels["nvidia.com/gpu.product"] == "L4"
    assert node.metadata.labels["team"] == "ml"
    # (the node lifecycle controller adds node.kubernetes.io/not-ready until kwok reports Ready)
    assert ("hybridgpu.io/spot", "true", "NoSchedule") in [
        (t.key, t.value, t.effect) for t in node.spec.taints
    ]
    wait_until(
        lambda: node_is_ready(kube.core.read_node(node.metadata.name)),
        timeout_seconds=30,
        what="kwok made the node Ready",
    )
    kube.create_job(
        gpu_job(
            "on-kwok",
            gpus=4,
            pool=pool,
            tolerations=[{"key": "hybridgpu.io/spot", "operator": "Exists"}],
        )
    )

    def bound_node() -> str | None:
        pods = kube.core.list_namespaced_pod(
            kube.namespace, label_selector="batch.kubernetes.io/job-name=on-kwok"
        ).items
        return next((p.spec.node_name for p in pods if p.status.phase == "Succeeded"), None)

    assert wait_until(bound_node, timeout_seconds=60, what="the pod ran") == node.metadata.name


def test_a_node_appears_only_after_the_pools_boot_delay(
    kube: KubeTest, harness: KwokHarness
) -> None:
    pool = f"kwok-{uuid.uuid4().hex[:6]}"
    spec = pool_spec(provider={"type": "kwok", "kwok": {"bootDelay": "3s"}})

    started = time.monotonic()
    harness.provider.set_target(pool, spec, 1)
    harness.wait_booted(pool, spec)

    assert time.monotonic() - started >= 3.0


def test_terminating_a_booting_instance_means_its_node_never_appears(
    kube: KubeTest, harness: KwokHarness
) -> None:
    pool = f"kwok-{uuid.uuid4().hex[:6]}"
    spec = pool_spec()
    harness.provider.set_target(pool, spec, 1)
    (cancelled,) = harness.provider.instances(pool, spec)

    harness.provider.terminate(pool, spec, cancelled.instance_id)
    assert harness.provider.target(pool, spec) == 0
    # A launch after it, with the same delay, boots after the cancelled one would have.
    harness.provider.set_target(pool, spec, 1)
    harness.wait_booted(pool, spec)

    nodes = kube.core.list_node(label_selector=f"hybridgpu.io/pool={pool}").items
    assert len(nodes) == 1 and nodes[0].metadata.name != cancelled.instance_id


def test_terminate_never_deletes_a_node_the_provider_did_not_make(
    kube: KubeTest, harness: KwokHarness
) -> None:
    (owned,) = kube.create_gpu_nodes("kwok-owned", 1, tier="core", gpus=8)

    harness.provider.terminate("kwok-owned", pool_spec(), owned)

    assert kube.core.read_node(owned).metadata.deletion_timestamp is None
    assert harness.provider.instances("kwok-owned", pool_spec()) == []
