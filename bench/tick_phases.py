"""CPU of the operator's steady ticks by phase, in-process, on a cluster bench/kwok_scale.py built.

A ``Reconciler`` reading a ``WatchCache`` (as ``hybridgpu run`` wires them, kwok stand-in cloud
included) ticks the policy of ``--state`` back to back; after three warm-up ticks, ``--ticks``
ticks are measured: the tick thread's CPU time per tick, the process's (the watch and Lease
threads too), and the tick thread's CPU in each phase (wrappers around the functions a tick
calls). ``--profile FILE`` also writes a cProfile of the measured ticks. Prints JSON.

    export HYBRIDGPU_KUBECONFIG=~/.cache/hybridgpu/run/<name>/kubeconfig
    .venv/bin/python bench/tick_phases.py --state /tmp/<name>.json --ticks 20

The ticks write the policy's status and hold the leader Lease (5 s) of the cluster's
namespace: run it while no operator runs on that cluster.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator")]

from kubernetes import config  # noqa: E402

import hybridgpu.handlers.loop as loop  # noqa: E402
from hybridgpu.cloud import kwok  # noqa: E402
from hybridgpu.handlers.options import OperatorOptions  # noqa: E402
from hybridgpu.kube.cache import WatchCache  # noqa: E402
from hybridgpu.kube.cluster import KubeCluster  # noqa: E402
from hybridgpu.kube.executor import PlanExecutor  # noqa: E402
from hybridgpu.metrics.exported import ExportedMetrics  # noqa: E402

PHASES: list[tuple[Any, str]] = [
    *((loop, name) for name in ("build_snapshot", "decide", "read_serving", "read_requests")),
    *((loop.Reconciler, name) for name in ("_measure", "_report", "_pools")),
    *(
        (PlanExecutor, name)
        for name in (
            "execute",
            "shape_nodes",
            "delete_orphan_nodes",
            "finish_interrupted",
            "advance_moves",
            "advance_rebalances",
        )
    ),
    (WatchCache, "read_objects"),
    (ExportedMetrics, "record_plan"),
]


def timed(spent: Counter[str]) -> None:
    """Wrap each phase so that the tick thread's CPU in it adds up in ``spent``."""
    for owner, name in PHASES:
        fn = getattr(owner, name)

        def wrapper(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent[_name] += time.thread_time() - started

        setattr(owner, name, functools.wraps(fn)(wrapper))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, required=True, help="kwok_scale.py --state file")
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the measured ticks")
    args = parser.parse_args(argv)
    kubeconfig = os.environ.get("HYBRIDGPU_KUBECONFIG")
    if not kubeconfig or not args.state.exists():
        print("error: set HYBRIDGPU_KUBECONFIG and give an existing --state", file=sys.stderr)
        return 2
    state = json.loads(args.state.read_text())
    os.environ["KUBECONFIG"] = kubeconfig  # the kwok provider's client
    spent: Counter[str] = Counter()
    timed(spent)
    cache = WatchCache.for_api(config.new_client_from_config(config_file=kubeconfig))
    reconciler = loop.Reconciler(
        KubeCluster(config.new_client_from_config(config_file=kubeconfig)),
        OperatorOptions(
            identity="bench-tick-phases",
            lease_namespace=state["namespace"],
            lease_seconds=5,
            fake_provider="hybridgpu.cloud.kwok:KwokProvider",
            freeze_heap=os.environ.get("HYBRIDGPU_FREEZE_HEAP", "1") != "0",  # as from_env
        ),
        metrics=ExportedMetrics(),
        reads=cache,
    )
    kwok.read_nodes_from(cache.reflectors["nodes"].view)
    cache.start()
    try:
        if not cache.wait_synced(600):
            print(f"error: {cache.problems()}", file=sys.stderr)
            return 1
        reconciler.start_lease_renewal()
        deadline = time.monotonic() + 120
        while not reconciler.lease.held():
            if time.monotonic() > deadline:
                print("error: the leader Lease was not taken in 120 s", file=sys.stderr)
                return 1
            time.sleep(0.5)
        policy = state["policy"]
        for _ in range(3):
            reconciler.tick(policy)
        spent.clear()
        profile = cProfile.Profile() if args.profile else None
        thread0, process0, wall0 = time.thread_time(), time.process_time(), time.monotonic()
        errors: list[str] = []
        for _ in range(args.ticks):
            result = (
                profile.runcall(reconciler.tick, policy) if profile else reconciler.tick(policy)
            )
            errors += result.errors
        n = args.ticks
        out = {
            "ticks": n,
            "nodes": len(cache.reflectors["nodes"]),
            "gpu_pods": len(cache.reflectors["pods"]),
            "tick_thread_cpu_ms": round((time.thread_time() - thread0) / n * 1000, 1),
            "process_cpu_ms": round((time.process_time() - process0) / n * 1000, 1),
            "wall_ms": round((time.monotonic() - wall0) / n * 1000, 1),
            "phases_cpu_ms": {k: round(v / n * 1000, 1) for k, v in spent.most_common()},
            "errors": errors[:5],
            "load_average": [round(x, 1) for x in os.getloadavg()],
        }
        if profile is not None and args.profile:
            profile.dump_stats(args.profile)
        print(json.dumps(out, indent=2))
        return 0
    finally:
        reconciler.stop_lease_renewal()
        cache.stop()
        reconciler.cluster.close()


if __name__ == "__main__":
    raise SystemExit(main())
