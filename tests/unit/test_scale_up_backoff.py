"""A pool whose scale-up failed for a retryable reason (a throttled cloud API) is not asked
again every tick: the next attempt waits, doubling per failure in a row."""

from __future__ import annotations

import pytest

from hybridgpu.cloud.base import ProviderError
from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.handlers.capacity import (
    SCALE_UP_BACKOFF_CAP_SECONDS,
    SCALE_UP_BACKOFF_SECONDS,
    Providers,
)
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

SPEC = GPUPoolSpec.model_validate(
    {
        "tier": "elastic",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 30},
    }
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build() -> tuple[Providers, FakeProvider, Clock]:
    clock = Clock()
    capacity = Providers("hybridgpu.cloud.fake:FakeProvider", clock)
    capacity.set_pools({"elastic": SPEC})
    fake = capacity.for_spec(SPEC)
    assert isinstance(fake, FakeProvider)
    return capacity, fake, clock


def set_target_calls(fake: FakeProvider) -> int:
    return sum(1 for call in fake.calls if call.method == "set_target")


def throttled() -> ProviderError:
    return ProviderError("could not scale: Throttling: Rate exceeded", retryable=True)


def test_a_throttled_scale_up_is_not_retried_until_its_back_off_ends() -> None:
    capacity, fake, clock = build()
    fake.next_error = throttled()
    with pytest.raises(ProviderError, match="next attempt in 10s"):
        capacity.scale_up("elastic", 1)
    calls = len(fake.calls)

    clock.now += SCALE_UP_BACKOFF_SECONDS - 1  # the ticks of the next 9 s
    with pytest.raises(ProviderError, match="backing off after 1 failed scale-up"):
        capacity.scale_up("elastic", 1)
    assert len(fake.calls) == calls, "the provider was asked again within the back-off"

    clock.now += 1
    capacity.scale_up("elastic", 1)
    assert fake.target("elastic", SPEC) == 1


def test_the_back_off_doubles_per_failure_in_a_row_up_to_a_cap_and_resets() -> None:
    capacity, fake, clock = build()
    waits = []
    for _ in range(7):
        fake.next_error = throttled()
        with pytest.raises(ProviderError):
            capacity.scale_up("elastic", 1)
        _, retry_at = capacity.scale_up_backoff["elastic"]
        waits.append(retry_at - clock.now)
        clock.now = retry_at
    assert waits == [10, 20, 40, 80, 160, SCALE_UP_BACKOFF_CAP_SECONDS, 300]

    capacity.scale_up("elastic", 1)
    fake.next_error = throttled()
    with pytest.raises(ProviderError, match="next attempt in 10s"):
        capacity.scale_up("elastic", 1)


def test_a_failure_that_retrying_cannot_fix_is_not_backed_off() -> None:
    capacity, fake, _ = build()
    fake.next_error = ProviderError("no such auto scaling group", retryable=False)
    with pytest.raises(ProviderError, match="no such auto scaling group"):
        capacity.scale_up("elastic", 1)
    assert "elastic" not in capacity.scale_up_backoff
    capacity.scale_up("elastic", 1)
    assert set_target_calls(fake) == 1
