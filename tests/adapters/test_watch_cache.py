"""The watch caches against the real apiserver: they sync by streaming lists (no LIST), see
adds, updates and deletes, resume a dropped watch from the last resourceVersion without
listing, sync again after 410 Gone while the last store stays readable, keep
only GPU pods and GPU Jobs, end a first sync the apiserver cut mid-way with a whole store
(reusing what the cut one received, no LIST), give the same snapshot and serving workloads
as a fresh LIST of the cluster, take a kind that is not installed as empty, and a steady
tick makes no LIST."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from hybridgpu.kube.cache import (
    DEPLOYMENTS,
    GPU_HINT,
    HPAS,
    REPLICASETS,
    UNFINISHED_PODS,
    Kind,
    Reflector,
    WatchCache,
    custom_lister,
    serves_streaming_lists,
)
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import IdleTracker
from hybridgpu.kube.errors import KubeError
from hybridgpu.kube.names import GPUPOOLS, GROUP, PROVREQ_PLURAL, SCALINGPOLICIES, VERSION
from hybridgpu.kube.serving import ServingObjects, read_serving
from hybridgpu.kube.snapshot import Measurements, build_snapshot
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import GPU_RESOURCE, POOL_LABEL, KubeTest, gpu_job, wait_until
from support.tcpcut import CuttingProxy

pytestmark = pytest.mark.adapters

Event = tuple[str, str, str | None]
"""(kind, event type, key of the new object or None)."""


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, event: str, old: Any, new: Any) -> None:
        obj = new or old
        key = None
        if obj is not None:
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        with self.lock:
            self.events.append((kind, event, key))

    def saw(self, kind: str, event: str, key: str | None) -> bool:
        with self.lock:
            return (kind, event, key) in self.events


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def cache(kube: KubeTest, recorder: Recorder) -> Iterator[WatchCache]:
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    watch_cache = WatchCache.for_api(api, listener=recorder, sync_timeout=60)
    watch_cache.start()
    try:
        assert watch_cache.wait_synced(60), watch_cache.problems()
        yield watch_cache
    finally:
        watch_cache.stop()
        api.close()


def pod(name: str, gpus: int, pool: str | None = None) -> dict[str, Any]:
    gpu = {GPU_RESOURCE: str(gpus)}
    resources = {"requests": gpu, "limits": gpu} if gpus else {}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "registry.example/x:1", "resources": resources}]
    }
    if pool is not None:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def deployment(name: str, gpus: int, pool: str | None = None) -> dict[str, Any]:
    body = pod(name, gpus, pool)
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": body["spec"]},
        },
    }


def hpa(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 2,
        },
    }


def serving_in(objects: ServingObjects, ns: str) -> tuple[Any, ...]:
    """What read_serving found in namespace ``ns``: Deployments with their resourceVersions,
    the ReplicaSet -> Deployment links, the autoscaled Deployments."""
    return (
        sorted(
            (d["metadata"]["name"], d["metadata"]["resourceVersion"])
            for d in objects.deployments
            if d["metadata"]["namespace"] == ns
        ),
        sorted((k, v) for k, v in objects.owner_of_replicaset.items() if k.startswith(f"{ns}/")),
        sorted(k for k in objects.autoscaled if k.startswith(f"{ns}/")),
    )


def keys(reflector: Reflector) -> set[str]:
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}"
        if "namespace" in o["metadata"]
        else o["metadata"]["name"]
        for o in reflector.items()
    }


def eventually(probe: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    return wait_until(probe, timeout_seconds=timeout, interval_seconds=0.05, what=what)


def watching(reflector: Reflector) -> bool:
    return reflector._response is not None


def disconnect(reflector: Reflector) -> None:
    """Cut the reflector's watch connection and keep it down until ``release()``."""
    eventually(lambda: watching(reflector), f"{reflector.kind.name} watching")
    reflector.drop(hold=True)
    eventually(lambda: not watching(reflector), f"{reflector.kind.name} disconnected")


def test_the_cache_sees_adds_updates_and_deletes(
    kube: KubeTest, cache: WatchCache, recorder: Recorder
) -> None:
    ns = kube.namespace
    nodes, pods, jobs = (cache.reflectors[k] for k in ("nodes", "pods", "jobs"))
    (node,) = kube.create_gpu_nodes("wc-elastic", 1, tier="elastic", wait_ready=False)
    eventually(lambda: node in keys(nodes), "the node in the cache")
    assert recorder.saw("nodes", "ADDED", node)

    kube.core.patch_node(node, {"metadata": {"labels": {"wc": "updated"}}})
    eventually(lambda: (nodes.get(node) or {})["metadata"]["labels"].get("wc"), "the new label")

    kube.core.create_namespaced_pod(ns, pod("cpu-only", 0))
    kube.core.create_namespaced_pod(ns, pod("gpu", 2, pool="nowhere"))
    # One stream, in order: once the GPU pod is in, the earlier CPU-only pod was seen too.
    eventually(lambda: f"{ns}/gpu" in keys(pods), "the GPU pod in the cache")
    assert f"{ns}/cpu-only" not in keys(pods)
    assert not recorder.saw("pods", "ADDED", f"{ns}/cpu-only")
    # The scheduler cannot place it: the cache sees its Unschedulable condition (an update).
    eventually(
        lambda: any(
            c.get("reason") == "Unschedulable"
            for c in ((pods.get(f"{ns}/gpu") or {}).get("status") or {}).get("conditions") or []
        ),
        "the GPU pod Unschedulable",
    )
    assert "managedFields" not in (pods.get(f"{ns}/gpu") or {})["metadata"]

    cpu_job = gpu_job("cpu-job2", suspend=True)
    cpu_job["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    kube.create_job(cpu_job)
    kube.create_job(gpu_job("gpu-job", gpus=1, suspend=True))
    eventually(lambda: f"{ns}/gpu-job" in keys(jobs), "the GPU Job in the cache")
    assert f"{ns}/cpu-job2" not in keys(jobs)

    kube.core.delete_namespaced_pod("gpu", ns, grace_period_seconds=0)
    eventually(lambda: f"{ns}/gpu" not in keys(pods), "the deleted pod gone")
    assert recorder.saw("pods", "DELETED", f"{ns}/gpu")
    kube.core.delete_node(node)
    eventually(lambda: node not in keys(nodes), "the deleted node gone")

    pool = f"{ns}-pool"
    create_pool(kube, pool)
    eventually(lambda: pool in {p["metadata"]["name"] for p in cache.list_pools()}, "the pool")


def test_a_dropped_watch_resumes_from_the_last_version_without_listing(
    kube: KubeTest, cache: WatchCache
) -> None:
    ns = kube.namespace
    pods = cache.reflectors["pods"]
    kube.core.create_namespaced_pod(ns, pod("before", 1, pool="nowhere"))
    eventually(lambda: f"{ns}/before" in keys(pods), "the first pod")
    lists, watches = pods.counters.lists, pods.counters.watches

    disconnect(pods)
    # What happens while the watch is down is delivered when it resumes.
    kube.core.create_namespaced_pod(ns, pod("during", 1, pool="nowhere"))
    kube.core.delete_namespaced_pod("before", ns, grace_period_seconds=0)
    assert f"{ns}/during" not in keys(pods)
    pods.release()

    eventually(lambda: f"{ns}/during" in keys(pods), "the pod created while disconnected")
    eventually(lambda: f"{ns}/before" not in keys(pods), "the pod deleted while disconnected")
    assert pods.counters.lists == lists  # resumed, not listed again
    assert pods.counters.relists == 0
    assert pods.counters.watches > watches


def test_410_gone_syncs_again_without_a_list_and_the_last_store_is_read_meanwhile(
    kube: KubeTest, recorder: Recorder
) -> None:
    """GPUPools: their CRD was installed after the apiserver started, so its watch cache
    begins later than version 1 and a watch from 1 is answered with 410 Gone (Expired). The
    reflector syncs again at once by a streaming list (no LIST request), the store stays
    whole and readable (synced) while it does, and afterwards it is the apiserver's."""
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    custom = custom_lister(api)
    at_resync: list[tuple[bool, set[str]]] = []

    def list_call(*args: Any, **kwargs: Any) -> Any:
        syncing = not kwargs.get("watch") or kwargs.get("send_initial_events")
        if syncing and pools.counters.relists:  # the sync after the 410, as it starts
            at_resync.append((pools.synced.is_set(), keys(pools)))
        return custom(*args, **kwargs)

    pools = Reflector(
        Kind(GPUPOOLS, list_call, (GROUP, VERSION, GPUPOOLS)),
        listener=lambda event, old, new: recorder(GPUPOOLS, event, old, new),
    )
    old, new = f"{kube.namespace}-old", f"{kube.namespace}-new"
    pools.start()
    try:
        eventually(pools.synced.is_set, "the first sync")
        create_pool(kube, old)
        eventually(lambda: old in keys(pools), "the first pool")
        disconnect(pools)
        create_pool(kube, new)
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, GPUPOOLS, old)
        pools.resource_version = "1"  # older than the apiserver keeps
        lists_before = apiserver_lists(kube).get(GPUPOOLS, 0.0)
        pools.release()

        eventually(
            lambda: pools.counters.relists == 1 and new in keys(pools) and old not in keys(pools),
            "a second sync after 410 Gone",
        )
        synced_meanwhile, store_meanwhile = at_resync[0]
        assert synced_meanwhile, "the store was marked unsynced while it synced again"
        assert old in store_meanwhile and new not in store_meanwhile
        assert recorder.saw(GPUPOOLS, "RELISTED", None)
        assert pools.counters.lists == 0
        assert apiserver_lists(kube).get(GPUPOOLS, 0.0) == lists_before
        # And it watches on from the new sync's version: later changes arrive.
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, GPUPOOLS, new)
        eventually(lambda: new not in keys(pools), "a pool deleted after the second sync")
    finally:
        pools.stop()
        api.close()


def test_the_first_sync_streams_from_the_watch_cache_without_a_list(kube: KubeTest) -> None:
    """Every stream syncs by a streaming list (``sendInitialEvents``), as client-go's
    reflector does: the apiserver counts no LIST of any kind while a new cache syncs (a paged
    LIST from etcd was too slow at 5,000 nodes for its version to outlive it)."""
    ns = kube.namespace
    kube.core.create_namespaced_pod(ns, pod("streamed", 1, pool="nowhere"))
    kube.core.create_namespaced_pod(ns, pod("not-kept", 0))
    before = apiserver_lists(kube)
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    watch_cache = WatchCache.for_api(api, sync_timeout=60)
    watch_cache.start()
    try:
        assert watch_cache.wait_synced(60), watch_cache.problems()
        after = apiserver_lists(kube)
        pods = watch_cache.reflectors["pods"]
        assert f"{ns}/streamed" in keys(pods)
        assert f"{ns}/not-kept" not in keys(pods)
        for name, reflector in watch_cache.reflectors.items():
            assert reflector.counters.lists == 0, name
            assert reflector.stream_lists, name
            assert after.get(name, 0.0) == before.get(name, 0.0), name
            if reflector.absent_since is None:
                assert reflector.counters.syncs == 1, name
    finally:
        watch_cache.stop()
        api.close()


def test_the_probe_kopf_is_configured_by_sees_streaming_lists_served(kube: KubeTest) -> None:
    """kopf starts its watches with a streaming list (no LIST at start or after 410) when
    this probe says the apiserver serves them; an apiserver that does not answer is taken as
    not serving them (kopf then lists, which works everywhere)."""
    lists_before = apiserver_lists(kube).get(SCALINGPOLICIES, 0.0)
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    try:
        assert serves_streaming_lists(api)
        assert apiserver_lists(kube).get(SCALINGPOLICIES, 0.0) == lists_before
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
        api.configuration.host = f"https://127.0.0.1:{port}"
        assert not serves_streaming_lists(api)
    finally:
        api.close()


def unscheduled_pod(name: str, gpus: int) -> dict[str, Any]:
    """A pod no scheduler picks up: it stays as created (its JSON does not change)."""
    body = pod(name, gpus)
    body["spec"]["schedulerName"] = "nobody"
    return body


def test_a_first_sync_cut_mid_way_ends_whole_reusing_what_it_received_without_a_list(
    kube: KubeTest,
) -> None:
    """The connection of the first streaming list is closed part-way through its initial
    events (a TCP proxy cuts it after 120 KB, as an apiserver closing an unresponsive
    watcher does). The store is never published half-filled; while the stream is down pods
    are deleted, created and relabelled; the next streaming list makes the store exactly the
    apiserver's, reuses the unchanged objects the cut sync had decoded, drops the pods
    without GPUs undecoded, and no LIST is made."""
    ns = kube.namespace
    gpu_names = [f"gpu-{i:03d}" for i in range(150)]
    threads = [
        threading.Thread(
            target=lambda names, gpus: [
                kube.core.create_namespaced_pod(ns, unscheduled_pod(n, gpus)) for n in names
            ],
            args=(names, gpus),
        )
        for names, gpus in [
            (gpu_names[:75], 1),
            (gpu_names[75:], 1),
            # Named after the GPU pods: initial events come in key order.
            ([f"plain-{i:03d}" for i in range(50)], 0),
            ([f"plain-{i:03d}" for i in range(50, 100)], 0),
        ]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    apiserver_port = int(api.configuration.host.rsplit(":", 1)[1])
    proxy = CuttingProxy(apiserver_port, cut_after_bytes=120_000)
    proxy.start()
    api.configuration.host = f"https://127.0.0.1:{proxy.port}"
    pods = Reflector(
        Kind(
            "pods",
            client.CoreV1Api(api).list_pod_for_all_namespaces,
            field_selector=UNFINISHED_PODS,
            keep=lambda obj: bool(obj["spec"]["containers"][0]["resources"]),
            hint=GPU_HINT,
        )
    )
    lists_before = apiserver_lists(kube).get("pods", 0.0)
    pods.start()
    try:
        eventually(lambda: pods.counters.interrupted_syncs == 1, "the first sync cut")
        assert not pods.synced.is_set() and len(pods) == 0, "half a sync was published"
        # While the stream is down: some pods go, some come, one changes.
        for name in gpu_names[:10]:
            kube.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        for name in ("late-0", "late-1"):
            kube.core.create_namespaced_pod(ns, unscheduled_pod(name, 1))
        kube.core.patch_namespaced_pod(
            gpu_names[-1], ns, {"metadata": {"labels": {"changed": "yes"}}}
        )
        proxy.release()

        eventually(pods.synced.is_set, "the second sync")
        mine = {k.split("/", 1)[1] for k in keys(pods) if k.startswith(f"{ns}/")}
        assert mine == {*gpu_names[10:], "late-0", "late-1"}
        changed = pods.get(f"{ns}/{gpu_names[-1]}")
        assert changed is not None and changed["metadata"]["labels"] == {"changed": "yes"}
        assert pods.counters.syncs == 1
        assert pods.counters.interrupted_syncs == 1
        assert 0 < pods.counters.reused < 150, pods.counters
        assert pods.counters.skipped >= 100, pods.counters
        assert pods.counters.lists == 0
        # And it follows the same stream on.
        kube.core.create_namespaced_pod(ns, unscheduled_pod("after", 1))
        eventually(lambda: f"{ns}/after" in keys(pods), "a pod created after the sync")
        assert apiserver_lists(kube).get("pods", 0.0) == lists_before
    finally:
        pods.stop()
        proxy.stop()
        api.close()


def test_an_apiserver_that_refuses_streaming_lists_is_listed_from_its_watch_cache(
    kube: KubeTest,
) -> None:
    """Before v1.32 (or with the WatchList gate off) ``sendInitialEvents`` is refused: the
    stream LISTs instead (``resourceVersion=0``, one response from the apiserver's watch
    cache) and watches from that list's version."""
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    core = client.CoreV1Api(api)
    refused: list[dict[str, Any]] = []
    listed: list[dict[str, Any]] = []

    def list_node(**kwargs: Any) -> Any:
        if kwargs.get("send_initial_events"):
            refused.append(kwargs)
            raise client.ApiException(status=422, reason="sendInitialEvents is forbidden")
        if not kwargs.get("watch"):
            listed.append(kwargs)
        return core.list_node(**kwargs)

    nodes = Reflector(Kind("nodes", list_node))
    nodes.start()
    try:
        eventually(nodes.synced.is_set, "the store listed")
        assert not nodes.stream_lists
        assert len(refused) == 1
        assert [k.get("resource_version") for k in listed] == ["0"]
        assert "limit" not in listed[0]
        (node,) = kube.create_gpu_nodes("wc-refused", 1, tier="elastic", wait_ready=False)
        eventually(lambda: node in keys(nodes), "a node created after the list, watched")
        assert nodes.counters.lists == 1
    finally:
        nodes.stop()
        api.close()


def create_pool(kube: KubeTest, name: str) -> None:
    kube.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        GPUPOOLS,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUPool",
            "metadata": {"name": name},
            "spec": {
                "tier": "core",
                "gpu": {"model": "A100-80GB", "perNode": 8},
                "maxNodes": 1,
                "provider": {"type": "static"},
                "pricing": {"capexPerNode": 100000},
            },
        },
    )


def test_a_ticks_snapshot_equals_one_built_from_a_fresh_list(
    kube: KubeTest, cache: WatchCache
) -> None:
    ns = kube.namespace
    pool_name = f"wc-{ns[-8:]}-snap"
    kube.create_gpu_nodes(pool_name, 2, tier="elastic", gpus=4)
    kube.create_job(
        gpu_job("runs", gpus=2, pool=pool_name, run_duration="10m", completions=2, parallelism=2)
    )
    kube.create_job(gpu_job("waits", gpus=8, pool=pool_name, run_duration="10m"))
    kube.core.create_namespaced_pod(ns, pod("bare", 1))
    spec = GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 4},
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 10.0},
        }
    )
    pools = {pool_name: spec}
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    listed = KubeCluster(api)
    now = time.time()

    def snapshots() -> tuple[Any, Any]:
        fresh = build_snapshot(listed.read_objects(), pools, Measurements(), IdleTracker(), now)
        cached = build_snapshot(cache.read_objects(), pools, Measurements(), IdleTracker(), now)
        return fresh, cached

    def settled() -> bool:
        fresh, cached = snapshots()
        ours = [p for p in fresh.pods if p.key.startswith(f"{ns}/")]
        bound = sum(1 for p in ours if p.node is not None)
        return len(fresh.nodes) == 2 and len(ours) == 4 and bound >= 2 and fresh == cached

    try:
        # The cache trails the apiserver by a watch event: the two agree once it has caught up.
        eventually(settled, "the cached snapshot equal to the listed one", timeout=60)
        _, cached = snapshots()
    finally:
        api.close()
    assert {j.key for j in cached.jobs} >= {f"{ns}/runs", f"{ns}/waits"}


def test_serving_workloads_from_the_cache_equal_a_fresh_list(
    kube: KubeTest, cache: WatchCache
) -> None:
    """GPU Deployments, their ReplicaSets and the HPAs that scale them, as the serving
    rebalance read them with three LISTs; Deployments and ReplicaSets without GPUs are not
    kept."""
    ns = kube.namespace
    apps = client.AppsV1Api(kube.plane.api)
    apps.create_namespaced_deployment(ns, deployment("serve", 1, pool="nowhere"))
    apps.create_namespaced_deployment(ns, deployment("web", 0))
    client.AutoscalingV2Api(kube.plane.api).create_namespaced_horizontal_pod_autoscaler(
        ns, hpa("serve", "serve")
    )
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    listed = KubeCluster(api)
    try:

        def agree() -> Any:
            fresh = serving_in(read_serving(listed), ns)
            cached = serving_in(read_serving(cache), ns)
            return cached if fresh == cached and fresh[1] and fresh[2] else None

        deployments, links, autoscaled = eventually(agree, "the cached serving objects")
    finally:
        api.close()
    assert [name for name, _ in deployments] == ["serve"]
    assert [owner for _, owner in links] == [f"{ns}/serve"]
    assert autoscaled == [f"{ns}/serve"]
    assert not any(k.startswith(f"{ns}/web") for k in keys(cache.reflectors[REPLICASETS]))
    assert f"{ns}/web" not in keys(cache.reflectors[DEPLOYMENTS])
    assert f"{ns}/serve" in keys(cache.reflectors[HPAS])


def test_reads_wait_for_the_first_list_and_say_what_is_missing() -> None:
    """Nothing is decided from an empty cache: reads fail (retryable) and readiness says why
    until every kind has been listed."""
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # nothing listens on the discard port
    api = client.ApiClient(configuration)
    watch_cache = WatchCache.for_api(api, sync_timeout=0.5)
    watch_cache.start()
    try:
        with pytest.raises(KubeError) as raised:
            watch_cache.read_objects()
        assert raised.value.retryable
        (problem,) = watch_cache.problems()
        assert "watch caches not synced yet: nodes, pods, jobs" in problem
    finally:
        watch_cache.stop()
        api.close()


def apiserver_lists(kube: KubeTest) -> dict[str, float]:
    """The apiserver's own count of cluster-wide LIST requests, by resource (the namespace
    controller lists pods namespace by namespace while earlier tests' namespaces go)."""
    from prometheus_client.parser import text_string_to_metric_families

    response = kube.plane.api.call_api(
        "/metrics",
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("verb") == "LIST"
                and labels.get("scope") == "cluster"
            ):
                resource = labels.get("resource", "")
                out[resource] = out.get(resource, 0.0) + sample.value
    return out


def test_ticks_read_the_cache_make_no_list_call_and_pending_gpu_pods_wake_the_loop(
    kube: KubeTest,
) -> None:
    """The operator's wiring (handlers/startup.py): a Reconciler reading a WatchCache whose
    events wake it. Three ticks on a real cluster make no LIST of what they read."""
    from hybridgpu.handlers.loop import Reconciler
    from hybridgpu.handlers.options import OperatorOptions
    from hybridgpu.metrics.exported import ExportedMetrics

    ns = kube.namespace
    policy = f"wc-{ns[-8:]}-p"
    kube.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "scalingpolicies",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScalingPolicy",
            "metadata": {"name": policy},
            "spec": {"interval": "1h"},
        },
    )
    pool = f"wc-{ns[-8:]}-core"
    create_pool(kube, pool)
    kube.custom.patch_cluster_custom_object(
        GROUP, VERSION, GPUPOOLS, pool, {"spec": {"policy": policy}}
    )
    kube.create_gpu_nodes(pool, 1, tier="core", gpus=8)
    # A serving workload with an HPA: the tick reads Deployments, ReplicaSets and HPAs too.
    client.AppsV1Api(kube.plane.api).create_namespaced_deployment(
        ns, deployment("serve", 1, pool=pool)
    )
    client.AutoscalingV2Api(kube.plane.api).create_namespaced_horizontal_pod_autoscaler(
        ns, hpa("serve", "serve")
    )

    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    reconciler_box: list[Reconciler] = []
    watch_cache = WatchCache.for_api(
        config.new_client_from_config(config_file=str(kube.plane.kubeconfig)),
        listener=lambda *event: (
            reconciler_box[0].on_cache_event(*event) if reconciler_box else None
        ),
    )
    reconciler = Reconciler(
        KubeCluster(api),
        OperatorOptions(identity="watch-cache-test", lease_namespace=ns),
        metrics=ExportedMetrics(),
        reads=watch_cache,
    )
    reconciler_box.append(reconciler)
    watch_cache.start()
    try:
        assert watch_cache.wait_synced(60), watch_cache.problems()
        eventually(
            lambda: read_serving(watch_cache).autoscaled >= {f"{ns}/serve"}, "the serving HPA"
        )
        reconciler.tick(policy)  # the first tick: the lease, the start-up checks
        before = apiserver_lists(kube)
        for _ in range(3):
            result = reconciler.tick(policy)
            assert result.leader and not result.errors, result
        after = apiserver_lists(kube)
        read = (
            "nodes",
            "pods",
            "jobs",
            GPUPOOLS,
            SCALINGPOLICIES,
            DEPLOYMENTS,
            REPLICASETS,
            HPAS,
            PROVREQ_PLURAL,
            "podtemplates",
            "leases",
            "events",
        )
        assert {r: after.get(r, 0) - before.get(r, 0) for r in read} == dict.fromkeys(read, 0)

        # A steady tick writes the policy's status (lastTick) but not a pool status that
        # would not change (once the cache shows what the last tick wrote).
        def versions() -> tuple[str, str, str | None]:
            """The pool's and the policy's resourceVersion, and the policy's lastTick."""
            got = [
                kube.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
                for plural, name in ((GPUPOOLS, pool), (SCALINGPOLICIES, policy))
            ]
            return (
                got[0]["metadata"]["resourceVersion"],
                got[1]["metadata"]["resourceVersion"],
                (got[1].get("status") or {}).get("lastTick"),
            )

        def quiet_tick() -> bool:
            pool_before, policy_before, tick_before = versions()
            assert not reconciler.tick(policy).errors
            pool_after, policy_after, tick_after = versions()
            if tick_after == tick_before:
                # lastTick is written to the second: a tick within the same second as the
                # last one writes the same status, which the apiserver keeps without a new
                # version. Tick again.
                return False
            assert policy_after != policy_before
            return pool_after == pool_before

        eventually(quiet_tick, "a tick that leaves the unchanged pool status alone", timeout=60)

        wake = reconciler.wake_event(policy)
        wake.clear()
        kube.core.create_namespaced_pod(ns, pod("waits", 16, pool=pool))
        eventually(wake.is_set, "the loop woken by the Unschedulable GPU pod")
    finally:
        watch_cache.stop()
        reconciler.cluster.close()


def test_the_kwok_provider_reading_a_node_cache_that_trails_launches_nothing_twice(
    kube: KubeTest, cache: WatchCache
) -> None:
    """The operator's kwok provider reads Nodes from the watch cache; a Node it has just
    created and the cache has not shown yet is still counted (pending), not launched again."""
    from hybridgpu.cloud import kwok

    spec = GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 8},
            "maxNodes": 3,
            "provider": {"type": "kwok"},
            "pricing": {"perNodeHour": 32.0},
        }
    )
    pool = f"wc-{kube.namespace[-8:]}-kwok"
    shown: list[dict[str, Any]] = []  # a node source that has seen nothing yet
    provider = kwok.KwokProvider(boot_delay_seconds=0.0, kubeconfig=str(kube.plane.kubeconfig))
    kwok.read_nodes_from(lambda: list(shown))
    try:
        provider.set_target(pool, spec, 1)
        (created,) = eventually(
            lambda: kube.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items,
            "the first node created",
        )
        # The timer thread drops its boot entry just after create_node returns: under load the
        # Node can be listed first, so wait for the entry to go before asking again.
        eventually(lambda: not provider._booting, "the first boot done")
        assert provider.target(pool, spec) == 1  # not in the source, still counted
        provider.set_target(pool, spec, 1)
        assert not provider._booting  # nothing launched again

        def caught_up() -> bool:  # the source shows what the cache has now
            shown[:] = cache.reflectors["nodes"].items()
            return any(n["metadata"]["name"] == created.metadata.name for n in shown)

        eventually(caught_up, "the node in the cache")
        (instance,) = provider.instances(pool, spec)
        assert instance.state == "running"
        assert not provider._created
    finally:
        kwok.read_nodes_from(None)
        provider.close()


def widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def test_an_optional_kind_is_empty_and_synced_without_its_crd_and_filled_once_installed(
    kube: KubeTest, caplog: pytest.LogCaptureFixture
) -> None:
    """A JobSet/RayJob/PyTorchJob stream whose CRD is not installed must not hold the tick
    (synced, empty) nor fill the log (one line, not one per recheck); once the CRD is
    installed its objects are listed, and when the CRD goes they go."""
    group = f"{kube.namespace}.cache.test"
    crd_name = f"widgets.{group}"
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    custom = custom_lister(api)
    reflector = Reflector(
        Kind("widgets", custom, (group, "v1", "widgets"), optional=True),
        absent_recheck_seconds=0.1,
    )
    caplog.set_level("DEBUG", logger="hybridgpu.kube.cache")
    reflector.start()
    try:
        eventually(lambda: reflector.counters.absent >= 5, "five syncs answered 404")
        assert reflector.synced.is_set()
        assert reflector.absent_since is not None
        assert reflector.items() == []
        assert reflector.counters.errors == 0
        loud = [r for r in caplog.records if r.levelno >= logging.INFO and "widgets" in r.message]
        assert [r.message for r in loud] == [
            "widgets: CRD not installed; none are managed until it is"
        ]

        kube.plane.apiextensions.create_custom_resource_definition(widget_crd(group))
        kube.plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd_name}"
        )
        widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}}
        kube.custom.create_namespaced_custom_object(group, "v1", kube.namespace, "widgets", widget)
        eventually(lambda: f"{kube.namespace}/w" in keys(reflector), "the widget listed")
        assert reflector.absent_since is None

        kube.plane.apiextensions.delete_custom_resource_definition(crd_name)
        eventually(lambda: reflector.absent_since is not None, "the kind absent again")
        assert reflector.items() == []
        assert reflector.synced.is_set()
    finally:
        reflector.stop()
        with contextlib.suppress(client.ApiException):
            kube.plane.apiextensions.delete_custom_resource_definition(crd_name)
        api.close()
