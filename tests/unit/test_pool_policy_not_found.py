"""A GPUPool whose spec.policy names no ScalingPolicy: nothing ticks it, so its status and a
Warning Event say so (tests/e2e/test_kubectl_ux.py on the real apiserver). A policy applied a
moment after its pools, from the same file (every example lists the pools first), is no
such case: no false PolicyNotFound Event is left in `kubectl describe` for an hour."""

from __future__ import annotations

from typing import Any

import pytest

from hybridgpu.handlers import resources
from hybridgpu.handlers.resources import gpupool_changed
from hybridgpu.kube.executor import PlanExecutor

pytestmark = pytest.mark.unit

SPEC = {
    "tier": "elastic",
    "gpu": {"model": "A100", "perNode": 8},
    "maxNodes": 4,
    "provider": {"type": "kwok"},
    "pricing": {"perNodeHour": 3},
    "policy": "default",
}


class FakeTime:
    """resources.time: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Cluster:
    """The policy appears after ``policy_after`` seconds (None: never)."""

    def __init__(self, clock: FakeTime, policy_after: float | None) -> None:
        self.clock = clock
        self.appears_at = None if policy_after is None else clock.now + policy_after
        self.status: dict[str, Any] = {}
        self.events: list[tuple[str, str, str]] = []

    def get_custom(self, plural: str, name: str) -> dict[str, Any] | None:
        if plural == "gpupools":
            return {"metadata": {"name": name, "resourceVersion": "1"}, "status": self.status}
        if self.appears_at is None or self.clock.now < self.appears_at:
            return None
        return {"metadata": {"name": name}}

    def patch_status(self, plural: str, name: str, body: Any, **_: Any) -> None:
        self.status = body

    def post_event(self, ref: Any, *, reason: str, message: str, event_type: str, **_: Any) -> None:
        self.events.append((ref.name, reason, event_type))


class Reconciler:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.executor = PlanExecutor(cluster, None, cluster.clock.time)  # type: ignore[arg-type]

    def trigger_all(self) -> None:
        return None


def handle(monkeypatch: pytest.MonkeyPatch, policy_after: float | None) -> Cluster:
    clock = FakeTime()
    monkeypatch.setattr(resources, "time", clock)
    cluster = Cluster(clock, policy_after)
    handler: Any = gpupool_changed  # kopf's handler type wants every kwarg kopf passes
    handler(
        name="pool",
        spec=SPEC,
        meta={"generation": 1},
        status={},
        memo={"reconciler": Reconciler(cluster)},
    )
    return cluster


def ready(cluster: Cluster) -> dict[str, Any]:
    return next(c for c in cluster.status["conditions"] if c["type"] == "Ready")


def test_a_policy_created_just_after_the_pool_is_no_policy_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = handle(monkeypatch, policy_after=0.5)
    assert (ready(cluster)["status"], ready(cluster)["reason"]) == ("True", "Accepted")
    assert cluster.events == []


def test_a_policy_that_never_comes_is_a_condition_and_one_warning_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = handle(monkeypatch, policy_after=None)
    cond = ready(cluster)
    assert (cond["status"], cond["reason"]) == ("False", "PolicyNotFound")
    assert "ScalingPolicy 'default', which does not exist" in cond["message"]
    assert cluster.events == [("pool", "PolicyNotFound", "Warning")]
