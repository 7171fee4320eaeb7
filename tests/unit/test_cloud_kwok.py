"""The kwok provider's pure parts: the Node it makes for a pool, and its boot delay.
Its behaviour against the control plane is in tests/adapters/test_kwok_provider.py."""

from __future__ import annotations

import pytest
from kubernetes import client

from hybridgpu.cloud.base import ProviderError
from hybridgpu.cloud.kwok import (
    BOOT_DELAY_ENV,
    GPU_REPORT_ENV,
    TERMINATION_ENV,
    KwokProvider,
    default_boot_delay_seconds,
    default_gpu_report_seconds,
    default_termination_seconds,
    kwok_node,
)
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def spot_spec(**provider: object) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "L4", "perNode": 4},
            "maxNodes": 3,
            "provider": {"type": "kwok", **provider},
            "pricing": {"perNodeHour": 3.0},
            "taints": [{"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}],
            "labels": {"team": "ml"},
        }
    )


def test_a_node_carries_the_pool_label_gpus_taints_and_the_kwok_annotation() -> None:
    node = kwok_node("spot-ab12cd", "spot", spot_spec())

    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    labels = node["metadata"]["labels"]
    assert labels["hybridgpu.io/pool"] == "spot" and labels["hybridgpu.io/tier"] == "spot"
    assert labels["team"] == "ml" and labels["nvidia.com/gpu.product"] == "L4"
    assert node["spec"]["providerID"] == "kwok://spot/spot-ab12cd"
    assert node["spec"]["taints"] == [
        {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
    ]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_a_node_whose_device_plugin_has_not_reported_yet_has_no_gpus() -> None:
    node = kwok_node("spot-ab12cd", "spot", spot_spec(), gpus_reported=False)
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert node["status"]["capacity"]["cpu"] == "96"


@pytest.mark.parametrize(("env", "want"), [(None, 10.0), ("", 10.0), ("2.5", 2.5), ("0", 0.0)])
def test_the_default_boot_delay_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str | None, want: float
) -> None:
    if env is None:
        monkeypatch.delenv("HYBRIDGPU_KWOK_DELAY_SECONDS", raising=False)
    else:
        monkeypatch.setenv("HYBRIDGPU_KWOK_DELAY_SECONDS", env)
    assert default_boot_delay_seconds() == want


@pytest.mark.parametrize("env", ["soon", "-1", "inf", "nan"])
def test_a_bad_boot_delay_in_the_environment_is_a_lasting_provider_error(
    monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.setenv("HYBRIDGPU_KWOK_DELAY_SECONDS", env)
    with pytest.raises(ProviderError, match="HYBRIDGPU_KWOK_DELAY_SECONDS") as raised:
        default_boot_delay_seconds()
    assert raised.value.retryable is False


def test_a_pools_own_boot_delay_wins_over_the_providers() -> None:
    kwok = KwokProvider(boot_delay_seconds=7.0, api_client=client.ApiClient())

    assert kwok.boot_delay_for(spot_spec()) == 7.0
    assert kwok.boot_delay_for(spot_spec(kwok={"bootDelay": "1m30s"})) == 90.0


@pytest.mark.parametrize(
    ("name", "read", "unset"),
    [
        (BOOT_DELAY_ENV, default_boot_delay_seconds, 10.0),
        (TERMINATION_ENV, default_termination_seconds, 0.0),
        (GPU_REPORT_ENV, default_gpu_report_seconds, 0.0),
    ],
)
def test_the_kwok_seconds_from_the_environment(monkeypatch, name, read, unset) -> None:
    monkeypatch.delenv(name, raising=False)
    assert read() == unset
    monkeypatch.setenv(name, "2.5")
    assert read() == 2.5
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ProviderError, match=f"{name}=.*finite number of seconds >= 0"):
            read()
