"""Start-up checks: a missing or old CRD, an unreachable API and a provider that cannot be
built or cannot authenticate each become one clear line, the readiness answer and the
ScalingPolicies' OperatorReady condition, instead of an error every tick."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tests.support.fake_cluster import FakeCluster

from hybridgpu.handlers.capacity import Providers
from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.handlers.preflight import NOT_CHECKED, Preflight
from hybridgpu.kube.errors import KubeError
from hybridgpu.metrics.exported import ExportedMetrics

pytestmark = pytest.mark.unit

FAKE_POOL = {
    "tier": "elastic",
    "gpu": {"model": "A100", "perNode": 8},
    "maxNodes": 2,
    "provider": {"type": "fake"},
    "pricing": {"perNodeHour": 24},
}
AWS_POOL = {
    **FAKE_POOL,
    "provider": {"type": "aws", "aws": {"region": "us-east-1", "autoScalingGroupName": "gpu"}},
}


def old_scalingpolicy_crd(cluster: FakeCluster) -> None:
    """The CRD of an earlier release: no spec.prometheus.tokensQuery."""
    crd = cluster.crds["scalingpolicies.hybridgpu.io"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["prometheus"]["properties"]["tokensQuery"]


def not_served(cluster: FakeCluster) -> None:
    cluster.crds["gpupools.hybridgpu.io"]["spec"]["versions"][0]["served"] = False


class Unreachable(FakeCluster):
    def read_crd(self, name: str) -> dict[str, Any] | None:
        raise KubeError("read CustomResourceDefinition: Connection refused", retryable=True)


def preflight(cluster: FakeCluster, fake_provider: str | None = None) -> Preflight:
    options = OperatorOptions(identity="test")
    if fake_provider:
        options = OperatorOptions(identity="test", fake_provider=fake_provider)
    return Preflight(cluster, Providers(options.fake_provider), options)


CASES: dict[str, tuple[Any, dict[str, Any], str | None, list[str], str]] = {
    "everything in place": (FakeCluster, {"p": FAKE_POOL}, None, [], "ChecksPassed"),
    "a CRD not installed": (
        lambda: _without(FakeCluster(), "capacityplans.hybridgpu.io"),
        {},
        None,
        ["CRD capacityplans.hybridgpu.io is not installed: apply this release's crds/"],
        "CRDNotCurrent",
    ),
    "a CRD of an earlier release": (
        lambda: _changed(FakeCluster(), old_scalingpolicy_crd),
        {},
        None,
        [
            "CRD scalingpolicies.hybridgpu.io is older than this operator: it has no "
            "spec.prometheus.tokensQuery: apply this release's crds/"
        ],
        "CRDNotCurrent",
    ),
    "a CRD that no longer serves v1alpha1": (
        lambda: _changed(FakeCluster(), not_served),
        {},
        None,
        ["CRD gpupools.hybridgpu.io does not serve v1alpha1 (serves: nothing)"],
        "CRDNotCurrent",
    ),
    "an API server that cannot be reached": (
        Unreachable,
        {"p": FAKE_POOL},
        None,
        ["cannot reach the Kubernetes API at https://fake-apiserver: read Custom"],
        "APIUnreachable",
    ),
    "a --fake-provider that does not import": (
        FakeCluster,
        {"p": FAKE_POOL},
        "no_such_module:Provider",
        ["--fake-provider no_such_module:Provider cannot be loaded: No module named"],
        "ProviderMisconfigured",
    ),
}


def _without(cluster: FakeCluster, crd: str) -> FakeCluster:
    del cluster.crds[crd]
    return cluster


def _changed(cluster: FakeCluster, change: Any) -> FakeCluster:
    change(cluster)
    return cluster


@pytest.mark.parametrize(
    ("make", "pools", "fake_provider", "want_starts", "want_reason"),
    CASES.values(),
    ids=CASES.keys(),
)
def test_each_problem_is_one_line(
    make: Any,
    pools: dict[str, Any],
    fake_provider: str | None,
    want_starts: list[str],
    want_reason: str,
) -> None:
    cluster = make()
    for name, spec in pools.items():
        cluster.add_pool(name, spec)
    checks = preflight(cluster, fake_provider)
    assert checks.problems == [NOT_CHECKED]

    problems = checks.check()

    assert len(problems) == len(want_starts), problems
    for line, start in zip(problems, want_starts, strict=True):
        assert line.startswith(start), line
        assert "\n" not in line
    assert checks.reason == want_reason


def test_an_aws_pool_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cluster = FakeCluster()
    cluster.add_pool("gpu", AWS_POOL)

    checks = preflight(cluster)

    assert checks.check() == [
        "GPUPool gpu (aws): no AWS credentials found (IRSA: a service account annotated with "
        "eks.amazonaws.com/role-arn; AWS_ACCESS_KEY_ID; or an instance profile)"
    ]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert preflight(cluster).check() == []


def test_the_problem_is_logged_once_until_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    cluster = _changed(FakeCluster(), old_scalingpolicy_crd)
    checks = preflight(cluster)
    with caplog.at_level(logging.INFO, logger="hybridgpu.handlers.preflight"):
        checks.check()
        checks.check()
        cluster.crds = FakeCluster().crds  # the CRDs were upgraded
        checks.check()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("hybridgpu is not ready: CRD scalingpolicies.hybridgpu.io")
    assert lines[1].startswith("hybridgpu is ready")


def test_a_tick_reports_the_problem_as_the_policys_operator_ready_condition() -> None:
    cluster = _changed(FakeCluster(), old_scalingpolicy_crd)
    cluster.add_policy("default", {})
    reconciler = Reconciler(
        cluster,  # type: ignore[arg-type]
        OperatorOptions(identity="test"),
        clock=lambda: 1_700_000_000.0,
        metrics=ExportedMetrics(),
    )

    reconciler.tick("default")

    conditions = {c["type"]: c for c in cluster.policies["default"]["status"]["conditions"]}
    ready = conditions["OperatorReady"]
    assert (ready["status"], ready["reason"]) == ("False", "CRDNotCurrent")
    assert "spec.prometheus.tokensQuery" in ready["message"]

    cluster.crds = FakeCluster().crds
    reconciler.preflight.check()
    reconciler.tick("default")

    conditions = {c["type"]: c for c in cluster.policies["default"]["status"]["conditions"]}
    assert conditions["OperatorReady"]["status"] == "True"


def test_per_event_handlers_do_not_log_every_success_but_failures_still_show() -> None:
    import logging

    from hybridgpu.handlers import admission
    from hybridgpu.handlers.startup import _QuietSuccess

    quiet = _QuietSuccess(admission.report_pods_admitted_without_webhook, admission.MUTATE_ID)

    def shown(message: str) -> bool:
        return quiet.filter(logging.LogRecord("kopf.objects", 20, "", 0, message, (), None))

    assert not shown("Handler 'report_pods_admitted_without_webhook' succeeded.")
    assert not shown("Webhook 'pod-priority-and-tier' succeeded.")
    assert shown("Handler 'scalingpolicy_changed' succeeded.")
    assert shown(
        "Handler 'report_pods_admitted_without_webhook' failed with an exception and will try "
        "again."
    )
