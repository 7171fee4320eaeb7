"""Scale fixture for the real control plane: N kwok GPU nodes and M GPU pods, timed.

Brings up a control plane (hack/control-plane.sh, or the one in $HYBRIDGPU_KUBECONFIG), creates
``--nodes`` fake GPU nodes spread over a core, an elastic and a spot pool, waits until kwok has
made them Ready, creates ``--pods`` pods requesting one nvidia.com/gpu each, waits until all are
bound and Running, then prints JSON with the timings and the memory (RSS) of every component.

    .venv/bin/python bench/kwok_scale.py --nodes 1000 --pods 5000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.controlplane import (
    ControlPlane,
    create_test_namespace,
    gpu_node,
    script_paths,
    start_control_plane,
    stop_control_plane,
    wait_until,
)

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
    """Number of objects a list call returns, read from the apiserver's watch cache."""
    response = plane.api.call_api(
        path,
        "GET",
        query_params=[*query.items(), ("resourceVersion", "0")],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return len(json.loads(response.data)["items"])


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--name", default="bench-kwok-scale", help="control plane name")
    args = parser.parse_args(argv)

    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    up_start = time.monotonic()
    if reuse:
        plane, run_dir = ControlPlane(kubeconfig=Path(reuse)), None
    else:
        plane = start_control_plane(args.name)
        run_dir = script_paths(args.name)["RUN_DIR"]
    startup_seconds = round(time.monotonic() - up_start, 1)
    try:
        result = run(plane, run_dir, args.nodes, args.pods, args.gpus_per_node)
        result["control_plane_start_seconds"] = startup_seconds
    finally:
        stop_control_plane(plane)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
