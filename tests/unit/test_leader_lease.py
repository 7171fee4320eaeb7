"""The leader Lease renews with one request a tick (no read first) while nobody else wrote it,
and still sees a takeover or a deletion (the renewal is conditional on the version it wrote)."""

from __future__ import annotations

from typing import Any, cast

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.lease import LeaderLease
from support.fake_cluster import FakeCluster


class CountingCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def read_lease(self, namespace: str, name: str) -> Any:
        self.calls.append("read")
        return super().read_lease(namespace, name)

    def create_lease(self, namespace: str, body: Any) -> Any:
        self.calls.append("create")
        return super().create_lease(namespace, body)

    def replace_lease(self, namespace: str, name: str, body: Any) -> Any:
        self.calls.append("replace")
        return super().replace_lease(namespace, name, body)


def lease(cluster: FakeCluster, identity: str) -> LeaderLease:
    return LeaderLease(cast(KubeCluster, cluster), "ns", "lease", identity, 15.0)


def test_the_holder_renews_with_one_request_a_tick() -> None:
    cluster = CountingCluster()
    me = lease(cluster, "me")
    assert me.acquire(100.0)
    assert cluster.calls == ["read", "create"]
    cluster.calls.clear()
    for t in (110.0, 120.0, 130.0):
        assert me.acquire(t)
    assert cluster.calls == ["replace"] * 3
    stored = cluster.leases[("ns", "lease")]
    assert stored["spec"]["holderIdentity"] == "me"
    assert stored["spec"]["renewTime"].startswith("1970-01-01T00:02:10")


def test_a_takeover_after_expiry_is_seen_by_the_old_holder() -> None:
    cluster = CountingCluster()
    me, other = lease(cluster, "me"), lease(cluster, "other")
    assert me.acquire(100.0)
    assert not other.acquire(105.0)  # my lease is live
    assert other.acquire(200.0)  # expired: taken over
    cluster.calls.clear()
    assert not me.acquire(201.0)  # my renewal conflicts; the read shows a live holder
    assert cluster.calls == ["replace", "read"]
    assert cluster.leases[("ns", "lease")]["spec"]["holderIdentity"] == "other"
    assert not me.acquire(202.0)
    assert other.acquire(203.0)


def test_a_deleted_lease_is_created_again() -> None:
    cluster = CountingCluster()
    me = lease(cluster, "me")
    assert me.acquire(100.0)
    del cluster.leases[("ns", "lease")]
    cluster.calls.clear()
    assert me.acquire(110.0)
    assert cluster.calls == ["replace", "read", "create"]
    assert cluster.leases[("ns", "lease")]["spec"]["holderIdentity"] == "me"
