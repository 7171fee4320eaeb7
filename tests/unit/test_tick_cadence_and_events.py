"""Two small fixes of issue 17: the reconcile interval runs start to start, and an action done
again within a minute is recorded again (its Event's count goes up) instead of dropped."""

from __future__ import annotations

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
        self.stopped = False

    def __bool__(self) -> bool:
        return self.stopped

    def wait(self, timeout: float | None = None) -> bool:
        return self.stopped


class FakeMonotonic:
    """Seconds that move only when a tick runs or the loop waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class NeverWoken:
    """The loop's wake event: nothing wakes it, waiting lets the fake time pass."""

    def __init__(self, clock: FakeMonotonic) -> None:
        self.clock = clock

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.now += timeout or 0.0
        return False

    def clear(self) -> None:
        return None


class SlowReconciler:
    """Ticks that take ``tick_seconds`` of fake time; records when each tick started."""

    def __init__(self, tick_seconds: float, stopped: Stopped, ticks: int) -> None:
        self.tick_seconds = tick_seconds
        self.monotonic = FakeMonotonic()
        self.starts: list[float] = []
        self.stopped = stopped
        self.ticks = ticks
        self.wake = NeverWoken(self.monotonic)
        self.options = type("Options", (), {"trigger_debounce_seconds": 0.0})()

    def wake_event(self, policy: str) -> NeverWoken:
        return self.wake

    def forget_wake_event(self, policy: str) -> None:
        return None

    def tick(self, policy: str) -> Any:
        self.starts.append(self.monotonic())
        self.monotonic.now += self.tick_seconds
        if len(self.starts) >= self.ticks:
            self.stopped.stopped = True
        return type("Result", (), {"errors": []})()


@pytest.mark.parametrize(
    ("tick_seconds", "want_gap_seconds"),
    [(0.6, 1.0), (1.5, 1.5)],
    ids=["a tick shorter than the interval", "a tick longer than the interval"],
)
def test_the_interval_runs_from_tick_start_to_tick_start(
    tick_seconds: float, want_gap_seconds: float
) -> None:
    """With a 1 s interval, 0.6 s ticks start every 1 s (not every 1.6 s); a 1.5 s tick is
    followed by the next one at once."""
    stopped = Stopped()
    reconciler = SlowReconciler(tick_seconds, stopped, ticks=3)
    daemon: Any = reconcile_policy  # kopf's handler type wants every kwarg kopf passes
    daemon(
        name="default",
        spec={"interval": "1s"},
        stopped=stopped,
        memo={"reconciler": reconciler},
        logger=None,
    )
    gaps = [b - a for a, b in zip(reconciler.starts, reconciler.starts[1:], strict=False)]
    assert gaps == pytest.approx([want_gap_seconds] * 2)


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
