"""Whole ticks of the Reconciler (in-memory cluster, fake provider) reading a real Prometheus:
what it reads besides utilization reaches the metrics and the prices."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.metrics.exported import PREFIX, ExportedMetrics
from hybridgpu.models.pool import GPUPoolSpec
from support.fake_cluster import FakeCluster, gpu_node
from support.prometheus import FakeDCGM, Prometheus, dcgm, prometheus

__all__ = ["dcgm", "prometheus"]  # fixtures used by name

pytestmark = pytest.mark.adapters

SPOT = {
    "tier": "spot",
    "gpu": {"model": "L4", "perNode": 4},
    "maxNodes": 2,
    "provider": {"type": "fake"},
    "pricing": {"fromProvider": True, "perNodeHour": 9.0},
}


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def spot_cluster(prometheus: Prometheus, node: str) -> tuple[FakeCluster, Reconciler, Clock]:
    """A policy reading ``prometheus`` and one spot pool with one joined node, ``node``."""
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {"prometheus": {"url": prometheus.url, "window": "1m"}})
    cluster.add_pool("spot", SPOT)
    options = OperatorOptions(identity="test")
    reconciler = Reconciler(cluster, options, clock=clock, metrics=ExportedMetrics())
    spec = GPUPoolSpec.model_validate(SPOT)
    fake = reconciler.providers.for_spec(spec)
    assert isinstance(fake, FakeProvider)
    fake.set_target("spot", spec, 1)
    (instance,) = fake.instances("spot", spec)
    cluster.add_node(gpu_node(node, "spot", gpus=4, provider_id=instance.provider_id))
    return cluster, reconciler, clock


def metric(reconciler: Reconciler, name: str, **labels: str) -> float | None:
    return reconciler.metrics.registry.get_sample_value(PREFIX + name, labels)


def scraped(prometheus: Prometheus, promql: str, value: float) -> None:
    prometheus.wait_for(promql, lambda r: any(float(s["value"][1]) == value for s in r))


def test_opencost_prices_a_spot_pool_whose_provider_has_no_price(
    prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    cluster, reconciler, _ = spot_cluster(prometheus, "oc-spot-1")
    dcgm.gpu_hourly_cost.labels(node="oc-spot-1").set(1.5)
    scraped(prometheus, 'node_gpu_hourly_cost{node="oc-spot-1"}', 1.5)

    reconciler.tick("default")

    # 4 GPUs at OpenCost's $1.50, not the $9 perNodeHour fallback.
    assert metric(reconciler, "pool_cost_per_hour_dollars", pool="spot", tier="spot") == 6.0
    status: dict[str, Any] = cluster.policies["default"]["status"]
    assert status["budget"]["hourlyCost"] == 6.0


def test_without_opencost_the_fallback_price_holds(prometheus: Prometheus) -> None:
    _, reconciler, _ = spot_cluster(prometheus, "oc-none-1")

    reconciler.tick("default")

    assert metric(reconciler, "pool_cost_per_hour_dollars", pool="spot", tier="spot") == 9.0


def test_cost_per_million_tokens_from_vllms_counter(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    cluster, reconciler, clock = spot_cluster(prometheus, "tok-spot-1")
    cluster.policies["default"]["spec"]["prometheus"]["tokensQuery"] = (
        'vllm:generation_tokens_total{kubernetes_node=~"tok-.*"}'
    )
    served = dcgm.generated_tokens.labels(pod="vllm-0", kubernetes_node="tok-spot-1")
    elsewhere = dcgm.generated_tokens.labels(pod="vllm-9", kubernetes_node="tok-other")
    served.inc(1000)
    elsewhere.inc(1000)
    query = 'vllm:generation_tokens_total{pod="vllm-0"}'
    scraped(prometheus, query, 1000)
    reconciler.tick("default")  # the counter's baseline
    assert metric(reconciler, "cost_per_million_tokens_dollars", pool="spot", tier="spot") is None

    served.inc(2_000_000)
    elsewhere.inc(5_000_000)  # a node of no pool: not the spot pool's tokens
    scraped(prometheus, query, 2_001_000)
    clock.now += 3600  # an hour of one $9 node
    reconciler.tick("default")

    got = metric(reconciler, "cost_per_million_tokens_dollars", pool="spot", tier="spot")
    assert got == pytest.approx(9.0 / 2)
