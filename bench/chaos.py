"""The operator SIGKILLed 20 times (seeded moments) while a mixed workload runs, on the real
control plane: the scenario of tests/e2e/test_chaos.py (tests/support/chaos.py) with more
kills. Prints the figures as JSON (jobs lost or left suspended, Node launches against the
demand, touches of the core node); docs/benchmarks.md has the results.

    .venv/bin/python bench/chaos.py --kills 20 --seed 11

Brings up its own control plane (hack/control-plane.sh; built on first use) unless
$HYBRIDGPU_KUBECONFIG names a running one, and stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import sys

from e2e_setup import operator_cluster
from support.chaos import run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs (default 20)")
    parser.add_argument("--seed", type=int, default=11, help="random seed of the kill moments")
    parser.add_argument(
        "--run-seconds",
        type=int,
        help="how long each Job runs once placed (default: long enough to span the kills)",
    )
    args = parser.parse_args()
    run_seconds = args.run_seconds or max(20, 4 * args.kills)
    with operator_cluster("chaos") as (cluster, operators, _):
        result = run_chaos(
            cluster,
            operators,
            kills=args.kills,
            seed=args.seed,
            run_seconds=run_seconds,
            settle_seconds=240.0,
            log=lambda line: print(f"chaos: {line}", file=sys.stderr, flush=True),
        )
    figures = result.summary() | {
        "jobs_lost_names": result.jobs_lost,
        "kill_offsets_seconds": result.kill_offsets_seconds,
        "run_seconds": run_seconds,
    }
    print(json.dumps(figures, sort_keys=True))
    ok = not (result.jobs_lost or result.duplicate_launches or result.core_touches)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
