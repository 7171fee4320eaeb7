"""The fake and static providers keep the CapacityProvider contract the operator relies on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.fake import FakeProvider, ProviderCall
from hybridgpu.cloud.static import StaticProvider
from hybridgpu.models.pool import GPUPoolSpec
from support.provider_contract import CONTRACT, ProviderHarness

pytestmark = pytest.mark.unit


def elastic_spec(max_nodes: int = 4) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": max_nodes,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 32.0},
        }
    )


def core_spec() -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8, "powerWatts": 400},
            "maxNodes": 4,
            "pricing": {"capexPerNode": 250000},
        }
    )


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_both_providers_answer_every_protocol_method() -> None:
    providers: list[CapacityProvider] = [FakeProvider(), StaticProvider()]  # mypy checks shape
    spec = elastic_spec()
    for provider in providers:
        assert provider.instances("gpu", spec) == []
        assert provider.target("gpu", spec) == 0
        assert provider.interruptions() == []
        assert provider.spot_price_per_node_hour("gpu", spec) is None


def test_lagging_lists_show_launches_and_terminations_late_but_the_target_at_once() -> None:
    clock = Clock()
    fake = FakeProvider(clock, list_lag_seconds=20)
    spec = elastic_spec()

    fake.set_target("gpu", spec, 2)

    assert fake.target("gpu", spec) == 2
    assert fake.instances("gpu", spec) == []  # the list lags the target
    clock.now += 20
    listed = fake.instances("gpu", spec)
    assert len(listed) == 2
    fake.terminate("gpu", spec, listed[0].instance_id)
    assert fake.target("gpu", spec) == 1
    assert len(fake.instances("gpu", spec)) == 2  # still listed: stale
    clock.now += 20
    assert [i.instance_id for i in fake.instances("gpu", spec)] == [listed[1].instance_id]


def test_scale_up_is_capped_at_max_nodes_and_instances_join_after_the_delay() -> None:
    clock = Clock()
    fake = FakeProvider(clock, provisioning_delay_seconds=90)
    spec = elastic_spec(max_nodes=3)

    fake.set_target("gpu", spec, 5)

    assert fake.target("gpu", spec) == 3
    assert [i.state for i in fake.instances("gpu", spec)] == ["pending"] * 3
    clock.now += 90
    assert [i.state for i in fake.instances("gpu", spec)] == ["running"] * 3


def test_repeating_a_target_never_doubles_capacity() -> None:
    fake = FakeProvider()
    spec = elastic_spec()
    fake.set_target("gpu", spec, 2)
    fake.set_target("gpu", spec, 2)
    fake.set_target("gpu", spec, 1)  # lower targets are ignored: nodes leave via terminate
    assert len(fake.instances("gpu", spec)) == 2
    assert fake.target("gpu", spec) == 2


def test_terminate_removes_exactly_that_instance_and_lowers_the_target() -> None:
    fake = FakeProvider()
    spec = elastic_spec()
    fake.set_target("gpu", spec, 3)
    victim = fake.instances("gpu", spec)[1].instance_id

    fake.terminate("gpu", spec, victim)
    fake.terminate("gpu", spec, victim)  # a retry is a no-op

    left = [i.instance_id for i in fake.instances("gpu", spec)]
    assert victim not in left and len(left) == 2
    assert fake.target("gpu", spec) == 2


def test_next_error_fails_one_call_without_effect_and_calls_are_recorded() -> None:
    fake = FakeProvider()
    spec = elastic_spec()
    fake.next_error = ProviderError("throttled", retryable=True)

    with pytest.raises(ProviderError, match="throttled"):
        fake.set_target("gpu", spec, 2)
    fake.set_target("gpu", spec, 2)

    assert fake.target("gpu", spec) == 2
    assert fake.calls[:2] == [
        ProviderCall("set_target", "gpu", (2,)),
        ProviderCall("set_target", "gpu", (2,)),
    ]
    fake.reset()
    assert fake.calls == [] and fake.instances("gpu", spec) == []


def test_interruption_notices_stay_until_acknowledged() -> None:
    clock = Clock(5000.0)
    fake = FakeProvider(clock)
    spec = elastic_spec()
    fake.set_target("spot", spec, 1)
    instance = fake.instances("spot", spec)[0]

    notice = fake.interrupt(instance.instance_id)

    assert notice.deadline == 5120.0
    assert notice.provider_id == instance.provider_id
    assert fake.interruptions() == [notice]
    assert fake.interruptions() == [notice]
    fake.acknowledge(notice)
    assert fake.interruptions() == []


def test_spot_prices_come_from_the_configured_table() -> None:
    fake = FakeProvider(spot_prices_per_node_hour={"spot": 9.5})
    assert fake.spot_price_per_node_hour("spot", elastic_spec()) == 9.5
    assert fake.spot_price_per_node_hour("other", elastic_spec()) is None


def test_static_provider_refuses_to_scale_owned_hardware() -> None:
    static = StaticProvider()
    spec = core_spec()
    with pytest.raises(ProviderError, match="owned hardware") as raised:
        static.set_target("core", spec, 5)
    assert raised.value.retryable is False
    with pytest.raises(ProviderError, match="never terminates") as raised:
        static.terminate("core", spec, "i-1")
    assert raised.value.retryable is False
    assert static.instances("core", spec) == [] and static.interruptions() == []


class FakeHarness:
    """The fake under the shared CapacityProvider contract (tests/support/provider_contract.py)."""

    def __init__(self, terminated_listed_seconds: float = 0.0) -> None:
        self.clock = Clock()
        self.fake = FakeProvider(
            self.clock,
            provisioning_delay_seconds=90,
            terminated_listed_seconds=terminated_listed_seconds,
        )
        self.provider: CapacityProvider = self.fake
        self.pools = 0

    def new_pool(self, max_nodes: int) -> tuple[str, GPUPoolSpec]:
        self.pools += 1
        return f"pool-{self.pools}", elastic_spec(max_nodes)

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        pass  # the fake acts at once

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        self.clock.now += 90

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        return self.fake.interrupt(instance.instance_id, lead_seconds=deadline - self.clock())


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_the_fake_keeps_the_provider_contract(check: Callable[[ProviderHarness], None]) -> None:
    check(FakeHarness())


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_the_fake_keeps_the_contract_while_terminated_instances_stay_listed(
    check: Callable[[ProviderHarness], None],
) -> None:
    """As EC2 does: a terminated instance stays listed, as terminated, for an hour."""
    check(FakeHarness(terminated_listed_seconds=3600))


def test_a_terminated_instance_is_listed_late_then_as_terminated_for_a_while() -> None:
    clock = Clock()
    fake = FakeProvider(clock, list_lag_seconds=20, terminated_listed_seconds=3600)
    spec = elastic_spec()
    fake.set_target("gpu", spec, 1)
    clock.now += 20
    (instance,) = fake.instances("gpu", spec)

    fake.terminate("gpu", spec, instance.instance_id)
    assert [i.state for i in fake.instances("gpu", spec)] == ["running"]  # the list is behind
    clock.now += 20
    assert [i.state for i in fake.instances("gpu", spec)] == ["terminated"]
    assert fake.target("gpu", spec) == 0
    clock.now += 3599
    assert [i.state for i in fake.instances("gpu", spec)] == ["terminated"]
    clock.now += 1
    assert fake.instances("gpu", spec) == []
