"""A tick that hangs on a call says which call: after SLOW_TICK_SECONDS the operator logs
the tick thread's stack, again every as long until the tick ends (a CI run once saw a loop
stop ticking after an etcd restart, with nothing in the log to say where it was)."""

from __future__ import annotations

import logging
import threading
import time
from typing import cast

import pytest
from tests.support.fake_cluster import FakeCluster

from hybridgpu.handlers import loop
from hybridgpu.handlers.loop import Reconciler, TickResult
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.metrics.exported import ExportedMetrics

pytestmark = pytest.mark.unit


def until(condition: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tick-watchdog-")]


def test_a_hung_tick_logs_where_it_hangs_until_it_ends(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(loop, "SLOW_TICK_SECONDS", 0.05)
    made = Reconciler(
        cast(KubeCluster, FakeCluster()),
        OperatorOptions(identity="test"),
        metrics=ExportedMetrics(),
    )
    release = threading.Event()

    def a_call_that_does_not_return() -> None:
        release.wait(30)

    def tick(policy_name: str) -> TickResult:
        a_call_that_does_not_return()
        return TickResult(policy=policy_name, leader=False)

    monkeypatch.setattr(made, "_tick", tick)
    caplog.set_level(logging.WARNING, logger=loop.__name__)
    ticking = threading.Thread(target=made.tick, args=("gpu",))
    ticking.start()
    try:

        def stacks() -> list[str]:
            return [r.getMessage() for r in caplog.records if "the tick of gpu" in r.getMessage()]

        until(lambda: len(stacks()) >= 2, "two reports of the hung tick")
        assert "a_call_that_does_not_return" in stacks()[0]
        assert "release.wait(30)" in stacks()[0]
    finally:
        release.set()
        ticking.join(10)
    until(lambda: not watchdogs(), "the watchdog to stop with its tick")


def test_a_quick_tick_logs_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made = Reconciler(
        cast(KubeCluster, FakeCluster()),
        OperatorOptions(identity="test"),
        metrics=ExportedMetrics(),
    )
    monkeypatch.setattr(made, "_tick", lambda name: TickResult(policy=name, leader=False))
    caplog.set_level(logging.WARNING, logger=loop.__name__)
    made.tick("gpu")
    until(lambda: not watchdogs(), "the watchdog to stop with its tick")
    assert not [r for r in caplog.records if "the tick of" in r.getMessage()]
