"""Pools and clusters for simulator tests: the bundled cluster file and small fleets whose
prices a test states."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridgpu.models.resources import GPUPool
from hybridgpu.models.snapshot import PoolState

BUNDLED_CLUSTER = (
    Path(__file__).resolve().parents[2] / "operator/hybridgpu/sim/scenarios/default-cluster.yaml"
)


def sim_pool(name: str, tier: str, per_node: int, max_nodes: int, price: float) -> PoolState:
    spec: dict[str, Any] = {
        "tier": tier,
        "gpu": {"model": "A100", "perNode": per_node},
        "maxNodes": max_nodes,
        "scaleDown": {"idleFor": "2m"},
    }
    if tier == "core":
        spec.update(minNodes=max_nodes, pricing={"capexPerNode": price, "opsPerNodeHour": 1})
    else:
        spec.update(provider={"type": "fake"}, pricing={"perNodeHour": price})
    pool = GPUPool.model_validate(
        {
            "apiVersion": "hybridgpu.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    return PoolState(name=name, spec=pool.spec)


def sim_cluster(core_nodes: int, od_gpu_price: float, spot_gpu_price: float) -> list[PoolState]:
    return [
        sim_pool("core", "core", 8, core_nodes, 120_000),
        sim_pool("od-1g", "elastic", 1, 32, od_gpu_price),
        sim_pool("od-8g", "elastic", 8, 4, od_gpu_price * 8),
        sim_pool("spot-1g", "spot", 1, 32, spot_gpu_price),
        sim_pool("spot-8g", "spot", 8, 4, spot_gpu_price * 8),
    ]
