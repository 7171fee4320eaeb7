"""Leader election on a coordination.k8s.io Lease: only the holder acts.

kopf's peering pauses watch handlers but keeps timers and daemons running (nolar/kopf
discussion 1003), so the reconcile loop asks this lease before every tick instead.

Time, as client-go's leader election measures it: replicas run on different machines whose
wall clocks disagree, so a candidate never compares the holder's ``renewTime`` with its own
clock. It notes, on its own monotonic clock, when it first saw the current record, and takes
the lease only after the record has stayed unchanged for the lease's duration. The holder,
for its part, acts only until one duration after it *sent* its last successful renewal, so
a holder whose renewal is late stops acting before any candidate can take over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.errors import Conflict, NotFound
from hybridgpu.models.timestamps import format_rfc3339

log = logging.getLogger(__name__)


def _micro(epoch_seconds: float) -> str:
    return format_rfc3339(epoch_seconds, fraction=True)


def holder_may_take(
    holder: str | None, seen_since: float, duration_seconds: float, me: str, now: float
) -> bool:
    """Whether ``me`` may hold a lease whose record (held by ``holder``) has stayed unchanged
    since ``seen_since`` on ``me``'s own monotonic clock (``now`` on the same clock)."""
    if not holder or holder == me:
        return True
    return now - seen_since > duration_seconds


class LeaderLease:
    """One Lease; ``acquire`` takes or renews it and says whether we hold it now."""

    def __init__(
        self,
        cluster: KubeCluster,
        namespace: str,
        name: str,
        identity: str,
        duration_seconds: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_seconds = duration_seconds
        self._held: dict[str, Any] | None = None
        """The Lease as we last wrote it while holding it: renewed from it without reading
        it first (one request a tick, not two); a Conflict means someone else wrote it."""
        self.monotonic = monotonic
        self._valid_until = float("-inf")
        """Monotonic time until which we may act: one duration after the request of our last
        successful write was sent."""
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        """Another holder's record as we last read it, and when (monotonic) it first looked
        like that."""
        self._lock = threading.Lock()
        self._leading = False

    def held(self) -> bool:
        """Whether we may still act: we hold the lease and no candidate can have taken it."""
        return self.monotonic() < self._valid_until

    def acquire(self, now: float) -> bool:
        """Take or renew the lease at ``now`` (wall time, written as ``renewTime``); False
        when another live holder has it. Thread-safe: the renewal runs on a thread of its own
        while ticks read :meth:`held`, which stays true while a renewal is in flight (the
        last one still bounds it) and turns false the moment one fails or finds the lease
        taken."""
        with self._lock:
            sent = self.monotonic()
            try:
                leading = self._acquire(now, sent)
            except BaseException:
                self._valid_until = float("-inf")
                self._says(leading=False)
                raise
            if not leading:
                self._valid_until = float("-inf")
            self._says(leading)
            return leading

    def _says(self, leading: bool) -> None:
        """Log when this replica starts or stops leading (what an SRE looks for first)."""
        if leading != self._leading:
            self._leading = leading
            if leading:
                log.info(
                    "leading: holds the Lease %s/%s as %s", self.namespace, self.name, self.identity
                )
            else:
                log.warning(
                    "not leading: the Lease %s/%s is held by another replica or "
                    "could not be renewed",
                    self.namespace,
                    self.name,
                )

    def _acquire(self, now: float, sent: float) -> bool:
        held, self._held = self._held, None
        if held is not None:
            spec = (held.get("spec") or {}) | {"renewTime": _micro(now)}
            try:
                self._keep(
                    self.cluster.replace_lease(self.namespace, self.name, held | {"spec": spec})
                )
                return self._holding(sent)
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
            return self._holding(sent)
        old = lease.get("spec") or {}
        holder = old.get("holderIdentity")
        record = (
            holder,
            old.get("renewTime"),
            old.get("acquireTime"),
            old.get("leaseDurationSeconds"),
            old.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, sent
        duration = max(self.duration_seconds, float(old.get("leaseDurationSeconds") or 0))
        if not holder_may_take(holder, self._observed_at, duration, self.identity, sent):
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
        return self._holding(sent)

    def _holding(self, sent: float) -> bool:
        self._observed = None
        self._valid_until = sent + self.duration_seconds
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
