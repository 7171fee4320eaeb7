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
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests"), str(ROOT / "operator")]

from conftest import Cluster, Operators, delete_workloads, release_custom_objects  # noqa: E402
from support.chaos import run_chaos  # noqa: E402
from support.controlplane import (  # noqa: E402
    ControlPlane,
    KubeTest,
    create_test_namespace,
    delete_namespace,
    install_crds,
    start_control_plane,
    stop_control_plane,
)


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
    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    plane = ControlPlane(kubeconfig=Path(reuse)) if reuse else start_control_plane("bench-chaos")
    try:
        install_crds(plane)
        kube = KubeTest(plane=plane, namespace=create_test_namespace(plane, "chaos"))
        cluster = Cluster(kube)
        with tempfile.TemporaryDirectory(prefix="hybridgpu-chaos-") as logs:
            operators = Operators(kube=kube, log_dir=Path(logs))
            try:
                result = run_chaos(
                    cluster,
                    operators,
                    kills=args.kills,
                    seed=args.seed,
                    run_seconds=run_seconds,
                    settle_seconds=240.0,
                    log=lambda line: print(f"chaos: {line}", file=sys.stderr, flush=True),
                )
            finally:
                operators.stop_all()
                delete_workloads(kube)
                release_custom_objects(kube, cluster.created)
                for node in kube.core.list_node().items:
                    if node.metadata.name.startswith(cluster.prefix):
                        kube.core.delete_node(node.metadata.name)
                delete_namespace(plane, kube.namespace)
    finally:
        if reuse:
            plane.close()
        else:
            stop_control_plane(plane)
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
