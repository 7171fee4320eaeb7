"""Per-pod GPU utilization for idle reclaim, against a real Prometheus scraping a fake DCGM
exporter that labels each GPU with the pod it is allocated to."""

from __future__ import annotations

import pytest

from hybridgpu.metrics.prometheus import PrometheusClient, pod_of
from hybridgpu.models.policy import PrometheusSpec
from support.prometheus import FakeDCGM, Prometheus, dcgm, prometheus

__all__ = ["dcgm", "prometheus"]  # fixtures used by name

pytestmark = pytest.mark.adapters


def test_engine_active_is_preferred_and_gpu_util_fills_in_for_pods_without_it(
    prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    # nb-1 reports both fields (engine-active wins); nb-2 only GPU_UTIL.
    dcgm.set_pod_utilization("gpu-p", "lab", "nb-1", 80.0, gpu=0)
    dcgm.set_pod_utilization("gpu-p", "lab", "nb-1", 3.0, gpu=0, engine_active=True)
    dcgm.set_pod_utilization("gpu-p", "lab", "nb-2", 40.0, gpu=1)
    dcgm.set_pod_utilization("gpu-p", "lab", "nb-2", 60.0, gpu=2)
    prometheus.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="nb-2"}', lambda r: len(r) == 2)
    prometheus.wait_for('DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod="nb-1"}', lambda r: len(r) == 1)

    found = PrometheusClient(prometheus.url).pod_utilization(window="1m", stale_after="30s")

    assert found["lab/nb-1"].percent == pytest.approx(3.0)
    assert found["lab/nb-1"].metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert found["lab/nb-2"].percent == pytest.approx(50.0)  # averaged over its two GPUs
    assert found["lab/nb-2"].metric == "DCGM_FI_DEV_GPU_UTIL"
    assert not found["lab/nb-2"].stale
    # A GPU allocated to no pod is in the node's average, never a pod's.
    assert not any(key.endswith("/") for key in found)


def test_readings_carry_pod_utilization(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    dcgm.set_utilization("gpu-q", [10.0])
    dcgm.set_pod_utilization("gpu-q", "lab", "nb-q", 1.0, gpu=1)
    prometheus.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="nb-q"}', lambda r: len(r) == 1)

    spec = PrometheusSpec(url=prometheus.url, window="1m", stale_after="30s")
    readings = PrometheusClient(prometheus.url).readings(spec)

    assert readings.health.available
    assert readings.pod_utilization["lab/nb-q"].percent == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({"namespace": "lab", "pod": "nb"}, "lab/nb"),
        # Prometheus renamed the exporter's labels (honor_labels false): the exported_ ones
        # name the workload, the plain ones the exporter's own pod.
        (
            {
                "namespace": "gpu-operator",
                "pod": "dcgm-exporter-x",
                "exported_namespace": "lab",
                "exported_pod": "nb",
            },
            "lab/nb",
        ),
        ({"namespace": "lab"}, None),
        ({"pod": "nb"}, None),
    ],
)
def test_the_pod_of_a_series(labels: dict[str, str], want: str | None) -> None:
    assert pod_of(labels) == want
