"""Which nodes a deleted elastic or spot pool drains and releases before it goes (the GPUPool
finalizer waits for them): the provider's instances of that pool only, never an owned node
nor one another live pool selects (tests/e2e/test_kubectl_ux.py runs it on the real
apiserver)."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.handlers.loop import nodes_of_deleted_pools, unmanaged_message, unmanaged_nodes
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def spec(tier: str = "elastic", **extra: Any) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": tier,
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "provider": {"type": "kwok"},
            "pricing": {"capexPerNode": 1} if tier == "core" else {"perNodeHour": 3},
            **extra,
        }
    )


def node(name: str, labels: dict[str, str], provider_id: str | None = "kwok://x") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id} if provider_id else {},
    }


def pool(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec(**extra).to_wire()}


def test_only_the_deleted_pools_provider_instances_are_drained() -> None:
    nodes = [
        node("gone-1", {"hybridgpu.io/pool": "gone"}),
        node("gone-hand-made", {"hybridgpu.io/pool": "gone"}, provider_id=None),
        node("gone-owned", {"hybridgpu.io/pool": "gone", "hybridgpu.io/tier": "core"}),
        node("other-1", {"hybridgpu.io/pool": "other"}),
        {**node("gone-2", {"hybridgpu.io/pool": "gone"}), "metadata": {
            "name": "gone-2", "labels": {"hybridgpu.io/pool": "gone"},
            "deletionTimestamp": "2026-01-01T00:00:00Z"}},
    ]  # fmt: skip
    live = [pool("other"), pool("gone")]
    assert nodes_of_deleted_pools({"gone": spec()}, live, nodes) == [("gone", "gone-1")]


def test_a_node_a_live_pool_also_selects_stays_that_pools() -> None:
    """A deleted pool with a broad nodeSelector never drains the nodes of a live pool."""
    shared = node("a100-1", {"gpu": "a100", "hybridgpu.io/pool": "core"})
    deleted = {"broad": spec(nodeSelector={"gpu": "a100"})}
    live = [pool("core", tier="core", minNodes=0)]
    assert nodes_of_deleted_pools(deleted, live, [shared]) == []
    assert nodes_of_deleted_pools(deleted, [], [shared]) == [("broad", "a100-1")]


def being_deleted(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "metadata": {**raw["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}


def test_cloud_nodes_of_a_pool_that_does_not_exist_are_reported_by_that_pool() -> None:
    """A pool deleted before the operator held it (or a node that booted after its pool went)
    leaves instances nothing releases: they are found, and only they."""
    nodes = [
        node("gone-2", {"hybridgpu.io/pool": "gone"}),
        node("gone-1", {"hybridgpu.io/pool": "gone"}),
        node("old-1", {"hybridgpu.io/pool": "old"}),
        node("gone-hand-made", {"hybridgpu.io/pool": "gone"}, provider_id=None),
        node("gone-owned", {"hybridgpu.io/pool": "gone", "hybridgpu.io/tier": "core"}),
        being_deleted(node("gone-3", {"hybridgpu.io/pool": "gone"})),
        node("live-1", {"hybridgpu.io/pool": "live"}),
        node("draining-1", {"hybridgpu.io/pool": "draining"}),
        node("unlabelled", {}),
    ]
    live = [pool("live"), being_deleted(pool("draining"))]
    assert unmanaged_nodes(live, nodes) == {"gone": ["gone-1", "gone-2"], "old": ["old-1"]}


def test_a_node_a_live_pool_selects_is_managed_whatever_its_pool_label_says() -> None:
    shared = node("a100-1", {"gpu": "a100", "hybridgpu.io/pool": "renamed"})
    assert unmanaged_nodes([pool("broad", nodeSelector={"gpu": "a100"})], [shared]) == {}
    assert unmanaged_nodes([], [shared]) == {"renamed": ["a100-1"]}
    # a pool whose spec no longer validates still holds its own label's nodes
    broken = {"metadata": {"name": "renamed"}, "spec": {"tier": "nonsense"}}
    assert unmanaged_nodes([broken], [shared]) == {}


def test_the_message_names_the_missing_pool_and_both_ways_out() -> None:
    text = unmanaged_message("gone-1", "gone")
    assert "no GPUPool 'gone' exists" in text
    assert "Re-create GPUPool 'gone'" in text
    assert "`kubectl delete node` removes only the Node object" in text


def test_the_gauge_follows_the_pools_found_and_drops_those_gone() -> None:
    metrics = ExportedMetrics()
    metrics.record_unmanaged({"gone": 2, "old": 1})
    metrics.record_unmanaged({"gone": 1})

    def value(pool_name: str) -> float | None:
        return metrics.registry.get_sample_value("hybridgpu_unmanaged_nodes", {"pool": pool_name})

    assert value("gone") == 1
    assert value("old") is None
    metrics.record_unmanaged({})
    assert value("gone") is None
