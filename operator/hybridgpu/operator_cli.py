"""`hybridgpu run` (the operator, via kopf) and `hybridgpu explain` (the last plan).

kopf and kubernetes are imported inside the commands so `hybridgpu simulate` does not pay
for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hybridgpu.errors import UserError


def add_parsers(sub: Any) -> None:
    """Register `run` and `explain`."""
    run = sub.add_parser("run", help="run the operator against the current cluster")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or $KUBECONFIG)")
    run.add_argument(
        "--liveness",
        default="http://127.0.0.1:8080/healthz",
        help="liveness/readiness endpoint (default http://127.0.0.1:8080/healthz; "
        "use http://0.0.0.0:8080/healthz in a pod)",
    )
    run.add_argument(
        "--identity", help="leader-lease identity (default: $POD_NAME, else host and pid)"
    )
    run.add_argument(
        "--lease-namespace",
        help="namespace of the leader Lease (default: $POD_NAMESPACE, else default)",
    )
    run.add_argument(
        "--lease-seconds", type=float, default=15.0, help="leader lease duration (default 15)"
    )
    run.add_argument(
        "--peering",
        metavar="NAME",
        help="also use kopf peering with this ClusterKopfPeering object (default: standalone; "
        "the leader Lease already keeps replicas from acting twice)",
    )
    run.add_argument("--priority", type=int, default=0, help="kopf peering priority")
    run.add_argument(
        "--fake-provider",
        metavar="MODULE:ATTR",
        help="factory for pools with provider type fake (tests)",
    )
    run.add_argument(
        "--metrics-port", type=int, help="serve /metrics on this port (default: not served)"
    )
    run.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address /metrics binds to (default 127.0.0.1; 0.0.0.0 in a pod)",
    )
    run.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    run.set_defaults(func=_run)

    explain = sub.add_parser("explain", help="print the last plan and its reasons")
    explain.add_argument("policy", nargs="?", default="default", help="ScalingPolicy name")
    explain.add_argument("--kubeconfig", help="kubeconfig file")
    explain.add_argument("--json", action="store_true", help="print the status as JSON")
    explain.set_defaults(func=_explain)


def _run(args: argparse.Namespace) -> int:
    import faulthandler
    import logging
    import os
    import signal

    import kopf

    import hybridgpu.handlers  # noqa: F401 - registers the handlers
    from hybridgpu.handlers.options import OperatorOptions

    env = OperatorOptions.from_env()
    options = OperatorOptions(
        kubeconfig=args.kubeconfig or env.kubeconfig,
        identity=args.identity or env.identity,
        lease_namespace=args.lease_namespace or env.lease_namespace,
        lease_seconds=args.lease_seconds,
        fake_provider=args.fake_provider or env.fake_provider,
        trigger_debounce_seconds=env.trigger_debounce_seconds,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port if args.metrics_port is not None else env.metrics_port,
    )
    # `kill -USR1 <pid>` prints every thread's stack: how to see what a stuck tick waits on.
    faulthandler.register(signal.SIGUSR1)
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = options.kubeconfig  # kopf's own login reads it
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    kopf.run(
        clusterwide=True,
        standalone=args.peering is None,
        peering_name=args.peering,
        priority=args.priority,
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(options=options),
    )
    return 0


def _explain(args: argparse.Namespace) -> int:
    from hybridgpu.kube.cluster import KubeCluster, load_api_client
    from hybridgpu.kube.errors import KubeError, NotFound

    try:
        cluster = KubeCluster(load_api_client(args.kubeconfig))
    except Exception as err:
        raise UserError(f"cannot reach the cluster: {err}") from err
    try:
        policy = cluster.get_policy(args.policy)
    except NotFound as err:
        raise UserError(f"ScalingPolicy {args.policy} not found") from err
    except KubeError as err:
        raise UserError(str(err)) from err
    finally:
        cluster.close()
    status = policy.get("status") or {}
    if args.json:
        json.dump(status, sys.stdout, indent=2)
        print()
        return 0
    print(format_explain(args.policy, status))
    return 0


def format_explain(policy: str, status: dict[str, Any]) -> str:
    """The text `hybridgpu explain` prints for a ScalingPolicy status."""
    if not status.get("lastTick"):
        return f"ScalingPolicy {policy}: no tick yet (is the operator running?)"
    lines = [f"ScalingPolicy {policy}, last tick {status['lastTick']}:"]
    plan = status.get("lastPlan") or []
    lines += [f"  - {line}" for line in plan] or ["  nothing to do"]
    budget = status.get("budget") or {}
    lines.append(
        f"cloud spend: ${budget.get('hourlyCost', 0):.2f}/h, "
        f"${budget.get('spentThisMonth', 0):.2f} this month, "
        f"${budget.get('projectedMonth', 0):.2f} projected"
    )
    for cond in status.get("conditions") or []:
        lines.append(f"{cond.get('type')}={cond.get('status')}: {cond.get('message', '')}")
    return "\n".join(lines)
