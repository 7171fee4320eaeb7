"""The generated CRDs against the real kube-apiserver: accepted, validating, and self-describing.

Invalid objects must be rejected by the apiserver itself (OpenAPI schema + CEL rules), with an
error that names the offending field, because that text is all a user applying YAML sees.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.controlplane import CRDS_DIR, EXAMPLES_DIR, KubeTest

pytestmark = pytest.mark.adapters

API_VERSION = "hybridgpu.io/v1alpha1"


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES_DIR.rglob("*.y*ml") if p.is_file())


def crd_files() -> list[Path]:
    return sorted(CRDS_DIR.glob("*.yaml"))


def apply(kube: KubeTest, *objects: dict[str, Any], dry_run: bool = False) -> Any:
    """Server-side apply ``objects`` with kubectl; return the CompletedProcess (never raises)."""
    args = ["apply", "--server-side", "--field-manager=hybridgpu-tests", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return kube.kubectl(*args, stdin=yaml.safe_dump_all(objects), check=False)


def elastic_pool(name: str = "elastic-a100") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUPool",
        "metadata": {"name": name},
        "spec": {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 8, "memoryGiB": 80, "powerWatts": 400},
            "minNodes": 0,
            "maxNodes": 10,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 32.77},
            "scaleDown": {"enabled": True, "idleUtilizationPercent": 10, "idleFor": "10m"},
            "taints": [{"key": "hybridgpu.io/elastic", "value": "true", "effect": "NoSchedule"}],
            "labels": {"team": "ml"},
        },
    }


def core_pool(name: str = "core-v100") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUPool",
        "metadata": {"name": name},
        "spec": {
            "tier": "core",
            "gpu": {"model": "V100", "perNode": 8},
            "minNodes": 4,
            "maxNodes": 4,
            "provider": {"type": "static"},
            "pricing": {
                "capexPerNode": 150000,
                "amortizationYears": 4,
                "powerWattsPerNode": 3500,
                "pue": 1.4,
                "electricityPerKWh": 0.12,
                "opsPerNodeHour": 0.5,
            },
        },
    }


def spot_pool(name: str = "spot-a10g") -> dict[str, Any]:
    pool = elastic_pool(name)
    pool["spec"]["tier"] = "spot"
    pool["spec"]["pricing"] = {"fromProvider": True, "perNodeHour": 5.0}
    pool["spec"]["provider"] = {
        "type": "aws",
        "aws": {
            "region": "us-east-1",
            "launchTemplateName": "gpu-spot",
            "instanceTypes": ["g5.12xlarge"],
        },
    }
    return pool


def scaling_policy(name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ScalingPolicy",
        "metadata": {"name": name},
        "spec": {
            "prometheus": {"url": "http://prometheus:9090", "window": "5m", "staleAfter": "2m"},
            "interval": "30s",
            "pendingGracePeriod": "15s",
            "scaleUp": {"maxNodesPerTick": 5},
            "preemption": {"enabled": True, "moveToSpot": True, "minRuntime": "10m"},
            "disruption": {"maxNodesPerTick": 2, "maxPercent": 20},
            "budget": {"maxHourlyCost": 500, "monthlyLimit": 200000},
            "dryRun": False,
        },
    }


def capacity_plan(name: str = "next-year") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "CapacityPlan",
        "metadata": {"name": name},
        "spec": {
            "history": {"prometheus": {"url": "http://prometheus:9090", "window": "30d"}},
            "horizonMonths": 36,
            "candidates": [
                {
                    "name": "8xA100",
                    "gpusPerNode": 8,
                    "capexPerNode": 250000,
                    "powerWattsPerNode": 6500,
                }
            ],
            "cloud": {"onDemandPerGpuHour": 4.1, "spotPerGpuHour": 1.3},
            "preemptibleShare": 0.4,
        },
    }


def with_changes(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` with dotted-path ``changes`` under spec (value None deletes)."""
    result = copy.deepcopy(obj)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = result["spec"]
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return result


# Each case: the object, and the fragments the apiserver's error must contain (field + reason).
INVALID_CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "a plan candidate named twice": (
        with_changes(
            capacity_plan(),
            {"candidates": capacity_plan()["spec"]["candidates"] * 2},
        ),
        ("spec.candidates", 'duplicate entries for key [name="8xA100"]'),
    ),
    "unknown tier": (
        with_changes(elastic_pool(), {"tier": "gold"}),
        ("spec.tier", 'Unsupported value: "gold"'),
    ),
    "minNodes above maxNodes": (
        with_changes(elastic_pool(), {"minNodes": 5, "maxNodes": 2}),
        ("spec.minNodes", "minNodes must not exceed maxNodes"),
    ),
    "negative cloud price": (
        with_changes(elastic_pool(), {"pricing.perNodeHour": -1}),
        ("spec.pricing.perNodeHour", "greater than 0"),
    ),
    "elastic pool without a price": (
        with_changes(elastic_pool(), {"pricing": {}}),
        ("spec.pricing", "elastic and spot pools need pricing.perNodeHour"),
    ),
    "core pool without capex": (
        with_changes(core_pool(), {"pricing.capexPerNode": None}),
        ("spec.pricing", "core pools need pricing.capexPerNode"),
    ),
    "cloud price of 1e300 dollars an hour": (
        with_changes(elastic_pool(), {"pricing.perNodeHour": 1e300}),
        ("spec.pricing.perNodeHour", "less than or equal to 1e+09"),
    ),
    "committed upfront of 1e300 dollars": (
        with_changes(
            elastic_pool(),
            {"committed": {"nodes": 10, "termYears": 1, "perNodeHour": 1, "upfrontPerNode": 1e300}},
        ),
        ("spec.committed.upfrontPerNode", "less than or equal to 1e+12"),
    ),
    "idle duration of 10 digits": (
        with_changes(elastic_pool(), {"scaleDown.idleFor": "1000000000s"}),
        ("spec.scaleDown.idleFor", "should match"),
    ),
    "policy: monthly budget of 1e300 dollars": (
        with_changes(scaling_policy(), {"budget": {"monthlyLimit": 1e300}}),
        ("spec.budget.monthlyLimit", "less than or equal to 1e+12"),
    ),
    "plan: spot price of 1e300 dollars a GPU-hour": (
        with_changes(capacity_plan(), {"cloud.spotPerGpuHour": 1e300}),
        ("spec.cloud.spotPerGpuHour", "less than or equal to 1e+09"),
    ),
    "negative capex": (
        with_changes(core_pool(), {"pricing.capexPerNode": -150000}),
        ("spec.pricing.capexPerNode", "greater than 0"),
    ),
    "core pool with an hourly price": (
        with_changes(core_pool(), {"pricing.perNodeHour": 3.0}),
        ("spec.pricing", "pricing.perNodeHour is for elastic and spot pools"),
    ),
    "elastic pool with capex": (
        with_changes(elastic_pool(), {"pricing.capexPerNode": 1000}),
        ("spec.pricing", "pricing.capexPerNode is for core pools"),
    ),
    "spot pool with core-only power pricing": (
        with_changes(spot_pool(), {"pricing.pue": 1.4, "pricing.opsPerNodeHour": 0.5}),
        ("spec.pricing", "pue, electricityPerKWh and opsPerNodeHour price owned (core) nodes"),
    ),
    "provider prices on an elastic pool": (
        with_changes(elastic_pool(), {"pricing": {"fromProvider": True}}),
        ("spec.pricing", "only valid on spot pools"),
    ),
    "pue out of range": (
        with_changes(core_pool(), {"pricing.pue": 5}),
        ("spec.pricing.pue", "less than or equal to 3"),
    ),
    "unknown field": (
        with_changes(elastic_pool(), {"gpu.vram": 80}),
        ("spec.gpu.vram",),
    ),
    "missing gpu": (
        with_changes(elastic_pool(), {"gpu": None}),
        ("spec.gpu", "Required value"),
    ),
    "zero GPUs per node": (
        with_changes(elastic_pool(), {"gpu.perNode": 0}),
        ("spec.gpu.perNode", "greater than or equal to 1"),
    ),
    "bad idle duration": (
        with_changes(elastic_pool(), {"scaleDown.idleFor": "ten minutes"}),
        ("spec.scaleDown.idleFor", "should match"),
    ),
    "idle percent above 100": (
        with_changes(elastic_pool(), {"scaleDown.idleUtilizationPercent": 150}),
        ("spec.scaleDown.idleUtilizationPercent", "less than or equal to 100"),
    ),
    "static provider on an elastic pool": (
        with_changes(elastic_pool(), {"provider": {"type": "static"}}),
        ("spec.provider", "provider.type must be aws, karpenter, clusterapi, kwok or fake"),
    ),
    "karpenter provider without its NodePool": (
        with_changes(elastic_pool(), {"provider": {"type": "karpenter"}}),
        ("spec.provider", "provider.karpenter is required"),
    ),
    "machineDeployment not NAMESPACE/NAME": (
        with_changes(
            elastic_pool(),
            {"provider": {"type": "clusterapi", "clusterapi": {"machineDeployment": "gpu-md"}}},
        ),
        ("spec.provider.clusterapi.machineDeployment", "should match"),
    ),
    "karpenter provider on a core pool": (
        with_changes(
            core_pool(), {"provider": {"type": "karpenter", "karpenter": {"nodePool": "a"}}}
        ),
        ("spec.provider", "core pools are owned hardware"),
    ),
    "aws provider on a core pool": (
        with_changes(core_pool(), {"provider": {"type": "aws", "aws": {"region": "us-east-1"}}}),
        ("spec.provider", "core pools are owned hardware"),
    ),
    "aws provider without aws settings": (
        with_changes(elastic_pool(), {"provider": {"type": "aws"}}),
        ("spec.provider", "provider.aws is required"),
    ),
    "aws provider with both ASG and fleet": (
        with_changes(spot_pool(), {"provider.aws.autoScalingGroupName": "gpu-asg"}),
        ("spec.provider.aws", "set exactly one of autoScalingGroupName or launchTemplateName"),
    ),
    "fleet without instance types": (
        with_changes(spot_pool(), {"provider.aws.instanceTypes": None}),
        ("spec.provider.aws", "launchTemplateName needs instanceTypes"),
    ),
    "bad taint effect": (
        with_changes(elastic_pool(), {"taints": [{"key": "gpu", "effect": "NoWay"}]}),
        ("spec.taints[0].effect", 'Unsupported value: "NoWay"'),
    ),
    "policy: bad interval": (
        with_changes(scaling_policy(), {"interval": "5 minutes"}),
        ("spec.interval", "should match"),
    ),
    "policy: prometheus url without scheme": (
        with_changes(scaling_policy(), {"prometheus.url": "prometheus:9090"}),
        ("spec.prometheus.url", "should match"),
    ),
    "policy: hourly budget above monthly": (
        with_changes(scaling_policy(), {"budget": {"maxHourlyCost": 500, "monthlyLimit": 100}}),
        ("spec.budget", "budget.maxHourlyCost cannot exceed budget.monthlyLimit"),
    ),
    "policy: zero disruption percent": (
        with_changes(scaling_policy(), {"disruption.maxPercent": 0}),
        ("spec.disruption.maxPercent", "greater than 0"),
    ),
    "plan: two history sources": (
        with_changes(capacity_plan(), {"history.trace": {"path": "/data/openb.csv"}}),
        ("spec.history", "set exactly one of history.prometheus or history.trace"),
    ),
    "plan: no candidates": (
        with_changes(capacity_plan(), {"candidates": []}),
        ("spec.candidates", "at least 1 items"),
    ),
    "plan: preemptible share above one": (
        with_changes(capacity_plan(), {"preemptibleShare": 1.5}),
        ("spec.preemptibleShare", "less than or equal to 1"),
    ),
    "plan: missing cloud prices": (
        with_changes(capacity_plan(), {"cloud": None}),
        ("spec.cloud", "Required value"),
    ),
}


@pytest.mark.parametrize("crd_path", crd_files(), ids=lambda p: p.name)
def test_crd_is_accepted_and_structural(kube: KubeTest, crd_path: Path) -> None:
    result = kube.kubectl(
        "apply", "--server-side", "--field-manager=hybridgpu-tests", "--force-conflicts",
        "-f", str(crd_path), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    name = yaml.safe_load(crd_path.read_text())["metadata"]["name"]
    crd = kube.plane.apiextensions.read_custom_resource_definition(name)
    conditions = {c.type: c.status for c in crd.status.conditions or []}
    assert conditions.get("Established") == "True"
    assert conditions.get("NamesAccepted") == "True"
    assert conditions.get("NonStructuralSchema") != "True"


def test_crds_directory_holds_the_three_kinds() -> None:
    kinds = {yaml.safe_load(p.read_text())["spec"]["names"]["kind"] for p in crd_files()}
    assert {"GPUPool", "ScalingPolicy", "CapacityPlan"} <= kinds


@pytest.mark.parametrize(
    "obj",
    [elastic_pool(), core_pool(), spot_pool(), scaling_policy(), capacity_plan()],
    ids=["elastic-pool", "core-pool", "spot-pool", "scaling-policy", "capacity-plan"],
)
def test_valid_objects_are_accepted(kube: KubeTest, obj: dict[str, Any]) -> None:
    result = apply(kube, obj)
    assert result.returncode == 0, result.stderr
    plural = {"GPUPool": "gpupools", "ScalingPolicy": "scalingpolicies"}.get(
        obj["kind"], "capacityplans"
    )
    stored = kube.custom.get_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", plural, obj["metadata"]["name"]
    )
    assert stored["spec"] == obj["spec"]


def test_minimal_pool_without_optional_fields_is_accepted(kube: KubeTest) -> None:
    """Optional fields left out (minNodes, provider type) must not trip the CEL rules."""
    pool = {
        "apiVersion": API_VERSION,
        "kind": "GPUPool",
        "metadata": {"name": "minimal-core"},
        "spec": {
            "tier": "core",
            "gpu": {"model": "L4", "perNode": 4},
            "maxNodes": 2,
            "pricing": {"capexPerNode": 40000},
        },
    }
    result = apply(kube, pool)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("example", example_files(), ids=lambda p: p.name)
def test_example_is_accepted(kube: KubeTest, example: Path) -> None:
    # A server-side dry run validates like a real apply, and leaves no demo Job pending.
    result = kube.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=hybridgpu-tests",
        "-n", kube.namespace, "-f", str(example), check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{example}: {result.stderr}"


@pytest.mark.parametrize("case", sorted(INVALID_CASES))
def test_invalid_object_is_rejected_naming_the_field(kube: KubeTest, case: str) -> None:
    obj, expected = INVALID_CASES[case]
    result = apply(kube, obj)
    assert result.returncode != 0, f"{case}: accepted but should be rejected"
    for fragment in expected:
        assert fragment in result.stderr, f"{case}: {fragment!r} not in:\n{result.stderr}"


def test_invalid_cases_cover_at_least_fifteen_rules() -> None:
    assert len(INVALID_CASES) >= 15


def test_get_gpupools_shows_printer_columns(kube: KubeTest) -> None:
    assert apply(kube, elastic_pool("cols-pool")).returncode == 0
    status = {
        "status": {
            "nodes": {"total": 3, "ready": 3, "cordoned": 0},
            "gpus": {"total": 24, "allocated": 16, "idle": 8},
            "utilization": 61.5,
            "costPerHour": 98.31,
            "conditions": [
                {"type": "ScalingBlocked", "status": "True", "reason": "max_nodes"},
                {"type": "Ready", "status": "False", "reason": "PolicyNotFound"},
            ],
        }
    }
    kube.custom.patch_cluster_custom_object_status(
        "hybridgpu.io", "v1alpha1", "gpupools", "cols-pool", status
    )
    # The Ready condition's reason says at a glance a pool nobody ticks (PolicyNotFound), one
    # refused (InvalidSpec), above maxNodes or draining for its deletion.
    table = kube.kubectl("get", "gpupools", "cols-pool").stdout.splitlines()
    assert table[0].split() == [
        "NAME", "TIER", "STATUS", "NODES", "GPUS", "ALLOC", "UTIL", "$/H", "AGE"
    ]  # fmt: skip
    assert table[1].split()[:8] == [
        "cols-pool", "elastic", "PolicyNotFound", "3", "24", "16", "61.5", "98.31"
    ]  # fmt: skip
    wide = kube.kubectl("get", "gpupools", "cols-pool", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == [
        "NAME", "TIER", "STATUS", "NODES", "MAX", "GPUS", "ALLOC", "UTIL", "$/H", "AGE"
    ]  # fmt: skip
    assert wide[1].split()[3:5] == ["3", "10"]
    # The short name and the category reach the same objects.
    assert "cols-pool" in kube.kubectl("get", "gp").stdout
    assert "cols-pool" in kube.kubectl("get", "hybridgpu").stdout


def test_status_is_a_subresource(kube: KubeTest) -> None:
    assert apply(kube, elastic_pool("sub-pool")).returncode == 0
    before = kube.custom.get_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", "gpupools", "sub-pool"
    )
    kube.custom.patch_cluster_custom_object_status(
        "hybridgpu.io", "v1alpha1", "gpupools", "sub-pool", {"status": {"costPerHour": 1.5}}
    )
    # A status write does not bump the generation; a spec write through the main resource
    # cannot set status.
    after = kube.custom.patch_cluster_custom_object(
        "hybridgpu.io",
        "v1alpha1",
        "gpupools",
        "sub-pool",
        {"spec": {"maxNodes": 11}, "status": {"costPerHour": 999}},
    )
    assert after["status"]["costPerHour"] == 1.5
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1


def test_explain_gpupool_spec_shows_descriptions(kube: KubeTest) -> None:
    spec = kube.kubectl("explain", "gpupool.spec").stdout
    assert "Desired state of a GPUPool" in spec
    for field in ("tier", "gpu", "minNodes", "maxNodes", "provider", "pricing", "scaleDown"):
        assert f"  {field}\t" in spec, f"{field} missing from kubectl explain:\n{spec}"
    assert "elastic: on-demand cloud nodes" in spec
    pricing = kube.kubectl("explain", "gpupool.spec.pricing.capexPerNode").stdout
    assert "purchase price of one node in dollars" in pricing
