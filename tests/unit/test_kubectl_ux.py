"""What a user who writes a GPUPool by hand is told: fields that cannot apply to the pool's
tier are refused (by the CRD's CEL rule on the apiserver and by the same rule in Python),
never silently ignored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def cloud_pool(tier: str, **pricing: float) -> dict[str, object]:
    return {
        "tier": tier,
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "kwok"},
        "pricing": {"perNodeHour": 30.0, **pricing},
    }


@pytest.mark.parametrize("tier", ["elastic", "spot"])
@pytest.mark.parametrize(
    "field",
    ["amortizationYears", "powerWattsPerNode", "pue", "electricityPerKWh", "opsPerNodeHour"],
)
def test_core_cost_model_fields_on_a_cloud_pool_are_refused_naming_them(
    tier: str, field: str
) -> None:
    """A spot pool with pricing.pue (or any field of the owned-hardware cost model) was
    accepted and the figure ignored: the user believed it counted."""
    with pytest.raises(ValidationError) as caught:
        GPUPoolSpec.model_validate(cloud_pool(tier, **{field: 1.5}))
    message = str(caught.value)
    assert field in message
    assert "price owned (core) nodes" in message


def test_the_same_fields_on_a_core_pool_are_accepted() -> None:
    GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "pricing": {
                "capexPerNode": 250000,
                "amortizationYears": 4,
                "powerWattsPerNode": 6500,
                "pue": 1.4,
                "electricityPerKWh": 0.12,
                "opsPerNodeHour": 0.5,
            },
        }
    )
