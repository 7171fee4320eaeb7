"""OperatorOptions.freeze_heap: after a tick, the heap is collected and frozen once per sync
of the Nodes' and pods' watch caches (not after every tick), and never without the option
or without a watch cache."""

from __future__ import annotations

import gc
from pathlib import Path
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


def test_hybridgpu_run_takes_what_its_flags_do_not_set_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The options ``hybridgpu run`` hands kopf: the freeze (and the other environment-only
    settings) as the environment says; the first 5,000-node run after the freeze landed had
    none, because the command built its options field by field and left this one out."""
    import kopf

    from hybridgpu.cli import main

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("HYBRIDGPU_WATCH_SECONDS", "7")
    monkeypatch.setenv("HYBRIDGPU_DEBOUNCE_SECONDS", "0.5")
    ran: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: ran.update(kwargs))
    for freeze, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("HYBRIDGPU_FREEZE_HEAP", freeze)
        assert main(["run", "--kubeconfig", str(kubeconfig), "--lease-seconds", "9"]) == 0
        options = ran["memo"]["options"]
        assert options.freeze_heap is expected
        assert (options.watch_seconds, options.trigger_debounce_seconds) == (7, 0.5)
        assert options.lease_seconds == 9
