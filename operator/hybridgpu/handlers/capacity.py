"""One CapacityProvider per pool, by ``spec.provider.type``, behind the executor's PoolCapacity."""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hybridgpu.cloud.base import (
    CapacityProvider,
    CapacityUnavailable,
    InterruptionNotice,
    ProviderError,
)
from hybridgpu.cloud.clusterapi import ClusterAPIProvider
from hybridgpu.cloud.karpenter import KarpenterProvider
from hybridgpu.cloud.kwok import KwokProvider
from hybridgpu.cloud.static import StaticProvider
from hybridgpu.core.cost import powered
from hybridgpu.models.limits import usable_price_per_hour
from hybridgpu.models.pool import GPUPoolSpec, Tier

log = logging.getLogger(__name__)

REGISTRATION_DEADLINE_SECONDS = 900.0
"""An instance with no Node this long after launch is replaced (Karpenter's default too)."""
REPORT_REPLACED_SECONDS = 3600.0
"""How long a replaced instance keeps its pool's NodesUnhealthy condition True."""
NO_CAPACITY_BACKOFF_SECONDS = 300.0
"""How long a pool whose launch failed for capacity is left out of scale-ups."""
SCALE_UP_BACKOFF_SECONDS = 10.0
"""After a scale-up failed for a retryable reason (throttling, 5xx, a lost connection), the
pool's next scale-up waits this long, doubling with each failure in a row."""
SCALE_UP_BACKOFF_CAP_SECONDS = 300.0
TERMINATED_MEMORY_SECONDS = 7200.0
"""How long an instance this operator terminated is remembered as terminated while the
provider still lists it (EC2 lists a terminated instance for about an hour, and a stale list
may still show it running)."""
NOT_LIVE_STATES = frozenset({"terminating", "terminated"})
"""Instance states that are no capacity and are never terminated again."""


def load_factory(path: str) -> Callable[..., Any]:
    """The object named by ``module:attribute``."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute or "Provider")  # type: ignore[no-any-return]


class Providers:
    """Builds providers lazily, one per provider type (AWS one per region), and remembers
    interruption notices until the node they name is drained."""

    def __init__(
        self,
        fake_factory: str,
        clock: Callable[[], float] = time.time,
        *,
        cluster_name: str = "default",
    ) -> None:
        self._fake_factory = fake_factory
        self.cluster_name = cluster_name
        """The hybridgpu.io/cluster tag of the AWS instances launched and found again."""
        self._clock = clock
        self._by_key: dict[str, CapacityProvider] = {}
        self._lock = threading.Lock()
        self.pools: dict[str, GPUPoolSpec] = {}
        self.notices: dict[str, InterruptionNotice] = {}
        """Open notices by provider ID."""
        self.replaced: dict[str, dict[str, float]] = {}
        """Instances replaced for never registering, by pool, then instance ID: when."""
        self.no_capacity_until: dict[str, float] = {}
        """Pools whose last launch failed for capacity, until when they are not tried."""
        self.scale_up_backoff: dict[str, tuple[int, float]] = {}
        """Pools whose last scale-ups failed: failures in a row, and when to try again."""
        self.terminated: dict[str, dict[str, float]] = {}
        """Instances this operator terminated, by pool, then instance ID: when. A cloud keeps
        listing them for a while (and a stale list in their last state): they are never
        terminated again, replaced, counted or billed."""
        self.gone: dict[str, set[str]] = {}
        """Per pool, provider IDs of instances the last listing showed terminated (by the
        provider's word or because this operator terminated them)."""
        self.decided_from: dict[str, int] = {}
        """Per pool, the provider's target the last snapshot read (``provisioning``): the
        base the next scale-up adds to, so a scale-up is the absolute target decide() meant."""

    def set_pools(self, pools: Mapping[str, GPUPoolSpec]) -> None:
        self.pools = dict(pools)

    def for_spec(self, spec: GPUPoolSpec) -> CapacityProvider:
        kind = spec.provider.type
        key = (
            kind
            if kind != "aws" or spec.provider.aws is None
            else f"aws:{spec.provider.aws.region}"
        )
        with self._lock:
            provider = self._by_key.get(key)
            if provider is None:
                provider = self._build(kind, spec)
                self._by_key[key] = provider
            return provider

    def _build(self, kind: str, spec: GPUPoolSpec) -> CapacityProvider:
        if kind == "static":
            return StaticProvider()
        if kind == "fake":
            factory = load_factory(self._fake_factory)
            try:
                provider: CapacityProvider = factory(clock=self._clock)
            except TypeError:
                provider = factory()
            return provider
        if kind == "kwok":
            return KwokProvider(clock=self._clock)
        if kind == "karpenter":
            return KarpenterProvider(clock=self._clock)
        if kind == "clusterapi":
            return ClusterAPIProvider(clock=self._clock)
        aws = importlib.import_module("hybridgpu.cloud.aws")
        region = spec.provider.aws.region if spec.provider.aws else None
        built: CapacityProvider = aws.AWSProvider(region=region, cluster=self.cluster_name)
        return built

    def all_providers(self) -> list[CapacityProvider]:
        with self._lock:
            return list(self._by_key.values())

    # --------------------------------------------------------- measurements
    def poll_interruptions(self, errors: dict[str, str] | None = None) -> dict[str, float]:
        """Deadlines of announced interruptions by provider ID (notices kept until drained).

        A pool whose provider cannot be built (a wrong module, bad settings) gets its error
        in ``errors`` by pool name; the other pools go on.
        """
        for name, spec in self.pools.items():
            try:
                self.for_spec(spec)
            except Exception as err:
                if errors is not None:
                    errors[name] = f"cannot build the {spec.provider.type} provider: {err}"
        for provider in self.all_providers():
            try:
                for notice in provider.interruptions():
                    if not notice.provider_id:
                        # Matching it to nodes by "" would match every owned node.
                        log.warning(
                            "notice for %s names no provider ID: ignored", notice.instance_id
                        )
                        continue
                    self.notices[notice.provider_id] = notice
            except ProviderError as err:
                log.warning("cannot read interruption notices: %s", err)
        return {pid: n.deadline for pid, n in self.notices.items()}

    def provisioning(self, pool: str, joined_nodes: int) -> int:
        """Capacity on its way to ``pool``: the provider's target minus the pool's Nodes.

        Never a count of listed instances: a cloud lists a launch late (an Auto Scaling
        group once its activity starts), and a scale-up computed from the list doubles.
        """
        spec = self.pools[pool]
        target = self.for_spec(spec).target(pool, spec)
        self.decided_from[pool] = target
        return max(0, target - joined_nodes)

    def replace_unregistered(
        self, pool: str, node_provider_ids: set[str], now: float, *, dry_run: bool = False
    ) -> list[str]:
        """Terminate ``pool``'s instances that have had no Node for the registration
        deadline (the pending pods' scale-up then launches new ones); returns one line per
        instance replaced within the last hour, for the pool's NodesUnhealthy condition."""
        spec = self.pools[pool]
        if spec.provider.type == "static" or spec.tier == Tier.CORE:
            self.gone.pop(pool, None)
            return []
        provider = self.for_spec(spec)
        replaced = self.replaced.setdefault(pool, {})
        listed = provider.instances(pool, spec)
        ours = self._forget_terminated(pool, {i.instance_id for i in listed}, now)
        self.gone[pool] = {
            i.provider_id
            for i in listed
            if i.provider_id and (i.state == "terminated" or i.instance_id in ours)
        }
        for instance in listed:
            late = now - instance.launched_at > REGISTRATION_DEADLINE_SECONDS
            if (
                instance.state in NOT_LIVE_STATES
                or instance.instance_id in ours  # terminated already; the list is behind
                or instance.launched_at <= 0  # launch time unknown: never guess
                or not late
                or instance.provider_id in node_provider_ids
            ):
                continue
            if dry_run:
                log.info("dry run: %s of %s never registered, not replaced", instance, pool)
                continue
            log.warning(
                "pool %s: instance %s has no Node %.0f min after launch: replacing it",
                pool,
                instance.instance_id,
                (now - instance.launched_at) / 60,
            )
            provider.terminate(pool, spec, instance.instance_id)
            ours[instance.instance_id] = now
            replaced[instance.instance_id] = now
        for instance_id, at in list(replaced.items()):
            if now - at > REPORT_REPLACED_SECONDS:
                del replaced[instance_id]
        return [
            f"instance {iid} never became a Node within "
            f"{REGISTRATION_DEADLINE_SECONDS / 60:.0f} min: terminated and replaced"
            for iid in sorted(replaced)
        ]

    def _forget_terminated(self, pool: str, listed: set[str], now: float) -> dict[str, float]:
        """This operator's terminated instances of ``pool`` still listed (and still within
        TERMINATED_MEMORY_SECONDS); the others are forgotten."""
        ours = self.terminated.setdefault(pool, {})
        for instance_id, at in list(ours.items()):
            if instance_id not in listed or now - at > TERMINATED_MEMORY_SECONDS:
                del ours[instance_id]
        return ours

    def terminated_provider_ids(self) -> frozenset[str]:
        """Provider IDs of instances listed as terminated or terminated by this operator,
        as the last listing of each pool showed them."""
        return frozenset(pid for ids in self.gone.values() for pid in ids)

    def spot_price(self, pool: str) -> float | None:
        spec = self.pools[pool]
        if not spec.pricing.from_provider:
            return None
        price = self.for_spec(spec).spot_price_per_node_hour(pool, spec)
        # nan or 1e300 from a provider is no price: pricing.perNodeHour holds instead.
        return price if price is not None and usable_price_per_hour(price) else None

    # ------------------------------------------------- PoolCapacity (executor)
    def scale_up(self, pool: str, nodes: int) -> None:
        """Raise the pool's target by ``nodes``. After a retryable failure (a throttled or
        failing cloud API) the pool is not asked again for SCALE_UP_BACKOFF_SECONDS, doubling
        per failure in a row up to SCALE_UP_BACKOFF_CAP_SECONDS: every tick retrying would
        keep the API throttled."""
        spec = self.pools[pool]
        now = self._clock()
        failures, retry_at = self.scale_up_backoff.get(pool, (0, 0.0))
        if now < retry_at:
            raise ProviderError(
                f"backing off after {failures} failed scale-up(s) of {pool}: "
                f"next attempt in {retry_at - now:.0f}s"
            )
        provider = self.for_spec(spec)
        # The target decide() saw, plus what it asked for: an absolute intent. Re-reading the
        # target here would count twice a node the provider started for the last tick's
        # intent in between (a Karpenter NodeClaim created after the snapshot): the limit
        # went from 1 to 2 nodes for one node's worth of demand.
        base = self.decided_from.pop(pool, None)
        try:
            if base is None:
                base = provider.target(pool, spec)
            provider.set_target(pool, spec, min(spec.max_nodes, base + nodes))
        except CapacityUnavailable:
            # decide() grows another pool until the back-off ends, then this one is tried again.
            self.no_capacity_until[pool] = self._clock() + NO_CAPACITY_BACKOFF_SECONDS
            raise
        except ProviderError as err:
            if not err.retryable:
                raise
            delay = min(SCALE_UP_BACKOFF_CAP_SECONDS, SCALE_UP_BACKOFF_SECONDS * 2**failures)
            self.scale_up_backoff[pool] = (failures + 1, self._clock() + delay)
            raise ProviderError(f"{err} (next attempt in {delay:.0f}s)") from err
        self.no_capacity_until.pop(pool, None)
        self.scale_up_backoff.pop(pool, None)

    def unlaunchable(self) -> frozenset[str]:
        """Pools whose last launch failed for capacity within the back-off."""
        now = self._clock()
        return frozenset(p for p, until in self.no_capacity_until.items() if until > now)

    def terminate(self, pool: str, node: str, provider_id: str | None) -> bool:
        """Terminate the instance whose provider ID is exactly ``provider_id``; False (and
        nothing done) for owned pools (but those with power, whose idle nodes are powered off)
        and nodes without a provider ID."""
        spec = self.pools.get(pool)
        if spec is None or not provider_id or spec.provider.type == "static":
            return False
        if spec.tier == Tier.CORE and not powered(spec):
            return False
        provider = self.for_spec(spec)
        ours = self.terminated.setdefault(pool, {})
        for instance in provider.instances(pool, spec):
            if instance.provider_id != provider_id:
                continue
            if instance.state in NOT_LIVE_STATES or instance.instance_id in ours:
                # Going or gone (a cloud lists a terminated instance for a while, a stale
                # list even in its last state): terminating it again could lower an Auto
                # Scaling group's desired capacity twice.
                log.info("pool %s: %s is already terminated", pool, instance.instance_id)
                continue
            provider.terminate(pool, spec, instance.instance_id)
            ours[instance.instance_id] = self._clock()
            self.gone.setdefault(pool, set()).add(provider_id)
        notice = self.notices.pop(provider_id, None)
        if notice is not None:
            provider.acknowledge(notice)
        return True

    def known_provider_ids(self, pool: str) -> set[str] | None:
        spec = self.pools.get(pool)
        if spec is None or spec.provider.type == "static":
            return None
        ours = self.terminated.get(pool, {})
        return {
            i.provider_id
            for i in self.for_spec(spec).instances(pool, spec)
            if i.state != "terminated" and i.instance_id not in ours
        }
