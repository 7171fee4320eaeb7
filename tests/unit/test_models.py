"""The models reject what the apiserver rejects, with the same words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hybridgpu.core.cost import core_node_cost, gpu_hour_dollars, node_hour_dollars
from hybridgpu.models import GPUPoolSpec, ScalingPolicySpec, parse_duration_seconds

pytestmark = pytest.mark.unit

CORE = {
    "tier": "core",
    "gpu": {"model": "H100", "perNode": 8, "powerWatts": 700},
    "maxNodes": 4,
    "pricing": {"capexPerNode": 300000, "powerWattsPerNode": 10000, "pue": 1.3},
}
ELASTIC = {
    "tier": "elastic",
    "gpu": {"model": "H100", "perNode": 8},
    "maxNodes": 4,
    "provider": {"type": "fake"},
    "pricing": {"perNodeHour": 98.32},
}


def patched(base: dict, **changes) -> dict:
    out = {**base}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


BAD = {
    "minNodes above maxNodes": (patched(CORE, minNodes=5), "minNodes must not exceed maxNodes"),
    "core without capex": ({**CORE, "pricing": {"pue": 1.2}}, "capexPerNode"),
    "elastic without a price": ({**ELASTIC, "pricing": {}}, "perNodeHour"),
    "negative price": (patched(ELASTIC, pricing={"perNodeHour": -1}), "greater than 0"),
    "unknown field": (patched(ELASTIC, surprise=1), "Extra inputs"),
    "wrong tier": (patched(ELASTIC, tier="cheap"), "core"),
    "core on aws": (
        patched(
            CORE, provider={"type": "aws", "aws": {"region": "x", "autoScalingGroupName": "a"}}
        ),
        "owned hardware",
    ),
    "elastic on static": (patched(ELASTIC, provider={"type": "static"}), "cloud provider"),
    "fromProvider on elastic": (
        patched(ELASTIC, pricing={"fromProvider": True}),
        "only valid on spot",
    ),
    "bad duration": (patched(ELASTIC, scaleDown={"idleFor": "ten minutes"}), "pattern"),
    "aws without settings": (patched(ELASTIC, provider={"type": "aws"}), "provider.aws"),
    "karpenter without its NodePool": (
        patched(ELASTIC, provider={"type": "karpenter"}),
        "provider.karpenter is required",
    ),
    "clusterapi without its MachineDeployment": (
        patched(ELASTIC, provider={"type": "clusterapi"}),
        "provider.clusterapi is required",
    ),
    "machineDeployment without a namespace": (
        patched(
            ELASTIC, provider={"type": "clusterapi", "clusterapi": {"machineDeployment": "gpu-md"}}
        ),
        "pattern",
    ),
    "core on karpenter": (
        patched(CORE, provider={"type": "karpenter", "karpenter": {"nodePool": "gpu"}}),
        "owned hardware",
    ),
}


@pytest.mark.parametrize(("body", "words"), BAD.values(), ids=BAD.keys())
def test_invalid_pools_are_rejected_with_a_useful_message(body: dict, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        GPUPoolSpec.model_validate(body)
    assert words in str(err.value)


def test_valid_pools_parse_and_round_trip_to_camel_case() -> None:
    spec = GPUPoolSpec.model_validate(CORE)
    assert spec.to_wire()["pricing"]["capexPerNode"] == 300000
    assert GPUPoolSpec.model_validate(spec.to_wire()) == spec


def test_policy_defaults_are_sensible() -> None:
    policy = ScalingPolicySpec()
    assert parse_duration_seconds(policy.interval) == 30
    assert policy.preemption.enabled and not policy.dry_run


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("250ms", 0.25)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds


def test_a_bad_duration_says_what_is_expected() -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 30s"):
        parse_duration_seconds("soon")


def test_core_node_hour_is_capex_plus_power_plus_ops() -> None:
    spec = GPUPoolSpec.model_validate(
        patched(
            CORE, pricing={"amortizationYears": 5, "electricityPerKWh": 0.1, "opsPerNodeHour": 1}
        )
    )
    cost = core_node_cost(spec)
    assert cost.capex_per_hour == pytest.approx(300000 / (5 * 8760))
    assert cost.power_per_hour == pytest.approx(10000 * 1.3 * 0.1 / 1000)
    assert node_hour_dollars(spec) == pytest.approx(cost.capex_per_hour + cost.power_per_hour + 1)


def test_cloud_prices_and_provider_spot_price() -> None:
    elastic = GPUPoolSpec.model_validate(ELASTIC)
    assert gpu_hour_dollars(elastic) == pytest.approx(98.32 / 8)
    spot = GPUPoolSpec.model_validate(
        patched(ELASTIC, tier="spot", pricing={"perNodeHour": 40.0, "fromProvider": True})
    )
    assert node_hour_dollars(spot, provider_price=31.5) == 31.5
    assert node_hour_dollars(spot) == 40.0
