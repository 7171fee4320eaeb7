"""Inputs of the TCO planner: demand history files, job traces, Prometheus range queries and
CapacityPlan manifests. Every bad input becomes one UserError naming the file and field."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybridgpu.errors import UserError
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import CapacityPlanSpec, TraceHistory
from hybridgpu.models.timestamps import parse_rfc3339
from hybridgpu.planner.model import DemandSample, JobDemand, history_from_intervals
from hybridgpu.planner.traceread import read_trace

CRITICALITIES = ("critical", "standard", "preemptible")
# Prometheus refuses range queries of more than 11,000 points per series.
_MAX_POINTS_PER_QUERY = 10_000
PROMETHEUS_TIMEOUT_SECONDS = 30.0
# More GPUs in use than any cluster holds is a unit mix-up (or 1e300), not demand to plan for.
MAX_GPUS_IN_USE = 10_000_000


def _parse_time(path: Path, line: int, raw: str) -> float:
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise UserError(
                f"{path}:{line}: field 'time' is {raw!r}; expected a finite number of seconds "
                "or an ISO 8601 time"
            )
        return seconds
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise UserError(
            f"{path}:{line}: field 'time' is {raw!r}; expected seconds or an ISO 8601 time"
        ) from None


def _parse_gpus(path: Path, line: int, field: str, raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_GPUS_IN_USE:
        raise UserError(
            f"{path}:{line}: field {field!r} is {raw!r}; expected GPUs in use, "
            f">= 0 and <= {MAX_GPUS_IN_USE:,}"
        )
    return value


def load_demand_csv(path: str | Path) -> list[DemandSample]:
    """GPUs in use over time from a CSV.

    Wide: ``time`` and any of ``critical``, ``standard``, ``preemptible`` (GPUs in use).
    Long: ``time``, ``criticality``, ``gpus`` (one row per time and criticality).
    ``time`` is seconds or ISO 8601. A row holds until the next time; the last row for the
    median step between rows.
    """
    from hybridgpu.inputs import read_text

    path = Path(path)
    text = read_text(path, "demand history")
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in reader.fieldnames or []]
    reader.fieldnames = header
    long_form = "criticality" in header and "gpus" in header
    if "time" not in header or not (long_form or any(c in header for c in CRITICALITIES)):
        raise UserError(
            f"{path}: header is {','.join(header) or '(empty)'}; expected time and critical, "
            "standard, preemptible (GPUs in use), or time, criticality, gpus"
        )
    by_time: dict[float, dict[str, float]] = {}
    for line, row in enumerate(reader, start=2):
        at = _parse_time(path, line, row.get("time") or "")
        levels = by_time.setdefault(at, dict.fromkeys(CRITICALITIES, 0.0))
        if long_form:
            crit = (row.get("criticality") or "").strip()
            if crit not in CRITICALITIES:
                raise UserError(
                    f"{path}:{line}: field 'criticality' is {crit!r}; expected critical, "
                    "standard or preemptible"
                )
            levels[crit] += _parse_gpus(path, line, "gpus", row.get("gpus"))
        else:
            for crit in CRITICALITIES:
                levels[crit] += _parse_gpus(path, line, crit, row.get(crit))
    return _samples_from_levels(by_time, str(path))


def _samples_from_levels(by_time: dict[float, dict[str, float]], source: str) -> list[DemandSample]:
    times = sorted(by_time)
    if len(times) < 2:
        raise UserError(f"{source}: needs at least two points in time to measure demand")
    steps = sorted(b - a for a, b in itertools.pairwise(times))
    last_step = steps[len(steps) // 2]
    samples = []
    for i, at in enumerate(times):
        hours = ((times[i + 1] if i + 1 < len(times) else at + last_step) - at) / 3600
        levels = by_time[at]
        samples.append(
            DemandSample(hours, levels["critical"] + levels["standard"], levels["preemptible"])
        )
    return samples


def load_trace(
    path: str | Path,
    trace_format: str,
    *,
    time_scale: float = 1.0,
    qos_map: str | None = None,
    largest_node: tuple[str, int] | None = None,
    skipped: list[str] | None = None,
    read: Any = None,
    share_replicas: int = 1,
    left_out: dict[str, int] | None = None,
) -> tuple[list[DemandSample], list[JobDemand]]:
    """Demand of a job trace (each job holds its GPUs from arrival for its duration) and its
    jobs; a ``demand`` CSV has no jobs. ``trace_format`` ``auto`` reads it from the header.

    With ``largest_node`` (candidate name, GPUs per node), a job needing more GPUs than that
    node is an error naming both, or, when ``skipped`` is a list, left out and named there.
    ``read``: the ``read_trace`` of this file with these settings, already done.
    ``left_out``, when a dict, is given the counts of the jobs the trace's reading skipped,
    by reason (``TraceLoad.skipped``: no GPU, never scheduled, 0 s).
    """
    if trace_format == "demand":
        return load_demand_csv(path), []
    load = read if read is not None else read_trace(path, trace_format, time_scale, qos_map)
    trace_jobs = load.jobs
    if left_out is not None:
        left_out.update(load.skipped)
    if largest_node is not None:
        name, per_node = largest_node
        too_big = [j for j in trace_jobs if j.gpus > per_node]
        if too_big and skipped is None:
            more = f" (and {len(too_big) - 1} more)" if len(too_big) > 1 else ""
            raise UserError(
                f"{path}: job {too_big[0].name!r} needs {too_big[0].gpus} GPUs on one node{more}; "
                f"the largest candidate node ({name}) has {per_node}: add a larger candidate, "
                "or pass --skip-infeasible to leave such jobs out"
            )
        if too_big and skipped is not None:
            skipped.extend(j.name for j in too_big)
            trace_jobs = [j for j in trace_jobs if j.gpus <= per_node]
    jobs = jobs_of_trace(trace_jobs, share_replicas)
    if not jobs:
        why = f" (skipped: {load.skipped_text()})" if load.skipped else ""
        raise UserError(f"{path}: no GPU jobs in the trace{why}")
    return history_from_jobs(jobs), jobs


def jobs_of_trace(trace_jobs: Sequence[Any], share_replicas: int = 1) -> list[JobDemand]:
    """``sim.traces.TraceJob`` records as the planner's jobs. With ``share_replicas`` R > 1
    (the plan's gpuSharing), a one-GPU job that needs a fraction of it (``gpu_milli``) takes
    ceil(milli x R / 1000) shares of one GPU, as the simulator gives it units of a shared pool;
    without, a whole GPU, as Kubernetes allocates nvidia.com/gpu."""
    jobs: list[JobDemand] = []
    for j in trace_jobs:
        if j.gpus <= 0 or j.duration_seconds <= 0:
            continue
        duration = reclaimed_duration(j)
        milli = getattr(j, "gpu_milli", None)
        shares = 0
        if share_replicas > 1 and milli is not None and j.gpus == 1:
            shares = max(1, math.ceil(milli * share_replicas / 1000))
        jobs.append(
            JobDemand(
                j.arrival_seconds,
                duration,
                int(j.gpus),
                str(j.criticality) == "preemptible",
                shares=shares,
                share_replicas=share_replicas if shares else 1,
            )
        )
    return jobs


def reclaimed_duration(job: Any) -> float:
    """How long a trace job holds its GPUs under the operator: a job opted in to idle reclaim
    (``idle_timeout_seconds``) whose utilization stays below the default idle threshold
    (a pool's scaleDown.idleUtilizationPercent) is reclaimed once idle that long, as the
    simulator's hybridgpu does; any other job runs its duration."""
    timeout = getattr(job, "idle_timeout_seconds", None)
    used = getattr(job, "utilization_percent", None)
    if timeout is not None and used is not None and used < _IDLE_PERCENT:
        return float(min(job.duration_seconds, timeout))
    return float(job.duration_seconds)


_IDLE_PERCENT = 10.0
"""ScaleDownSpec.idle_utilization_percent's default (the CapacityPlan names no pools)."""


def history_from_jobs(jobs: Sequence[JobDemand]) -> list[DemandSample]:
    """Demand samples of jobs: each holds its GPUs (or its share of one) from arrival for its
    duration."""
    return history_from_intervals(
        (j.arrival_seconds, j.arrival_seconds + j.duration_seconds, j.demand_gpus, j.preemptible)
        for j in jobs
    )


def history_from_spec_trace(
    trace: TraceHistory,
    base: Path | None = None,
    *,
    largest_node: tuple[str, int] | None = None,
    skipped: list[str] | None = None,
    share_replicas: int = 1,
    left_out: dict[str, int] | None = None,
) -> tuple[list[DemandSample], list[JobDemand]]:
    """The demand (and jobs) of a CapacityPlan's trace source; relative paths from ``base``."""
    path = Path(trace.path)
    if base is not None and not path.is_absolute():
        path = base / path
    return load_trace(
        path,
        trace.format,
        time_scale=trace.time_scale,
        largest_node=largest_node,
        skipped=skipped,
        share_replicas=share_replicas,
        left_out=left_out,
    )


def prometheus_history(
    url: str,
    query: str,
    window: str,
    step: str,
    *,
    end_seconds: float,
    timeout_seconds: float = PROMETHEUS_TIMEOUT_SECONDS,
) -> list[DemandSample]:
    """GPUs in use by criticality over ``window`` before ``end_seconds`` (Prometheus range
    queries, split so no request exceeds Prometheus' point limit). Series without a
    ``criticality`` label count as standard."""
    try:
        window_s = parse_duration_seconds(window)
        step_s = parse_duration_seconds(step)
    except ValueError as err:
        raise UserError(f"--window/--step: {err}") from None
    if step_s <= 0 or window_s < 2 * step_s:
        raise UserError(f"--window {window} must cover at least two steps of {step}")
    by_time: dict[float, dict[str, float]] = {}
    start = end_seconds - window_s
    while start < end_seconds:
        stop = min(start + step_s * _MAX_POINTS_PER_QUERY, end_seconds)
        for series in _range_query(url, query, start, stop, step_s, timeout_seconds):
            crit = str(series.get("metric", {}).get("criticality", "standard"))
            if crit not in CRITICALITIES:
                crit = "standard"
            for at, value in series.get("values", []):
                levels = by_time.setdefault(float(at), dict.fromkeys(CRITICALITIES, 0.0))
                gpus = float(value)
                levels[crit] += gpus if math.isfinite(gpus) and gpus > 0 else 0.0
        start = stop + step_s
    if not by_time:
        raise UserError(f"{url}: the query {query!r} returned no data over the last {window}")
    return _samples_from_levels(by_time, url)


def _range_query(
    url: str, query: str, start: float, end: float, step: float, timeout: float
) -> list[dict[str, Any]]:
    from hybridgpu.metrics.prometheus import MetricsUnavailable, PrometheusClient

    try:
        client = PrometheusClient(url, timeout_seconds=timeout)
        series = client.query_range(query, start, end, step)
    except (MetricsUnavailable, ValueError) as err:
        raise UserError(f"{url}: cannot read the demand history: {err}") from None
    return [{"metric": s.labels, "values": s.points} for s in series]


def load_plan_spec(path: str | Path, *, history: dict[str, Any] | None = None) -> CapacityPlanSpec:
    """A CapacityPlan manifest or bare spec from YAML. ``history`` fills a missing
    spec.history (the command line names the history instead)."""
    from pydantic import ValidationError

    from hybridgpu.inputs import describe_validation_error, read_yaml_documents

    path = Path(path)
    docs = read_yaml_documents(path, "plan")
    if len(docs) > 1:
        # One plan is computed; the others would be ignored without a word.
        raise UserError(
            f"{path}: {len(docs)} YAML documents; expected one CapacityPlan manifest or its spec"
        )
    doc = docs[0] if docs else None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a CapacityPlan manifest or its spec (a mapping)")
    prefix = ""
    if "kind" in doc:
        if doc.get("kind") != "CapacityPlan":
            raise UserError(f"{path}: kind is {doc.get('kind')!r}; expected CapacityPlan")
        doc = doc.get("spec")
        prefix = "spec."
        if not isinstance(doc, dict):
            raise UserError(f"{path}: field 'spec' is missing; expected the plan's spec")
    if history is not None and "history" not in doc:
        doc = {**doc, "history": history}
    try:
        spec = CapacityPlanSpec.model_validate(doc)
    except ValidationError as err:
        field, _, msg = describe_validation_error(err, prefix).partition(": ")
        raise UserError(f"{path}: field '{field}': {msg}") from None
    names = [c.name for c in spec.candidates]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        # Two entries of one name would count today's fleet twice.
        raise UserError(
            f"{path}: field '{prefix}candidates': name {dupes[0]!r} is used twice; expected one "
            "entry per node type"
        )
    return spec
