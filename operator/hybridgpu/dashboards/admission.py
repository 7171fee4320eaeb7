"""The admission dashboard: what the operator's webhooks did to labelled pods (PriorityClass
set, tier affinity added, critical pods restricted to spot refused), and how the API server
saw them: calls, latency, rejections and calls that failed open (``failurePolicy: Ignore``:
the pod was admitted unchanged, without its PriorityClass)."""

from __future__ import annotations

from typing import Any

from hybridgpu.dashboards import names as n
from hybridgpu.dashboards.panels import (
    label_variable,
    new_dashboard,
    query,
    row,
    stat_panel,
    timeseries_panel,
)
from hybridgpu.metrics.exported import AdmissionOutcome

UID = "hybridgpu-admission"
FILE = "hybridgpu-admission.json"


def _outcome(*outcomes: AdmissionOutcome) -> str:
    return 'outcome=~"' + "|".join(o.value for o in outcomes) + '"'


def build() -> Any:
    """The dashboard builder."""
    criticality = 'criticality=~"$criticality"'
    reviews = n.select(n.ADMISSION_REVIEWS, criticality)
    mutated = n.select(
        n.ADMISSION_REVIEWS,
        criticality,
        _outcome(
            AdmissionOutcome.PATCHED, AdmissionOutcome.UNCHANGED, AdmissionOutcome.NO_PRIORITY_CLASS
        ),
    )
    refused = n.select(n.ADMISSION_REVIEWS, criticality, _outcome(AdmissionOutcome.REFUSED))
    no_class = n.select(
        n.ADMISSION_REVIEWS, criticality, _outcome(AdmissionOutcome.NO_PRIORITY_CLASS)
    )
    requests = n.select(n.WEBHOOK_REQUESTS, n.OUR_WEBHOOKS)
    duration = n.select(n.WEBHOOK_DURATION_BUCKET, n.OUR_WEBHOOKS)
    rejections = n.select(n.WEBHOOK_REJECTIONS, n.OUR_WEBHOOKS)
    fail_open = n.select(n.WEBHOOK_FAIL_OPEN, n.OUR_WEBHOOKS)
    latency = "histogram_quantile({q}, sum by (name, le) (rate({d}[$__rate_interval])))"
    return (
        new_dashboard(
            UID,
            "hybridgpu: admission and PriorityClasses",
            "The hybridgpu admission webhooks: PriorityClasses given by criticality, pods "
            "refused, and the API server's calls to the webhooks (latency, fail-open).",
            ["gpu", "admission"],
        )
        .with_variable(label_variable("criticality", "Criticality", n.ADMISSION_REVIEWS))
        # ---------------------------------------------------------------- totals
        .with_row(row("Over the range"))
        .with_panel(
            stat_panel(
                "Labelled pods admitted",
                "Pods labelled hybridgpu.io/criticality the mutating webhook reviewed.",
                [query(f"sum(increase({mutated}[$__range]))", "pods")],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Critical pods refused",
                "Critical pods refused because they could only run on spot nodes (which "
                "vanish at two minutes' notice).",
                [query(f"sum(increase({refused}[$__range]))", "refused")],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Pods without their PriorityClass",
                "Labelled pods admitted while no PriorityClass carries their criticality "
                "label: they keep their own priority. Create the classes (the chart's "
                "priorityClasses.create).",
                [query(f"sum(increase({no_class}[$__range]))", "pods")],
                unit="short",
                width=6,
                thresholds=[(None, "green"), (1, "red")],
            )
        )
        .with_panel(
            stat_panel(
                "Webhook calls that failed open",
                "Calls the API server could not complete (operator down, slow or "
                "unreachable): the pod was admitted unchanged, without PriorityClass or "
                "tier rules.",
                [query(f"sum(increase({fail_open}[$__range]))", "fail-open")],
                unit="short",
                width=6,
                thresholds=[(None, "green"), (1, "red")],
            )
        )
        # ---------------------------------------------------------------- operator
        .with_row(row("What the webhooks did"))
        .with_panel(
            timeseries_panel(
                "Reviews by criticality and outcome",
                "Pods reviewed per interval. patched: PriorityClass or tier affinity set; "
                "unchanged: already right; no_priority_class: no class for the criticality; "
                "allowed / refused: the validating webhook.",
                [
                    query(
                        "sum by (webhook, criticality, outcome) "
                        f"(increase({reviews}[$__rate_interval]))",
                        "{{webhook}} {{criticality}} {{outcome}}",
                    )
                ],
                unit="short",
                width=8,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Pods running without their admission rules",
                "Labelled pods in the cluster now that the webhook never changed (created "
                "while it was down: it fails open), by criticality: they lack their "
                "PriorityClass or tier affinity until recreated. Events with reason "
                "AdmittedWithoutWebhook name them.",
                [
                    query(
                        f"sum by (criticality) ({n.select(n.PODS_WITHOUT_ADMISSION, criticality)})",
                        "{{criticality}}",
                    )
                ],
                unit="short",
                width=8,
            )
        )
        .with_panel(
            timeseries_panel(
                "Pending GPU requests by criticality",
                "GPUs requested by pending pods: with PriorityClasses set, the scheduler "
                "places critical pods first, so critical demand should not stay pending.",
                [
                    query(
                        f"sum by (criticality) ({n.select(n.PENDING_GPU_REQUESTS, criticality)})",
                        "{{criticality}}",
                    )
                ],
                unit="short",
                width=8,
                stacked=True,
            )
        )
        # ---------------------------------------------------------------- apiserver
        .with_row(row("API server calls to the webhooks"))
        .with_panel(
            timeseries_panel(
                "Calls by webhook and code",
                "Calls per second the API server made to each hybridgpu webhook, by HTTP "
                "code and whether the webhook rejected the pod.",
                [
                    query(
                        f"sum by (name, code, rejected) (rate({requests}[$__rate_interval]))",
                        "{{name}} {{code}} rejected={{rejected}}",
                    )
                ],
                unit="reqps",
                width=8,
            )
        )
        .with_panel(
            timeseries_panel(
                "Webhook latency",
                "How long the API server waited for each webhook (timeoutSeconds caps it: "
                "beyond, the call fails open).",
                [
                    query(latency.format(q="0.5", d=duration), "{{name}} p50"),
                    query(latency.format(q="0.99", d=duration), "{{name}} p99"),
                ],
                unit="s",
                width=8,
            )
        )
        .with_panel(
            timeseries_panel(
                "Rejections and fail-open calls",
                "Rejections by error type (calling_webhook_error: the webhook could not be "
                "called or answered an error) and calls that failed open, per interval.",
                [
                    query(
                        f"sum by (name, error_type) (increase({rejections}[$__rate_interval]))",
                        "{{name}} {{error_type}}",
                    ),
                    query(
                        f"sum by (name) (increase({fail_open}[$__rate_interval]))",
                        "{{name}} failed open",
                    ),
                ],
                unit="short",
                width=8,
                counts=True,
            )
        )
    )
