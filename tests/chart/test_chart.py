"""The Helm chart, the Dockerfile and the Grafana dashboard.

- ``helm lint`` (also ``--strict``) and ``helm template`` with default and non-default values;
  the rendered Deployment starts ``hybridgpu run`` with flags its real parser accepts;
- ``values.schema.json`` rejects unknown keys and wrong types;
- the chart's CRDs are the repo's ``crds/``, byte for byte;
- every rendered object is server-side applied to the real control plane, and the operator's
  ServiceAccount can do exactly what the operator needs (``kubectl auth can-i --as``);
- the Dockerfile runs ``hybridgpu run`` as a numeric non-root user;
- the dashboards are what ``make dashboards`` generates; they only query metrics and labels
  the operator (or the API server) exports, and every query returns data when promtool
  evaluates it over made-up series of those metrics (the alerts: tests/chart/test_alerts.py).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException
from prometheus_client.metrics import MetricWrapperBase

from hybridgpu.cli import build_parser
from hybridgpu.dashboards import generated_files
from hybridgpu.dashboards.names import APISERVER_SERIES
from hybridgpu.metrics.exported import ExportedMetrics
from support.chart import (
    CHART_DIR,
    DASHBOARD,
    DASHBOARDS_DIR,
    DOCKERFILE,
    Rendered,
    RenderError,
    container,
    dockerfile_instructions,
    helm,
    render,
)
from support.children import DIE_WITH_PARENT
from support.controlplane import CRDS_DIR, REPO_ROOT, KubeTest, wait_until
from support.ports import free_port
from support.prometheus import promtool_binary

pytestmark = pytest.mark.chart

GROUP, VERSION = "hybridgpu.io", "v1alpha1"
LEASE_NAME = "hybridgpu-operator"  # hybridgpu.kube.names.LEASE_NAME
IRSA_ROLE = "arn:aws:iam::123456789012:role/hybridgpu-operator"

# Everything optional switched on, and the defaults that matter changed.
NON_DEFAULT_VALUES: dict[str, Any] = {
    "replicaCount": 2,
    "image": {"repository": "registry.example/hybridgpu", "tag": "1.2.3", "pullPolicy": "Always"},
    "serviceAccount": {
        "name": "gpu-operator-sa",
        "annotations": {"eks.amazonaws.com/role-arn": IRSA_ROLE},
    },
    "operator": {
        "clusterName": "prod-eu-1",
        "leaseSeconds": 30,
        "healthPort": 8090,
        "verbose": True,
        "peering": {"enabled": True, "name": "hybridgpu-peering", "priority": 100},
        "extraEnv": [{"name": "AWS_REGION", "value": "eu-west-1"}],
    },
    "metrics": {
        "port": 9100,
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
    },
    "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Cost"}},
    "defaultScalingPolicy": {
        "enabled": True,
        "name": "default",
        "spec": {"interval": "1m", "dryRun": True, "budget": {"monthlyLimit": 5000}},
    },
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    "webhook": {"port": 9444, "timeoutSeconds": 3},
    "priorityClasses": {
        "critical": {"name": "gpu-gold", "value": 5000},
        "standard": {"name": "gpu-silver", "value": 10},
        "preemptible": {"name": "gpu-scavenger", "value": -5},
    },
    "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
}

DEFAULT_KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
    "PriorityClass",
    "Secret",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


@pytest.fixture
def values_dir(tmp_path: Path) -> Path:
    return tmp_path


def component_service(rendered: Rendered, component: str) -> dict[str, Any]:
    """The Service of ``component`` (metrics or webhook)."""
    (found,) = [
        s
        for s in rendered.of_kind("Service")
        if s["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


def run_args(deployment: dict[str, Any]) -> list[str]:
    return list(container(deployment)["args"])


def flag(args: list[str], name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix) :] for a in args if a.startswith(prefix)), None)


# ------------------------------------------------------------------------------- lint, CRDs


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_passes(strict: bool, values_dir: Path) -> None:
    values = values_dir / "non-default.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    for extra in ([], ["--values", str(values)]):
        result = helm("lint", str(CHART_DIR), *(["--strict"] if strict else []), *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout


def test_chart_crds_are_the_repo_crds() -> None:
    """`hybridgpu crds` writes crds/; the chart ships a copy that must not drift."""
    repo = {p.name: p.read_bytes() for p in CRDS_DIR.glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART_DIR / "crds").glob("*.yaml")}
    assert repo, "no CRDs in crds/"
    assert sorted(chart) == sorted(repo), "chart crds/ and crds/ hold different files"
    stale = [name for name in repo if chart[name] != repo[name]]
    assert not stale, f"helm/hybridgpu-operator/crds/ differs from crds/ for {stale}: copy them"


def test_chart_installs_crds_with_the_release(values_dir: Path) -> None:
    rendered = render(values_dir=values_dir, extra_args=["--include-crds"])
    names = {o["metadata"]["name"] for o in rendered.of_kind("CustomResourceDefinition")}
    assert names == {
        "gpupools.hybridgpu.io",
        "scalingpolicies.hybridgpu.io",
        "capacityplans.hybridgpu.io",
    }


# ------------------------------------------------------------------------------- template


def test_default_values_render_the_operator_and_its_rbac_only(values_dir: Path) -> None:
    rendered = render(values_dir=values_dir, namespace="gpu-ops")
    assert rendered.kinds() == DEFAULT_KINDS
    for obj in rendered.objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-ops", obj["kind"]


def test_deployment_runs_hybridgpu_run_with_flags_it_accepts(values_dir: Path) -> None:
    for values in (None, NON_DEFAULT_VALUES):
        deployment = render(values, values_dir=values_dir).one("Deployment")
        args = run_args(deployment)
        assert args[0] == "run"
        # The real parser: a flag the CLI does not have fails here, not in a crash-looping pod.
        parsed = build_parser().parse_args(args)
        assert parsed.func.__name__ == "_run"
        health_port = (values or {}).get("operator", {}).get("healthPort", 8080)
        metrics_port = (values or {}).get("metrics", {}).get("port", 8081)
        assert parsed.liveness == f"http://0.0.0.0:{health_port}/healthz"
        assert parsed.metrics_port == metrics_port
        assert parsed.metrics_address == "0.0.0.0"  # reachable through the Service
        assert parsed.cluster_name == (values or {}).get("operator", {}).get(
            "clusterName", "default"
        )
        webhook_port = (values or {}).get("webhook", {}).get("port", 9443)
        assert parsed.webhook_port == webhook_port
        assert parsed.webhook_address == "0.0.0.0"  # reachable through the webhook Service
        ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
        assert ports == {"health": health_port, "metrics": metrics_port, "webhook": webhook_port}
        probe = container(deployment)["livenessProbe"]["httpGet"]
        assert (probe["path"], probe["port"]) == ("/healthz", "health")
        ready = container(deployment)["readinessProbe"]["httpGet"]
        assert (ready["path"], ready["port"]) == ("/readyz", "metrics")  # the start-up checks


def test_pod_name_is_the_lease_identity(values_dir: Path) -> None:
    env = {e["name"]: e for e in container(render(values_dir=values_dir).one("Deployment"))["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_operator_runs_non_root_read_only_without_capabilities(values_dir: Path) -> None:
    deployment = render(values_dir=values_dir).one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    ctx = container(deployment)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_user()[0]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctx["runAsNonRoot"] is True
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container(deployment)["resources"]["requests"], "no resource requests"


def test_non_default_values_reach_the_objects(values_dir: Path) -> None:
    rendered = render(NON_DEFAULT_VALUES, values_dir=values_dir, release="gpu", namespace="ops")
    assert rendered.kinds() == DEFAULT_KINDS | {
        "ServiceMonitor",
        "PodDisruptionBudget",
        "ConfigMap",
        "ScalingPolicy",
    }
    deployment = rendered.one("Deployment")
    args = run_args(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert container(deployment)["image"] == "registry.example/hybridgpu:1.2.3"
    assert flag(args, "peering") == "hybridgpu-peering"
    assert flag(args, "priority") == "100"
    assert flag(args, "lease-seconds") == "30"
    assert "--verbose" in args
    env = {e["name"]: e.get("value") for e in container(deployment)["env"]}
    assert env["AWS_REGION"] == "eu-west-1"

    sa = rendered.one("ServiceAccount")
    assert sa["metadata"]["name"] == "gpu-operator-sa"
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": IRSA_ROLE}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-operator-sa"
    for binding in rendered.of_kind("ClusterRoleBinding") + rendered.of_kind("RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpu-operator-sa", "namespace": "ops"}
        ]

    peering = [r for r in rendered.one("ClusterRole")["rules"] if "kopf.dev" in r["apiGroups"]]
    assert peering and peering[0]["resources"] == ["clusterkopfpeerings"]

    policy = rendered.one("ScalingPolicy")
    assert policy["metadata"]["name"] == "default"
    assert policy["spec"] == NON_DEFAULT_VALUES["defaultScalingPolicy"]["spec"]

    pdb = rendered.one("PodDisruptionBudget")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_service_monitor_scrapes_the_metrics_service(values_dir: Path) -> None:
    rendered = render(NON_DEFAULT_VALUES, values_dir=values_dir, namespace="ops")
    service = component_service(rendered, "metrics")
    monitor = rendered.one("ServiceMonitor")
    deployment = rendered.one("Deployment")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["port"] == 9100
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_metrics_off_means_no_metrics_port_service_or_monitor(values_dir: Path) -> None:
    values = {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}
    rendered = render(values, values_dir=values_dir)
    components = [
        s["metadata"]["labels"].get("app.kubernetes.io/component")
        for s in rendered.of_kind("Service")
    ]
    assert components == ["webhook"]
    assert "ServiceMonitor" not in rendered.kinds()
    args = run_args(rendered.one("Deployment"))
    assert build_parser().parse_args(args).metrics_port is None


def priority_classes(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """The rendered PriorityClasses by their hybridgpu.io/criticality label."""
    return {
        o["metadata"]["labels"]["hybridgpu.io/criticality"]: o
        for o in rendered.of_kind("PriorityClass")
    }


def test_a_priority_class_per_criticality_and_preemptible_never_preempts(
    values_dir: Path,
) -> None:
    for values, names, priorities in (
        (
            None,
            ["hybridgpu-critical", "hybridgpu-standard", "hybridgpu-preemptible"],
            [100000, 0, -100000],
        ),
        (NON_DEFAULT_VALUES, ["gpu-gold", "gpu-silver", "gpu-scavenger"], [5000, 10, -5]),
    ):
        classes = priority_classes(render(values, values_dir=values_dir))
        assert list(classes) == ["critical", "standard", "preemptible"]
        assert [c["metadata"]["name"] for c in classes.values()] == names
        assert [c["value"] for c in classes.values()] == priorities
        assert [c["preemptionPolicy"] for c in classes.values()] == [
            "PreemptLowerPriority",
            "PreemptLowerPriority",
            "Never",
        ]
        assert not any(c["globalDefault"] for c in classes.values())
    off = render({"priorityClasses": {"create": False}}, values_dir=values_dir)
    assert "PriorityClass" not in off.kinds()


def test_webhooks_call_the_operator_handlers_through_the_service_and_fail_open(
    values_dir: Path,
) -> None:
    from cryptography import x509

    from hybridgpu.handlers.admission import MUTATE_ID, VALIDATE_ID

    rendered = render(NON_DEFAULT_VALUES, values_dir=values_dir, release="gpu", namespace="ops")
    webhook_service = component_service(rendered, "webhook")
    deployment = rendered.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert webhook_service["spec"]["selector"].items() <= pod_labels.items()
    assert webhook_service["spec"]["ports"][0]["targetPort"] == "webhook"
    secret = rendered.one("Secret")
    ca = x509.load_pem_x509_certificate(base64_decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64_decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service_dns = f"{webhook_service['metadata']['name']}.ops.svc"
    assert service_dns in sans.get_values_for_type(x509.DNSName)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
    assert flag(run_args(deployment), "webhook-cert-dir") == mounts["webhook-tls"]

    for kind, handler in (
        ("MutatingWebhookConfiguration", MUTATE_ID),
        ("ValidatingWebhookConfiguration", VALIDATE_ID),
    ):
        (webhook,) = rendered.one(kind)["webhooks"]
        client = webhook["clientConfig"]
        assert client["service"] == {
            "name": webhook_service["metadata"]["name"],
            "namespace": "ops",
            "path": f"/{handler}",
            "port": webhook_service["spec"]["ports"][0]["port"],
        }
        assert client["caBundle"] == secret["data"]["ca.crt"]
        assert webhook["failurePolicy"] == "Ignore", "a down operator must not block pods"
        assert webhook["timeoutSeconds"] == 3
        assert webhook["objectSelector"] == {
            "matchExpressions": [{"key": "hybridgpu.io/criticality", "operator": "Exists"}]
        }
        assert webhook["rules"][0]["resources"] == ["pods"]
        assert webhook["rules"][0]["operations"] == ["CREATE"]

    off = render({"webhook": {"enabled": False}}, values_dir=values_dir)
    assert not off.kinds() & {
        "Secret",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    args = run_args(off.one("Deployment"))
    assert "--no-webhook" in args
    assert build_parser().parse_args(args).no_webhook


def base64_decode(text: str) -> bytes:
    import base64

    return base64.b64decode(text)


def test_dashboard_config_map_carries_the_dashboard_for_the_grafana_sidecar(
    values_dir: Path,
) -> None:
    values = {"dashboard": {"enabled": True, "namespace": "monitoring"}}
    config_map = render(values, values_dir=values_dir).one("ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    files = {path.name: path for path in DASHBOARDS_DIR.glob("*.json")}
    assert set(config_map["data"]) == set(files) and "hybridgpu-cost.json" in files
    for name, path in files.items():
        assert json.loads(config_map["data"][name]) == json.loads(path.read_text()), name


def test_chart_refuses_kubernetes_older_than_1_27(values_dir: Path) -> None:
    """Moving a Job repins the template of a suspended Job: Kubernetes 1.27 and later."""
    with pytest.raises(RenderError, match="kubeVersion"):
        render(values_dir=values_dir, extra_args=["--kube-version", "1.26.9"])
    render(values_dir=values_dir, extra_args=["--kube-version", "1.27.0"])


def test_a_null_policy_spec_renders_an_empty_object(values_dir: Path) -> None:
    """`spec: null` drops the chart's default spec (Helm merges `{}` with it instead)."""
    values = {"defaultScalingPolicy": {"enabled": True, "spec": None}}
    assert render(values, values_dir=values_dir).one("ScalingPolicy")["spec"] == {}


def test_values_hold_no_secrets(values_dir: Path) -> None:
    """AWS credentials come from IRSA (serviceAccount.annotations), never from values; the
    only Secret is the webhook's TLS certificate, generated by the chart."""
    text = (CHART_DIR / "values.yaml").read_text().lower()
    for word in ("aws_access_key", "aws_secret", "password", "token:"):
        assert word not in text
    templates = {p.name: p.read_text() for p in (CHART_DIR / "templates").glob("*")}
    assert [name for name, text in templates.items() if "kind: Secret" in text] == ["webhook.yaml"]
    secret = render(values_dir=values_dir).one("Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}


# ------------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicas": 2}, "replicas"),  # the Deployment field, not our key (replicaCount)
        ({"metrics": {"sevice": {"type": "ClusterIP"}}}, "sevice"),
        ({"operator": {"peering": {"enabeld": True}}}, "enabeld"),
        ({"replicaCount": "two"}, "replicaCount"),
        ({"metrics": {"port": 70000}}, "port"),
        ({"metrics": {"enabled": "yes"}}, "enabled"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": 42}}}, "annotations"),
        ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
        ({"defaultScalingPolicy": {"name": "Not A Name"}}, "name"),
        ({"priorityClasses": {"critical": {"name": "c", "value": "high"}}}, "value"),
        ({"priorityClasses": {"critical": {"value": 2000000000}}}, "value"),
        ({"webhook": {"timeoutSeconds": 60}}, "timeoutSeconds"),
        ({"alerts": {"pendingCriticalFor": "1.5m"}}, "pendingCriticalFor"),
        ({"alerts": {"spotInterruptions": {"count": 0}}}, "count"),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "unknown-deep-key",
        "string-for-integer",
        "port-out-of-range",
        "string-for-boolean",
        "bad-enum",
        "non-string-annotation",
        "bad-duration",
        "bad-object-name",
        "string-priority",
        "priority-in-the-system-range",
        "webhook-timeout-over-30s",
        "alert-for-not-a-prometheus-duration",
        "alert-threshold-of-zero-interruptions",
    ],
)
def test_schema_rejects_bad_values(
    values: dict[str, Any], complaint: str, values_dir: Path
) -> None:
    with pytest.raises(RenderError) as failure:
        render(values, values_dir=values_dir)
    assert complaint in str(failure.value)


# ------------------------------------------------------------------------------- control plane


def chart_objects_to_apply(rendered: Rendered, plane_kubectl: Any) -> list[dict[str, Any]]:
    """The rendered objects; a ServiceMonitor only when its CRD is installed."""
    have_monitors = (
        plane_kubectl("get", "crd", "servicemonitors.monitoring.coreos.com", check=False).returncode
        == 0
    )
    return [o for o in rendered.objects if o["kind"] != "ServiceMonitor" or have_monitors]


@pytest.fixture
def installed(kube: KubeTest, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Server-side apply the chart rendered with ``request.param`` values into the test's
    namespace (a server-side dry run first, then for real); yields (kube, rendered, applied
    objects, ServiceAccount name) and deletes what it created."""
    suffix = kube.namespace.rsplit("-", 1)[-1]
    values = json.loads(json.dumps(request.param or {}))
    if values.get("defaultScalingPolicy", {}).get("enabled"):
        # cluster-scoped: a unique name so a session's own "default" policy is never touched
        values["defaultScalingPolicy"]["name"] = f"chart-test-{suffix}"
    rendered = render(
        values, values_dir=tmp_path, release=f"hgpu-{suffix}", namespace=kube.namespace
    )
    objects = chart_objects_to_apply(rendered, kube.kubectl)
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    try:
        kube.kubectl(  # raises with kubectl's stderr when the apiserver refuses an object
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=helm",
            "-f",
            str(manifest),
        )
        kube.plane.apply_server_side(manifest, field_manager="helm")
        sa = rendered.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        yield kube, rendered, objects, sa
    finally:
        kube.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", str(manifest), check=False
        )


def can_i(kube: KubeTest, sa: str, verb: str, resource: str, *extra: str) -> bool:
    result = kube.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        f"--as=system:serviceaccount:{kube.namespace}:{sa}",
        *extra,
        check=False,
    )
    answer = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if answer not in {"yes", "no"}:
        raise AssertionError(f"kubectl auth can-i {verb} {resource}: {result.stderr}")
    return answer == "yes"


# (verb, resource, extra kubectl args): what the operator calls, from hybridgpu.kube.cluster,
# hybridgpu.kube.lease and kopf (watches, finalizers, progress annotations, Events).
NEEDED: list[tuple[str, str, tuple[str, ...]]] = [
    *[
        (verb, f"{plural}.hybridgpu.io", ())
        for plural in ("gpupools", "scalingpolicies", "capacityplans")
        for verb in ("get", "list", "watch", "patch", "update")
    ],
    *[
        ("patch", f"{plural}.hybridgpu.io", ("--subresource=status",))
        for plural in ("gpupools", "scalingpolicies", "capacityplans")
    ],
    *[(verb, "nodes", ()) for verb in ("get", "list", "watch", "patch", "delete")],
    *[(verb, "pods", ("--all-namespaces",)) for verb in ("get", "list", "watch", "patch")],
    *[
        (verb, "deployments.apps", ("--all-namespaces",))
        for verb in ("get", "list", "watch", "patch")
    ],
    *[(verb, "replicasets.apps", ("--all-namespaces",)) for verb in ("list", "watch")],
    *[
        (verb, "horizontalpodautoscalers.autoscaling", ("--all-namespaces",))
        for verb in ("list", "watch")
    ],
    ("create", "pods", ("--subresource=eviction", "-n", "team-a")),
    *[(verb, "jobs.batch", ("--all-namespaces",)) for verb in ("get", "list", "watch", "patch")],
    ("patch", "jobs.batch", ("--subresource=status", "-n", "team-a")),
    *[(verb, "events", ("-n", "default")) for verb in ("create", "patch", "get", "list")],
    ("create", "events.events.k8s.io", ("-n", "default")),
    *[
        (verb, "customresourcedefinitions.apiextensions.k8s.io", ())
        for verb in ("get", "list", "watch")
    ],
    *[(verb, "priorityclasses.scheduling.k8s.io", ()) for verb in ("get", "list", "watch")],
    *[(verb, "podtemplates", ("--all-namespaces",)) for verb in ("get", "list")],
]
LEASE_NEEDED = [("create", "leases.coordination.k8s.io", ())] + [
    (verb, f"leases.coordination.k8s.io/{LEASE_NAME}", ()) for verb in ("get", "update")
]
FORBIDDEN: list[tuple[str, str, tuple[str, ...]]] = [
    ("get", "secrets", ("--all-namespaces",)),
    ("list", "secrets", ("-n", "default")),
    ("delete", "pods", ("-n", "team-a")),
    ("create", "pods", ("-n", "team-a")),
    ("create", "nodes", ()),
    ("create", "jobs.batch", ("-n", "team-a")),
    ("delete", "jobs.batch", ("-n", "team-a")),
    ("delete", "gpupools.hybridgpu.io", ()),
    ("create", "deployments.apps", ("-n", "default")),
    ("delete", "deployments.apps", ("-n", "team-a")),
    ("update", "leases.coordination.k8s.io", ("-n", "kube-system")),
    ("bind", "clusterroles.rbac.authorization.k8s.io", ()),
    ("create", "priorityclasses.scheduling.k8s.io", ()),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ()),
    ("*", "*", ()),
]


def access_review(kube: KubeTest, sa: str, verb: str, group: str, resource: str) -> bool:
    """A SubjectAccessReview for a cluster-wide ``verb`` on ``resource`` in ``group``.

    For resources whose CRD is not installed (kopf's peering): `kubectl auth can-i` needs
    discovery to know the resource and answers "no" without it.
    """
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{kube.namespace}:{sa}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{kube.namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource},
        },
    }
    result = kube.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(review))
    return bool(json.loads(result.stdout)["status"].get("allowed"))


def rbac_mismatches(kube: KubeTest, sa: str, *, peering: bool) -> list[str]:
    lease_ns = ("-n", kube.namespace)
    wanted = [(v, r, x, True) for v, r, x in NEEDED]
    wanted += [(v, r, x + lease_ns, True) for v, r, x in LEASE_NEEDED]
    wanted += [(v, r, x, False) for v, r, x in FORBIDDEN]
    wanted += [("get", "leases.coordination.k8s.io/someone-else", lease_ns, False)]
    mismatches = [
        f"{verb} {resource} {' '.join(extra)}: expected {'yes' if allowed else 'no'}"
        for verb, resource, extra, allowed in wanted
        if can_i(kube, sa, verb, resource, *extra) != allowed
    ]
    for verb in ("get", "list", "watch", "patch"):
        if access_review(kube, sa, verb, "kopf.dev", "clusterkopfpeerings") != peering:
            mismatches.append(f"{verb} clusterkopfpeerings.kopf.dev: expected {peering}")
    for group, resource, verbs in PROVIDER_ACCESS:
        for verb, allowed in verbs.items():
            if access_review(kube, sa, verb, group, resource) != allowed:
                mismatches.append(f"{verb} {resource}.{group}: expected {allowed}")
    return mismatches


# The Karpenter and Cluster API providers (hybridgpu.cloud.karpenter, .clusterapi), whose CRDs
# a chart install need not have: checked by SubjectAccessReview. True: needed; False: never.
PROVIDER_ACCESS: list[tuple[str, str, dict[str, bool]]] = [
    ("karpenter.sh", "nodepools", {"get": True, "patch": True, "create": False, "delete": False}),
    ("karpenter.sh", "nodeclaims", {"list": True, "delete": True, "create": False}),
    ("cluster.x-k8s.io", "machinedeployments", {"get": True, "patch": True, "delete": False}),
    ("cluster.x-k8s.io", "machines", {"list": True, "patch": True, "delete": False}),
    # ProvisioningRequests (Kueue's admission check): read them, answer through the status
    ("autoscaling.x-k8s.io", "provisioningrequests", {"list": True, "watch": True, "patch": False}),
    ("autoscaling.x-k8s.io", "provisioningrequests/status", {"patch": True}),
    # The suspendable batch kinds moved like Jobs (docs/workloads.md): never created or deleted.
    *[
        (
            group,
            plural,
            {
                "get": True,
                "list": True,
                "watch": True,
                "patch": True,
                "create": False,
                "delete": False,
            },
        )
        for group, plural in (
            ("jobset.x-k8s.io", "jobsets"),
            ("ray.io", "rayjobs"),
            ("kubeflow.org", "pytorchjobs"),
            ("trainer.kubeflow.org", "trainjobs"),
        )
    ],
]


@pytest.mark.parametrize("installed", [None], indirect=True, ids=["default-values"])
def test_default_install_applies_and_grants_exactly_what_the_operator_needs(
    installed: Any,
) -> None:
    kube, _rendered, objects, sa = installed
    listed = kube.kubectl("get", "-o", "name", "-f", "-", stdin=yaml.safe_dump_all(objects))
    assert len(listed.stdout.split()) == len(objects)
    assert sa == "hgpu-" + kube.namespace.rsplit("-", 1)[-1] + "-hybridgpu-operator"
    assert rbac_mismatches(kube, sa, peering=False) == []


@pytest.mark.parametrize("installed", [NON_DEFAULT_VALUES], indirect=True, ids=["non-default"])
def test_non_default_install_applies_with_peering_rbac(installed: Any) -> None:
    kube, rendered, objects, sa = installed
    kinds = {o["kind"] for o in objects}
    assert {"ConfigMap", "PodDisruptionBudget", "ScalingPolicy"} <= kinds
    policy = rendered.one("ScalingPolicy")["metadata"]["name"]
    stored = kube.kubectl("get", "scalingpolicy", policy, "-o", "json")
    assert json.loads(stored.stdout)["spec"]["budget"] == {"monthlyLimit": 5000}
    assert rbac_mismatches(kube, sa, peering=True) == []


def test_apiserver_rejects_a_policy_spec_the_crd_forbids(kube: KubeTest, tmp_path: Path) -> None:
    """defaultScalingPolicy.spec is only checked by the CRD: a wrong spec fails the apply."""
    values = {
        "defaultScalingPolicy": {
            "enabled": True,
            "name": f"chart-bad-{kube.namespace.rsplit('-', 1)[-1]}",
            "spec": {"interval": "soon"},
        }
    }
    policy = render(values, values_dir=tmp_path).one("ScalingPolicy")
    result = kube.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(policy),
        check=False,
    )
    assert result.returncode != 0
    assert "spec.interval" in result.stderr


# ------------------------------------------------------------------------------- Dockerfile


def dockerfile_user() -> tuple[int, int | None]:
    users = [args for kw, args in dockerfile_instructions(DOCKERFILE.read_text()) if kw == "USER"]
    assert users, "the Dockerfile sets no USER: the operator would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), f"USER {users[-1]}: use a numeric uid so runAsNonRoot can verify it"
    return int(uid), int(gid) if gid else None


def test_dockerfile_runs_hybridgpu_run_as_numeric_non_root_user() -> None:
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    keywords = [kw for kw, _ in instructions]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    uid, gid = dockerfile_user()
    assert uid == 10001 and gid in (None, 10001)
    # Nothing after USER may run as root again, and USER must precede the entrypoint.
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    assert "RUN" not in keywords[last_user:]
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    cmd = json.loads(dict(instructions)["CMD"])
    assert entrypoint == ["hybridgpu"] and cmd == ["run"]
    assert build_parser().parse_args(cmd).func.__name__ == "_run"
    scripts = _pyproject()["project"]["scripts"]
    assert scripts["hybridgpu"] == "hybridgpu.cli:main"


def test_dockerfile_installs_the_package_without_test_extras() -> None:
    runs = [args for kw, args in dockerfile_instructions(DOCKERFILE.read_text()) if kw == "RUN"]
    installs = [r for r in runs if "pip install" in r]
    assert installs, "no pip install in the Dockerfile"
    assert all(re.search(r"pip install \.(\s|$)", r) for r in installs), installs
    assert not any("[test]" in r or "-e " in r for r in installs)
    copied = " ".join(
        args for kw, args in dockerfile_instructions(DOCKERFILE.read_text()) if kw == "COPY"
    )
    for needed in ("pyproject.toml", "README.md", "operator"):
        assert needed in copied, f"{needed} is not copied into the image"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    """The build context is only what COPY needs; .dockerignore must not drop any of it."""
    import fnmatch

    patterns = [
        line.strip().rstrip("/")
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies = [a for kw, a in dockerfile_instructions(DOCKERFILE.read_text()) if kw == "COPY"]
    sources = [src for args in copies for src in args.split()[:-1]]
    assert sources
    for source in sources:
        included = True
        for pattern in patterns:  # the last matching pattern wins, as in Docker
            negated = pattern.startswith("!")
            if fnmatch.fnmatch(source.rstrip("/"), pattern.lstrip("!")):
                included = negated
        assert included, f"COPY {source}: excluded by .dockerignore"
        assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_dockerfile_parser_sees_continuations_and_comments() -> None:
    text = "FROM a\n# c\nRUN x \\\n  # inner\n  && y\nUSER 1\n"
    assert dockerfile_instructions(text) == [("FROM", "a"), ("RUN", "x  && y"), ("USER", "1")]


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


# ------------------------------------------------------------------------------- dashboard


def exported_metrics() -> dict[str, tuple[str, set[str]]]:
    """Series name -> (family, labels) of everything the operator exports, and of the API
    server's webhook metrics the admission dashboard and the alerts query."""
    exported = ExportedMetrics()
    series: dict[str, tuple[str, set[str]]] = {}
    for collector in vars(exported).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        (family,) = collector.describe()
        labels = set(collector._labelnames)
        suffixes = {
            "counter": ["_total"],
            "histogram": ["_bucket", "_sum", "_count"],
        }.get(family.type, [""])
        for suffix in suffixes:
            extra = {"le"} if suffix == "_bucket" else set()
            series[family.name + suffix] = (family.name, labels | extra)
    for name, apiserver_labels in APISERVER_SERIES.items():
        series[name] = (name, set(apiserver_labels))
    return series


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard, for every dashboard the chart ships."""
    return {
        path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS_DIR.glob("*.json"))
    }


def dashboard_queries() -> list[tuple[str, str, str]]:
    """("file: panel title", PromQL, legend) of every target of every dashboard."""
    out = []
    for file, board in dashboards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                title = f"{file}: {panel['title']}"
                out.append((title, target["expr"], target.get("legendFormat", "")))
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                query = variable["query"]["query"] if isinstance(variable["query"], dict) else ""
                match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
                assert match, f"variable {variable['name']}: {query}"
                title = f"{file}: variable {variable['name']}"
                out.append((title, match[1], "{{" + match[2] + "}}"))
    return out


METRIC_NAME = re.compile(r"\b(?:hybridgpu|apiserver)_[a-z_]+\b")


def test_dashboards_are_what_make_dashboards_generates() -> None:
    """The checked-in dashboards and PrometheusRule template are the generator's output."""
    expected = generated_files()
    for relative, generate in expected.items():
        path = REPO_ROOT / relative
        assert path.exists() and path.read_text() == generate(), (
            f"{relative}: run `make dashboards`"
        )
    on_disk = {p.relative_to(REPO_ROOT) for p in DASHBOARDS_DIR.glob("*.json")}
    assert on_disk <= set(expected), "a dashboard no module generates: delete it"


def test_dashboard_queries_only_exported_metrics_and_their_labels() -> None:
    series = exported_metrics()
    problems = []
    for title, expr, legend in dashboard_queries():
        names = set(METRIC_NAME.findall(expr))
        unknown = names - series.keys()
        if unknown:
            problems.append(f"{title}: unknown metric(s) {sorted(unknown)}")
            continue
        labels = set().union(*(series[n][1] for n in names)) if names else set()
        used = set(re.findall(r"\bby \(([^)]*)\)", expr))
        used_labels = {lbl.strip() for group in used for lbl in group.split(",")}
        used_labels |= set(re.findall(r"(\w+)\s*=~?\s*\"", expr))
        used_labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        missing = used_labels - labels
        if missing:
            problems.append(f"{title}: labels {sorted(missing)} not on {sorted(names)}")
    assert problems == []


def test_dashboards_show_every_metric_the_operator_exports() -> None:
    queried = set(METRIC_NAME.findall(" ".join(expr for _, expr, _ in dashboard_queries())))
    shown = {exported_metrics()[name][0] for name in queried}
    families = {family for family, _ in exported_metrics().values()}
    assert families - shown == set(), "exported but on no dashboard"
    assert "hybridgpu_reconcile_duration_seconds_bucket" in queried  # a quantile, not a count


def test_dashboard_is_importable_grafana_json() -> None:
    boards = dashboards()
    assert {
        "hybridgpu-cost.json",
        "hybridgpu-moves.json",
        "hybridgpu-admission.json",
        "hybridgpu-workloads.json",
    } <= set(boards)
    uids = [board["uid"] for board in boards.values()]
    assert len(uids) == len(set(uids)), "two dashboards share a uid"
    for file, board in boards.items():
        assert board["uid"] and board["title"], file
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), f"{file}: duplicate panel ids"
        names = {v["name"] for v in board["templating"]["list"]}
        assert "datasource" in names, file
        cells: dict[tuple[int, int], str] = {}
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, f"{file}: {panel['title']}"
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    other = cells.setdefault((x, y), panel["title"])
                    assert other == panel["title"], f"{file}: {panel['title']} covers {other}"
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    assert {"datasource", "pool", "tier"} <= {
        v["name"] for v in boards["hybridgpu-cost.json"]["templating"]["list"]
    }


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana's variables with values Prometheus accepts."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
    return expr


def test_dashboard_promql_parses(tmp_path: Path) -> None:
    promtool = promtool_binary()
    rules = [
        {"record": f"hybridgpu_dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr, _) in enumerate(dashboard_queries())
    ]
    rules_file = tmp_path / "dashboard-rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------- the real operator


def service_account_kubeconfig(kube: KubeTest, sa: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token), as the
    operator's pod does."""
    token = kube.kubectl("create", "token", sa, "-n", kube.namespace, "--duration=15m")
    admin = yaml.safe_load(kube.plane.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": sa, "user": {"token": token.stdout.strip()}}],
                "contexts": [{"name": sa, "context": {"cluster": cluster["name"], "user": sa}}],
                "current-context": sa,
            }
        )
    )
    return path


def local_args(
    args: list[str], kubeconfig: Path, webhook_cert_dir: Path, webhook_port: int
) -> list[str]:
    """The Deployment's args, bound to 127.0.0.1 on free ports instead of the pod's 0.0.0.0,
    with the webhook certificate (the chart's Secret) in ``webhook_cert_dir``."""
    out = []
    for arg in args:
        if arg.startswith("--liveness="):
            arg = f"--liveness=http://127.0.0.1:{free_port()}/healthz"
        elif arg.startswith("--metrics-port="):
            arg = f"--metrics-port={free_port()}"
        elif arg.startswith("--metrics-address="):
            arg = "--metrics-address=127.0.0.1"
        elif arg.startswith("--webhook-port="):
            arg = f"--webhook-port={webhook_port}"
        elif arg.startswith("--webhook-address="):
            arg = "--webhook-address=127.0.0.1"
        elif arg.startswith("--webhook-cert-dir="):
            arg = f"--webhook-cert-dir={webhook_cert_dir}"
        out.append(arg)
    return [*out, f"--kubeconfig={kubeconfig}"]


def admission_patch(port: int, ca_file: Path, hostname: str, path: str) -> list[dict[str, Any]]:
    """POST an AdmissionReview of a new preemptible pod to the webhook on 127.0.0.1 over TLS
    (checked against ``ca_file`` for ``hostname``); the JSON patch it answers ([] if none)."""
    import base64
    import http.client
    import ssl

    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "chart-test",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {"username": "chart-test"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "p",
                    "namespace": "team-a",
                    "labels": {"hybridgpu.io/criticality": "preemptible"},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}], "priority": 0},
            },
        },
    }
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False  # the socket goes to 127.0.0.1; the name is checked below
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", f"/{path}", json.dumps(review), {"Content-Type": "json"})
        answer = json.loads(connection.getresponse().read())
        assert connection.sock is not None
        peer: Any = connection.sock.getpeercert()
    except (OSError, ValueError):
        return []  # not listening yet
    finally:
        connection.close()
    names = [value for kind, value in (peer or {}).get("subjectAltName", ()) if kind == "DNS"]
    assert hostname in names, names
    assert answer["response"]["allowed"] is True
    patch = answer["response"].get("patch")
    return list(json.loads(base64.b64decode(patch))) if patch else []


@pytest.mark.parametrize("installed", [None], indirect=True, ids=["default-values"])
def test_operator_with_only_the_chart_rbac_ticks_and_is_never_forbidden(
    installed: Any, tmp_path: Path
) -> None:
    """`hybridgpu run` with the Deployment's args and the chart's ServiceAccount token: kopf
    starts, the loop takes the Lease, labels a pool's node, writes status, and no request
    is refused (a missing rule shows up as a 403 in its log)."""
    kube, rendered, _objects, sa = installed
    policies = kube.custom.list_cluster_custom_object(GROUP, VERSION, "scalingpolicies")["items"]
    others = [p for p in policies if not p["metadata"].get("deletionTimestamp")]
    if others:
        # This operator would act for them: only on a cluster with no other policy.
        pytest.skip(f"{len(others)} ScalingPolicy object(s) exist on this cluster")
    suffix = kube.namespace.rsplit("-", 1)[-1]
    policy, pool = f"chart-rbac-{suffix}", f"chart-rbac-{suffix}"
    label = ("hybridgpu.io/chart-test", suffix)
    kube.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "scalingpolicies",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScalingPolicy",
            "metadata": {"name": policy},
            "spec": {"interval": "2s"},
        },
    )
    created = [("scalingpolicies", policy)]
    process: subprocess.Popen[bytes] | None = None
    log_path = tmp_path / "operator.log"
    try:
        kube.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "gpupools",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GPUPool",
                "metadata": {"name": pool},
                "spec": {
                    "tier": "core",
                    "policy": policy,
                    "gpu": {"model": "A100-80GB", "perNode": 4, "powerWatts": 400},
                    "minNodes": 0,
                    "maxNodes": 1,
                    "pricing": {"capexPerNode": 250000},
                    "labels": dict([label]),
                },
            },
        )
        created.append(("gpupools", pool))
        (node,) = kube.create_gpu_nodes(pool, 1, tier="core", gpus=4)

        kubeconfig = service_account_kubeconfig(kube, sa, tmp_path / "sa.kubeconfig")
        pod_name = f"{rendered.one('Deployment')['metadata']['name']}-abc12-xyz34"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDGPU_")}
        env |= {
            "KUBECONFIG": str(kubeconfig),
            "POD_NAME": pod_name,
            "POD_NAMESPACE": kube.namespace,
        }
        cert_dir = tmp_path / "webhook-tls"
        cert_dir.mkdir()
        for file, data in rendered.one("Secret")["data"].items():
            (cert_dir / file).write_bytes(base64_decode(data))
        webhook_port = free_port()
        args = local_args(run_args(rendered.one("Deployment")), kubeconfig, cert_dir, webhook_port)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "hybridgpu.cli", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
                preexec_fn=DIE_WITH_PARENT,
            )

        def done() -> bool:
            assert process is not None and process.poll() is None, log_path.read_text()
            labels = kube.core.read_node(node).metadata.labels or {}
            status = (
                kube.custom.get_cluster_custom_object(
                    GROUP, VERSION, "scalingpolicies", policy
                ).get("status")
                or {}
            )
            pool_status = (
                kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", pool).get(
                    "status"
                )
                or {}
            )
            return bool(
                labels.get(label[0]) == label[1]
                and status.get("lastTick")
                and pool_status.get("conditions")
            )

        wait_until(done, timeout_seconds=90, what="a tick of the operator under the chart's RBAC")
        lease = kube.kubectl("get", "lease", LEASE_NAME, "-n", kube.namespace, "-o", "json")
        assert json.loads(lease.stdout)["spec"]["holderIdentity"] == pod_name

        # The webhook serves the chart's certificate under the Service's name, and gives a
        # preemptible pod the chart's PriorityClass (read through the chart's RBAC).
        service_dns = f"{component_service(rendered, 'webhook')['metadata']['name']}."
        service_dns += f"{kube.namespace}.svc"
        ops = wait_until(
            lambda: [
                op
                for op in admission_patch(
                    webhook_port, cert_dir / "ca.crt", service_dns, "pod-priority-and-tier"
                )
                if op["path"] == "/spec/priorityClassName"
            ],
            timeout_seconds=30,
            what="the webhook's patch with the preemptible PriorityClass",
        )
        assert ops[0]["value"] == priority_classes(rendered)["preemptible"]["metadata"]["name"]
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for plural, name in created:
            try:
                kube.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
                kube.custom.patch_cluster_custom_object(
                    GROUP, VERSION, plural, name, {"metadata": {"finalizers": None}}
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
    log_text = log_path.read_text(errors="replace")
    refused = [
        line
        for line in log_text.splitlines()
        if re.search(r"\b403\b|forbidden|not enough permissions", line, re.IGNORECASE)
    ]
    assert refused == [], "\n".join(refused[:20])


# ------------------------------------------------------------------------------- docs agree


def documented_paths(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted value paths down to where the schema stops describing keys (free-form maps)."""
    paths = []
    for key, sub in schema.get("properties", {}).items():
        if key == "global":
            continue
        path = f"{prefix}{key}"
        if "properties" in sub:
            paths += documented_paths(sub, f"{path}.")
        else:
            paths.append(path)
    return paths


def test_every_value_has_a_default_and_a_row_in_docs_install() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    docs = (REPO_ROOT / "docs" / "install.md").read_text()
    undocumented, no_default = [], []
    for path in documented_paths(schema):
        node: Any = values
        for part in path.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:
            no_default.append(path)
        if f"`{path}`" not in docs:
            undocumented.append(path)
    assert no_default == [], "in values.schema.json but not in values.yaml"
    assert undocumented == [], "no row in docs/install.md"


def test_cluster_role_is_the_rbac_docs_operator_md_lists(values_dir: Path) -> None:
    """docs/operator.md tells admins what the operator needs; the chart must grant just that."""
    text = (REPO_ROOT / "docs" / "operator.md").read_text()
    block = re.search(r"## RBAC\s+```yaml\n(.*?)```", text, re.DOTALL)
    assert block, "docs/operator.md has no RBAC yaml block"
    documented = {d["kind"]: d for d in yaml.safe_load_all(block[1]) if d}

    def rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (group, resource, verb)
            for rule in rules
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    peering = {"operator": {"peering": {"enabled": True}}}
    chart_rules = render(peering, values_dir=values_dir).one("ClusterRole")["rules"]
    assert rule_set(chart_rules) == rule_set(documented["ClusterRole"]["rules"])
    # The chart narrows get/update of Leases to the operator's own Lease.
    role = render(values_dir=values_dir).one("Role")["rules"]
    assert rule_set(role) == rule_set(documented["Role"]["rules"])


# ------------------------------------------------------------------------------- helm install


def test_helm_install_and_uninstall_against_the_control_plane(kube: KubeTest) -> None:
    """The release path users take (helm's own apply, CRDs already present, NOTES)."""
    release = f"hgpu-{kube.namespace.rsplit('-', 1)[-1]}"
    kubeconfig = f"--kubeconfig={kube.plane.kubeconfig}"
    # --skip-crds: the session's fixture owns the CRDs (test_chart_crds_are_the_repo_crds
    # checks the chart's copy); helm applying a different copy would conflict or replace them.
    installed = helm(
        "install", release, str(CHART_DIR), "-n", kube.namespace, kubeconfig, "--skip-crds",
        "--set", "dashboard.enabled=true", "--set", "podDisruptionBudget.enabled=true",
    )  # fmt: skip
    try:
        assert installed.returncode == 0, installed.stderr
        assert "hybridgpu explain" in installed.stdout  # NOTES
        status = helm("status", release, "-n", kube.namespace, kubeconfig, "-o", "json")
        assert json.loads(status.stdout)["info"]["status"] == "deployed"
        deployment = kube.kubectl("get", "deployment", "-n", kube.namespace, "-o", "name")
        assert deployment.stdout.strip() == f"deployment.apps/{release}-hybridgpu-operator"
    finally:
        removed = helm("uninstall", release, "-n", kube.namespace, kubeconfig)
    assert removed.returncode == 0, removed.stderr
    gone = kube.kubectl("get", "clusterrole", f"{release}-hybridgpu-operator", check=False)
    assert gone.returncode != 0, "helm uninstall left the ClusterRole behind"


def at_one_hour(expr: str) -> str:
    """``expr`` with Grafana's variables set to an hour's range and every value."""
    expr = re.sub(r"\$__(rate_interval|interval)\b", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr.replace("$__range", "1h"))


def panel_expr(title: str, file: str = DASHBOARD.name) -> str:
    """The (first) query of the panel called ``title`` of dashboard ``file``, with Grafana's
    variables set to an hour's range and every value (pool, tier, criticality)."""
    board = json.loads((DASHBOARDS_DIR / file).read_text())
    panel = next(p for p in board["panels"] if p["title"] == title)
    return at_one_hour(panel["targets"][0]["expr"])


REGEX_LABEL_EXAMPLES = {"name": ["pod-priority-and-tier.hybridgpu.io"]}
"""Values of labels that queries match with a pattern (not with alternatives of words)."""
BUCKETS = ("0.1", "1", "+Inf")


def made_up_series(queries: list[str]) -> dict[str, str]:
    """promtool input series (an hour, one sample a minute): every series in
    :func:`exported_metrics`, once for each combination of the values the queries match its
    labels on (``x`` for a label no query matches); counters grow, gauges stay at 1."""
    values_of: dict[str, set[str]] = {}
    for expr in queries:
        for label, op, value in re.findall(r'(\w+)\s*(=~|=)\s*"([^"]*)"', expr):
            if op == "=":
                values_of.setdefault(label, set()).add(value)
            elif re.fullmatch(r"[\w|]+", value):
                values_of.setdefault(label, set()).update(value.split("|"))
            elif value != ".*":
                examples = REGEX_LABEL_EXAMPLES.get(label, [])
                assert any(re.fullmatch(value, e) for e in examples), f"{label}=~{value!r}"
                values_of.setdefault(label, set()).update(examples)
    series = {}
    for name, (_, labels) in exported_metrics().items():
        keys = sorted(labels - {"le"})
        for combination in itertools.product(*(sorted(values_of.get(k, {"x"})) for k in keys)):
            matchers = [f'{k}="{v}"' for k, v in zip(keys, combination, strict=True)]
            if "le" in labels:
                for step, le in enumerate(BUCKETS, start=1):
                    bucket = ", ".join([*matchers, f'le="{le}"'])
                    series[f"{name}{{{bucket}}}"] = f"0+{step}x60"
                continue
            growing = name.endswith(("_total", "_count", "_sum"))
            series[f"{name}{{{', '.join(matchers)}}}"] = "0+1x60" if growing else "1x60"
    return series


def test_every_dashboard_query_returns_data_over_made_up_metrics(tmp_path: Path) -> None:
    """Each target of each panel (and each variable's query), evaluated by promtool over an
    hour of every exported series, returns at least one number that is not NaN."""
    promtool = promtool_binary()
    queries = [(title, at_one_hour(expr)) for title, expr, _ in dashboard_queries()]
    series = made_up_series([query for _, query in queries])
    assert {re.sub(r"\{.*", "", s) for s in series} == set(exported_metrics())
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {
                        # the comment names the panel in promtool's report; NaN != NaN
                        "expr": f"# {title}\nclamp_max(count(({query}) == ({query})), 1)",
                        "eval_time": "60m",
                        "exp_samples": [{"labels": "{}", "value": 1}],
                    }
                    for title, query in queries
                ],
            }
        ],
    }
    test_file = tmp_path / "dashboard-data-test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_panels_compute_what_their_titles_say(tmp_path: Path) -> None:
    """A few panels evaluated by promtool over an hour of made-up operator metrics."""
    promtool = promtool_binary()
    series = {
        'hybridgpu_pool_cost_per_hour_dollars{pool="core",tier="core"}': "10x60",
        'hybridgpu_pool_cost_per_hour_dollars{pool="spot-a",tier="spot"}': "3x60",
        'hybridgpu_pool_cost_per_hour_dollars{pool="spot-b",tier="spot"}': "2x60",
        # $1 a minute, a quarter of it for idle GPUs
        'hybridgpu_cost_dollars_total{pool="core",tier="core"}': "0+1x60",
        'hybridgpu_idle_gpu_cost_dollars_total{pool="core",tier="core"}': "0+0.25x60",
        "hybridgpu_budget_spent_dollars": "800x60",
        "hybridgpu_budget_limit_dollars": "1000x60",
        'hybridgpu_pending_gpu_requests{criticality="critical"}': "4x60",
        'hybridgpu_pending_gpu_requests{criticality="preemptible"}': "0x60",
        # ticked every minute until 50m
        'hybridgpu_last_tick_timestamp_seconds{policy="default"}': "0+60x50 3000x10",
        'hybridgpu_preemptions_total{from_tier="spot",to_tier="elastic",reason="deadline"}': (
            "0+1x60"
        ),
        'hybridgpu_preemptions_total{from_tier="core",to_tier="spot",reason="preempt"}': "0+2x60",
        'hybridgpu_reclaimed_gpu_hours_total{namespace="ml",tier="spot"}': "0+0.5x60",
        'hybridgpu_rebalances_total{namespace="web",from_tier="elastic",to_tier="core",'
        'result="completed"}': "0+1x60",
        'hybridgpu_rebalances_total{namespace="web",from_tier="elastic",to_tier="core",'
        'result="started"}': "0+2x60",
        'hybridgpu_rebalances_total{namespace="web",from_tier="elastic",to_tier="core",'
        'result="rolled_back"}': "0+0.25x60",
        'hybridgpu_admission_reviews_total{webhook="pod-priority-and-tier",'
        'criticality="critical",outcome="patched"}': "0+1x60",
        'hybridgpu_admission_reviews_total{webhook="pod-priority-and-tier",'
        'criticality="standard",outcome="no_priority_class"}': "0+1x60",
        'hybridgpu_admission_reviews_total{webhook="pod-critical-not-spot-only",'
        'criticality="critical",outcome="allowed"}': "0+1x60",
        'hybridgpu_admission_reviews_total{webhook="pod-critical-not-spot-only",'
        'criticality="critical",outcome="refused"}': "0+0.25x60",
        'apiserver_admission_webhook_fail_open_count{name="pod-priority-and-tier.hybridgpu.io",'
        'type="admit"}': "0+1x60",
        'hybridgpu_pods_admitted_without_webhook{criticality="preemptible"}': "0x30 3x30",
        'hybridgpu_pods_admitted_without_webhook{criticality="critical"}': "0x60",
        'apiserver_admission_webhook_fail_open_count{name="other.example.com",type="admit"}': (
            "0+5x60"
        ),
        # one JobSet move a minute, one Job move every two; one gang blocked, one coming
        'hybridgpu_workload_moves_total{kind="JobSet",from_tier="core",to_tier="spot",'
        'reason="preempt"}': "0+1x60",
        'hybridgpu_workload_moves_total{kind="Job",from_tier="core",to_tier="spot",'
        'reason="preempt"}': "0+0.5x60",
        'hybridgpu_gangs{policy="a",kind="JobSet",state="blocked"}': "1x60",
        'hybridgpu_gangs{policy="b",kind="ProvisioningRequest",state="blocked"}': "2x60",
        'hybridgpu_gangs{policy="a",kind="JobSet",state="coming"}': "1x60",
        'hybridgpu_gang_decisions_total{kind="JobSet",state="coming",cause="none"}': "0+0.25x60",
        'hybridgpu_gang_decisions_total{kind="JobSet",state="placed",cause="none"}': "0+0.25x60",
        'hybridgpu_gang_decisions_total{kind="JobSet",state="blocked",cause="max_nodes"}': (
            "0+1x60"
        ),
    }
    moves, admission = "hybridgpu-moves.json", "hybridgpu-admission.json"
    serving, workloads = "hybridgpu-serving.json", "hybridgpu-workloads.json"
    cases: list[tuple[str, list[tuple[str, float]]]] = [
        ("Cost per hour by tier", [('{tier="core"}', 10), ('{tier="spot"}', 5)]),
        ("Spend rate now", [("{}", 15)]),
        ("Idle share of cost", [("{}", 0.25)]),
        ("Idle GPU cost (waste) by tier, $/h", [('{tier="core"}', 15)]),
        ("Budget used", [("{}", 0.8)]),
        (
            "Pending GPU requests by criticality",
            [('{criticality="critical"}', 4), ('{criticality="preemptible"}', 0)],
        ),
        ("Since the last tick", [("{}", 600)]),
    ]
    other_cases: list[tuple[str, str, list[tuple[str, float]]]] = [
        (moves, "Jobs moved", [("{}", 180)]),
        (moves, "Moved to meet a deadline", [("{}", 60)]),
        (moves, "Idle GPU-hours reclaimed", [("{}", 30)]),
        (admission, "Labelled pods admitted", [("{}", 120)]),  # the validating ones are not
        (admission, "Critical pods refused", [("{}", 15)]),
        (admission, "Pods without their PriorityClass", [("{}", 60)]),
        (admission, "Webhook calls that failed open", [("{}", 60)]),  # ours only
        (
            admission,
            "Pods running without their admission rules",
            [('{criticality="critical"}', 0), ('{criticality="preemptible"}', 3)],
        ),
        (serving, "Replicas rebalanced to owned GPUs", [("{}", 60)]),  # not the started ones
        (serving, "Rebalances rolled back or aborted", [("{}", 15)]),
        (workloads, "Workloads moved", [("{}", 90)]),
        (workloads, "Moves by kind", [('{kind="JobSet"}', 5), ('{kind="Job"}', 2.5)]),
        (workloads, "Gangs admitted", [("{}", 30)]),  # placed and coming, not blocked
        (workloads, "Gangs blocked now", [("{}", 3)]),
        (workloads, "Why gangs were blocked over the range", [('{cause="max_nodes"}', 60)]),
    ]
    exprs = [(panel_expr(title), samples) for title, samples in cases]
    exprs += [(panel_expr(title, file), samples) for file, title, samples in other_cases]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "60m",
                        "exp_samples": [{"labels": lbl, "value": val} for lbl, val in samples],
                    }
                    for expr, samples in exprs
                ],
            }
        ],
    }
    test_file = tmp_path / "dashboard-test.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
