"""Scale fixture for the real control plane: N kwok GPU nodes and M GPU pods, timed.

Brings up a control plane (hack/control-plane.sh, or the one in $HYBRIDGPU_KUBECONFIG), creates
``--nodes`` fake GPU nodes spread over a core, an elastic and a spot pool, waits until kwok has
made them Ready, creates ``--pods`` pods requesting one nvidia.com/gpu each, waits until all are
bound and Running, then prints JSON with the timings and the memory (RSS) of every component.

    .venv/bin/python bench/kwok_scale.py --nodes 1000 --pods 5000

With ``--operator`` (issue 14) the nodes belong to a core, an elastic and a spot GPUPool of one
ScalingPolicy, ``--gpu-pods`` of the ``--pods`` request one GPU (the scheduler binds them) and
the others none (bound straight to a node), and then the operator runs on that cluster
(``hybridgpu run`` as a subprocess, kwok provider): its RSS, the duration of ``--ticks``
steady-state ticks, the apiserver's LIST calls during those ticks (its own
``apiserver_request_total{verb="LIST"}``, read before and after), and ``--samples`` reactions
(a pending GPU pod -> the new node the operator launched). A control plane started with
``HYBRIDGPU_AUDIT_LOG=1`` (hack/control-plane.sh) keeps an audit log of LIST requests; the
LISTs of the steady ticks are then also counted by client (user agent and user).

    .venv/bin/python bench/kwok_scale.py --operator --nodes 5000 --pods 50000 --gpu-pods 20000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests"), str(ROOT / "operator")]

import urllib3  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from support.controlplane import (  # noqa: E402
    ControlPlane,
    KubeTest,
    audit_lists,
    create_test_namespace,
    gpu_job,
    gpu_node,
    install_crds,
    script_paths,
    start_control_plane,
    stop_control_plane,
    utc_stamp,
    wait_until,
)

WORKERS = 16
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Share of nodes per tier, so the cluster looks like a hybrid fleet.
TIER_SHARES = (("core", 0.2), ("elastic", 0.4), ("spot", 0.4))


def rss_mib(run_dir: Path) -> dict[str, dict[str, float]]:
    """Current and peak resident memory of each control-plane process, in MiB."""
    usage = {}
    for name in COMPONENTS:
        pid_file = run_dir / f"{name}.pid"
        if not pid_file.exists():
            continue
        status = Path(f"/proc/{pid_file.read_text().strip()}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        usage[name] = {
            "rss_mib": round(int(fields["VmRSS"].split()[0]) / 1024, 1),
            "peak_rss_mib": round(int(fields["VmHWM"].split()[0]) / 1024, 1),
        }
    return usage


def count(plane: ControlPlane, path: str, query: dict[str, str]) -> int:
    """Number of objects a list call returns, read from the apiserver's watch cache; a
    response cut short (a list of 50,000 pods on a loaded machine) is asked for again, twice."""
    for attempt in range(3):
        try:
            response = plane.api.call_api(
                path,
                "GET",
                query_params=[*query.items(), ("resourceVersion", "0")],
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            return len(json.loads(response.data)["items"])
        except urllib3.exceptions.HTTPError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def count_or_none(plane: ControlPlane, path: str, query: dict[str, str]) -> int | None:
    """``count`` for a figure that is only informational, None when it failed (a list of
    50,000 pods cut short after the steady ticks of a 5,000-node run lost the run's
    figures)."""
    try:
        return count(plane, path, query)
    except Exception as err:
        print(f"counting {path} failed: {err}", file=sys.stderr)
        return None


def parallel(fn: Callable[[Any], object], items: list[Any], workers: int) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(fn, items):
            pass


def gpu_pod(name: str) -> dict[str, Any]:
    one_gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kwok-scale"}},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example/train:latest",
                    "resources": {"requests": one_gpu, "limits": one_gpu},
                }
            ],
            "tolerations": [{"key": "hybridgpu.io/spot", "operator": "Exists"}],
        },
    }


def run(plane: ControlPlane, run_dir: Path | None, nodes: int, pods: int, gpus: int) -> dict:
    plane.api.configuration.connection_pool_maxsize = 32
    workers = 16
    result: dict[str, Any] = {"nodes": nodes, "pods": pods, "gpus_per_node": gpus}

    node_bodies = []
    for tier, share in TIER_SHARES:
        n = round(nodes * share) if tier != "spot" else nodes - len(node_bodies)
        taints = [{"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}]
        for i in range(n):
            node_bodies.append(
                gpu_node(
                    f"scale-{tier}-{i}",
                    pool=f"scale-{tier}",
                    tier=tier,
                    gpus=gpus,
                    taints=taints if tier == "spot" else (),
                )
            )

    start = time.monotonic()
    parallel(plane.core.create_node, node_bodies, workers)
    result["nodes_created_seconds"] = round(time.monotonic() - start, 1)
    wait_until(
        lambda: (
            count(plane, "/api/v1/nodes", {"labelSelector": "type=kwok"}) >= nodes
            and not_ready_nodes(plane) == 0
        ),
        timeout_seconds=600,
        interval_seconds=1,
        what=f"{nodes} nodes Ready",
    )
    result["nodes_ready_seconds"] = round(time.monotonic() - start, 1)

    namespace = create_test_namespace(plane, "kwok-scale")
    pods_start = time.monotonic()
    parallel(
        lambda i: plane.core.create_namespaced_pod(namespace, gpu_pod(f"gpu-{i}")),
        list(range(pods)),
        workers,
    )
    result["pods_created_seconds"] = round(time.monotonic() - pods_start, 1)
    running_path = f"/api/v1/namespaces/{namespace}/pods"
    wait_until(
        lambda: count(plane, running_path, {"fieldSelector": "status.phase=Running"}) >= pods,
        timeout_seconds=1200,
        interval_seconds=1,
        what=f"{pods} pods Running",
    )
    result["pods_running_seconds"] = round(time.monotonic() - pods_start, 1)
    result["total_seconds"] = round(time.monotonic() - start, 1)
    if run_dir is not None:
        result["memory"] = rss_mib(run_dir)
        result["memory_total_rss_mib"] = round(
            sum(c["rss_mib"] for c in result["memory"].values()), 1
        )
    return result


def not_ready_nodes(plane: ControlPlane) -> int:
    response = plane.api.call_api(
        "/api/v1/nodes",
        "GET",
        query_params=[("labelSelector", "type=kwok"), ("resourceVersion", "0")],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    items = json.loads(response.data)["items"]
    return sum(
        1
        for node in items
        if not any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
    )


# ---------------------------------------------------------------------------------------------
# --operator: the operator on the scaled cluster (issue 14)
# ---------------------------------------------------------------------------------------------


def apiserver_lists(plane: ControlPlane) -> dict[str, float]:
    """apiserver_request_total{verb="LIST"} by resource, from the apiserver's /metrics."""
    response = plane.api.call_api(
        "/metrics",
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name == "apiserver_request_total" and sample.labels.get("verb") == "LIST":
                resource = sample.labels.get("resource") or "?"
                out[resource] = out.get(resource, 0.0) + sample.value
    return out


def operator_reconcile(op: Any) -> tuple[float, float]:
    """(sum, count) of the operator's hybridgpu_reconcile_duration_seconds."""
    total = count_ = 0.0
    for family in text_string_to_metric_families(op.metrics()):
        for sample in family.samples:
            if sample.name == "hybridgpu_reconcile_duration_seconds_sum":
                total = sample.value
            elif sample.name == "hybridgpu_reconcile_duration_seconds_count":
                count_ = sample.value
    return total, count_


def process_memory(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {
        "rss_mib": round(int(fields["VmRSS"].split()[0]) / 1024, 1),
        "peak_rss_mib": round(int(fields["VmHWM"].split()[0]) / 1024, 1),
        "cpu_seconds": round((int(stat[11]) + int(stat[12])) / ticks, 1),
    }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


def plain_pod(name: str, node: str) -> dict[str, Any]:
    """A pod without GPUs bound straight to ``node`` (no scheduler work): the cluster's other
    pods, which the operator must not hold in memory."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kwok-scale-cpu"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "web", "image": "registry.example/web:latest"}],
            "tolerations": [{"key": "hybridgpu.io/spot", "operator": "Exists"}],
        },
    }


def wait_pods_running(plane: ControlPlane, namespace: str, want: int, what: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"

    def running() -> bool:
        try:
            return count(plane, path, {"fieldSelector": "status.phase=Running"}) >= want
        except Exception:  # a list of thousands of pods cut short on a loaded machine
            return False

    wait_until(
        running,
        timeout_seconds=3600,
        interval_seconds=5,
        what=what,
    )


def build_cluster(
    plane: ControlPlane, args: argparse.Namespace, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The cluster of ``--nodes`` and ``--pods`` (``--gpu-pods`` of them GPU pods) with its
    pools and policy; returns what a later run needs to find them (``--state``). ``state``
    from an interrupted build (its ``phase``: ``nodes`` once the nodes are created, ``pods``
    once the pods are) carries on from where it stopped."""
    from conftest import SPOT_TAINT, Cluster  # tests/e2e
    from hybridgpu.cloud.kwok import kwok_node
    from hybridgpu.models.pool import GPUPoolSpec

    def save(phase: str) -> None:
        assert state is not None
        state["phase"] = phase
        if args.state is not None:
            args.state.write_text(json.dumps(state, indent=2))

    if state is None:
        state = {
            "kubeconfig": str(plane.kubeconfig),
            "nodes": args.nodes,
            "pods": args.pods,
            "gpu_pods": args.gpu_pods,
            "gpus_per_node": args.gpus_per_node,
            "samples": args.samples,
            "bind_gpu_pods": args.bind_gpu_pods,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        }
        kube = KubeTest(plane=plane, namespace=create_test_namespace(plane, "kwok-scale"))
        cluster = Cluster(kube)
        policy = cluster.policy(interval=args.interval)
        n_core = round(args.nodes * TIER_SHARES[0][1])
        n_elastic = round(args.nodes * TIER_SHARES[1][1])
        n_spot = args.nodes - n_core - n_elastic
        gpus = args.gpus_per_node
        core = cluster.pool(
            "core", tier="core", policy=policy, per_node=gpus, max_nodes=n_core, idle_for="24h"
        )
        elastic = cluster.pool(
            "elastic",
            tier="elastic",
            policy=policy,
            per_node=gpus,
            max_nodes=n_elastic + args.samples,
            price=10.0,
            idle_for="24h",
        )
        spot = cluster.pool(
            "spot",
            tier="spot",
            policy=policy,
            per_node=gpus,
            max_nodes=n_spot,
            price=3.0,
            taints=[SPOT_TAINT],
            idle_for="24h",
        )
        state.update(
            namespace=kube.namespace,
            policy=policy,
            core=core,
            elastic=elastic,
            spot=spot,
            n_core=n_core,
            n_elastic=n_elastic,
            n_spot=n_spot,
        )
        elastic_spec = GPUPoolSpec.model_validate(cluster.pool_object(elastic)["spec"])
        spot_spec = GPUPoolSpec.model_validate(cluster.pool_object(spot)["spec"])
        bodies = [gpu_node(f"{core}-{i}", pool=core, tier="core", gpus=gpus) for i in range(n_core)]
        bodies += [kwok_node(f"{elastic}-{i}", elastic, elastic_spec) for i in range(n_elastic)]
        bodies += [kwok_node(f"{spot}-{i}", spot, spot_spec) for i in range(n_spot)]
        t0 = time.monotonic()
        parallel(lambda body: create(plane, "/api/v1/nodes", body), bodies, args.workers)
        state["nodes_created_seconds"] = round(time.monotonic() - t0, 1)
        save("nodes")
        if args.wait_nodes_ready:
            wait_until(
                lambda: (
                    not_ready_nodes(plane) == 0
                    and count(plane, "/api/v1/nodes", {"labelSelector": "type=kwok"}) >= args.nodes
                ),
                timeout_seconds=3600,
                interval_seconds=5,
                what=f"{args.nodes} nodes Ready",
            )
            state["nodes_ready_seconds"] = round(time.monotonic() - t0, 1)

    names = [f"{state['core']}-{i}" for i in range(state["n_core"])]
    names += [f"{state['elastic']}-{i}" for i in range(state["n_elastic"])]
    names += [f"{state['spot']}-{i}" for i in range(state["n_spot"])]
    ns = state["namespace"]
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    if state.get("phase") == "nodes":
        t0 = time.monotonic()
        elastic_nodes = names[state["n_core"] : state["n_core"] + state["n_elastic"]]

        # --bind-gpu-pods: the others round-robin on core and spot nodes, no scheduler.
        bound_to = [*names[: state["n_core"]], *names[state["n_core"] + state["n_elastic"] :]]
        bind = state.get("bind_gpu_pods", False)

        def gpu_pod_at(i: int) -> None:
            body = gpu_pod(f"gpu-{i}")
            if i < len(elastic_nodes):  # one GPU taken on every elastic node: 8 fit on none
                body["spec"]["nodeName"] = elastic_nodes[i]
            elif bind:
                body["spec"]["nodeName"] = bound_to[(i - len(elastic_nodes)) % len(bound_to)]
            create(plane, pods_path, body)

        parallel(gpu_pod_at, list(range(state["gpu_pods"])), args.workers)
        state["gpu_pods_created_seconds"] = round(time.monotonic() - t0, 1)
        others = state["pods"] - state["gpu_pods"]
        parallel(
            lambda i: create(plane, pods_path, plain_pod(f"cpu-{i}", names[i % len(names)])),
            list(range(others)),
            args.workers,
        )
        state["pods_created_seconds"] = round(time.monotonic() - t0, 1)
        save("pods")
        state["pods_t0"] = time.time() - (time.monotonic() - t0)
    if args.wait_pods_running:
        wait_pods_running(plane, ns, state["pods"], f"{state['pods']} pods Running")
    if "pods_t0" in state:
        state["pods_running_seconds"] = round(time.time() - state.pop("pods_t0"), 1)
    state["load_average_built"] = [round(x, 2) for x in os.getloadavg()]
    save("done")
    return state


def create(plane: ControlPlane, path: str, body: dict[str, Any]) -> None:
    """POST ``body`` without decoding the answer into client models (the client's CPU was
    most of the time spent creating objects)."""
    for attempt in range(5):
        try:
            plane.api.call_api(
                path,
                "POST",
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            return
        except Exception as err:  # throttled or timed out on a loaded machine: once more
            status = getattr(err, "status", None)
            if status == 409:  # created by the attempt that timed out
                return
            if attempt == 4:
                raise
            time.sleep(1 + attempt)


def operator_run(
    plane: ControlPlane, args: argparse.Namespace, state: dict[str, Any]
) -> dict[str, Any]:
    """The operator on the cluster ``state`` describes: its RSS, its ticks, the apiserver's
    LIST calls during steady-state ticks, and its reaction to pending GPU pods."""
    from conftest import Cluster, Operators  # tests/e2e

    result: dict[str, Any] = {
        **state,
        "load_average_operator_start": [round(x, 2) for x in os.getloadavg()],
    }
    kube = KubeTest(plane=plane, namespace=state["namespace"])
    cluster = Cluster(kube)
    policy, elastic = state["policy"], state["elastic"]
    pods_path = f"/api/v1/namespaces/{state['namespace']}/pods"
    result["pods_at_operator_start"] = count_or_none(plane, pods_path, {})
    result["pods_running_at_operator_start"] = count_or_none(
        plane, pods_path, {"fieldSelector": "status.phase=Running"}
    )
    operators = Operators(kube=kube, log_dir=Path(tempfile.mkdtemp(prefix="kwok-scale-")))
    try:
        t0 = time.monotonic()
        ticked_before = cluster.policy_status(policy).get("lastTick")
        op = operators.start(kwok_delay_seconds=0.0, extra_env=profile_env(args))
        result["operator_log"] = str(op.log_path)
        if ticked_before:  # a cluster measured again: its last operator's tick is not this one's
            cluster.wait_ticks(policy, ticks=1, timeout_seconds=1800)
        else:
            cluster.wait_ticking(policy, timeout_seconds=1800)
        result["operator_first_tick_seconds"] = round(time.monotonic() - t0, 1)
        result["operator_memory_after_first_tick"] = process_memory(op.process.pid)
        cluster.wait_ticks(policy, ticks=2, timeout_seconds=600)

        # Steady state: N ticks; each tick's duration from the histogram's sum between ticks,
        # LIST calls from the apiserver's own counters (nothing here LISTs meanwhile).
        lists_before = apiserver_lists(plane)
        steady_since = utc_stamp()
        cpu_before = process_memory(op.process.pid)["cpu_seconds"]
        t0 = time.monotonic()
        last_sum, last_count = operator_reconcile(op)
        ticks: list[float] = []
        while len(ticks) < args.ticks:
            cluster.wait_ticks(policy, ticks=1, timeout_seconds=600)
            total, count_ = operator_reconcile(op)
            if count_ == last_count + 1:
                ticks.append(total - last_sum)
            last_sum, last_count = total, count_
        steady_until = utc_stamp()
        lists_after = apiserver_lists(plane)
        result["steady_ticks"] = len(ticks)
        result["steady_wall_seconds"] = round(time.monotonic() - t0, 1)
        result["steady_operator_cpu_seconds"] = round(
            process_memory(op.process.pid)["cpu_seconds"] - cpu_before, 1
        )
        result["tick_seconds"] = [round(t, 3) for t in ticks]
        result["tick_seconds_p50"] = percentile(ticks, 0.5)
        result["tick_seconds_p95"] = percentile(ticks, 0.95)
        result["tick_seconds_max"] = round(max(ticks), 3)
        result["list_calls_during_steady_ticks"] = {
            k: lists_after[k] - lists_before.get(k, 0.0)
            for k in sorted(lists_after)
            if lists_after[k] != lists_before.get(k, 0.0)
        }
        if plane.audit_log is not None:
            result["list_calls_during_steady_ticks_by_client"] = audit_lists(
                plane.audit_log, steady_since, steady_until
            )
        result["operator_memory_steady"] = process_memory(op.process.pid)
        result["pods_running_after_steady_ticks"] = count_or_none(
            plane, pods_path, {"fieldSelector": "status.phase=Running"}
        )
        result["load_average_steady"] = [round(x, 2) for x in os.getloadavg()]

        result["elastic_max_nodes_for_samples"] = room_for_samples(
            plane, cluster, elastic, args.samples
        )
        polled, watched = reaction_samples(plane, cluster, elastic, args.samples)
        result["reaction_seconds"] = polled
        result["reaction_seconds_p50"] = percentile(polled, 0.5)
        result["reaction_seconds_p95"] = percentile(polled, 0.95)
        # The same samples, the node's arrival taken from a watch instead of the 50 ms polls.
        result["reaction_seconds_watched"] = watched
        arrived = [w for w in watched if w is not None]
        if arrived:
            result["reaction_seconds_watched_p50"] = percentile(arrived, 0.5)
            result["reaction_seconds_watched_p95"] = percentile(arrived, 0.95)
        result["operator_memory_end"] = process_memory(op.process.pid)
        result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        operators.stop_all()
    return result


def profile_env(args: argparse.Namespace) -> dict[str, str]:
    return {"HYBRIDGPU_PROFILE_TICKS": str(args.profile)} if args.profile else {}


def room_for_samples(plane: ControlPlane, cluster: Any, elastic: str, samples: int) -> int:
    """Raise the elastic pool's ``maxNodes`` to its Nodes now plus ``samples``, so that
    every reaction sample has a node to launch: the build sized it for the build's own
    ``--samples``, and each measured run leaves its samples' nodes behind (their Jobs run
    24 h), so a cluster measured again, or with more samples, would otherwise hit the limit
    and the bench would wait for a node the operator rightly never launches. Returns the new
    ``maxNodes``."""
    from conftest import GROUP, VERSION  # tests/e2e

    nodes = count(plane, "/api/v1/nodes", {"labelSelector": f"hybridgpu.io/pool={elastic}"})
    wanted = nodes + samples
    current = int(cluster.pool_object(elastic)["spec"]["maxNodes"])
    if wanted > current:
        cluster.kube.custom.patch_cluster_custom_object(
            GROUP, VERSION, "gpupools", elastic, {"spec": {"maxNodes": wanted}}
        )
    return max(wanted, current)


def reaction_samples(
    plane: ControlPlane, cluster: Any, elastic: str, samples: int
) -> tuple[list[float], list[float | None]]:
    """Each sample: a critical Job whose 8-GPU pod fits on no elastic node (they are half
    full); seconds from the scheduler marking it Unschedulable to the new elastic node the
    operator launched (kwok boot delay 0: the node appears when the operator asks for it).

    Two clocks stop at the node: this process polling the pool's Nodes every 50 ms (each
    poll a list of the pool's every Node: at 5,000 nodes, 2,000 of them, which takes a
    while and a core of its own), and a watch of the pool's Nodes started before the Job
    (the moment its ADDED event arrives; None when none came). Both are returned, in that
    order."""
    ns = create_test_namespace(plane, "kwok-scale-reaction")
    path = f"/api/v1/namespaces/{ns}/pods"
    nodes_path = "/api/v1/nodes"
    selector = {"labelSelector": f"hybridgpu.io/pool={elastic}"}
    polled: list[float] = []
    watched: list[float | None] = []
    for i in range(samples):
        before = count(plane, nodes_path, selector)
        added = NodeAdded(plane, selector["labelSelector"])
        body = gpu_job(
            f"r{i}",
            gpus=cluster_gpus(cluster, elastic),
            pool=elastic,
            run_duration="24h",
            labels={"hybridgpu.io/criticality": "critical"},
        )
        plane.batch.create_namespaced_job(ns, body)
        wait_until(
            lambda n=f"r{i}": any(unschedulable(p) for p in items(plane, path, f"job-name={n}")),
            timeout_seconds=120,
            interval_seconds=0.05,
            what=f"r{i} Unschedulable",
        )
        seen = time.monotonic()
        wait_until(
            lambda b=before: count(plane, nodes_path, selector) > b,
            timeout_seconds=120,
            interval_seconds=0.05,
            what=f"a node for r{i}",
        )
        polled.append(round(time.monotonic() - seen, 3))
        added.thread.join(10.0)
        watched.append(None if added.at is None else round(added.at - seen, 3))
        wait_until(
            lambda n=f"r{i}": any(
                p["spec"].get("nodeName") for p in items(plane, path, f"job-name={n}")
            ),
            timeout_seconds=120,
            interval_seconds=0.2,
            what=f"r{i} bound",
        )
    return polled, watched


class NodeAdded:
    """A watch of the Nodes of ``label_selector`` from now on, on a thread of its own: ``at``
    is when (monotonic) the first ADDED event arrived; it stops there (or after 130 s)."""

    def __init__(self, plane: ControlPlane, label_selector: str) -> None:
        self.at: float | None = None
        listed = plane.api.call_api(
            "/api/v1/nodes",
            "GET",
            query_params=[("labelSelector", label_selector), ("limit", "1")],
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        version = json.loads(listed.data)["metadata"]["resourceVersion"]
        self.response = plane.api.call_api(
            "/api/v1/nodes",
            "GET",
            query_params=[
                ("watch", "true"),
                ("labelSelector", label_selector),
                ("resourceVersion", version),
                ("timeoutSeconds", "130"),
            ],
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        pending = b""
        try:
            for chunk in self.response.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line and json.loads(line).get("type") == "ADDED":
                        self.at = time.monotonic()
                        return
        except Exception as err:  # the figure is then None, the polled one stands
            print(f"node watch failed: {err}", file=sys.stderr)
        finally:
            self.response.release_conn()


def cluster_gpus(cluster: Any, pool: str) -> int:
    return int(cluster.pool_object(pool)["spec"]["gpu"]["perNode"])


def items(plane: ControlPlane, path: str, label_selector: str) -> list[dict[str, Any]]:
    response = plane.api.call_api(
        path,
        "GET",
        query_params=[("labelSelector", label_selector), ("resourceVersion", "0")],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return list(json.loads(response.data)["items"])


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--name", default="bench-kwok-scale", help="control plane name")
    parser.add_argument("--operator", action="store_true", help="run the operator on it")
    parser.add_argument("--gpu-pods", type=int, help="with --operator: pods with a GPU")
    parser.add_argument("--interval", default="10s", help="the ScalingPolicy's interval")
    parser.add_argument("--ticks", type=int, default=20, help="steady-state ticks measured")
    parser.add_argument("--samples", type=int, default=10, help="reaction samples")
    parser.add_argument("--workers", type=int, default=WORKERS, help="client threads creating")
    parser.add_argument(
        "--state",
        type=Path,
        help="with --operator: a JSON file; when it exists, the cluster it names (on the "
        "control plane of $HYBRIDGPU_KUBECONFIG) is measured again instead of built; when it "
        "does not, the cluster built is written there (keep the control plane with "
        "$HYBRIDGPU_KUBECONFIG, e.g. from hack/control-plane.sh up)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="with --operator: the operator writes a cProfile of its ticks to this file",
    )
    parser.add_argument(
        "--no-wait-nodes-ready",
        dest="wait_nodes_ready",
        action="store_false",
        help="create the pods without waiting for every node to be Ready (kwok is slow to "
        "initialise thousands of nodes on a loaded machine; the wait for Running pods stays)",
    )
    parser.add_argument(
        "--no-wait-pods-running",
        dest="wait_pods_running",
        action="store_false",
        help="measure the operator without waiting for every pod to be Running",
    )
    parser.add_argument(
        "--bind-gpu-pods",
        action="store_true",
        help="with --operator: create the GPU pods bound to core and spot nodes (round-robin) "
        "instead of leaving them to the scheduler, which at thousands of nodes is most of the "
        "build's time; the reaction samples still go through the scheduler",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="with --operator and --state: build the cluster, write the state, run nothing",
    )
    args = parser.parse_args(argv)
    if args.build_only and args.state is None:
        parser.error("--build-only needs --state")
    if args.operator and args.gpu_pods is None:
        args.gpu_pods = args.pods
    if args.operator and not 0 < args.gpu_pods <= args.pods:
        parser.error("--gpu-pods must be between 1 and --pods")
    n_bound = args.nodes - round(args.nodes * TIER_SHARES[1][1])
    if args.bind_gpu_pods and args.gpu_pods > n_bound * args.gpus_per_node:
        parser.error("--bind-gpu-pods: more GPU pods than the core and spot nodes have GPUs")

    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    up_start = time.monotonic()
    if reuse:
        plane, run_dir = ControlPlane(kubeconfig=Path(reuse)), None
    else:
        plane = start_control_plane(args.name)
        run_dir = script_paths(args.name)["RUN_DIR"]
    startup_seconds = round(time.monotonic() - up_start, 1)
    try:
        if args.operator:
            plane.api.configuration.connection_pool_maxsize = 32
            state = None
            if args.state is not None and args.state.exists():
                state = json.loads(args.state.read_text())
            if state is None or state.get("phase") != "done":
                if state is None:
                    install_crds(plane)
                state = build_cluster(plane, args, state)
            if args.build_only:
                print(json.dumps(state, indent=2))
                return 0
            result = operator_run(plane, args, state)
            if run_dir is None and reuse and args.name:
                found = script_paths(args.name).get("RUN_DIR")
                run_dir = found if found is not None and (found / "etcd.pid").exists() else None
            if run_dir is not None:
                result["control_plane_memory"] = rss_mib(run_dir)
        else:
            result = run(plane, run_dir, args.nodes, args.pods, args.gpus_per_node)
        result["control_plane_start_seconds"] = startup_seconds
    finally:
        stop_control_plane(plane)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
