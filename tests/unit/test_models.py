"""The models reject what the apiserver rejects, with the same words."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

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


# --- money and power limits: one per unit (hybridgpu.models.limits), in every model

# Number fields with a money or power unit, by how their wire name ends, and their limit.
_UNIT_LIMITS = (
    (r"([pP]er(Node|Gpu)Hour|maxHourlyCost|minSavingsPerHour)$", "MAX_DOLLARS_PER_HOUR"),
    (r"(capexPerNode|upfrontPer(Node|Gpu)|monthlyLimit)$", "MAX_DOLLARS"),
    (r"KWh$", "MAX_DOLLARS_PER_KWH"),
    (r"[wW]atts(PerNode)?$", "MAX_WATTS"),
    (r"\.(committed\.nodes|maxNodes|currentNodes|minPoweredOn)$", "MAX_NODES"),
)
# Not money: a hazard (an inf rerun factor means "spot never pays") and a token rate.
_NOT_MONEY = ("spotInterruptionsPerHour", "tokensPerGpuHour")


def _spec_numbers() -> list[tuple[str, dict]]:
    from hybridgpu.models.crd import all_crds

    found: list[tuple[str, dict]] = []

    def walk(schema: dict, path: str) -> None:
        if schema.get("type") in ("number", "integer"):
            found.append((path, schema))
        for key, sub in schema.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if "items" in schema:
            walk(schema["items"], f"{path}[]")

    for name, crd in all_crds().items():
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        walk(root["properties"]["spec"], f"{name.split('.')[0]}.spec")
    return found


def test_every_money_and_power_field_has_its_units_limit() -> None:
    import re

    from hybridgpu.models import limits

    checked = 0
    for path, schema in _spec_numbers():
        if path.endswith(_NOT_MONEY) or path.endswith(".maxNodesPerTick"):
            continue
        for pattern, limit_name in _UNIT_LIMITS:
            if re.search(pattern, path):
                assert schema.get("maximum") == getattr(limits, limit_name), (path, limit_name)
                checked += 1
    assert checked >= 27  # every pool, policy and plan price, not a few


ABSURD = {
    "GPUPool perNodeHour": (
        GPUPoolSpec,
        patched(ELASTIC, pricing={"perNodeHour": 1e300}),
        "pricing.perNodeHour: 1e+300 is above the limit of 1,000,000,000",
    ),
    "GPUPool capexPerNode": (
        GPUPoolSpec,
        patched(CORE, pricing={"capexPerNode": 1e300}),
        "pricing.capexPerNode: 1e+300 is above the limit of 1,000,000,000,000",
    ),
    "GPUPool electricityPerKWh": (
        GPUPoolSpec,
        patched(CORE, pricing={"electricityPerKWh": 1e300}),
        "pricing.electricityPerKWh: 1e+300 is above the limit of 1,000",
    ),
    "GPUPool opsPerNodeHour": (
        GPUPoolSpec,
        patched(CORE, pricing={"opsPerNodeHour": 1e300}),
        "pricing.opsPerNodeHour: 1e+300 is above",
    ),
    "GPUPool powerWatts": (
        GPUPoolSpec,
        patched(CORE, gpu={"powerWatts": 1e300}),
        "gpu.powerWatts: 1e+300 is above the limit of 10,000,000",
    ),
    "GPUPool committed perNodeHour": (
        GPUPoolSpec,
        patched(ELASTIC, committed={"nodes": 4, "termYears": 1, "perNodeHour": 1e300}),
        "committed.perNodeHour: 1e+300 is above",
    ),
    "GPUPool committed upfrontPerNode": (
        GPUPoolSpec,
        patched(
            ELASTIC,
            committed={"nodes": 4, "termYears": 1, "perNodeHour": 1, "upfrontPerNode": 1e300},
        ),
        "committed.upfrontPerNode: 1e+300 is above",
    ),
    "ScalingPolicy monthlyLimit": (
        ScalingPolicySpec,
        {"budget": {"maxHourlyCost": 10, "monthlyLimit": 1e300}},
        "budget.monthlyLimit: 1e+300 is above",
    ),
    "ScalingPolicy minSavingsPerHour": (
        ScalingPolicySpec,
        {"consolidation": {"minSavingsPerHour": 1e300}},
        "consolidation.minSavingsPerHour: 1e+300 is above",
    ),
    "ScalingPolicy interval of 400 digits": (
        ScalingPolicySpec,
        {"interval": "1" + "0" * 400 + "s"},
        "interval: '1000",
    ),
}


@pytest.mark.parametrize(("model", "body", "words"), ABSURD.values(), ids=ABSURD.keys())
def test_absurd_money_is_refused_naming_the_field_and_the_limit(
    model: type[BaseModel], body: dict, words: str
) -> None:
    from hybridgpu.inputs import describe_validation_error

    with pytest.raises(ValidationError) as err:
        model.model_validate(body)
    said = describe_validation_error(err.value)
    assert words in said
    assert len(said) < 300


def test_prices_at_the_limit_are_accepted() -> None:
    from hybridgpu.models.limits import MAX_DOLLARS, MAX_DOLLARS_PER_HOUR

    pool = GPUPoolSpec.model_validate(patched(ELASTIC, pricing={"perNodeHour": 1e9}))
    assert pool.pricing.per_node_hour == MAX_DOLLARS_PER_HOUR
    core = GPUPoolSpec.model_validate(patched(CORE, pricing={"capexPerNode": 1e12}))
    assert core.pricing.capex_per_node == MAX_DOLLARS


def test_a_plan_refuses_absurd_prices_and_counts() -> None:
    from hybridgpu.models.capacityplan import CapacityPlanSpec

    base = {
        "history": {"trace": {"path": "t.csv"}},
        "candidates": [
            {"name": "8x", "gpusPerNode": 8, "capexPerNode": 280000, "powerWattsPerNode": 1000}
        ],
        "cloud": {"onDemandPerGpuHour": 3.0, "spotPerGpuHour": 1.0},
    }
    CapacityPlanSpec.model_validate(base)
    for change in (
        {"cloud": {"onDemandPerGpuHour": 1e300, "spotPerGpuHour": 1.0}},
        {"cloud": {"onDemandPerGpuHour": 3.0, "spotPerGpuHour": 1e300}},
        {"candidates": [{**base["candidates"][0], "capexPerNode": 1e300}]},  # type: ignore[index]
        {"candidates": [{**base["candidates"][0], "currentNodes": 10**300}]},  # type: ignore[index]
        {"committed": [{"name": "1y", "termYears": 1, "perGpuHour": 1e300}]},
        {"committed": [{"name": "1y", "termYears": 1, "perGpuHour": 1, "upfrontPerGpu": 1e300}]},
        {"tokensPerGpuHour": 1e-320},
    ):
        with pytest.raises(ValidationError):
            CapacityPlanSpec.model_validate({**base, **change})


@pytest.mark.parametrize("text", ["999999999d", "999999999s999999999ms", "000000001s"])
def test_durations_of_up_to_nine_digits_parse(text: str) -> None:
    import math

    assert math.isfinite(parse_duration_seconds(text)) and parse_duration_seconds(text) > 0


@pytest.mark.parametrize("text", ["1000000000d", "1" + "0" * 400 + "s", "0s" + "9" * 310 + "h"])
def test_a_duration_with_more_digits_is_refused_not_inf(text: str) -> None:
    with pytest.raises(ValueError, match="too long a duration: at most 9 digits"):
        parse_duration_seconds(text)
    with pytest.raises(ValidationError):
        ScalingPolicySpec.model_validate({"interval": text})
