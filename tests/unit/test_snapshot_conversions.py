"""Per-object conversions kept between ticks (kube/snapshot.py ``Conversions``): a snapshot
built with the conversions of the last build equals one built from scratch, through pods,
Jobs, nodes, pools and measurements changing in any order, and unchanged objects are not
converted again."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.test_kube_convert import elastic, make_job, make_node, make_pod

from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import IdleTracker
from hybridgpu.kube.snapshot import Conversions, Measurements, build_snapshot
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

NOW = 1_767_225_600.0


class World:
    """A little cluster whose objects get a new resourceVersion on every change, as the
    apiserver gives them."""

    def __init__(self) -> None:
        self.version = 0
        self.nodes = {f"n{i}": self.stamp(make_node(f"n{i}", "a", gpus=4)) for i in range(3)}
        self.jobs = {f"j{i}": self.stamp(make_job(f"j{i}", gpus=1)) for i in range(2)}
        self.pods: dict[str, dict[str, Any]] = {}
        for i in range(5):
            job = f"j{i % 2}" if i < 4 else None
            pod = make_pod(f"p{i}", job=job, node=f"n{i % 3}" if i % 2 else None)
            if pod["spec"].get("nodeName") is None:
                pod = make_pod(f"p{i}", job=job, unschedulable=True, pool="a")
            self.pods[f"p{i}"] = self.stamp(pod)
        self.pools: dict[str, GPUPoolSpec] = {"a": elastic()}
        self.utilization: dict[str, float] = {}

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def change(self, what: str, index: int) -> None:
        if what.startswith("pod-") and f"p{index % 5}" not in self.pods:
            return  # deleted earlier
        if what == "pod-label":
            name = f"p{index % 5}"
            pod = copy.deepcopy(self.pods[name])
            labels = pod["metadata"].setdefault("labels", {})
            labels["hybridgpu.io/criticality"] = ["critical", "preemptible", "standard"][index % 3]
            self.pods[name] = self.stamp(pod)
        elif what == "pod-bound":
            name = f"p{index % 5}"
            pod = copy.deepcopy(self.pods[name])
            pod["spec"]["nodeName"] = f"n{index % 3}"
            pod["status"]["phase"] = "Running"
            self.pods[name] = self.stamp(pod)
        elif what == "pod-gone":
            self.pods.pop(f"p{index % 5}", None)
        elif what == "job-criticality":  # the Job changes, its pods do not
            name = f"j{index % 2}"
            job = copy.deepcopy(self.jobs[name])
            job["metadata"]["labels"]["hybridgpu.io/criticality"] = ["critical", "preemptible"][
                index % 2
            ]
            self.jobs[name] = self.stamp(job)
        elif what == "job-idle-timeout":
            name = f"j{index % 2}"
            job = copy.deepcopy(self.jobs[name])
            job["metadata"]["annotations"]["hybridgpu.io/idle-timeout"] = ["10m", "bogus"][
                index % 2
            ]
            self.jobs[name] = self.stamp(job)
        elif what == "job-queued":
            name = f"j{index % 2}"
            job = copy.deepcopy(self.jobs[name])
            job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = f"q{index}"
            self.jobs[name] = self.stamp(job)
        elif what == "node-pool":
            name = f"n{index % 3}"
            node = copy.deepcopy(self.nodes[name])
            node["metadata"]["labels"]["hybridgpu.io/pool"] = ["a", "b"][index % 2]
            self.nodes[name] = self.stamp(node)
        elif what == "node-cordon":
            name = f"n{index % 3}"
            node = copy.deepcopy(self.nodes[name])
            node["spec"]["unschedulable"] = bool(index % 2)
            self.nodes[name] = self.stamp(node)
        elif what == "pools":  # a pool added or gone: the nodes' pool may change
            if "b" in self.pools:
                del self.pools["b"]
            else:
                self.pools["b"] = elastic()
        elif what == "utilization":
            self.utilization[f"n{index % 3}"] = float(index % 100)

    def objects(self) -> ClusterObjects:
        return ClusterObjects(
            nodes=list(self.nodes.values()),
            pods=list(self.pods.values()),
            jobs=list(self.jobs.values()),
        )


CHANGES = [
    "pod-label",
    "pod-bound",
    "pod-gone",
    "job-criticality",
    "job-idle-timeout",
    "job-queued",
    "node-pool",
    "node-cordon",
    "pools",
    "utilization",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 9)), max_size=12))
def test_a_snapshot_with_the_last_builds_conversions_equals_one_from_scratch(
    changes: list[tuple[str, int]],
) -> None:
    world = World()
    kept = Conversions()
    idle_kept, idle_fresh = IdleTracker(), IdleTracker()
    for tick, (what, index) in enumerate([("none", 0), *changes]):
        world.change(what, index)
        now = NOW + 60 * tick
        measured = Measurements(utilization_by_node=dict(world.utilization))
        objects = world.objects()
        with_kept = build_snapshot(objects, world.pools, measured, idle_kept, now, conversions=kept)
        fresh = build_snapshot(objects, world.pools, measured, idle_fresh, now)
        assert with_kept == fresh, what


def test_unchanged_objects_are_not_converted_again() -> None:
    world = World()
    kept = Conversions()
    build_snapshot(
        world.objects(), world.pools, Measurements(), IdleTracker(), NOW, conversions=kept
    )
    converted = kept.misses
    assert converted == len(world.pods) + len(world.nodes)
    build_snapshot(
        world.objects(), world.pools, Measurements(), IdleTracker(), NOW, conversions=kept
    )
    assert kept.misses == converted
    assert kept.hits == converted
    world.change("pod-label", 0)
    build_snapshot(
        world.objects(), world.pools, Measurements(), IdleTracker(), NOW, conversions=kept
    )
    assert kept.misses == converted + 1


def test_a_pod_follows_its_jobs_criticality_though_the_pod_did_not_change() -> None:
    """A naive cache keyed by the pod's resourceVersion alone would keep the old value."""
    world = World()
    kept = Conversions()
    before = build_snapshot(
        world.objects(), world.pools, Measurements(), IdleTracker(), NOW, conversions=kept
    )
    assert {p.criticality.value for p in before.pods if p.job == "ns/j1"} == {"standard"}
    world.change("job-criticality", 1)  # j1 -> preemptible
    after = build_snapshot(
        world.objects(), world.pools, Measurements(), IdleTracker(), NOW, conversions=kept
    )
    assert {p.criticality.value for p in after.pods if p.job == "ns/j1"} == {"preemptible"}
