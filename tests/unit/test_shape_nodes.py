"""PlanExecutor.shape_nodes puts each pool's labels and taints on its nodes where they are
missing, and does not look again at a Node object (the watch cache's: replaced on every
change, never mutated) it found already shaped while its pools' specs are unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.support.fake_cluster import FakeCluster, gpu_node
from tests.support.workloads import NoCapacity
from tests.unit.test_kube_convert import elastic

from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def spot(**extra: Any) -> GPUPoolSpec:
    body = elastic().model_dump(by_alias=True, mode="json")
    body.update(
        tier="spot",
        taints=[{"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}],
        **extra,
    )
    return GPUPoolSpec.model_validate(body)


def setup() -> tuple[FakeCluster, PlanExecutor, dict[str, GPUPoolSpec]]:
    cluster = FakeCluster()
    for i in range(3):
        cluster.add_node(gpu_node(f"s{i}", "s"))
    cluster.add_node(gpu_node("other", "not-a-pool-of-ours"))
    executor = PlanExecutor(cluster, NoCapacity(), lambda: 0.0)  # type: ignore[arg-type]
    return cluster, executor, {"s": spot()}


def test_missing_labels_and_taints_are_written_once_and_shaped_nodes_left_alone() -> None:
    cluster, executor, pools = setup()
    executor.shape_nodes(cluster.read_objects().nodes, pools)
    assert sorted(cluster.writes) == sorted(
        [("patch_metadata", f"s{i}") for i in range(3)] + [("taint", f"s{i}") for i in range(3)]
    )
    node = cluster.nodes["s0"]
    assert node["metadata"]["labels"]["hybridgpu.io/tier"] == "spot"
    assert node["spec"]["taints"] == [
        {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
    ]
    cluster.writes.clear()
    shaped = cluster.read_objects().nodes  # as the watch cache has them after the patches
    executor.shape_nodes(shaped, pools)
    executor.shape_nodes(shaped, pools)
    assert cluster.writes == []


def test_a_node_object_replaced_without_its_label_is_labelled_again() -> None:
    cluster, executor, pools = setup()
    executor.shape_nodes(cluster.read_objects().nodes, pools)
    shaped = cluster.read_objects().nodes
    executor.shape_nodes(shaped, pools)
    cluster.writes.clear()
    # Someone removed the tier label: the watch cache holds a new object for s1.
    del cluster.nodes["s1"]["metadata"]["labels"]["hybridgpu.io/tier"]
    changed = copy.deepcopy(cluster.nodes["s1"])
    nodes = [changed if n["metadata"]["name"] == "s1" else n for n in shaped]
    executor.shape_nodes(nodes, pools)
    assert cluster.writes == [("patch_metadata", "s1")]


def test_a_changed_pool_spec_shapes_the_same_node_objects_again() -> None:
    cluster, executor, pools = setup()
    executor.shape_nodes(cluster.read_objects().nodes, pools)
    shaped = cluster.read_objects().nodes
    executor.shape_nodes(shaped, pools)
    cluster.writes.clear()
    executor.shape_nodes(shaped, {"s": spot(labels={"team": "ml"})})
    assert sorted(cluster.writes) == [("patch_metadata", f"s{i}") for i in range(3)]
    assert cluster.nodes["s2"]["metadata"]["labels"]["team"] == "ml"


def test_a_failed_patch_is_tried_again_on_the_next_call() -> None:
    cluster, executor, pools = setup()
    nodes = cluster.read_objects().nodes
    del cluster.nodes["s0"]  # the patch answers 404: not shaped
    executor.shape_nodes(nodes, pools)
    cluster.writes.clear()
    executor.shape_nodes(nodes, pools)
    assert ("patch_metadata", "s0") in cluster.writes


def test_a_taint_put_on_after_the_cache_read_is_kept() -> None:
    # A tick keeps a new node for a Job (its taint) after the watch cache read the node; the
    # same tick then shapes it from that read: the reservation must not be written over.
    cluster, executor, pools = setup()
    stale = cluster.read_objects().nodes
    kept = {"key": "hybridgpu.io/reserved-for", "value": "abc", "effect": "NoSchedule"}
    cluster.set_node_taints("s0", [kept])
    executor.shape_nodes(stale, pools)
    assert cluster.nodes["s0"]["spec"]["taints"] == [
        kept,
        {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"},
    ]
