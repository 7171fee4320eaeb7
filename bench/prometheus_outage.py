"""Prometheus down for 10 minutes under a running operator, on the real control plane: the
scenario of tests/e2e/test_faults_prometheus.py (tests/support/outage.py) with the full
outage. Prints the figures as JSON (ticks while blind, releases while blind, how long after
Prometheus came back the idle node was released); docs/benchmarks.md has the results.

    .venv/bin/python bench/prometheus_outage.py --outage-seconds 600

Brings up its own control plane (hack/control-plane.sh; built on first use) unless
$HYBRIDGPU_KUBECONFIG names a running one, a fake DCGM exporter and Debian's Prometheus, and
stops everything it started. Exits 1 when anything was released while blind.
"""

from __future__ import annotations

import argparse
import json
import sys

from e2e_setup import operator_cluster
from support.outage import run_prometheus_outage
from support.prometheus import start_fake_dcgm, start_prometheus, stop_prometheus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--outage-seconds", type=float, default=600.0, help="how long Prometheus is down"
    )
    parser.add_argument("--idle-for-seconds", type=int, default=30, help="the pool's idleFor")
    args = parser.parse_args()
    if args.outage_seconds < 0 or args.idle_for_seconds < 1:
        parser.error("--outage-seconds must be >= 0 and --idle-for-seconds >= 1")
    dcgm = start_fake_dcgm()
    try:
        with operator_cluster("outage") as (cluster, operators, work):
            prometheus_dir = work / "prometheus"
            prometheus_dir.mkdir()
            prometheus = start_prometheus(prometheus_dir, dcgm.target)
            try:
                result = run_prometheus_outage(
                    cluster,
                    operators,
                    prometheus,
                    dcgm,
                    outage_seconds=args.outage_seconds,
                    idle_for_seconds=args.idle_for_seconds,
                    log=lambda line: print(f"outage: {line}", file=sys.stderr, flush=True),
                )
            finally:
                stop_prometheus(prometheus)
    finally:
        dcgm.server.shutdown()
        dcgm.server.server_close()
    figures = result.summary() | {
        "idle_for_seconds": args.idle_for_seconds,
        "released_while_blind_what": result.released_while_blind,
    }
    print(json.dumps(figures, sort_keys=True))
    ok = result.blind_condition_seen and not result.released_while_blind and result.operator_alive
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
