"""A real Prometheus (Debian's package, started here) scraping a fake DCGM exporter.

Import the fixtures into a test module: ``from support.prometheus import dcgm, prometheus``.

- ``dcgm`` (session): a prometheus_client HTTP server on 127.0.0.1 serving the DCGM
  exporter's metrics (``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``,
  ``DCGM_FI_DEV_XID_ERRORS``), OpenCost's ``node_gpu_hourly_cost`` and vLLM's
  ``vllm:generation_tokens_total``; tests set values.
- ``prometheus`` (session): ``/usr/bin/prometheus`` on a free 127.0.0.1 port with a temp
  config scraping ``dcgm`` every second, its TSDB pre-filled with history by
  ``promtool tsdb create-blocks-from openmetrics`` (:data:`HISTORY`). Stopped at the end,
  also when tests fail. Override the binaries with HYBRIDGPU_PROMETHEUS / HYBRIDGPU_PROMTOOL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app

from support.children import DIE_WITH_PARENT
from support.ports import free_port

HISTORY_METRIC = "hybridgpu_test_gpus_in_use"
HISTORY_STEP_SECONDS = 300
HISTORY_POINTS = 48  # four hours


def history_value(criticality: str, index: int) -> float:
    """The backfilled GPU demand at step ``index``: a known function the tests check."""
    base = {"critical": 8.0, "standard": 16.0, "preemptible": 4.0}[criticality]
    return base + (index % 6)


def _binary(env: str, default: str) -> str:
    path = os.environ.get(env, default)
    if not Path(path).exists() and shutil.which(Path(path).name) is None:
        pytest.fail(f"{path} is missing: run `make prometheus-bin` (Debian package prometheus)")
    return path if Path(path).exists() else str(shutil.which(Path(path).name))


def promtool_binary() -> str:
    """promtool: $HYBRIDGPU_PROMTOOL, else /usr/bin/promtool, else the one on $PATH; fails
    the test when there is none (every tier that needs it uses this lookup)."""
    return _binary("HYBRIDGPU_PROMTOOL", "/usr/bin/promtool")


class DCGMField:
    """One DCGM exporter field: a series per GPU (labels gpu, UUID, Hostname) that also
    names the pod the GPU is allocated to (``namespace``, ``pod``; empty when none, and
    Prometheus drops empty labels), as the exporter's Kubernetes mapping does."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    def labels(self, namespace: str = "", pod: str = "", **gpu: str) -> Gauge:
        return self.gauge.labels(namespace=namespace, pod=pod, **gpu)

    def remove_node(self, node: str) -> None:
        for labels in [s.labels for m in self.gauge.collect() for s in m.samples]:
            if labels.get("Hostname") == node:
                self.gauge.remove(*(labels[k] for k in DCGM_LABELS))


DCGM_LABELS = ("gpu", "UUID", "Hostname", "namespace", "pod")


@dataclass
class FakeDCGM:
    """What a DCGM exporter (plus OpenCost and vLLM) would expose; set values per node and
    GPU."""

    registry: CollectorRegistry
    util: DCGMField
    engine_active: DCGMField
    xid: DCGMField
    gpu_hourly_cost: Gauge
    generated_tokens: Counter
    """vLLM's vllm:generation_tokens_total, labels pod and kubernetes_node."""
    server: WSGIServer

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def set_utilization(self, node: str, percents: list[float]) -> None:
        for gpu, percent in enumerate(percents):
            labels = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "Hostname": node}
            self.util.labels(**labels).set(percent)

    def set_pod_utilization(
        self,
        node: str,
        namespace: str,
        pod: str,
        percent: float,
        *,
        gpu: int = 0,
        engine_active: bool = False,
    ) -> None:
        """The GPU ``gpu`` of ``node``, allocated to ``namespace/pod``, at ``percent``: in
        DCGM_FI_DEV_GPU_UTIL, or as a ratio in DCGM_FI_PROF_GR_ENGINE_ACTIVE."""
        labels = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "Hostname": node}
        if engine_active:
            self.engine_active.labels(namespace, pod, **labels).set(percent / 100)
        else:
            self.util.labels(namespace, pod, **labels).set(percent)

    def forget_node(self, node: str) -> None:
        """The node's exporter stopped reporting (its series vanish from the next scrape)."""
        for field in (self.util, self.engine_active, self.xid):
            field.remove_node(node)


def start_fake_dcgm() -> FakeDCGM:
    registry = CollectorRegistry()
    labels = list(DCGM_LABELS)
    util = DCGMField(
        Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels, registry=registry)
    )
    engine = DCGMField(
        Gauge(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "Ratio of time the graphics engine is active.",
            labels,
            registry=registry,
        )
    )
    xid = DCGMField(
        Gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error.", labels, registry=registry)
    )
    cost = Gauge("node_gpu_hourly_cost", "OpenCost GPU hourly cost.", ["node"], registry=registry)
    tokens = Counter(
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        ["pod", "kubernetes_node"],
        registry=registry,
    )
    app = make_wsgi_app(registry)

    def text_format(environ: dict[str, object], start_response: Any) -> Any:
        # The classic text format, as vLLM serves it: prometheus_client's OpenMetrics output
        # would turn vllm:generation_tokens_total into vllm_generation_tokens_total.
        return app({k: v for k, v in environ.items() if k != "HTTP_ACCEPT"}, start_response)

    server = make_server("127.0.0.1", 0, text_format, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return FakeDCGM(registry, util, engine, xid, cost, tokens, server)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="session")
def dcgm() -> Iterator[FakeDCGM]:
    exporter = start_fake_dcgm()
    try:
        yield exporter
    finally:
        exporter.server.shutdown()
        exporter.server.server_close()


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    history_end: float
    """Time of the last backfilled point (seconds since the epoch, on a step boundary)."""
    command: tuple[str, ...] = ()
    """How it was started: :func:`start_prometheus_again` runs it again (same port, TSDB)."""
    workdir: Path | None = None

    def api(self, path: str, **params: str) -> dict[str, object]:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=5) as response:
            body: dict[str, object] = json.loads(response.read())
        return body

    def wait_for(self, promql: str, ready: Callable[[list[dict[str, object]]], bool]) -> None:
        """Poll an instant query until ``ready(result)`` (scrapes land every second)."""
        deadline = time.monotonic() + 20
        result: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            data = self.api("/api/v1/query", query=promql)["data"]
            result = data["result"]  # type: ignore[index]
            if ready(result):
                return
            time.sleep(0.25)
        raise AssertionError(f"Prometheus never had {promql}: {result}")


def write_history(path: Path, end: float) -> None:
    """OpenMetrics text of HISTORY_METRIC, one point per step, ending at ``end``."""
    lines = [f"# TYPE {HISTORY_METRIC} gauge", f"# HELP {HISTORY_METRIC} GPUs in use."]
    for criticality in ("critical", "standard", "preemptible"):
        for index in range(HISTORY_POINTS):
            at = end - (HISTORY_POINTS - 1 - index) * HISTORY_STEP_SECONDS
            value = history_value(criticality, index)
            lines.append(f'{HISTORY_METRIC}{{criticality="{criticality}"}} {value} {at:.0f}')
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


def start_prometheus(workdir: Path, scrape_target: str) -> Prometheus:
    prometheus_bin = _binary("HYBRIDGPU_PROMETHEUS", "/usr/bin/prometheus")
    promtool_bin = promtool_binary()
    data = workdir / "data"
    data.mkdir()
    # History ends well before now so the backfilled blocks never overlap the live head.
    step = HISTORY_STEP_SECONDS
    history_end = (time.time() - 3 * 3600) // step * step
    openmetrics = workdir / "history.om"
    write_history(openmetrics, history_end)
    subprocess.run(
        [promtool_bin, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: dcgm\n"
        "    honor_labels: true\n"
        "    static_configs:\n"
        f"      - targets: ['{scrape_target}']\n"
    )
    port = free_port()
    command = (
        prometheus_bin,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
        "--log.level=warn",
    )
    server = Prometheus(f"http://127.0.0.1:{port}", _spawn(command, workdir), history_end)
    server.command, server.workdir = command, workdir
    _wait_ready(server)
    return server


def start_prometheus_again(server: Prometheus) -> None:
    """Start a stopped Prometheus again on its port with its TSDB (an outage ends)."""
    if server.workdir is None or not server.command:
        raise RuntimeError("this Prometheus was not started by start_prometheus")
    if server.process.poll() is None:
        return
    server.process = _spawn(server.command, server.workdir)
    _wait_ready(server)


def _spawn(command: tuple[str, ...], workdir: Path) -> subprocess.Popen[bytes]:
    with (workdir / "prometheus.log").open("ab") as log_file:
        return subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            preexec_fn=DIE_WITH_PARENT,
        )


def _wait_ready(server: Prometheus) -> None:
    workdir = server.workdir or Path(".")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            log_text = (workdir / "prometheus.log").read_text()[-3000:]
            raise RuntimeError(f"prometheus exited: {log_text}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    stop_prometheus(server)
    raise RuntimeError("prometheus was not ready within 30 s")


def stop_prometheus(server: Prometheus) -> None:
    """Stop it (SIGTERM, SIGKILL after 15 s); a stopped one is left as it is."""
    if server.process.poll() is not None:
        return
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)


@pytest.fixture(scope="session")
def prometheus(dcgm: FakeDCGM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = start_prometheus(tmp_path_factory.mktemp("prometheus"), dcgm.target)
    try:
        yield server
    finally:
        stop_prometheus(server)
