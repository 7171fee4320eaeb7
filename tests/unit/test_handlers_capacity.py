"""The handlers' glue that is pure: pool capacity over a provider, budget integration."""

from __future__ import annotations

import pytest

from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.handlers.capacity import Providers
from hybridgpu.handlers.loop import month_hours, spent_so_far
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def spot(max_nodes: int = 3) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "A100", "perNode": 8},
            "minNodes": 0,
            "maxNodes": max_nodes,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 9},
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def providers(clock: Clock) -> tuple[Providers, FakeProvider]:
    built = Providers("hybridgpu.cloud.fake:FakeProvider", clock)
    built.set_pools({"spot": spot()})
    fake = built.for_spec(spot())
    assert isinstance(fake, FakeProvider)
    fake.provisioning_delay_seconds = 30
    return built, fake


def test_scale_up_adds_to_the_target_and_never_exceeds_max_nodes() -> None:
    clock = Clock()
    capacity, fake = providers(clock)
    capacity.scale_up("spot", 2)
    assert capacity.provisioning("spot", joined_nodes=0) == 2
    capacity.scale_up("spot", 5)
    assert fake.target("spot", spot()) == 3
    assert capacity.provisioning("spot", joined_nodes=1) == 2


def test_terminate_removes_the_nodes_instance_and_acknowledges_its_notice() -> None:
    clock = Clock()
    capacity, fake = providers(clock)
    capacity.scale_up("spot", 2)
    first = fake.instances("spot", spot())[0]
    fake.interrupt(first.instance_id, lead_seconds=60)
    assert capacity.poll_interruptions() == {first.provider_id: 1060.0}
    capacity.terminate("spot", "node-a", first.provider_id)
    assert first.provider_id not in capacity.known_provider_ids("spot")  # type: ignore[operator]
    assert fake.interruptions() == []
    assert capacity.poll_interruptions() == {}


def test_spend_integrates_the_last_rate_and_restarts_each_month() -> None:
    month, hours_left = month_hours(0.0)  # 1970-01-01T00:00Z
    assert (month, hours_left) == ("1970-01", 31 * 24)
    status = {
        "lastTick": "1970-01-01T00:00:00Z",
        "budget": {"spentThisMonth": 5.0, "hourlyCost": 10.0},
    }
    assert spent_so_far(status, 1800.0) == pytest.approx(10.0)
    assert spent_so_far(status, 31 * 86400 + 60) == 0.0  # February: a new month
    assert spent_so_far({}, 100.0) == 0.0


def test_a_scale_up_adds_to_the_target_decide_saw_not_to_a_fresher_one() -> None:
    """Replays issue 13's budget e2e: the snapshot saw no capacity on its way, Karpenter then
    created the NodeClaim for the last tick's raised limit, and the scale-up re-read the
    target and asked for 2 nodes for one node's worth of demand (beyond the budget)."""
    clock = Clock()
    capacity, fake = providers(clock)
    assert capacity.provisioning("spot", joined_nodes=0) == 0  # the snapshot: none on its way
    fake.set_target("spot", spot(), 1)  # the provider acts on the last tick's intent
    capacity.scale_up("spot", 1)  # decide(), from the snapshot: one more node in all
    assert fake.target("spot", spot()) == 1
    # The next snapshot sees it, and a further scale-up adds to it.
    assert capacity.provisioning("spot", joined_nodes=0) == 1
    capacity.scale_up("spot", 1)
    assert fake.target("spot", spot()) == 2


def spot_from_provider() -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {**spot().model_dump(by_alias=True), "pricing": {"perNodeHour": 9, "fromProvider": True}}
    )


@pytest.mark.parametrize("price", [float("nan"), float("inf"), 1e300, 0.0, -1.0])
def test_a_provider_price_that_is_not_one_leaves_the_pools_own(price: float) -> None:
    built = Providers("hybridgpu.cloud.fake:FakeProvider", Clock())
    built.set_pools({"spot": spot_from_provider()})
    fake = built.for_spec(spot_from_provider())
    assert isinstance(fake, FakeProvider)
    fake.spot_prices_per_node_hour["spot"] = 7.5
    assert built.spot_price("spot") == 7.5
    fake.spot_prices_per_node_hour["spot"] = price
    assert built.spot_price("spot") is None  # the loop falls back to OpenCost, then perNodeHour


def test_an_opencost_price_beyond_the_limit_is_none() -> None:
    from hybridgpu.core.cost import node_hour_from_gpu_prices

    assert node_hour_from_gpu_prices(spot(), [2.0, 1e300, float("nan")]) == 16.0
    assert node_hour_from_gpu_prices(spot(), [1e300]) is None
