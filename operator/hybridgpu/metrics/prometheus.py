"""What Prometheus knows about the GPUs: PromQL over the HTTP API (urllib, no client library).

- per-node GPU utilization averaged over the policy window, in percent (``DCGM_FI_DEV_GPU_UTIL``
  by default; ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, a 0-1 ratio, is scaled to percent), each with
  the age of the node's newest sample: a node whose newest sample is older than
  ``staleAfter``, or that has no current sample, is *stale*; a node with no data at all is
  absent. Neither is ever reported as 0%.
- GPUs with XID errors per node (``DCGM_FI_DEV_XID_ERRORS``, the last XID code of a GPU);
- OpenCost's ``node_gpu_hourly_cost`` per node when it is there;
- per-pod GPU utilization (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, else ``DCGM_FI_DEV_GPU_UTIL``,
  on the series the DCGM exporter labels with the pod it allocated the GPU to), for idle
  reclaim;
- a counter of generated tokens per node (``tokensQuery``, vLLM's
  ``vllm:generation_tokens_total`` by default), turned into tokens per tick by
  :class:`TokenCounter`;
- range queries for the TCO planner's demand history.

Results are plain dataclasses keyed by Kubernetes node name, taken from the first non-empty
label of ``node_labels`` (``instance`` loses its ``:port``). Failures raise
:class:`MetricsUnavailable` (or :class:`MetricsQueryError` for a query Prometheus rejects);
:meth:`PrometheusClient.readings` turns them into ``MetricsHealth(available=False)``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hybridgpu.errors import HybridGPUError
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.policy import PrometheusSpec
from hybridgpu.models.snapshot import MetricsHealth

log = logging.getLogger(__name__)

DEFAULT_UTILIZATION_METRIC = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
OPENCOST_GPU_COST_METRIC = "node_gpu_hourly_cost"
DEFAULT_NODE_LABELS = ("Hostname", "node", "kubernetes_node", "instance")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?$")


class MetricsUnavailable(HybridGPUError):
    """Prometheus could not be asked (down, slow, unreachable) or answered with an error."""


class MetricsQueryError(MetricsUnavailable):
    """Prometheus rejected the query itself (bad PromQL): a configuration to fix."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant query."""

    labels: dict[str, str]
    value: float
    timestamp: float
    """Evaluation time, seconds since the epoch."""


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: (seconds since the epoch, value) points in time order."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class NodeUtilization:
    """GPU utilization of one node over the window."""

    node: str
    percent: float
    """Average over the node's GPUs and the window, 0-100."""
    age_seconds: float | None
    """Age of the node's newest sample at query time; None when it has no current sample."""
    stale: bool
    """True when the newest sample is older than staleAfter or missing: do not act on it."""


@dataclass(frozen=True, slots=True)
class PodUtilization:
    """GPU utilization of one pod's GPUs over the window."""

    pod: str
    """``namespace/name``."""
    percent: float
    age_seconds: float | None
    stale: bool
    metric: str
    """The DCGM field it was read from."""


POD_UTILIZATION_METRICS = (ENGINE_ACTIVE_METRIC, DEFAULT_UTILIZATION_METRIC)
"""Per-pod utilization, in order of preference: the engine-active ratio measures work done,
GPU_UTIL only that a kernel ran; a pod absent from the first is looked up in the second."""
POD_LABELS = ("exported_namespace", "exported_pod", "namespace", "pod")
"""The DCGM exporter's pod labels; ``exported_`` ones when Prometheus renamed them because
the scrape target had its own (``honor_labels: false``)."""


@dataclass(frozen=True, slots=True)
class GPUReadings:
    """Everything one tick reads from Prometheus, keyed by node name."""

    taken_at: float
    health: MetricsHealth
    utilization: dict[str, NodeUtilization] = field(default_factory=dict)
    xid_gpus: dict[str, int] = field(default_factory=dict)
    """GPUs of the node that reported a non-zero XID code within the window."""
    gpu_hourly_cost_dollars: dict[str, float] = field(default_factory=dict)
    """OpenCost's price of one GPU-hour of the node; empty when OpenCost is not there."""
    token_counters: list[Sample] | None = None
    """Current values of the tokens counter, one per series; None when it is not configured
    or could not be read (not the same as no tokens)."""
    pod_utilization: dict[str, PodUtilization] = field(default_factory=dict)
    """Per pod (``namespace/name``); empty when the exporter does not label pods."""

    def utilization_percent(self, node: str) -> float | None:
        """The node's utilization, or None when it is unknown or stale (never 0 for unknown)."""
        found = self.utilization.get(node)
        return None if found is None or found.stale else found.percent


def is_metric_name(query: str) -> bool:
    """True for a bare metric name (optionally with a label matcher), not an expression."""
    return bool(_METRIC_NAME.match(query.strip()))


def utilization_scale(query: str) -> float:
    """100 for DCGM_FI_PROF_GR_ENGINE_ACTIVE (a 0-1 ratio), else 1 (already percent)."""
    return 100.0 if ENGINE_ACTIVE_METRIC in query else 1.0


class PrometheusClient:
    """Reads GPU metrics from one Prometheus. ``clock`` gives seconds since the epoch."""

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 3.0,
        node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Prometheus URL must start with http:// or https://: {url!r}")
        if not node_labels:
            raise ValueError("node_labels must name at least one label")
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.node_labels = node_labels
        self._clock = clock

    # --- raw PromQL ---------------------------------------------------------------------

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Instant query; ``at`` defaults to Prometheus' now."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        if data.get("resultType") not in ("vector", "scalar"):
            raise MetricsQueryError(f"{promql!r} gave a {data.get('resultType')}, not a vector")
        if data["resultType"] == "scalar":
            at_s, value = data["result"]
            return [Sample({}, float(value), float(at_s))]
        return [
            Sample(dict(r.get("metric", {})), float(r["value"][1]), float(r["value"][0]))
            for r in data.get("result", [])
        ]

    def query_range(
        self, promql: str, start: float, end: float, step_seconds: float
    ) -> list[Series]:
        """Range query from ``start`` to ``end`` (seconds since the epoch), one point per
        ``step_seconds``."""
        if step_seconds <= 0 or end < start:
            raise ValueError("query_range needs step_seconds > 0 and end >= start")
        data = self._get(
            "/api/v1/query_range",
            {
                "query": promql,
                "start": f"{start:.3f}",
                "end": f"{end:.3f}",
                "step": f"{step_seconds:g}",
            },
        )
        return [
            Series(
                dict(r.get("metric", {})),
                [(float(t), float(v)) for t, v in r.get("values", [])],
            )
            for r in data.get("result", [])
        ]

    # --- GPU readings -------------------------------------------------------------------

    def utilization(
        self,
        query: str = DEFAULT_UTILIZATION_METRIC,
        window: str = "5m",
        stale_after: str = "2m",
    ) -> dict[str, NodeUtilization]:
        """Average GPU utilization of each node over ``window``, percent, with sample age."""
        by = self._by()
        scale = utilization_scale(query)
        if is_metric_name(query):
            averaged = f"avg by ({by}) (avg_over_time({query}[{window}]))"
            newest = f"max by ({by}) (timestamp({query}))"
        else:  # an expression: average it over the window with a subquery
            averaged = f"avg by ({by}) (avg_over_time(({query})[{window}:]))"
            newest = f"max by ({by}) (timestamp({query}))"
        values = self._per_node(self.query(averaged), mean=True)
        newest_at = self._per_node(self.query(newest), mean=False)
        now = self._clock()
        limit = parse_duration_seconds(stale_after)
        out: dict[str, NodeUtilization] = {}
        for node, value in values.items():
            if not math.isfinite(value):
                continue
            last = newest_at.get(node)
            age = max(now - last, 0.0) if last is not None else None
            out[node] = NodeUtilization(
                node=node,
                percent=min(max(value * scale, 0.0), 100.0),
                age_seconds=age,
                stale=age is None or age > limit,
            )
        return out

    def pod_utilization(
        self, window: str = "5m", stale_after: str = "2m"
    ) -> dict[str, PodUtilization]:
        """Average GPU utilization of each pod's GPUs over ``window``, percent, with the age
        of its newest sample (stale past ``stale_after``), from the first metric of
        POD_UTILIZATION_METRICS that has the pod."""
        by = ", ".join(POD_LABELS)
        now = self._clock()
        limit = parse_duration_seconds(stale_after)
        out: dict[str, PodUtilization] = {}
        for metric in POD_UTILIZATION_METRICS:
            try:
                values = self.query(f"avg by ({by}) (avg_over_time({metric}[{window}]))")
                newest = self.query(f"max by ({by}) (timestamp({metric}))")
            except MetricsQueryError as exc:
                log.warning("per-pod %s unreadable: %s", metric, exc)
                continue
            newest_at: dict[str, float] = {}
            for sample in newest:
                key = pod_of(sample.labels)
                if key is not None:
                    newest_at[key] = max(newest_at.get(key, sample.value), sample.value)
            scale = utilization_scale(metric)
            for sample in values:
                key = pod_of(sample.labels)
                if key is None or key in out or not math.isfinite(sample.value):
                    continue
                last = newest_at.get(key)
                age = max(now - last, 0.0) if last is not None else None
                out[key] = PodUtilization(
                    pod=key,
                    percent=min(max(sample.value * scale, 0.0), 100.0),
                    age_seconds=age,
                    stale=age is None or age > limit,
                    metric=metric,
                )
        return out

    def xid_gpus(self, window: str = "5m") -> dict[str, int]:
        """GPUs per node that reported a non-zero XID error code within ``window``."""
        by = self._by()
        samples = self.query(f"count by ({by}) (max_over_time({XID_METRIC}[{window}]) > 0)")
        return {node: int(v) for node, v in self._per_node(samples, mean=False, add=True).items()}

    def gpu_hourly_cost_dollars(self) -> dict[str, float]:
        """OpenCost's dollars per GPU-hour of each node; empty when OpenCost is not there."""
        samples = self.query(f"avg by ({self._by()}) ({OPENCOST_GPU_COST_METRIC})")
        return self._per_node(samples, mean=True)

    def token_counters(self, counter: str) -> list[Sample]:
        """Current values of a tokens counter (e.g. ``vllm:generation_tokens_total``), one
        sample per series; :class:`TokenCounter` turns them into tokens per node."""
        return self.query(counter)

    def readings(self, spec: PrometheusSpec) -> GPUReadings:
        """One tick's GPU readings under a ScalingPolicy's ``prometheus`` settings.

        Never raises: when utilization cannot be read the result says so in ``health``
        (available=False, with the reason), so the operator releases nothing while blind.
        """
        now = self._clock()
        try:
            utilization = self.utilization(spec.utilization_query, spec.window, spec.stale_after)
        except MetricsUnavailable as exc:
            return GPUReadings(now, MetricsHealth(available=False, reason=str(exc)))
        if not utilization:
            health = MetricsHealth(
                available=False,
                reason=f"no samples of {spec.utilization_query} in the last {spec.window}",
            )
        else:
            ages = [u.age_seconds for u in utilization.values() if u.age_seconds is not None]
            freshest = min(ages) if ages else math.inf
            limit = parse_duration_seconds(spec.stale_after)
            if freshest > limit:
                health = MetricsHealth(
                    available=False,
                    age_seconds=freshest if ages else 0.0,
                    reason=f"newest sample of {spec.utilization_query} is older than "
                    f"{spec.stale_after}",
                )
            else:
                health = MetricsHealth(available=True, age_seconds=freshest)
        xid: dict[str, int] = {}
        cost: dict[str, float] = {}
        tokens: list[Sample] | None = None
        try:
            xid = self.xid_gpus(spec.window)
            cost = self.gpu_hourly_cost_dollars()
        except MetricsUnavailable as exc:
            log.warning("XID errors or GPU prices unavailable: %s", exc)
        if spec.tokens_query:
            try:
                tokens = self.token_counters(spec.tokens_query)
            except MetricsUnavailable as exc:
                log.warning("tokens counter %s unavailable: %s", spec.tokens_query, exc)
        pods: dict[str, PodUtilization] = {}
        try:
            pods = self.pod_utilization(spec.window, spec.stale_after)
        except MetricsUnavailable as exc:
            log.warning("per-pod GPU utilization unavailable (no idle reclaim): %s", exc)
        return GPUReadings(now, health, utilization, xid, cost, tokens, pods)

    # --- helpers ------------------------------------------------------------------------

    def _by(self) -> str:
        return ", ".join(self.node_labels)

    def node_of(self, labels: dict[str, str]) -> str | None:
        """Node name of a series: its first non-empty label of ``node_labels``."""
        for name in self.node_labels:
            value = labels.get(name)
            if value:
                return value.rsplit(":", 1)[0] if name == "instance" else value
        return None

    def _per_node(
        self, samples: list[Sample], *, mean: bool, add: bool = False
    ) -> dict[str, float]:
        # Several groups may name one node (e.g. different instance labels): combine them.
        grouped: dict[str, list[float]] = {}
        for sample in samples:
            node = self.node_of(sample.labels)
            if node is not None:
                grouped.setdefault(node, []).append(sample.value)
        if add:
            return {node: sum(v) for node, v in grouped.items()}
        if mean:
            return {node: sum(v) / len(v) for node, v in grouped.items()}
        return {node: max(v) for node, v in grouped.items()}

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_seconds) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            body = _error_body(exc)
            message = body.get("error") or exc.reason
            if exc.code in (400, 422) and body.get("errorType") in ("bad_data", "execution"):
                raise MetricsQueryError(
                    f"Prometheus at {self.url} rejected {params.get('query')!r}: {message}"
                ) from exc
            raise MetricsUnavailable(
                f"Prometheus at {self.url} answered HTTP {exc.code}: {message}"
            ) from exc
        except TimeoutError as exc:
            raise MetricsUnavailable(
                f"Prometheus at {self.url} did not answer within {self.timeout_seconds:g}s"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(getattr(exc, "reason", None), TimeoutError):
                raise MetricsUnavailable(
                    f"Prometheus at {self.url} did not answer within {self.timeout_seconds:g}s"
                ) from exc
            raise MetricsUnavailable(f"Prometheus at {self.url} is unreachable: {exc}") from exc
        except ValueError as exc:
            raise MetricsUnavailable(f"Prometheus at {self.url} sent invalid JSON: {exc}") from exc
        if body.get("status") != "success":
            raise MetricsUnavailable(
                f"Prometheus at {self.url} failed: {body.get('error', 'unknown error')}"
            )
        data = body.get("data")
        if not isinstance(data, dict):
            raise MetricsUnavailable(f"Prometheus at {self.url} sent no data")
        return data


def pod_of(labels: dict[str, str]) -> str | None:
    """``namespace/name`` of the pod a DCGM series is labelled with, or None."""
    name = labels.get("exported_pod") or labels.get("pod")
    if labels.get("exported_pod"):
        namespace = labels.get("exported_namespace")
    else:
        namespace = labels.get("namespace")
    return f"{namespace}/{name}" if name and namespace else None


class TokenCounter:
    """Tokens generated per node between two reads of a tokens counter; one per
    ScalingPolicy, since each policy reads on its own ticks.

    Each series is followed on its own, as Prometheus' ``increase()`` does: a value below the
    last one is a restart (the series counts again from 0). A series seen for the first time
    only sets its baseline, so the first read of a policy counts nothing.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[tuple[str, str], ...], float] = {}

    def increase_by_node(
        self, samples: list[Sample], node_of: Callable[[dict[str, str]], str | None]
    ) -> dict[str, float]:
        """Tokens per node since the last call; series that name no node are left out."""
        out: dict[str, float] = {}
        seen: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in samples:
            if not math.isfinite(sample.value):
                continue
            key = tuple(sorted(sample.labels.items()))
            seen[key] = sample.value
            before = self._last.get(key)
            node = node_of(sample.labels)
            if before is None or node is None:
                continue
            grown = sample.value - before if sample.value >= before else sample.value
            out[node] = out.get(node, 0.0) + grown
        self._last = seen
        return out


def _error_body(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        parsed = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
