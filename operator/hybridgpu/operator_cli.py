"""`hybridgpu run` (the operator, via kopf) and `hybridgpu explain` (the last plan).

kopf and kubernetes are imported inside the commands so `hybridgpu simulate` does not pay
for them.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import tempfile
import urllib.parse
from typing import Any

from hybridgpu.errors import UserError
from hybridgpu.inputs import (
    check_webhook_cert_dir,
    file_name,
    port_number,
    positive_number,
    read_text,
)


def add_parsers(sub: Any) -> None:
    """Register `run` and `explain`."""
    run = sub.add_parser(
        "run",
        help="run the operator against the current cluster",
        description="Run the operator (kopf) against a cluster. The cluster comes from "
        "--kubeconfig, else the in-cluster service account, else $KUBECONFIG, else "
        "~/.kube/config; with none usable it says which paths it tried and exits 2.",
    )
    _add_cluster_flags(run)
    run.add_argument(
        "--liveness",
        type=_liveness_url,
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
        "--lease-seconds",
        type=positive_number,
        help="seconds a leader lease lasts without renewal (default: $HYBRIDGPU_LEASE_SECONDS, "
        "else 15)",
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
        "--cluster-name",
        metavar="NAME",
        help="this cluster's name, the hybridgpu.io/cluster tag of the cloud instances it "
        "launches (default: $HYBRIDGPU_CLUSTER_NAME, else default); unique per cluster "
        "sharing a cloud account",
    )
    run.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve /metrics on this port (default: $HYBRIDGPU_METRICS_PORT, else not served)",
    )
    run.add_argument(
        "--metrics-address",
        help="address /metrics binds to (default: $HYBRIDGPU_METRICS_ADDRESS, else 127.0.0.1; "
        "0.0.0.0 in a pod)",
    )
    webhook = run.add_mutually_exclusive_group()
    webhook.add_argument(
        "--webhook-port",
        type=port_number,
        metavar="PORT",
        help="serve the admission webhook (priority class and tier per criticality) on this "
        "port, 0 for any free one (default: $HYBRIDGPU_WEBHOOK_PORT, else not served)",
    )
    webhook.add_argument(
        "--no-webhook", action="store_true", help="do not serve the admission webhook"
    )
    run.add_argument(
        "--webhook-address",
        help="address the webhook binds to (default 127.0.0.1; 0.0.0.0 in a pod)",
    )
    run.add_argument(
        "--webhook-cert-dir",
        metavar="DIR",
        help="tls.crt, tls.key and ca.crt of the webhook (the chart mounts them); default: a "
        "self-signed CA made at start, and kopf creates the webhook configurations",
    )
    run.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    run.set_defaults(func=_run)

    explain = sub.add_parser(
        "explain",
        help="print the last plan and its reasons",
        description="Print the last plan a running operator made for a ScalingPolicy, with "
        "the reason of every action, read from the policy's status.",
    )
    explain.add_argument(
        "policy", nargs="?", default="default", help="ScalingPolicy name (default: default)"
    )
    _add_cluster_flags(explain)
    explain.add_argument("--json", action="store_true", help="print the status as JSON")
    explain.set_defaults(func=_explain)


def _liveness_url(text: str) -> str:
    """argparse type: kopf's liveness endpoint, http://HOST:PORT/PATH (kopf serves http only,
    and only fails on a bad one after start, in its log); empty: none."""
    if not text:
        return text
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError on a port out of range)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "http":
        raise argparse.ArgumentTypeError(
            f"expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz, got {text!r}"
        )
    return text


def _add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        type=file_name,
        metavar="FILE",
        help="kubeconfig file (default: in-cluster, else $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument(
        "--context", help="kubeconfig context to use (default: the file's current-context)"
    )


_SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def use_cluster_config(kubeconfig: str | None, context: str | None) -> str | None:
    """Check that a usable cluster configuration exists and point the kubernetes client at it,
    before kopf or the client load anything (the client reads $KUBECONFIG at import).

    Returns the kubeconfig path list (``a:b``) to use, or None for in-cluster config. Raises
    UserError naming every path tried when none is usable.
    """
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        _SERVICE_ACCOUNT_TOKEN
    )
    if kubeconfig:
        paths = [p for p in kubeconfig.split(os.pathsep) if p]
        missing = [p for p in paths if not os.path.isfile(os.path.expanduser(p))]
        if missing:
            what = (
                "is a directory; expected a kubeconfig file"
                if os.path.isdir(os.path.expanduser(missing[0]))
                else "no such file"
            )
            raise UserError(f"--kubeconfig {missing[0]}: {what}")
        tried = f"--kubeconfig {kubeconfig}"
    elif in_cluster and not context:
        return None
    else:
        env = os.environ.get("KUBECONFIG", "")
        candidates = [p for p in env.split(os.pathsep) if p] or ["~/.kube/config"]
        paths = [p for p in candidates if os.path.isfile(os.path.expanduser(p))]
        if not paths:
            where = f"$KUBECONFIG ({env})" if env else "~/.kube/config"
            raise UserError(
                f"no Kubernetes configuration: tried {where} and the in-cluster service account "
                f"({_SERVICE_ACCOUNT_TOKEN}); pass --kubeconfig FILE"
            )
        tried = ", ".join(paths)
    texts = [read_text(os.path.expanduser(path), "kubeconfig") for path in paths]
    # Checked here first, with PyYAML: the kubernetes client that checks the rest costs half
    # a CPU second to import (over 10 s on a loaded machine), too much for a file that is
    # not YAML or names no context.
    problem = _kubeconfig_problem(texts, context)
    if problem is not None:
        raise UserError(f"{tried}: not a usable kubeconfig: {problem}")
    joined = os.pathsep.join(paths)
    os.environ["KUBECONFIG"] = joined
    from kubernetes import client, config
    from kubernetes.config import kube_config

    # Already imported (tests, or another command earlier): its default was read back then.
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = joined
    try:
        config.load_kube_config(
            config_file=joined, context=context, client_configuration=client.Configuration()
        )
    except Exception as err:  # the client raises ConfigException, yaml and OS errors alike
        detail = " ".join(str(err).split()) or type(err).__name__
        raise UserError(f"{tried}: not a usable kubeconfig: {detail}") from None
    if context:
        # kopf logs in with the file's current-context; the client merges the files of
        # $KUBECONFIG and the last current-context wins, so a one-line file picks the context.
        handle, override = tempfile.mkstemp(prefix="hybridgpu-context-", suffix=".yaml")
        with os.fdopen(handle, "w") as out:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": context}, out)
        atexit.register(os.unlink, override)
        joined = os.pathsep.join([*paths, override])
        os.environ["KUBECONFIG"] = joined
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = joined
    return joined


def _kubeconfig_problem(texts: list[str], context: str | None) -> str | None:
    """What makes these kubeconfig files (merged as the client merges $KUBECONFIG: the
    first current-context wins) unusable for ``context`` (default: the current-context),
    as far as their YAML and context names tell; None when nothing is wrong there."""
    import yaml

    names: set[str] = set()
    current = ""
    for text in texts:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as err:
            return " ".join(str(err).split())
        if doc is None:
            continue
        if not isinstance(doc, dict):
            return f"expected a mapping, got {type(doc).__name__}"
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name"):
                names.add(str(entry["name"]))
        current = current or str(doc.get("current-context") or "")
    wanted = context or current
    if not wanted:
        return "no current-context is set and no --context given"
    if wanted not in names:
        return f"context {wanted!r} not found (contexts: {', '.join(sorted(names)) or 'none'})"
    return None


def _run(args: argparse.Namespace) -> int:
    import dataclasses
    import faulthandler
    import logging
    import signal

    if args.webhook_cert_dir and not args.no_webhook:
        # Before anything is imported or connected ($HYBRIDGPU_WEBHOOK_CERT_DIR is checked
        # the same way when the environment is read).
        check_webhook_cert_dir(args.webhook_cert_dir, "--webhook-cert-dir")
    kubeconfig = use_cluster_config(args.kubeconfig, args.context)
    import kopf

    import hybridgpu.handlers  # noqa: F401 - registers the handlers
    from hybridgpu.handlers.options import OperatorOptions

    env = OperatorOptions.from_env(check_cert_dir=False)
    # What the flags do not set comes from the environment (replace keeps env's fields).
    options = dataclasses.replace(
        env,
        kubeconfig=kubeconfig,
        identity=args.identity or env.identity,
        lease_namespace=args.lease_namespace or env.lease_namespace,
        lease_seconds=args.lease_seconds or env.lease_seconds,
        fake_provider=args.fake_provider or env.fake_provider,
        cluster_name=args.cluster_name or env.cluster_name,
        metrics_address=args.metrics_address or env.metrics_address,
        metrics_port=args.metrics_port if args.metrics_port is not None else env.metrics_port,
        webhook_port=None
        if args.no_webhook
        else (args.webhook_port if args.webhook_port is not None else env.webhook_port),
        webhook_address=args.webhook_address or env.webhook_address,
        webhook_cert_dir=args.webhook_cert_dir or env.webhook_cert_dir,
    )
    if options.webhook_port is not None and options.webhook_cert_dir and not args.webhook_cert_dir:
        # $HYBRIDGPU_WEBHOOK_CERT_DIR for a webhook the flags serve; with --no-webhook (or no
        # port anywhere) its files are never read, so they are not asked for.
        check_webhook_cert_dir(options.webhook_cert_dir, "$HYBRIDGPU_WEBHOOK_CERT_DIR")
    # `kill -USR1 <pid>` prints every thread's stack: how to see what a stuck tick waits on.
    faulthandler.register(signal.SIGUSR1)
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
    # The configuration first: a missing one is reported without importing the kubernetes
    # client (half a CPU second, many seconds on a loaded machine).
    kubeconfig = use_cluster_config(args.kubeconfig, args.context)
    from hybridgpu.kube.cluster import KubeCluster, load_api_client
    from hybridgpu.kube.errors import KubeError, NotFound

    try:
        cluster = KubeCluster(load_api_client(kubeconfig))
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
