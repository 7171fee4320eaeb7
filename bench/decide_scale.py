"""How long decide() takes on large clusters.

    .venv/bin/python bench/decide_scale.py --json

Each size is a cluster of 8-GPU nodes split 50/30/20 over core, elastic and spot pools,
with pods of 1, 2, 4 or 8 GPUs in every criticality: 98% running, 2% pending, some nodes
idle, a few interrupted or unhealthy, half the Jobs stating an expected duration (so pods
may wait for owned GPUs), so every step of decide() has work. The median of
several runs is reported, wall and CPU seconds (on a shared machine the CPU seconds are the
figure to compare with the targets); building the snapshot is not timed (the operator
builds it from its watch caches).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from hybridgpu.core.decide import decide
from hybridgpu.models import GPUPoolSpec, ScalingPolicySpec
from hybridgpu.models.snapshot import (
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    NodeState,
    PoolState,
)

SIZES = [(100, 1_000), (1_000, 10_000), (5_000, 50_000), (10_000, 100_000)]
NOW = 10_000_000.0


def _pool(name: str, tier: str, max_nodes: int) -> PoolState:
    body: dict = {"tier": tier, "gpu": {"model": "H100", "perNode": 8}, "maxNodes": max_nodes}
    if tier == "core":
        body["pricing"] = {"capexPerNode": 300000, "powerWattsPerNode": 10000}
    else:
        body["pricing"] = {"perNodeHour": 98.0 if tier == "elastic" else 30.0}
        body["provider"] = {"type": "fake"}
    return PoolState(name=name, spec=GPUPoolSpec.model_validate(body))


def cluster(nodes: int, pods: int, seed: int = 1) -> ClusterSnapshot:
    """A deterministic random cluster of ``nodes`` 8-GPU nodes and ``pods`` GPU pods."""
    rng = random.Random(seed)
    stated = random.Random(seed + 1)  # apart, so the cluster itself stays the same
    shares = {"core": 0.5, "elastic": 0.3, "spot": 0.2}
    pools = [_pool(t, t, nodes * 2) for t in shares]
    node_list: list[NodeState] = []
    for tier, share in shares.items():
        for i in range(int(nodes * share)):
            idle = rng.random() < 0.03
            node_list.append(
                NodeState(
                    name=f"{tier}-{i:06d}",
                    pool=tier,
                    gpus=8,
                    created_at=NOW - 86400,
                    idle_since=NOW - 3600 if idle else None,
                    utilization_percent=0.0 if idle else 70.0,
                    interruption_deadline=NOW + 60
                    if tier == "spot" and rng.random() < 0.01
                    else None,
                    xid_errors=1 if rng.random() < 0.002 else 0,
                )
            )
    busy = [n for n in node_list if n.idle_since is None]
    free = {n.name: 8 for n in busy}
    crits = [Criticality.CRITICAL, Criticality.STANDARD, Criticality.PREEMPTIBLE]
    pod_list: list[GPUPod] = []
    jobs: list[JobState] = []
    for i in range(pods):
        gpus = rng.choice((1, 1, 1, 1, 1, 1, 2, 8))
        crit = rng.choice(crits)
        node = None
        if rng.random() > 0.02:
            start = rng.randrange(len(busy))
            for step in range(16):
                host = busy[(start + step) % len(busy)]
                if free[host.name] >= gpus:
                    free[host.name] -= gpus
                    node = host.name
                    break
        started = NOW - rng.uniform(60, 36000) if node else None
        pod_list.append(
            GPUPod(
                namespace=f"ns{i % 50}",
                name=f"pod-{i:07d}",
                gpus=gpus,
                criticality=crit,
                node=node,
                job=f"ns{i % 50}/job-{i:07d}",
                pending_since=NOW - 120,
                started_at=started,
            )
        )
        jobs.append(
            JobState(
                f"ns{i % 50}",
                f"job-{i:07d}",
                crit,
                gpus,
                started_at=started,
                created_at=(NOW - 120 if started is None else started) - 60,
                # Half the Jobs state how long they run: decide() may wait for their GPUs.
                expected_duration_seconds=stated.uniform(3600, 43200)
                if stated.random() < 0.5
                else None,
            )
        )
    return ClusterSnapshot(
        taken_at=NOW,
        pools=tuple(pools),
        nodes=tuple(node_list),
        pods=tuple(pod_list),
        jobs=tuple(jobs),
    )


def at_least_one(text: str) -> int:
    runs = int(text)
    if runs < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.add_argument(
        "--runs", type=at_least_one, default=5, help="runs per size (median reported)"
    )
    parser.add_argument("--max-nodes", type=int, default=10_000, help="skip larger sizes")
    args = parser.parse_args()
    policy = ScalingPolicySpec()
    rows = []
    for nodes, pods in SIZES:
        if nodes > args.max_nodes:
            continue
        snap = cluster(nodes, pods)
        times = []
        cpu_times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            cpu = time.process_time()
            plan = decide(snap, policy, NOW)
            cpu_times.append(time.process_time() - cpu)
            times.append(time.perf_counter() - start)
        row = {
            "nodes": nodes,
            "pods": pods,
            "median_seconds": round(statistics.median(times), 4),
            # On a shared machine the CPU seconds are what an idle one would take.
            "median_cpu_seconds": round(statistics.median(cpu_times), 4),
            "actions": len(plan.actions),
        }
        rows.append(row)
        if not args.json:
            print(
                f"{nodes:>6} nodes {pods:>7} pods: median {row['median_seconds']:.3f} s "
                f"({row['median_cpu_seconds']:.3f} CPU s, {len(plan.actions)} actions)",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
