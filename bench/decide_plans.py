"""Whether two checkouts of decide() make the same plans on the clusters of decide_scale.py.

    .venv/bin/python bench/decide_plans.py --operator operator > after.json
    .venv/bin/python bench/decide_plans.py --operator /tmp/main/operator > before.json
    diff before.json after.json

For several sizes and seeds of bench/decide_scale.py's cluster and several policies (the
default; large per-tick limits with on-demand for preemptible work; an hourly budget;
preemption off; no waiting for owned GPUs), prints one line per case: its name and a SHA-256
of the whole ``Plan`` (``repr``: every action, blocked request, note, gang, recheck time,
progress and pending count), with the action count to read. A speed-up must not change a line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CLUSTERS = [(100, 1), (100, 2), (100, 3), (300, 1), (1_000, 1), (1_000, 2), (3_000, 1)]
POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "wide": {
        "scaleUp": {"maxNodesPerTick": 1000},
        "preemption": {"maxPerTick": 200, "allowOnDemandForPreemptible": True},
        "disruption": {"maxNodesPerTick": 50, "maxPercent": 50},
    },
    "budget": {"budget": {"maxHourlyCost": 20000}},
    "no-preemption": {"preemption": {"enabled": False}, "consolidation": {"enabled": False}},
    "no-wait": {"waitBudget": {"critical": "0s", "standard": "0s", "preemptible": "0s"}},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--operator", type=Path, default=HERE.parent / "operator", help="code to run"
    )
    parser.add_argument("--max-nodes", type=int, default=3_000, help="skip larger clusters")
    parser.add_argument("--nodes", type=int, action="append", help="also this size (seed 1)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.operator.resolve()))
    from hybridgpu.core.decide import decide
    from hybridgpu.models import ScalingPolicySpec

    sys.path.insert(1, str(HERE))
    import decide_scale  # the cluster; its own path insert comes after the code chosen

    clusters = [c for c in CLUSTERS if c[0] <= args.max_nodes]
    clusters += [(n, 1) for n in args.nodes or ()]
    for nodes, seed in clusters:
        snap = decide_scale.cluster(nodes, nodes * 10, seed=seed)
        for name, body in POLICIES.items():
            plan = decide(snap, ScalingPolicySpec.model_validate(body), decide_scale.NOW)
            digest = hashlib.sha256(repr(plan).encode()).hexdigest()
            line = {
                "nodes": nodes,
                "seed": seed,
                "policy": name,
                "actions": len(plan.actions),
                "blocked": len(plan.blocked),
                "plan_sha256": digest,
            }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
