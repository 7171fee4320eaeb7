"""OperatorOptions.freeze_heap: after a tick, the heap is collected and frozen once per sync
of the Nodes' and pods' watch caches (not after every tick), and never without the option
or without a watch cache."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.support.fake_cluster import FakeCluster

from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cache import Counters
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.metrics.exported import ExportedMetrics

pytestmark = pytest.mark.unit


def reflector(syncs: int) -> Any:
    return SimpleNamespace(counters=Counters(syncs=syncs))


def reconciler(freeze: bool, reads: Any) -> Reconciler:
    options = OperatorOptions(identity="test", freeze_heap=freeze)
    made = Reconciler(cast(KubeCluster, FakeCluster()), options, metrics=ExportedMetrics())
    made.reads = reads
    return made


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def collect(*args: Any) -> int:
        calls.append("collect")
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    return calls


def test_frozen_once_per_sync_of_nodes_and_pods(frozen: list[str]) -> None:
    reflectors = {"nodes": reflector(1), "pods": reflector(1), "jobs": reflector(1)}
    made = reconciler(True, SimpleNamespace(reflectors=reflectors))
    made._freeze_heap()
    assert frozen == ["collect", "freeze"]
    made._freeze_heap()
    reflectors["jobs"] = reflector(5)  # a small kind synced again: not worth a collection
    made._freeze_heap()
    assert frozen == ["collect", "freeze"]
    reflectors["pods"] = reflector(2)  # 410 Gone: every pod is a new object
    made._freeze_heap()
    made._freeze_heap()
    assert frozen == ["collect", "freeze"] * 2


def test_never_frozen_without_the_option_or_a_watch_cache(frozen: list[str]) -> None:
    reflectors = {"nodes": reflector(1), "pods": reflector(1)}
    reconciler(False, SimpleNamespace(reflectors=reflectors))._freeze_heap()
    reconciler(True, FakeCluster())._freeze_heap()
    assert frozen == []


def test_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYBRIDGPU_FREEZE_HEAP", raising=False)
    assert OperatorOptions.from_env().freeze_heap
    monkeypatch.setenv("HYBRIDGPU_FREEZE_HEAP", "0")
    assert not OperatorOptions.from_env().freeze_heap
