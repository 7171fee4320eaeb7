"""The CapacityProvider contract the operator relies on, written once and run against every
provider: the in-memory fake (tests/unit/test_cloud_fake.py), the AWS provider against
moto_server (tests/adapters/test_aws_contract.py), and on the real control plane the kwok
provider (tests/adapters/test_kwok_provider.py) and the Karpenter and Cluster API providers
(tests/adapters/test_karpenter_provider.py, test_clusterapi_provider.py).

A provider under test comes in a ``ProviderHarness``, which knows how to let the controllers
that act on the provider's requests act (Karpenter, a MachineSet: the lag between asking and
having), how to let its boot delay pass (a fake clock moves, a real one is waited for) and how
to announce an interruption.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice
from hybridgpu.models.pool import GPUPoolSpec


class ProviderHarness(Protocol):
    provider: CapacityProvider

    def new_pool(self, max_nodes: int) -> tuple[str, GPUPoolSpec]:
        """A pool name no other check uses, and an elastic spec with ``max_nodes``."""
        ...

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        """Let the controllers that act on the provider's requests act once (Karpenter
        creating NodeClaims up to a raised limit, a MachineSet creating or deleting Machines);
        nothing for providers that act at once."""
        ...

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        """Let the boot delay pass until every launched instance of ``pool`` runs."""
        ...

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        """Make the provider announce that ``instance`` goes away at ``deadline``."""
        ...


NOT_LIVE = frozenset({"terminating", "terminated"})
"""States of instances going or gone that a provider may still list (a real cloud does)."""


def states(h: ProviderHarness, pool: str, spec: GPUPoolSpec) -> list[str]:
    return sorted(i.state for i in h.provider.instances(pool, spec))


def live_ids(h: ProviderHarness, pool: str, spec: GPUPoolSpec) -> list[str]:
    """Instances that are capacity: listed and neither terminating nor terminated."""
    return sorted(
        i.instance_id for i in h.provider.instances(pool, spec) if i.state not in NOT_LIVE
    )


def an_empty_pool_has_no_instances_no_target_and_no_price(h: ProviderHarness) -> None:
    pool, spec = h.new_pool(4)
    assert h.provider.instances(pool, spec) == []
    assert h.provider.target(pool, spec) == 0
    assert h.provider.spot_price_per_node_hour(pool, spec) is None


def a_scale_up_is_capped_at_max_nodes_and_instances_run_after_the_boot_delay(
    h: ProviderHarness,
) -> None:
    pool, spec = h.new_pool(3)

    h.provider.set_target(pool, spec, 5)
    h.settle(pool, spec)

    assert h.provider.target(pool, spec) == 3
    # moto's Auto Scaling group puts instances in service at once: no boot to observe.
    booting = "running" if getattr(h, "boots_at_once", False) else "pending"
    assert states(h, pool, spec) == [booting] * 3
    h.wait_booted(pool, spec)
    assert states(h, pool, spec) == ["running"] * 3
    assert h.provider.target(pool, spec) == 3


def repeating_a_target_never_doubles_capacity_and_a_lower_one_is_ignored(
    h: ProviderHarness,
) -> None:
    pool, spec = h.new_pool(4)
    # Repeated before the provider acted on the first (a tick retried during the lag).
    h.provider.set_target(pool, spec, 2)
    h.provider.set_target(pool, spec, 2)
    h.provider.set_target(pool, spec, 1)  # nodes leave only through terminate
    h.settle(pool, spec)

    assert h.provider.target(pool, spec) == 2
    assert len(h.provider.instances(pool, spec)) == 2
    h.wait_booted(pool, spec)
    h.provider.set_target(pool, spec, 2)
    h.settle(pool, spec)
    assert len(h.provider.instances(pool, spec)) == 2


def terminate_removes_exactly_that_instance_and_lowers_the_target_by_one(
    h: ProviderHarness,
) -> None:
    pool, spec = h.new_pool(4)
    h.provider.set_target(pool, spec, 3)
    h.settle(pool, spec)
    h.wait_booted(pool, spec)
    ids = sorted(i.instance_id for i in h.provider.instances(pool, spec))
    victim = ids[1]

    h.provider.terminate(pool, spec, victim)
    h.provider.terminate(pool, spec, victim)  # a retry is a no-op
    h.settle(pool, spec)

    # The victim may stay listed for a while (EC2 lists terminated instances for about an
    # hour, a NodeClaim lingers while its finalizer runs), but never as capacity.
    assert live_ids(h, pool, spec) == [ids[0], ids[2]]
    for instance in h.provider.instances(pool, spec):
        assert instance.instance_id in ids
        assert instance.instance_id != victim or instance.state in NOT_LIVE, instance
    assert h.provider.target(pool, spec) == 2


def a_terminated_instance_still_listed_is_never_capacity_and_never_launched_again(
    h: ProviderHarness,
) -> None:
    pool, spec = h.new_pool(2)
    h.provider.set_target(pool, spec, 2)
    h.settle(pool, spec)
    h.wait_booted(pool, spec)
    victim, keep = live_ids(h, pool, spec)

    h.provider.terminate(pool, spec, victim)
    h.settle(pool, spec)
    # The operator raises the target back to what it had (the terminated one's work came
    # back): exactly one new instance, whatever the list still shows of the old one.
    h.provider.set_target(pool, spec, 2)
    h.provider.set_target(pool, spec, 2)
    h.settle(pool, spec)
    h.wait_booted(pool, spec)

    live = live_ids(h, pool, spec)
    assert len(live) == 2 and keep in live and victim not in live, live
    assert h.provider.target(pool, spec) == 2


def interruption_notices_stay_until_acknowledged(h: ProviderHarness) -> None:
    pool, spec = h.new_pool(2)
    h.provider.set_target(pool, spec, 1)
    h.settle(pool, spec)
    h.wait_booted(pool, spec)
    instance = h.provider.instances(pool, spec)[0]

    notice = h.announce_interruption(instance, deadline=2_000_000_000.0)

    def mine() -> list[InterruptionNotice]:
        return [n for n in h.provider.interruptions() if n.instance_id == instance.instance_id]

    assert notice.provider_id == instance.provider_id and notice.deadline == 2_000_000_000.0
    assert mine() == [notice]
    assert mine() == [notice]
    h.provider.acknowledge(notice)
    assert mine() == []


CAPACITY_CONTRACT: list[Callable[[ProviderHarness], None]] = [
    an_empty_pool_has_no_instances_no_target_and_no_price,
    a_scale_up_is_capped_at_max_nodes_and_instances_run_after_the_boot_delay,
    repeating_a_target_never_doubles_capacity_and_a_lower_one_is_ignored,
    terminate_removes_exactly_that_instance_and_lowers_the_target_by_one,
    a_terminated_instance_still_listed_is_never_capacity_and_never_launched_again,
]
"""Every check a CapacityProvider must pass, in the order a reader meets them."""

CONTRACT: list[Callable[[ProviderHarness], None]] = [
    *CAPACITY_CONTRACT,
    interruption_notices_stay_until_acknowledged,
]
"""The checks of a provider that announces interruptions too (fake, kwok). Karpenter and
Cluster API handle their machines' disruptions themselves and announce none."""
