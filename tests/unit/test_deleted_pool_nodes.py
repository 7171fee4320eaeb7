"""Which nodes a deleted elastic or spot pool drains and releases before it goes (the GPUPool
finalizer waits for them): the provider's instances of that pool only, never an owned node
nor one another live pool selects (tests/e2e/test_kubectl_ux.py runs it on the real
apiserver)."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.handlers.loop import nodes_of_deleted_pools
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
