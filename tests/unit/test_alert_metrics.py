"""The metrics the chart's alerts read say what the operator wrote: a ScalingPolicy's last
tick and conditions, a GPUPool's conditions (whole ticks of the real Reconciler over an
in-memory cluster), and what the admission webhooks did with each pod."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from tests.support.fake_cluster import FakeCluster, gpu_pod

from hybridgpu.core.admission import PriorityClassRef
from hybridgpu.handlers import admission
from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.metrics.exported import METRICS, ExportedMetrics
from hybridgpu.models.pool import Taint
from hybridgpu.models.snapshot import Criticality

pytestmark = pytest.mark.unit

START = 1_700_000_000.0
ELASTIC = {
    "tier": "elastic",
    "gpu": {"model": "A100", "perNode": 8},
    "minNodes": 0,
    "maxNodes": 4,
    "provider": {"type": "fake"},
    "pricing": {"perNodeHour": 24},
}


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def sample(metrics: ExportedMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj["status"]["conditions"]}


def as_value(status: str) -> float | None:
    return {"True": 1.0, "False": 0.0}.get(status)


def ticking_operator() -> tuple[FakeCluster, Clock, Reconciler, ExportedMetrics]:
    cluster, clock, metrics = FakeCluster(), Clock(), ExportedMetrics()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", ELASTIC)
    options = OperatorOptions(identity="test", fake_provider="hybridgpu.cloud.fake:FakeProvider")
    reconciler = Reconciler(cluster, options, clock=clock, metrics=metrics)  # type: ignore[arg-type]
    return cluster, clock, reconciler, metrics


def test_the_last_tick_and_conditions_are_the_ones_written_to_the_status() -> None:
    cluster, clock, reconciler, metrics = ticking_operator()
    # a pod that never gets a Node: the instance bought for it never registers
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=START - 120))
    reconciler.tick("default")
    assert sample(metrics, "hybridgpu_last_tick_timestamp_seconds", policy="default") == START
    for _ in range(16 * 2):  # 16 minutes: past the registration deadline
        clock.now += 30
        reconciler.tick("default")
    assert sample(metrics, "hybridgpu_last_tick_timestamp_seconds", policy="default") == clock.now

    policy = conditions(cluster.policies["default"])
    assert {"MetricsAvailable", "BudgetExceeded"} <= policy.keys()
    for kind, status in policy.items():
        got = sample(metrics, "hybridgpu_policy_condition", policy="default", condition=kind)
        assert got == as_value(status), kind
    pool = conditions(cluster.pools["elastic"])
    assert pool["NodesUnhealthy"] == "True"
    for kind, status in pool.items():
        labels = {"pool": "elastic", "tier": "elastic", "condition": kind}
        assert sample(metrics, "hybridgpu_pool_condition", **labels) == as_value(status), kind


def test_a_deleted_policy_or_pool_leaves_no_series_to_alert_on() -> None:
    cluster, clock, reconciler, metrics = ticking_operator()
    reconciler.tick("default")
    unhealthy = {"pool": "elastic", "tier": "elastic", "condition": "NodesUnhealthy"}
    assert sample(metrics, "hybridgpu_pool_condition", **unhealthy) is not None

    del cluster.pools["elastic"]
    clock.now += 30
    reconciler.tick("default")
    assert sample(metrics, "hybridgpu_pool_condition", **unhealthy) is None

    reconciler.forget_wake_event("default")  # what the policy's daemon does when it is deleted
    assert sample(metrics, "hybridgpu_last_tick_timestamp_seconds", policy="default") is None
    available = {"policy": "default", "condition": "MetricsAvailable"}
    assert sample(metrics, "hybridgpu_policy_condition", **available) is None


def test_an_unknown_condition_has_no_series() -> None:
    metrics = ExportedMetrics()
    metrics.record_policy_conditions("p", [{"type": "MetricsAvailable", "status": "False"}])
    assert (
        sample(metrics, "hybridgpu_policy_condition", policy="p", condition="MetricsAvailable") == 0
    )
    metrics.record_policy_conditions("p", [{"type": "MetricsAvailable", "status": "Unknown"}])
    assert (
        sample(metrics, "hybridgpu_policy_condition", policy="p", condition="MetricsAvailable")
        is None
    )


def reviews(webhook: str, criticality: str, outcome: str) -> float:
    labels = {"webhook": webhook, "criticality": criticality, "outcome": outcome}
    return sample(METRICS, "hybridgpu_admission_reviews_total", **labels) or 0.0


def indexes(classes: dict[Criticality, PriorityClassRef]) -> dict[str, Any]:
    """The kopf indexes the webhook handlers read, as plain mappings of lists."""
    spot_taint = Taint(key="hybridgpu.io/spot", value="true", effect="NoSchedule")
    return {
        "priority_classes": {c: [ref] for c, ref in classes.items()},
        "spot_pools": {"spot": [(spot_taint,)]},
        "on_demand_for_preemptible": {},
    }


# The handlers as plain coroutine functions (kopf's decorators type them as WebhookFn).
SET_PRIORITY: Any = admission.set_priority_and_tier
REFUSE_SPOT_ONLY: Any = admission.refuse_critical_on_spot_only


def mutate(labels: dict[str, str], spec: dict[str, Any], **index: Any) -> list[str]:
    warnings: list[str] = []
    asyncio.run(
        SET_PRIORITY(labels=labels, spec=spec, patch=kopf.Patch(), warnings=warnings, **index)
    )
    return warnings


def test_the_webhooks_count_each_pod_by_criticality_and_outcome() -> None:
    mutating, validating = admission.MUTATE_ID, admission.VALIDATE_ID
    critical = PriorityClassRef("hybridgpu-critical", 100000)
    before = {
        key: reviews(*key)
        for key in [
            (mutating, "critical", "patched"),
            (mutating, "standard", "no_priority_class"),
            (validating, "critical", "allowed"),
            (validating, "critical", "refused"),
        ]
    }
    with_class = indexes({Criticality.CRITICAL: critical})
    mutate({"hybridgpu.io/criticality": "critical"}, {"containers": []}, **with_class)
    warned = mutate({"hybridgpu.io/criticality": "standard"}, {"containers": []}, **with_class)
    assert warned  # the pod keeps its priority, and the user is told

    spot_only = {
        "containers": [],
        "nodeSelector": {"hybridgpu.io/tier": "spot"},
        "tolerations": [{"key": "hybridgpu.io/spot", "operator": "Exists"}],
    }
    asyncio.run(
        REFUSE_SPOT_ONLY(
            labels={"hybridgpu.io/criticality": "critical"}, spec={"containers": []}, **with_class
        )
    )
    with pytest.raises(kopf.AdmissionError):
        asyncio.run(
            REFUSE_SPOT_ONLY(
                labels={"hybridgpu.io/criticality": "critical"}, spec=spot_only, **with_class
            )
        )
    assert {key: reviews(*key) - count for key, count in before.items()} == {
        (mutating, "critical", "patched"): 1,
        (mutating, "standard", "no_priority_class"): 1,
        (validating, "critical", "allowed"): 1,
        (validating, "critical", "refused"): 1,
    }
