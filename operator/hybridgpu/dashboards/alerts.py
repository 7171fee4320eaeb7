"""The chart's PrometheusRule: alerts on the operator's metrics and the API server's webhook
metrics, each with a ``runbook_url`` pointing to its section of docs/runbooks.md.

:func:`template` writes ``templates/prometheusrule.yaml``: the rules with Helm expressions for
the thresholds users tune (``.Values.alerts``). Prometheus' own template expressions in
annotations are escaped for Helm (see :func:`prometheus_template`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from hybridgpu.dashboards import names as n
from hybridgpu.models.snapshot import Criticality

# Condition types the operator writes (kube.status) and exports as policy_condition and
# pool_condition.
METRICS_AVAILABLE, BUDGET_EXCEEDED, NODES_UNHEALTHY = (
    "MetricsAvailable",
    "BudgetExceeded",
    "NodesUnhealthy",
)


def values(path: str) -> str:
    """A Helm expression for ``.Values.alerts.<path>``."""
    return "{{ .Values.alerts." + path + " }}"


def prometheus_template(expr: str) -> str:
    """A Prometheus template expression (``{{ $labels.pool }}``) that Helm leaves alone."""
    return "{{`{{ " + expr + " }}`}}"


@dataclass(frozen=True)
class Alert:
    """One alerting rule; ``runbook`` is the anchor of its section in docs/runbooks.md."""

    name: str
    expr: str
    summary: str
    description: str
    runbook: str
    severity: str = "warning"
    for_: str | None = None

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ is not None:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": values("runbookURL") + "#" + self.runbook,
        }
        return rule


CRITICAL = n.equals("criticality", Criticality.CRITICAL.value)
SPOT_WINDOW = values("spotInterruptions.window")


def _label(name: str) -> str:
    return prometheus_template(f"$labels.{name}")


def _condition(series: str, condition: str, by: str, status: int) -> str:
    return f"max by ({by}) ({n.select(series, n.equals('condition', condition))}) == {status}"


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="HybridGPUOperatorDown",
        expr=f"absent({n.RECONCILE_DURATION_COUNT})",
        for_="5m",
        severity="critical",
        summary="No hybridgpu operator is scraped",
        description=(
            "Prometheus has no hybridgpu operator metrics: the operator is down or not "
            "scraped. Nothing scales, moves or releases GPU capacity meanwhile; pods go "
            "through the admission webhook unchanged."
        ),
        runbook="the-operator-is-down-or-not-ticking",
    ),
    Alert(
        name="HybridGPUOperatorNotTicking",
        expr=f"time() - max by (policy) ({n.LAST_TICK}) > {values('tickAgeSeconds')}",
        severity="critical",
        summary="ScalingPolicy " + _label("policy") + " has not ticked for a while",
        description=(
            "The operator last decided a plan for ScalingPolicy "
            + _label("policy")
            + " "
            + prometheus_template("$value | humanizeDuration")
            + " ago (status.lastTick): no leader, a failing tick or an invalid spec."
        ),
        runbook="the-operator-is-down-or-not-ticking",
    ),
    Alert(
        name="HybridGPUMetricsUnavailable",
        expr=_condition(n.POLICY_CONDITION, METRICS_AVAILABLE, "policy", 0),
        for_=values("metricsUnavailableFor"),
        summary="ScalingPolicy " + _label("policy") + " is blind: MetricsAvailable=False",
        description=(
            "The operator cannot read GPU utilization for ScalingPolicy "
            + _label("policy")
            + ": it adds capacity for pending work but releases none, so idle cloud nodes "
            "keep costing."
        ),
        runbook="metricsavailablefalse",
    ),
    Alert(
        name="HybridGPUBudgetExceeded",
        expr=_condition(n.POLICY_CONDITION, BUDGET_EXCEEDED, "policy", 1),
        for_="1m",
        summary="ScalingPolicy " + _label("policy") + " is over its cloud budget",
        description=(
            "BudgetExceeded=True on ScalingPolicy "
            + _label("policy")
            + ": the operator adds no cloud capacity until the budget allows it; pending "
            "critical work waits."
        ),
        runbook="budgetexceededtrue-on-a-scalingpolicy",
    ),
    Alert(
        name="HybridGPUCriticalDemandPending",
        expr=f"max({n.select(n.PENDING_GPU_REQUESTS, CRITICAL)}) > 0",
        for_=values("pendingCriticalFor"),
        summary="Critical GPU demand has been pending for a while",
        description=(
            prometheus_template("$value")
            + " GPUs requested by critical pods have had no capacity for "
            + values("pendingCriticalFor")
            + "."
        ),
        runbook="gpu-pods-stay-pending",
    ),
    Alert(
        name="HybridGPUSpotInterruptionBurst",
        expr=(
            f"sum by (pool) (increase({n.SPOT_INTERRUPTIONS}[{SPOT_WINDOW}]))"
            f" >= {values('spotInterruptions.count')}"
        ),
        summary="Spot pool " + _label("pool") + " is being interrupted in a burst",
        description=(
            prometheus_template("$value | humanize")
            + " nodes of spot pool "
            + _label("pool")
            + " were taken back within "
            + values("spotInterruptions.window")
            + ": its Jobs restart, and the capacity may not come back."
        ),
        runbook="spot-interruptions-come-in-bursts",
    ),
    Alert(
        name="HybridGPUNodesUnhealthy",
        expr=_condition(n.POOL_CONDITION, NODES_UNHEALTHY, "pool, tier", 1),
        for_=values("nodesUnhealthyFor"),
        summary="GPUPool " + _label("pool") + " has nodes that serve no work",
        description=(
            "NodesUnhealthy=True on GPUPool "
            + _label("pool")
            + " ("
            + _label("tier")
            + "): capacity is paid for but does not serve work (not ready, GPU errors, or "
            "instances that never registered)."
        ),
        runbook="nodesunhealthytrue-on-a-gpupool",
    ),
    Alert(
        name="HybridGPUWebhookFailOpen",
        expr=f"sum by (name) (increase({n.select(n.WEBHOOK_FAIL_OPEN, n.OUR_WEBHOOKS)}[10m])) > 0",
        summary="Admission webhook " + _label("name") + " fails open",
        description=(
            "The API server could not call "
            + _label("name")
            + " and admitted pods unchanged (failurePolicy Ignore): labelled pods got no "
            "PriorityClass and preemptible pods no tier rules."
        ),
        runbook="the-admission-webhook-fails-open",
    ),
    Alert(
        name="HybridGPUPodsAdmittedWithoutWebhook",
        expr=f"sum by (criticality) ({n.PODS_WITHOUT_ADMISSION}) > 0",
        for_="5m",
        summary=_label("criticality") + " pods run without their admission rules",
        description=(
            "The operator found "
            + prometheus_template("$value")
            + " "
            + _label("criticality")
            + " pods created while its webhook was down: they lack their PriorityClass or tier "
            "affinity until they are recreated (Events with reason AdmittedWithoutWebhook "
            "name them)."
        ),
        runbook="pods-admitted-without-the-webhook",
    ),
    Alert(
        name="HybridGPUUnmanagedNodes",
        expr=f"max by (pool) ({n.UNMANAGED_NODES}) > 0",
        for_="10m",
        summary="Nodes of GPUPool " + _label("pool") + ", which does not exist, are left running",
        description=(
            prometheus_template("$value")
            + " cloud node(s) are labelled for GPUPool "
            + _label("pool")
            + ", which does not exist: nothing manages or releases them, and their instances "
            "are billed (Events with reason UnmanagedNode name them)."
        ),
        runbook="nodes-no-gpupool-manages",
    ),
)

HEADER = """\
{{- /* Generated by `make dashboards` from operator/hybridgpu/dashboards/alerts.py: edit that,
not this file. Rendered when the cluster serves the Prometheus Operator's PrometheusRule (with
`helm template`, pass --api-versions monitoring.coreos.com/v1/PrometheusRule). */}}
{{- $served := .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}
{{- if and .Values.alerts.enabled $served }}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "hybridgpu.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "hybridgpu.labels" . | nindent 4 }}
    {{- with .Values.alerts.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
"""
FOOTER = "{{- end }}\n"


def template() -> str:
    """The text of ``templates/prometheusrule.yaml``."""
    spec = {"groups": [{"name": "hybridgpu", "rules": [alert.rule() for alert in ALERTS]}]}
    body = yaml.safe_dump(spec, sort_keys=False, width=1000, allow_unicode=True)
    return HEADER + "".join(f"  {line}\n" for line in body.splitlines()) + FOOTER
