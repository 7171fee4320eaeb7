"""The Prometheus outage scenario: the operator goes blind while a cloud node turns idle.

Shared by tests/e2e/test_faults_prometheus.py (a short outage) and bench/prometheus_outage.py
(10 minutes, figures in docs/benchmarks.md). It takes the e2e ``Cluster`` and ``Operators``
builders (tests/e2e/conftest.py), a Prometheus of its own (it is stopped and started again)
and the fake DCGM exporter it scrapes:

- an elastic pool (kwok provider) with one node, busy with a Job and at 90% in DCGM;
- the operator ticks with Prometheus up (``MetricsAvailable`` True), then Prometheus is
  stopped; the operator reports ``MetricsAvailable`` False;
- the Job ends during the outage, so the node is idle and, past ``idleFor``, would be
  released if the operator could see;
- the outage lasts until the operator's own ``lastTick`` is ``outage_seconds`` after the
  stop and ``idleFor`` plus two intervals after the Job ended (never a sleep);
- Prometheus comes back on its port with its TSDB; the operator catches up: metrics
  available again, the idle node released.

A poller records when the node was first cordoned or gone; a release before Prometheus
answered again is a release while blind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes.client.rest import ApiException

from support.controlplane import gpu_job, wait_until
from support.prometheus import FakeDCGM, Prometheus, start_prometheus_again, stop_prometheus

CRITICALITY = "hybridgpu.io/criticality"


@dataclass
class OutageResult:
    outage_seconds: float
    """From Prometheus stopped to Prometheus ready again."""
    ticks_while_blind: int
    """Distinct ``lastTick`` values the operator wrote while Prometheus was down."""
    blind_condition_seen: bool
    """The policy's MetricsAvailable condition was False during the outage."""
    released_while_blind: list[str]
    """What happened to the idle node before Prometheus answered again (should be none)."""
    idle_while_blind_seconds: float
    """How long the node was idle (its Job done) before Prometheus came back."""
    metrics_back_seconds: float
    """From Prometheus ready to MetricsAvailable True on the policy."""
    released_after_seconds: float
    """From Prometheus ready to the idle node gone."""
    operator_alive: bool
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "outage_seconds": round(self.outage_seconds, 1),
            "ticks_while_blind": self.ticks_while_blind,
            "blind_condition_seen": self.blind_condition_seen,
            "released_while_blind": len(self.released_while_blind),
            "idle_while_blind_seconds": round(self.idle_while_blind_seconds, 1),
            "metrics_back_seconds": round(self.metrics_back_seconds, 1),
            "released_after_seconds": round(self.released_after_seconds, 1),
            "operator_alive": self.operator_alive,
        }


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class NodeFate:
    """Polls one node: when (monotonic) it was first seen cordoned or gone."""

    def __init__(self, core_api: Any, node: str) -> None:
        self.core_api = core_api
        self.node = node
        self.events: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def first(self) -> tuple[float, str] | None:
        return self.events[0] if self.events else None

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                found = self.core_api.read_node(self.node)
            except ApiException as exc:
                if exc.status == 404:
                    self.events.append((time.monotonic(), "deleted"))
                    return
                continue
            cordoned = any(what == "cordoned" for _, what in self.events)
            if found.spec.unschedulable and not cordoned:
                self.events.append((time.monotonic(), "cordoned"))


def run_prometheus_outage(
    cluster: Any,
    operators: Any,
    prometheus: Prometheus,
    dcgm: FakeDCGM,
    *,
    outage_seconds: float,
    idle_for_seconds: int = 6,
    interval_seconds: int = 2,
    log: Callable[[str], None] = lambda _: None,
) -> OutageResult:
    """One outage on ``cluster``; Prometheus is running again when this returns."""
    policy = cluster.policy(
        interval=f"{interval_seconds}s",
        prometheus={"url": prometheus.url, "window": "5s", "staleAfter": "10s"},
    )
    elastic = cluster.pool(
        "elastic",
        tier="elastic",
        policy=policy,
        per_node=4,
        max_nodes=2,
        idle_for=f"{idle_for_seconds}s",
    )
    (node,) = cluster.cloud_nodes(elastic, 1)
    dcgm.set_utilization(node, [90.0] * 4)
    cluster.kube.create_job(
        gpu_job(
            "train",
            gpus=4,
            pool=elastic,
            run_duration="30m",
            labels={CRITICALITY: "standard"},
        )
    )
    wait_until(
        lambda: _running(cluster, "train"),
        timeout_seconds=60,
        what="the Job running on the elastic node",
    )
    operator = operators.start()
    cluster.wait_ticking(policy, timeout_seconds=180)
    wait_until(
        lambda: _metrics_available(cluster, policy) is True,
        timeout_seconds=60,
        what="MetricsAvailable True",
    )

    fate = NodeFate(cluster.kube.core, node)
    fate.start()
    stopped_at = time.monotonic()
    stopped_epoch = time.time()
    stop_prometheus(prometheus)
    log(f"Prometheus stopped at {stopped_epoch:.0f}")
    blind_seen = False
    ticks: set[str] = set()

    def blind() -> bool:
        nonlocal blind_seen
        tick = cluster.policy_status(policy).get("lastTick")
        if tick and (epoch(tick) or 0) > stopped_epoch:
            ticks.add(tick)
        if _metrics_available(cluster, policy) is False:
            blind_seen = True
        return blind_seen

    wait_until(blind, timeout_seconds=60, what="MetricsAvailable False")
    # The work ends while the operator is blind (its Job is deleted): the node is idle from
    # then on.
    cluster.kube.batch.delete_namespaced_job(
        "train", cluster.kube.namespace, propagation_policy="Foreground"
    )
    wait_until(lambda: not cluster.job_pods("train"), timeout_seconds=60, what="the Job's pod gone")
    idle_epoch = time.time()
    dcgm.set_utilization(node, [0.0] * 4)
    log(f"node {node} idle at {idle_epoch:.0f}")

    def outage_over() -> bool:
        blind()
        tick = epoch(cluster.policy_status(policy).get("lastTick")) or 0.0
        return (
            tick >= stopped_epoch + outage_seconds
            and tick >= idle_epoch + idle_for_seconds + 2 * interval_seconds
        )

    wait_until(outage_over, timeout_seconds=outage_seconds + 300, what="the outage's last tick")
    cluster.wait_ticks(policy, 2, timeout_seconds=120)
    blind()
    idle_blind = time.time() - idle_epoch
    start_prometheus_again(prometheus)
    back_at = time.monotonic()
    log(f"Prometheus back after {back_at - stopped_at:.1f}s")
    released_while_blind = [what for at, what in fate.events if at < back_at]
    wait_until(
        lambda: _metrics_available(cluster, policy) is True,
        timeout_seconds=120,
        what="MetricsAvailable True again",
    )
    metrics_back = time.monotonic() - back_at
    wait_until(
        lambda: any(w == "deleted" for _, w in fate.events),
        timeout_seconds=180,
        what="the idle node released",
    )
    released_after = time.monotonic() - back_at
    fate.stop()
    return OutageResult(
        outage_seconds=back_at - stopped_at,
        ticks_while_blind=len(ticks),
        blind_condition_seen=blind_seen,
        released_while_blind=released_while_blind,
        idle_while_blind_seconds=idle_blind,
        metrics_back_seconds=metrics_back,
        released_after_seconds=released_after,
        operator_alive=operator.alive(),
    )


def _running(cluster: Any, job: str) -> bool:
    return any(p.status.phase == "Running" for p in cluster.job_pods(job))


def _metrics_available(cluster: Any, policy: str) -> bool | None:
    cond = cluster.condition(policy, "MetricsAvailable")
    if cond is None:
        return None
    return bool(cond.get("status") == "True")
