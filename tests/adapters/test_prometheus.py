"""The Prometheus input against a real Prometheus scraping a fake DCGM exporter, with history
backfilled by promtool; and against a Prometheus that is down or too slow."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hybridgpu.metrics.prometheus import (
    MetricsQueryError,
    MetricsUnavailable,
    PrometheusClient,
)
from hybridgpu.models.policy import PrometheusSpec
from support.ports import free_port
from support.prometheus import (
    HISTORY_METRIC,
    HISTORY_POINTS,
    HISTORY_STEP_SECONDS,
    FakeDCGM,
    Prometheus,
    dcgm,
    history_value,
    prometheus,
)

__all__ = ["dcgm", "prometheus"]  # fixtures used by name

pytestmark = pytest.mark.adapters


def present(node: str) -> str:
    return f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}"}}'


def test_utilization_is_averaged_per_node_over_the_window(
    prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    started = time.time()
    dcgm.set_utilization("gpu-a", [80.0, 40.0])
    dcgm.set_utilization("gpu-b", [5.0])
    prometheus.wait_for(present("gpu-a"), lambda r: len(r) == 2)
    prometheus.wait_for(present("gpu-b"), lambda r: len(r) == 1)
    # The client's clock is pinned to a moment after the samples exist: the age it reports
    # is then a fact about the samples, not about how fast this machine ran the test.
    pinned = time.time()
    client = PrometheusClient(prometheus.url, clock=lambda: pinned)

    found = client.utilization(window="1m", stale_after="30s")

    assert found["gpu-a"].percent == pytest.approx(60.0)
    assert found["gpu-b"].percent == pytest.approx(5.0)
    assert not found["gpu-a"].stale
    age = found["gpu-a"].age_seconds
    assert age is not None and 0 <= age <= pinned - started


def test_node_label_is_configurable(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    dcgm.set_utilization("gpu-i", [20.0])
    prometheus.wait_for(present("gpu-i"), lambda r: len(r) == 1)

    by_instance = PrometheusClient(prometheus.url, node_labels=("instance",)).utilization()

    # honor_labels keeps the exporter's labels; instance is the scrape target, port dropped.
    assert set(by_instance) == {"127.0.0.1"}
    assert not by_instance["127.0.0.1"].stale


def test_engine_active_ratio_is_read_as_percent(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    labels = {"gpu": "0", "UUID": "GPU-gpu-e-0", "Hostname": "gpu-e"}
    dcgm.engine_active.labels(**labels).set(0.25)
    prometheus.wait_for('DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname="gpu-e"}', lambda r: len(r) == 1)

    found = PrometheusClient(prometheus.url).utilization("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "1m")

    assert found["gpu-e"].percent == pytest.approx(25.0)


def test_a_node_that_stopped_reporting_is_stale_not_idle(
    prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    dcgm.set_utilization("gpu-gone", [70.0])
    prometheus.wait_for(present("gpu-gone"), lambda r: len(r) == 1)

    dcgm.forget_node("gpu-gone")
    prometheus.wait_for(present("gpu-gone"), lambda r: len(r) == 0)  # staleness marker
    client = PrometheusClient(prometheus.url)
    readings = client.readings(PrometheusSpec(window="1m", stale_after="30s"))

    gone = readings.utilization["gpu-gone"]
    assert gone.stale and gone.age_seconds is None
    assert gone.percent == pytest.approx(70.0)  # what it was, never 0%
    assert readings.utilization_percent("gpu-gone") is None
    assert readings.utilization_percent("never-seen") is None


def test_a_sample_older_than_stale_after_is_stale(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    dcgm.set_utilization("gpu-old", [30.0])
    prometheus.wait_for(present("gpu-old"), lambda r: len(r) == 1)
    later = [time.time() + 600]
    client = PrometheusClient(prometheus.url, clock=lambda: later[0])

    found = client.utilization(window="1m", stale_after="2m")

    assert found["gpu-old"].stale and (found["gpu-old"].age_seconds or 0) > 500


def test_xid_errors_and_opencost_prices_per_node(prometheus: Prometheus, dcgm: FakeDCGM) -> None:
    dcgm.set_utilization("gpu-x", [50.0, 50.0])
    dcgm.xid.labels(gpu="0", UUID="GPU-gpu-x-0", Hostname="gpu-x").set(0)
    dcgm.xid.labels(gpu="1", UUID="GPU-gpu-x-1", Hostname="gpu-x").set(79)
    dcgm.gpu_hourly_cost.labels(node="gpu-x").set(2.5)
    prometheus.wait_for('DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-x"} > 0', lambda r: len(r) == 1)
    prometheus.wait_for('node_gpu_hourly_cost{node="gpu-x"}', lambda r: len(r) == 1)

    readings = PrometheusClient(prometheus.url).readings(
        PrometheusSpec(window="1m", stale_after="30s")
    )

    assert readings.health.available
    assert readings.xid_gpus.get("gpu-x") == 1
    assert "gpu-a" not in readings.xid_gpus
    assert readings.gpu_hourly_cost_dollars["gpu-x"] == pytest.approx(2.5)
    assert readings.utilization_percent("gpu-x") == pytest.approx(50.0)


def test_no_data_at_all_is_unavailable(prometheus: Prometheus) -> None:
    readings = PrometheusClient(prometheus.url).readings(
        PrometheusSpec(utilization_query="DCGM_FI_DEV_MEM_COPY_UTIL", window="1m")
    )
    assert not readings.health.available
    assert "no samples of DCGM_FI_DEV_MEM_COPY_UTIL" in readings.health.reason


def test_range_query_returns_the_backfilled_history(prometheus: Prometheus) -> None:
    end = prometheus.history_end
    start = end - (HISTORY_POINTS - 1) * HISTORY_STEP_SECONDS

    series = PrometheusClient(prometheus.url).query_range(
        HISTORY_METRIC, start, end, HISTORY_STEP_SECONDS
    )

    by_criticality = {s.labels["criticality"]: s.points for s in series}
    assert set(by_criticality) == {"critical", "standard", "preemptible"}
    for criticality, points in by_criticality.items():
        assert len(points) == HISTORY_POINTS
        assert [v for _, v in points] == [
            history_value(criticality, i) for i in range(HISTORY_POINTS)
        ]
        assert points[0][0] == start and points[-1][0] == end


def test_bad_promql_is_a_query_error(prometheus: Prometheus) -> None:
    with pytest.raises(MetricsQueryError, match="rejected"):
        PrometheusClient(prometheus.url).query("sum(")


def test_prometheus_down_is_unavailable_never_zero() -> None:
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_seconds=1)

    with pytest.raises(MetricsUnavailable, match="unreachable"):
        client.utilization()
    readings = client.readings(PrometheusSpec())

    assert not readings.health.available and "unreachable" in readings.health.reason
    assert readings.utilization == {}


@dataclass
class SlowPrometheus:
    """An HTTP server on 127.0.0.1 that holds every request until released (at teardown),
    like an overloaded Prometheus; ``answered`` counts the requests it answered."""

    url: str
    answered: list[str]


@pytest.fixture
def slow_prometheus() -> Iterator[SlowPrometheus]:
    release = threading.Event()
    answered: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            release.wait(60)
            answered.append(self.path)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[]}}')
            except OSError:
                pass  # the client gave up long ago

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield SlowPrometheus(f"http://127.0.0.1:{server.server_address[1]}", answered)
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_slow_prometheus_times_out_instead_of_waiting(slow_prometheus: SlowPrometheus) -> None:
    client = PrometheusClient(slow_prometheus.url, timeout_seconds=0.5)

    readings = client.readings(PrometheusSpec())

    # The server answers nothing before it is released: the client gave up on its own.
    assert slow_prometheus.answered == []
    assert not readings.health.available
    assert "did not answer within 0.5s" in readings.health.reason
