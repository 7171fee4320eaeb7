"""The snapshot a tick builds incrementally (kube/snapshot.py ``Conversions``: conversions of
the objects the watch cache still holds unchanged are reused, only what changed since the
last build is converted) equals one built from scratch, after any sequence of watch events
(objects added, modified, deleted, dropped because they no longer request GPUs) and of
syncs after ``410 Gone`` (the whole store replaced by fresh objects, some changed meanwhile),
applied to the watch cache's own stores (kube/cache.py ``Reflector``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.test_kube_convert import elastic, make_job, make_node, make_pod

from hybridgpu.kube.cache import Kind, Reflector, is_gpu_job, is_gpu_pod
from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import IdleTracker
from hybridgpu.kube.snapshot import Conversions, Measurements, build_snapshot
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

NOW = 1_767_225_600.0
POOLS = ("a", "b")
CRITICALITY = "hybridgpu.io/criticality"
IDLE_TIMEOUT = "hybridgpu.io/idle-timeout"
RECLAIM_CRITICAL = "hybridgpu.io/idle-reclaim-critical"
QUEUE = "kueue.x-k8s.io/queue-name"
FINISHED = ("Succeeded", "Failed")


def unused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("no request in this test")


def unfinished_gpu_pod(obj: dict[str, Any]) -> bool:
    """What the pod stream keeps: its field selector drops finished pods (the apiserver
    sends a DELETED event when a pod stops matching it), ``keep`` pods without GPUs."""
    return is_gpu_pod(obj) and (obj.get("status") or {}).get("phase") not in FINISHED


class Cache:
    """The watch cache's stores of nodes, GPU pods and GPU Jobs, fed events by hand, and the
    objects the apiserver holds (what a sync after 410 Gone receives)."""

    def __init__(self) -> None:
        self.version = 0
        self.reflectors = {
            "nodes": Reflector(Kind("nodes", unused)),
            "pods": Reflector(Kind("pods", unused, keep=unfinished_gpu_pod)),
            "jobs": Reflector(Kind("jobs", unused, keep=is_gpu_job)),
        }
        self.server: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in self.reflectors}
        """What the apiserver holds, by kind and key (a watch event applies it to the cache)."""
        self.pools: dict[str, GPUPoolSpec] = {"a": elastic()}
        self.utilization: dict[str, float] = {}
        self.stale: set[str] = set()
        self.missed = False
        """Whether events are being lost (the watch is cut; the next sync sees them)."""

    def write(self, kind: str, obj: dict[str, Any], deleted: bool = False) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.version)
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        if deleted:
            self.server[kind].pop(key, None)
        else:
            self.server[kind][key] = obj
        if not self.missed:
            event = "DELETED" if deleted else ("MODIFIED" if key in self.stored(kind) else "ADDED")
            self.reflectors[kind]._apply({"type": event, "object": copy.deepcopy(obj)})

    def stored(self, kind: str) -> set[str]:
        return {
            (f"{o['metadata']['namespace']}/" if o["metadata"].get("namespace") else "")
            + o["metadata"]["name"]
            for o in self.reflectors[kind].view()
        }

    def relist(self) -> None:
        """410 Gone: each store is replaced by a fresh copy of what the apiserver holds."""
        self.missed = False
        for kind, reflector in self.reflectors.items():
            keep = reflector.kind.keep
            fresh = {
                key: copy.deepcopy(obj)
                for key, obj in self.server[kind].items()
                if keep is None or keep(obj)
            }
            reflector._replace(fresh, str(self.version))

    def objects(self) -> ClusterObjects:
        return ClusterObjects(
            nodes=self.reflectors["nodes"].items(),
            pods=self.reflectors["pods"].items(),
            jobs=self.reflectors["jobs"].items(),
        )

    def existing(self, kind: str, index: int) -> dict[str, Any] | None:
        keys = sorted(self.server[kind])
        return copy.deepcopy(self.server[kind][keys[index % len(keys)]]) if keys else None

    # ----------------------------------------------------------------- events
    def apply(self, op: str, i: int, j: int) -> None:
        pod: dict[str, Any] | None
        job: dict[str, Any] | None
        node: dict[str, Any] | None
        if op == "pod-add":
            owner = f"j{j % 4}" if j % 3 else None
            if i % 2:
                added = make_pod(f"p{i}-{j}", job=owner, node=f"n{j % 5}", phase="Running")
            else:
                added = make_pod(f"p{i}-{j}", job=owner, unschedulable=True, pool=POOLS[j % 2])
            if j % 4 == 0:
                added["metadata"]["labels"][CRITICALITY] = "critical"
            if j % 5 == 0:
                added["metadata"]["annotations"] = {RECLAIM_CRITICAL: "true", IDLE_TIMEOUT: "5m"}
            elif j % 5 == 1:
                added["metadata"]["annotations"] = {RECLAIM_CRITICAL: "true"}
            self.write("pods", added)
        elif op == "pod-no-gpu":  # a pod created without GPUs: the cache never keeps it
            self.write("pods", make_pod(f"p{i}-cpu", gpus=0, node="n0", phase="Running"))
        elif op == "pod-update":
            pod = self.existing("pods", i)
            if pod is None:
                return
            if j % 4 == 0:
                pod["spec"]["nodeName"] = f"n{j % 5}"
                pod["status"]["phase"] = "Running"
            elif j % 4 == 1:
                pod["metadata"]["labels"][CRITICALITY] = ["preemptible", "standard"][j % 2]
            elif j % 4 == 2:
                pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
            else:
                pod["metadata"]["labels"][QUEUE] = "q"
            self.write("pods", pod)
        elif op == "pod-finished":
            pod = self.existing("pods", i)
            if pod is not None:
                pod["status"]["phase"] = "Succeeded"
                self.write("pods", pod)
        elif op == "pod-delete":
            pod = self.existing("pods", i)
            if pod is not None:
                self.write("pods", pod, deleted=True)
        elif op == "job-add":
            self.write("jobs", make_job(f"j{i % 4}", gpus=1))
        elif op == "job-update":
            job = self.existing("jobs", i)
            if job is None:
                return
            if j % 4 == 0:
                job["metadata"]["labels"][CRITICALITY] = ["critical", "preemptible"][j % 2]
            elif j % 4 == 1:
                job["metadata"]["annotations"][IDLE_TIMEOUT] = ["10m", "bogus"][j % 2]
            elif j % 4 == 2:
                job["metadata"]["labels"][QUEUE] = f"q{j}"
            else:
                job["metadata"]["annotations"][RECLAIM_CRITICAL] = "true"
            self.write("jobs", job)
        elif op == "job-delete":
            job = self.existing("jobs", i)
            if job is not None:
                self.write("jobs", job, deleted=True)
        elif op == "node-add":
            self.write("nodes", make_node(f"n{i % 7}", POOLS[j % 2], gpus=4))
        elif op == "node-update":
            node = self.existing("nodes", i)
            if node is None:
                return
            if j % 3 == 0:
                node["spec"]["unschedulable"] = bool(j % 2)
            elif j % 3 == 1:
                node["metadata"]["labels"]["hybridgpu.io/pool"] = POOLS[j % 2]
            else:
                node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            self.write("nodes", node)
        elif op == "node-delete":
            node = self.existing("nodes", i)
            if node is not None:
                self.write("nodes", node, deleted=True)
        elif op == "watch-cut":  # events are lost until the next sync
            self.missed = True
        elif op == "relist":
            self.relist()
        elif op == "pools":
            if "b" in self.pools:
                del self.pools["b"]
            else:
                self.pools["b"] = elastic()
        elif op == "utilization":
            self.utilization[f"n{i % 7}"] = float(j % 100)
        elif op == "stale":
            self.stale ^= {f"n{i % 7}"}


OPS = [
    "pod-add",
    "pod-no-gpu",
    "pod-update",
    "pod-finished",
    "pod-delete",
    "job-add",
    "job-update",
    "job-delete",
    "node-add",
    "node-update",
    "node-delete",
    "watch-cut",
    "relist",
    "pools",
    "utilization",
    "stale",
]


def start() -> Cache:
    cache = Cache()
    for n in range(4):
        cache.apply("node-add", n, n)
    for n in range(3):
        cache.apply("job-add", n, n)
    for n in range(6):
        cache.apply("pod-add", n, n + 1)
    return cache


def build(cache: Cache, idle: IdleTracker, now: float, kept: Conversions | None) -> Any:
    measured = Measurements(
        utilization_by_node=dict(cache.utilization), stale_nodes=frozenset(cache.stale)
    )
    return build_snapshot(cache.objects(), cache.pools, measured, idle, now, conversions=kept)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from(OPS), st.integers(0, 30), st.integers(0, 30)),
            max_size=5,
        ),
        max_size=12,
    )
)
def test_the_incremental_snapshot_equals_one_from_scratch_after_any_events(
    ticks: list[list[tuple[str, int, int]]],
) -> None:
    cache = start()
    kept = Conversions()
    idle_kept, idle_fresh = IdleTracker(), IdleTracker()
    for tick, events in enumerate([[], *ticks]):
        for op, i, j in events:
            cache.apply(op, i, j)
        now = NOW + 60 * tick
        incremental = build(cache, idle_kept, now, kept)
        assert incremental == build(cache, idle_fresh, now, None), events


def test_a_relist_converts_every_object_again_and_then_nothing() -> None:
    """After 410 Gone the stores hold new objects (same versions): nothing kept is reused
    for them, and the build after that converts nothing again."""
    cache = start()
    kept = Conversions()
    build(cache, IdleTracker(), NOW, kept)
    everything = kept.misses
    build(cache, IdleTracker(), NOW, kept)
    assert (kept.misses, kept.hits) == (everything, everything)
    cache.relist()
    build(cache, IdleTracker(), NOW, kept)
    assert kept.misses == 2 * everything
    build(cache, IdleTracker(), NOW, kept)
    assert kept.misses == 2 * everything


def test_one_changed_pod_is_the_only_conversion_of_a_tick() -> None:
    cache = start()
    kept = Conversions()
    build(cache, IdleTracker(), NOW, kept)
    before = kept.misses
    cache.apply("pod-update", 0, 1)  # a label on one pod
    build(cache, IdleTracker(), NOW, kept)
    assert kept.misses == before + 1


def test_a_jobs_change_converts_only_its_pods_again() -> None:
    cache = start()
    kept = Conversions()
    first = build(cache, IdleTracker(), NOW, kept)
    before = kept.misses
    cache.apply("job-update", 2, 0)  # j2 -> critical
    after = build(cache, IdleTracker(), NOW, kept)
    of_j2 = [p for p in after.pods if p.job == "ns/j2"]
    assert of_j2 and {p.criticality.value for p in of_j2} == {"critical"}
    assert kept.misses == before + len(of_j2)
    assert after != first


def test_the_first_jobs_annotations_convert_pods_without_a_job_annotation_again() -> None:
    """A pod's own annotations (other than the idle timeout) count only while no Job's are
    read: when the first Job appears, pods of a Job not (yet) in the cache change too."""
    cache = Cache()
    cache.apply("node-add", 0, 0)
    cache.apply("pod-add", 1, 1)  # bound, of j1 (not created), reclaim-critical on the pod
    kept = Conversions()
    idle_kept, idle_fresh = IdleTracker(), IdleTracker()
    alone = build(cache, idle_kept, NOW, kept)
    assert [p.reclaim_critical for p in alone.pods] == [True]
    cache.apply("job-add", 0, 0)  # j0, not the pod's Job
    with_job = build(cache, idle_kept, NOW, kept)
    assert with_job == build(cache, idle_fresh, NOW, None)
    assert [p.reclaim_critical for p in with_job.pods] == [False]
