"""Leader election on a coordination.k8s.io Lease: only the holder acts.

kopf's peering pauses watch handlers but keeps timers and daemons running (nolar/kopf
discussion 1003), so the reconcile loop asks this lease before every tick instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import epoch_of
from hybridgpu.kube.errors import Conflict, NotFound


def _micro(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def holder_may_take(
    holder: str | None, renewed_at: float | None, duration_seconds: float, me: str, now: float
) -> bool:
    """Whether ``me`` may hold a lease last renewed by ``holder`` at ``renewed_at``."""
    if not holder or holder == me:
        return True
    return renewed_at is None or now - renewed_at > duration_seconds


class LeaderLease:
    """One Lease; ``acquire`` takes or renews it and says whether we hold it now."""

    def __init__(
        self,
        cluster: KubeCluster,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: float = 15.0,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_seconds = duration_seconds
        self._held: dict[str, Any] | None = None
        """The Lease as we last wrote it while holding it: renewed from it without reading
        it first (one request a tick, not two); a Conflict means someone else wrote it."""

    def acquire(self, now: float) -> bool:
        """Take or renew the lease at ``now``; False when another live holder has it."""
        held, self._held = self._held, None
        if held is not None:
            spec = (held.get("spec") or {}) | {"renewTime": _micro(now)}
            try:
                self._keep(
                    self.cluster.replace_lease(self.namespace, self.name, held | {"spec": spec})
                )
                return True
            except (Conflict, NotFound):
                pass  # written by someone else since, or deleted: read it and decide
        lease = self.cluster.read_lease(self.namespace, self.name)
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration_seconds)),
            "renewTime": _micro(now),
        }
        if lease is None:
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec | {"acquireTime": _micro(now)},
            }
            try:
                self._keep(self.cluster.create_lease(self.namespace, body))
            except Conflict:
                return False
            return True
        old = lease.get("spec") or {}
        holder = old.get("holderIdentity")
        renewed = epoch_of(old.get("renewTime") or old.get("acquireTime"))
        if not holder_may_take(holder, renewed, self.duration_seconds, self.identity, now):
            return False
        if holder != self.identity:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + 1
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": old | spec,
        }
        try:
            self._keep(self.cluster.replace_lease(self.namespace, self.name, body))
        except Conflict:
            return False
        return True

    def _keep(self, stored: object) -> None:
        """Remember the Lease the apiserver stored, when it said which version it is."""
        if not isinstance(stored, dict):
            return
        meta = stored.get("metadata")
        if isinstance(meta, dict) and meta.get("resourceVersion"):
            self._held = {
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": meta["resourceVersion"],
                },
                "spec": dict(stored.get("spec") or {}),
            }
