"""How much of decide() at scale is the garbage collector's work.

    .venv/bin/python bench/decide_gc.py --nodes 10000 [--operator ../other/operator]

On the cluster of bench/decide_scale.py, per tick (the last of ``--runs``): the young and
full collections it set off and the CPU seconds of the full ones (they walk the whole
snapshot, 100,000 pods at 10,000 nodes), the objects the collector still tracks when the
plan is made, and the median CPU seconds of a tick with the collector on and off.
``--operator`` measures another checkout's code on the same cluster.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="pods: ten per node")
    parser.add_argument("--runs", type=int, default=3, help="ticks per figure")
    parser.add_argument(
        "--operator", type=Path, default=HERE.parent / "operator", help="code to measure"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(args.operator.resolve()))
    import hybridgpu.core.decide as decide_module
    from hybridgpu.models import ScalingPolicySpec

    sys.path.insert(1, str(HERE))
    import decide_scale  # the cluster; its own path insert comes after the code chosen

    snap = decide_scale.cluster(args.nodes, args.nodes * 10)
    policy = ScalingPolicySpec()
    now = decide_scale.NOW

    def cpu_seconds() -> float:
        times = []
        for _ in range(args.runs):
            start = time.process_time()
            decide_module.decide(snap, policy, now)
            times.append(time.process_time() - start)
        return statistics.median(times)

    on = cpu_seconds()
    events: list[tuple[str, int, float]] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        events.append((phase, info["generation"], time.process_time()))

    tracked: list[int] = []
    run = decide_module._Decider.run

    def run_and_count(self: Any) -> Any:
        plan = run(self)
        gc.collect(1)  # the young ones: drops tuples of plain values from tracking
        tracked.append(len(gc.get_objects()) - before)
        return plan

    gc.collect()
    before = len(gc.get_objects())
    gc.callbacks.append(record)
    decide_module._Decider.run = run_and_count  # type: ignore[method-assign]
    try:
        decide_module.decide(snap, policy, now)
    finally:
        decide_module._Decider.run = run  # type: ignore[method-assign]
        gc.callbacks.remove(record)
    collections = [0, 0, 0]
    full_seconds = 0.0
    started = 0.0
    for phase, generation, at in events[:-2]:  # the last two: gc.collect(1) above
        if phase == "start":
            started = at
        else:
            collections[generation] += 1
            if generation == 2:
                full_seconds += at - started
    gc.disable()
    try:
        off = cpu_seconds()
    finally:
        gc.enable()
    print(
        json.dumps(
            {
                "code": str(Path(decide_module.__file__).parents[2]),
                "nodes": args.nodes,
                "young_collections": collections[0] + collections[1],
                "full_collections": collections[2],
                "full_collection_cpu_seconds": round(full_seconds, 3),
                "tracked_objects_kept": tracked[0],
                "median_cpu_seconds": round(on, 3),
                "median_cpu_seconds_gc_off": round(off, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
