"""GPU utilization per node from Prometheus (DCGM exporter), for idle release.

A small reader until ``hybridgpu.metrics`` offers one: one instant query per tick, a short
timeout, and any failure reported as ``MetricsHealth(available=False)`` so nothing is
released while the operator is blind.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from hybridgpu.models.snapshot import MetricsHealth

NODE_LABELS = ("Hostname", "node", "kubernetes_node", "instance")


def utilization_query(metric: str, window: str) -> str:
    """PromQL: average utilization per node over ``window``, in percent."""
    scale = " * 100" if "PROF_GR_ENGINE_ACTIVE" in metric else ""
    by = ", ".join(NODE_LABELS)
    return f"avg by ({by}) (avg_over_time({metric}[{window}])){scale}"


def read_utilization(
    url: str | None, metric: str, window: str, timeout_seconds: float = 2.0
) -> tuple[dict[str, float], MetricsHealth]:
    """Utilization percent by node name, and whether the data can be trusted."""
    if not url:
        return {}, MetricsHealth(available=True, reason="no Prometheus configured")
    query = urllib.parse.urlencode({"query": utilization_query(metric, window)})
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/api/v1/query?{query}", timeout=timeout_seconds
        ) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as err:
        return {}, MetricsHealth(available=False, reason=f"Prometheus at {url}: {err}")
    if body.get("status") != "success":
        return {}, MetricsHealth(available=False, reason=str(body.get("error", "query failed")))
    out: dict[str, float] = {}
    for sample in body.get("data", {}).get("result", []):
        labels = sample.get("metric", {})
        node = next((labels[k] for k in NODE_LABELS if labels.get(k)), None)
        if node is not None:
            out[node.split(":")[0]] = float(sample["value"][1])
    return out, MetricsHealth(available=True)
