"""Two small fixes of issue 17: the reconcile interval runs start to start, and an action done
again within a minute is recorded again (its Event's count goes up) instead of dropped."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest
from tests.support import builders
from tests.support.fake_cluster import FakeCluster

from hybridgpu.handlers.reconcile import reconcile_policy
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.models.actions import Blocked, Plan, ScaleUp

pytestmark = pytest.mark.unit


class Stopped:
    """kopf's DaemonStopped as the daemon uses it: truthiness and wait()."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)


class SlowReconciler:
    """Ticks that take ``tick_seconds``; records when each tick started (monotonic)."""

    def __init__(self, tick_seconds: float, stopped: Stopped, ticks: int) -> None:
        self.tick_seconds = tick_seconds
        self.starts: list[float] = []
        self.stopped = stopped
        self.ticks = ticks
        self.wake = threading.Event()
        self.options = type("Options", (), {"trigger_debounce_seconds": 0.0})()

    def wake_event(self, policy: str) -> threading.Event:
        return self.wake

    def forget_wake_event(self, policy: str) -> None:
        return None

    def tick(self, policy: str) -> Any:
        self.starts.append(time.monotonic())
        time.sleep(self.tick_seconds)
        if len(self.starts) >= self.ticks:
            self.stopped.event.set()
        return type("Result", (), {"errors": []})()


def test_the_interval_runs_from_tick_start_to_tick_start() -> None:
    """A 1 s interval with 0.6 s ticks starts a tick every 1 s, not every 1.6 s."""
    stopped = Stopped()
    reconciler = SlowReconciler(0.6, stopped, ticks=3)
    reconcile_policy(
        name="default",
        spec={"interval": "1s"},
        stopped=stopped,
        memo={"reconciler": reconciler},
        logger=None,
    )
    gaps = [b - a for a, b in zip(reconciler.starts, reconciler.starts[1:], strict=False)]
    assert len(gaps) == 2
    assert all(0.95 <= gap < 1.3 for gap in gaps), gaps


def test_an_action_repeated_within_a_minute_is_posted_again_a_persisting_block_is_not() -> None:
    cluster = FakeCluster()
    clock = [builders.NOW]
    executor = PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: clock[0])
    plan = Plan(
        decided_at=builders.NOW,
        actions=(ScaleUp(pool="elastic", nodes=2, reason="2 pending critical pods"),),
        blocked=(
            Blocked(pool="elastic", nodes=1, reason="elastic is at maxNodes=4", cause="max_nodes"),
        ),
    )
    for _ in range(2):
        executor.execute(plan, builders.snapshot([]), {}, policy="default", dry_run=True)
        clock[0] += 10  # the second scale-up of a burst, 10 s later
    reasons = [e["reason"] for e in cluster.events]
    assert reasons.count("ScaleUp") == 2, reasons
    assert reasons.count("ScalingBlocked") == 1, reasons
