"""A tick that hangs on a call says which call: after SLOW_TICK_SECONDS the operator logs
the tick thread's stack, again every as long until the tick ends (a CI run once saw a loop
stop ticking after an etcd restart, with nothing in the log to say where it was)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import cast

import pytest
from tests.support.fake_cluster import FakeCluster

from hybridgpu.handlers import loop
from hybridgpu.handlers.loop import Reconciler, TickResult
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.metrics.exported import ExportedMetrics

pytestmark = pytest.mark.unit


class Reports(logging.Handler):
    """The watchdog's reports as they are logged; a test waits on them, never on a clock."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self._logged = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("the tick of "):
            with self._logged:
                self.messages.append(message)
                self._logged.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[str]:
        with self._logged:
            reported = self._logged.wait_for(lambda: len(self.messages) >= count, timeout)
        assert reported, f"{len(self.messages)} of {count} reports after {timeout:.0f}s"
        return list(self.messages)


@pytest.fixture
def reports() -> Iterator[Reports]:
    handler = Reports()
    logger = logging.getLogger(loop.__name__)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def reconciler() -> Reconciler:
    return Reconciler(
        cast(KubeCluster, FakeCluster()),
        OperatorOptions(identity="test"),
        metrics=ExportedMetrics(),
    )


def join_watchdogs() -> None:
    """Wait for every tick's watchdog thread to end (it ends with its tick)."""
    for thread in threading.enumerate():
        if thread.name.startswith("tick-watchdog-"):
            thread.join(10)
            assert not thread.is_alive(), f"{thread.name} outlived its tick"


def test_a_hung_tick_logs_where_it_hangs_until_it_ends(
    monkeypatch: pytest.MonkeyPatch, reports: Reports
) -> None:
    monkeypatch.setattr(loop, "SLOW_TICK_SECONDS", 0.05)
    made = reconciler()
    release = threading.Event()

    def a_call_that_does_not_return() -> None:
        release.wait(30)

    def tick(policy_name: str) -> TickResult:
        a_call_that_does_not_return()
        return TickResult(policy=policy_name, leader=False)

    monkeypatch.setattr(made, "_tick", tick)
    ticking = threading.Thread(target=made.tick, args=("gpu",))
    ticking.start()
    try:
        stacks = reports.wait_for(2)  # reported again while it still hangs
        assert stacks[0].startswith("the tick of gpu has run for")
        assert "a_call_that_does_not_return" in stacks[0]
        assert "release.wait(30)" in stacks[0]
    finally:
        release.set()
        ticking.join(10)
    join_watchdogs()


def test_a_quick_tick_logs_nothing(monkeypatch: pytest.MonkeyPatch, reports: Reports) -> None:
    made = reconciler()
    monkeypatch.setattr(made, "_tick", lambda name: TickResult(policy=name, leader=False))
    made.tick("gpu")
    join_watchdogs()  # the watchdog ended with the tick, having said nothing
    assert reports.messages == []
