"""The leader Lease renews with one request a tick (no read first) while nobody else wrote it,
and still sees a takeover or a deletion (the renewal is conditional on the version it wrote).
Expiry is measured on each replica's own monotonic clock, never against another replica's
wall clock, and a holder whose renewal fails stops acting before anyone can take over."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.lease import LeaderLease
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models.actions import Plan, ScaleUp
from support import builders
from support.controlplane import wait_until
from support.fake_cluster import FakeCluster


class CountingCluster(FakeCluster):
    """Counts Lease requests, and which thread made each (``by_thread``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.by_thread: list[tuple[int, str]] = []

    def _count(self, verb: str) -> None:
        self.calls.append(verb)
        self.by_thread.append((threading.get_ident(), verb))

    def read_lease(self, namespace: str, name: str) -> Any:
        self._count("read")
        return super().read_lease(namespace, name)

    def create_lease(self, namespace: str, body: Any) -> Any:
        self._count("create")
        return super().create_lease(namespace, body)

    def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
        self._count("replace")
        return super().replace_lease(namespace, name, body)


class Clock:
    """One replica's monotonic clock, set by the test."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def lease(cluster: FakeCluster, identity: str, clock: Clock | None = None) -> LeaderLease:
    return LeaderLease(
        cast(KubeCluster, cluster), "ns", "lease", identity, 15.0, monotonic=clock or Clock()
    )


def at(me: LeaderLease, t: float, *, wall_skew: float = 0.0) -> bool:
    """``me`` acquires at monotonic ``t``; its wall clock is ``t + wall_skew``."""
    assert isinstance(me.monotonic, Clock)
    me.monotonic.t = t
    return me.acquire(t + wall_skew)


def test_the_holder_renews_with_one_request_a_tick() -> None:
    cluster = CountingCluster()
    me = lease(cluster, "me")
    assert at(me, 100.0)
    assert cluster.calls == ["read", "create"]
    cluster.calls.clear()
    for t in (110.0, 120.0, 130.0):
        assert at(me, t)
    assert cluster.calls == ["replace"] * 3
    stored = cluster.leases[("ns", "lease")]
    assert stored["spec"]["holderIdentity"] == "me"
    assert stored["spec"]["renewTime"].startswith("1970-01-01T00:02:10")


def test_a_takeover_after_expiry_is_seen_by_the_old_holder() -> None:
    cluster = CountingCluster()
    me, other = lease(cluster, "me"), lease(cluster, "other")
    assert at(me, 100.0)
    assert not at(other, 105.0)  # my lease is live
    assert not at(other, 115.0)  # unchanged for 10 s of other's clock: still live
    assert at(other, 121.0)  # unchanged for 16 s > 15 s: expired, taken over
    cluster.calls.clear()
    assert not at(me, 201.0)  # my renewal conflicts; the read shows a live holder
    assert cluster.calls == ["replace", "read"]
    assert not me.held()
    assert cluster.leases[("ns", "lease")]["spec"]["holderIdentity"] == "other"
    assert not at(me, 202.0)
    assert at(other, 203.0)


def test_a_deleted_lease_is_created_again() -> None:
    cluster = CountingCluster()
    me = lease(cluster, "me")
    assert at(me, 100.0)
    del cluster.leases[("ns", "lease")]
    cluster.calls.clear()
    assert at(me, 110.0)
    assert cluster.calls == ["replace", "read", "create"]
    assert cluster.leases[("ns", "lease")]["spec"]["holderIdentity"] == "me"


@pytest.mark.parametrize("skew", [-3600.0, -20.0, 20.0, 3600.0])
def test_a_live_holder_is_never_taken_over_whatever_the_clocks_say(skew: float) -> None:
    """The holder's wall clock is ``skew`` seconds off the candidate's: its renewTime looks
    an hour old (or an hour ahead). Judged by renewTime against the candidate's clock, a
    live holder was taken over at the first look (two leaders, each launching); judged by
    how long the record stayed unchanged, never while the holder renews."""
    cluster = FakeCluster()
    holder, candidate = lease(cluster, "holder"), lease(cluster, "candidate")
    for t in range(100, 400, 5):
        assert at(holder, float(t), wall_skew=skew)
        assert not at(candidate, t + 1.0)
    # The holder stops renewing: the candidate takes over one duration after it last saw
    # the record change, not earlier.
    assert not at(candidate, 396.0 + 14.0)
    assert at(candidate, 396.0 + 16.0)


def test_a_candidate_that_just_started_waits_one_duration() -> None:
    """A replica that starts after the holder died has not seen the record change: it waits
    one full duration from its first look (client-go's rule) rather than trusting clocks."""
    cluster = FakeCluster()
    assert at(lease(cluster, "dead"), 100.0)
    late = lease(cluster, "late")
    assert not at(late, 5000.0)
    assert not at(late, 5014.0)
    assert at(late, 5016.0)


def test_the_holder_may_act_only_until_one_duration_after_its_last_renewal_was_sent() -> None:
    cluster = FakeCluster()
    me = lease(cluster, "me")
    assert not me.held()
    assert at(me, 100.0)
    me.monotonic.t = 114.0  # type: ignore[attr-defined]
    assert me.held()
    me.monotonic.t = 115.5  # type: ignore[attr-defined]
    assert not me.held()  # a candidate may take over from here: stop acting


def test_a_failed_renewal_stops_acting_at_once() -> None:
    class Down(FakeCluster):
        def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
            raise ConnectionError("apiserver unreachable")

    cluster = Down()
    me = lease(cluster, "me")
    assert at(me, 100.0)  # created
    with pytest.raises(ConnectionError):
        at(me, 105.0)
    assert not me.held()


def test_the_executor_stops_acting_once_the_lease_may_have_expired() -> None:
    """A tick that outlives its lease (a slow apiserver, a long plan) leaves the rest of its
    plan to the next leader instead of launching beside it."""
    launched: list[str] = []

    class Machines:
        def scale_up(self, pool: str, nodes: int) -> None:
            launched.append(pool)

    answers = iter([True, False, True])
    executor = PlanExecutor(cast(KubeCluster, FakeCluster()), cast(Any, Machines()), lambda: 0.0)
    plan = Plan(
        decided_at=builders.NOW,
        actions=tuple(ScaleUp(pool=p, nodes=1, reason="pending") for p in ("a", "b", "c")),
    )
    result = executor.execute(
        plan, builders.snapshot([]), {}, policy="p", dry_run=False, may_act=lambda: next(answers)
    )
    assert launched == ["a"]
    assert any("2 action(s) left to the next leader" in e for e in result.errors), result.errors


def test_a_renewal_in_flight_keeps_acting_and_a_lost_lease_stops_it_at_once() -> None:
    """The renewal runs beside the ticks: while its request is in flight the holder still
    acts (its last renewal bounds it); once the request finds the lease taken, it stops."""
    entered, answer = threading.Event(), threading.Event()

    class Slow(CountingCluster):
        def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
            entered.set()
            answer.wait(10)
            return super().replace_lease(namespace, name, body)

    cluster = Slow()
    me, other = lease(cluster, "me"), lease(cluster, "other")
    assert at(me, 100.0)
    renewal = threading.Thread(target=at, args=(me, 105.0))
    renewal.start()
    assert entered.wait(10)
    assert me.held()  # in flight: still the holder
    # Meanwhile another replica wrote the lease (as if ours had expired on its clock).
    stored = cluster.leases[("ns", "lease")]
    stored["spec"] |= {"holderIdentity": "other", "renewTime": "1970-01-01T00:02:00.000000Z"}
    stored["metadata"]["resourceVersion"] = "99"
    answer.set()
    renewal.join(10)
    assert not me.held()  # the renewal conflicted and the read shows a live holder
    assert not other.held()


def test_ticks_make_no_lease_request_while_the_renewal_thread_holds_it() -> None:
    cluster = CountingCluster()
    cluster.add_policy("default", {})
    # A lease long enough that a loaded machine (the renewal thread starved for seconds) does
    # not let it lapse between renewals; the renewal thread's own requests may fall inside a
    # tick, so requests are told apart by the thread that made them.
    options = OperatorOptions(identity="me", lease_seconds=9)
    reconciler = Reconciler(cast(KubeCluster, cluster), options, metrics=ExportedMetrics())
    reconciler.start_lease_renewal()
    ticking = threading.get_ident()
    try:
        wait_until(reconciler.lease.held, timeout_seconds=30, what="the lease taken")
        for _ in range(3):
            cluster.by_thread.clear()
            assert reconciler.tick("default").leader
            assert [verb for who, verb in cluster.by_thread if who == ticking] == []
        # The thread renews on its own, a third of the duration apart.
        cluster.calls.clear()
        wait_until(lambda: cluster.calls.count("replace") >= 2, timeout_seconds=30, what="renewals")
        assert {who for who, _ in cluster.by_thread} - {ticking}, "renewed by another thread"
        assert reconciler.lease.held()
    finally:
        reconciler.stop_lease_renewal()


def test_starting_and_stopping_to_lead_is_logged_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = FakeCluster()
    me, other = lease(cluster, "me"), lease(cluster, "other")
    with caplog.at_level("INFO", logger="hybridgpu.kube.lease"):
        assert at(me, 100.0)
        assert at(me, 105.0)
        assert not at(other, 106.0)
        assert at(other, 122.0)  # unchanged for 16 s: taken over
        assert not at(me, 123.0)
        assert not at(me, 124.0)
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for _, level, _ in lines] == ["INFO", "INFO", "WARNING"], lines
    assert "as me" in lines[0][2] and "as other" in lines[1][2]
