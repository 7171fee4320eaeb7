"""Metric names and label values the dashboards and alerts query, taken from where they are
defined: the operator's metrics from ``metrics.exported``, label values from the models, and
the API server's admission webhook metrics (the one fact here that is not ours).
"""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase

from hybridgpu.metrics.exported import ExportedMetrics

EXPORTED = ExportedMetrics()
"""A throwaway set of the operator's metrics (never served): their names and labels."""


def series(metric: MetricWrapperBase, sample: str = "") -> str:
    """The name of the series Prometheus stores for ``metric``: a counter's ends in
    ``_total``; a histogram's in ``sample`` (``_bucket``, ``_sum`` or ``_count``)."""
    (family,) = metric.describe()
    if family.type == "counter":
        return family.name + "_total"
    if family.type == "histogram":
        if sample not in ("_bucket", "_sum", "_count"):
            raise ValueError(f"{family.name} is a histogram: name a sample, not {sample!r}")
        return family.name + sample
    return family.name


def equals(label: str, value: str) -> str:
    """The matcher ``label="value"``."""
    return f'{label}="{value}"'


def select(name: str, *matchers: str) -> str:
    """``name{m1, m2}`` (just ``name`` without matchers)."""
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


M = EXPORTED
POOL_NODES = series(M.pool_nodes)
POOL_GPUS = series(M.pool_gpus)
POOL_GPU_UTILIZATION = series(M.pool_gpu_utilization_ratio)
POOL_COST_PER_HOUR = series(M.pool_cost_per_hour_dollars)
COST = series(M.cost_dollars)
NAMESPACE_COST = series(M.namespace_cost_dollars)
IDLE_GPU_COST = series(M.idle_gpu_cost_dollars)
COMMITTED_IDLE_COST = series(M.committed_idle_cost_dollars)
RECLAIMED_GPU_HOURS = series(M.reclaimed_gpu_hours)
PREEMPTIONS = series(M.preemptions)
REBALANCES = series(M.rebalances)
WORKLOAD_MOVES = series(M.workload_moves)
WORKLOADS = series(M.workloads)
GANGS = series(M.gangs)
GANG_DECISIONS = series(M.gang_decisions)
SCALE_EVENTS = series(M.scale_events)
SPOT_INTERRUPTIONS = series(M.spot_interruptions)
PENDING_GPU_REQUESTS = series(M.pending_gpu_requests)
BUDGET_SPENT = series(M.budget_spent_dollars)
BUDGET_LIMIT = series(M.budget_limit_dollars)
RECONCILE_DURATION_BUCKET = series(M.reconcile_duration_seconds, "_bucket")
RECONCILE_DURATION_COUNT = series(M.reconcile_duration_seconds, "_count")
DECISIONS = series(M.decisions)
EFFECTIVE_COST_PER_GPU_HOUR = series(M.effective_cost_per_gpu_hour_dollars)
COST_PER_MILLION_TOKENS = series(M.cost_per_million_tokens_dollars)
LAST_TICK = series(M.last_tick_timestamp_seconds)
POLICY_CONDITION = series(M.policy_condition)
POOL_CONDITION = series(M.pool_condition)
ADMISSION_REVIEWS = series(M.admission_reviews)
PODS_WITHOUT_ADMISSION = series(M.pods_without_admission)
UNMANAGED_NODES = series(M.unmanaged_nodes)

# The kube-apiserver's admission webhook metrics (ALPHA, Kubernetes 1.23 and later), with
# the labels they carry. The chart names its webhooks `<handler id>.hybridgpu.io`.
WEBHOOK_REQUESTS = "apiserver_admission_webhook_request_total"
WEBHOOK_DURATION_BUCKET = "apiserver_admission_webhook_admission_duration_seconds_bucket"
WEBHOOK_REJECTIONS = "apiserver_admission_webhook_rejection_count"
WEBHOOK_FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
APISERVER_SERIES: dict[str, frozenset[str]] = {
    WEBHOOK_REQUESTS: frozenset({"name", "type", "operation", "code", "rejected"}),
    WEBHOOK_DURATION_BUCKET: frozenset({"name", "type", "operation", "rejected", "le"}),
    WEBHOOK_REJECTIONS: frozenset({"name", "type", "operation", "error_type", "rejection_code"}),
    WEBHOOK_FAIL_OPEN: frozenset({"name", "type"}),
}
"""Series of the API server the dashboards and alerts query -> their labels."""
OUR_WEBHOOKS = 'name=~".*hybridgpu.io"'
"""Matches the chart's webhooks (and those kopf registers in local runs)."""
