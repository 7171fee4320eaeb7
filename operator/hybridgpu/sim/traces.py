"""Job traces: the Alibaba openb pod list, a plain CSV, the built-in synthetic scenario, and
measured spot preemption traces. Every loader names the file, line and field it rejects."""

from __future__ import annotations

import bisect
import csv
import io
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hybridgpu.errors import UserError
from hybridgpu.inputs import decode_text, read_text
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.defaults import MAX_SPAN_DAYS, TRACE_FORMATS

DEFAULT_QOS_MAP: dict[str, Criticality] = {
    "LS": Criticality.CRITICAL,
    "Guaranteed": Criticality.CRITICAL,
    "Burstable": Criticality.STANDARD,
    "BE": Criticality.PREEMPTIBLE,
}


# A job asking for more GPUs than this is a unit mix-up (or 1e300), not a job.
MAX_GPUS_PER_JOB = 100_000


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One GPU job of a trace: it arrives, waits for GPUs, then runs ``duration_seconds``."""

    name: str
    arrival_seconds: float
    duration_seconds: float
    gpus: int
    criticality: Criticality
    checkpoint_seconds: float | None = None
    """Progress between two checkpoints; None: the simulation's default, 0: never."""
    gpu_models: tuple[str, ...] = ()
    """GPU models it may run on (a pool's gpu.model); empty: any."""
    deadline_seconds: float | None = None
    """It must have finished this long after it arrived (hybridgpu.io/deadline as a
    duration from creation); None: no deadline."""
    expected_duration_seconds: float | None = None
    """What its owner said it needs (hybridgpu.io/expected-duration); None: its real
    duration, when it has a deadline."""
    utilization_percent: float | None = None
    """GPU utilization while it runs; None: busy (the simulator's 90%)."""
    idle_timeout_seconds: float | None = None
    """hybridgpu.io/idle-timeout: reclaimed after this long below the idle threshold."""
    return_to_core: bool = False
    """hybridgpu.io/return-to-core: a standard job the operator may move back to owned GPUs."""
    gpu_milli: int | None = None
    """Of a one-GPU job: the thousandths of one GPU it needs (openb gpu_milli); None or
    1000: the whole GPU. Run as a share where a pool shares its GPUs (sim.config), else
    rounded up to the whole GPU, as Kubernetes allocates nvidia.com/gpu."""
    service: str | None = None
    """The serving workload (a Deployment) this is one replica of; None: a batch Job."""

    @property
    def deadline_at(self) -> float | None:
        """Seconds into the trace by which it must have finished; None: no deadline."""
        if self.deadline_seconds is None:
            return None
        return self.arrival_seconds + self.deadline_seconds


def _gpu_milli(path: Path, line: int, raw: str | None, gpus: int) -> int | None:
    """A one-GPU job's share of the GPU in thousandths (None: whole or not given)."""
    if raw is None or not raw.strip() or gpus != 1:
        return None
    milli = _number(path, line, "gpu_milli", raw)
    if milli is None or not 0 < milli <= 1000:
        raise UserError(
            f"{path}:{line}: field 'gpu_milli' is {raw!r}; expected thousandths of one GPU, "
            "from 1 to 1000 (or an empty cell)"
        )
    return None if milli >= 1000 else math.ceil(milli)


def parse_gpu_models(raw: str | None) -> tuple[str, ...]:
    """``V100M16|V100M32`` (openb's gpu_spec) as a sorted tuple; empty or blank: any model."""
    if not raw:
        return ()  # most traces have no such column: every job's cell is missing
    return tuple(sorted({m.strip() for m in raw.split("|") if m.strip()}))


@dataclass(frozen=True, slots=True)
class TraceLoad:
    """Jobs read from a file and what was left out, with the reason."""

    jobs: list[TraceJob]
    skipped: dict[str, int]

    def skipped_text(self) -> str:
        """What was left out, for a person: ``3 no gpu, 1 zero duration`` (empty: nothing)."""
        return skipped_text(self.skipped)


def skipped_text(skipped: Mapping[str, int]) -> str:
    """Counts by reason for a person: ``3 no gpu, 1 zero duration`` (empty: nothing; reasons
    counted 0 are not named)."""
    return ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in sorted(skipped.items()) if n)


SKIP_REASONS = ("no_gpu", "never_scheduled", "zero_duration", "infeasible")
"""Why a trace's job is left out, as `simulate --json` and `plan --json` count them: no GPU
asked, never scheduled (openb), ran 0 s, and (with --skip-infeasible) no node could run it."""


def skipped_counts(skipped: Mapping[str, int], infeasible: int = 0) -> dict[str, int]:
    """The jobs a trace load left out (``TraceLoad.skipped``) and the ``infeasible`` ones
    dropped after it, by reason: every reason of SKIP_REASONS, in that order, 0 when none."""
    counts = dict.fromkeys(SKIP_REASONS, 0)
    for why, n in skipped.items():
        counts[why] = counts.get(why, 0) + n
    counts["infeasible"] += infeasible
    return counts


def parse_qos_map(text: str | None) -> dict[str, Criticality]:
    """``LS=critical,BE=preemptible`` on top of the default openb mapping."""
    mapping = dict(DEFAULT_QOS_MAP)
    if not text:
        return mapping
    for part in text.split(","):
        qos, sep, value = part.partition("=")
        if not sep or value.strip() not in {c.value for c in Criticality}:
            raise UserError(
                f"--qos-map: {part!r} must be QOS=critical|standard|preemptible, "
                "e.g. LS=standard,BE=preemptible"
            )
        mapping[qos.strip()] = Criticality(value.strip())
    return mapping


def _number(
    path: Path, line: int, field: str, raw: str | None, *, allow_empty: bool = False
) -> float | None:
    if raw is None or raw.strip() == "":
        if allow_empty:
            return None
        raise UserError(f"{path}:{line}: field {field!r} is empty; expected a number")
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{path}:{line}: field {field!r} is {raw!r}; expected a number") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{path}:{line}: field {field!r} is {raw!r}; expected a finite number >= 0")
    return value


def _open_csv(path: Path, required: Iterable[str]) -> tuple[csv.DictReader[str], Sequence[str]]:
    text = read_text(path, "trace")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as err:
        raise UserError(f"{path}: not a CSV file ({err})") from None
    reader.fieldnames = header
    missing = [c for c in required if c not in header]
    if missing:
        raise UserError(
            f"{path}: missing column(s) {', '.join(missing)}; expected a header with "
            f"{', '.join(required)}"
        )
    return reader, header


def load_openb(
    path: str | Path,
    *,
    time_scale: float = 1.0,
    qos_map: Mapping[str, Criticality] | None = None,
) -> TraceLoad:
    """Jobs of an Alibaba openb pod list (cluster-trace-gpu-v2023).

    A pod arrives at creation_time and runs from scheduled_time to deletion_time; times are
    divided by ``time_scale``. Pods asking no GPU, and pods never scheduled (their run time is
    unknown), are skipped and counted. A fractional GPU (gpu_milli < 1000 of one GPU) is kept:
    it runs as a share on a pool that shares its GPUs, else as one whole GPU.
    """
    path = Path(path)
    mapping = dict(qos_map or DEFAULT_QOS_MAP)
    required = ("name", "num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time")
    reader, _ = _open_csv(path, required)
    jobs: list[TraceJob] = []
    skipped: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        gpus = _number(path, line, "num_gpu", row["num_gpu"])
        assert gpus is not None
        if gpus > MAX_GPUS_PER_JOB:
            raise UserError(
                f"{path}:{line}: field 'num_gpu' is {row['num_gpu']!r}; expected at most "
                f"{MAX_GPUS_PER_JOB:,} GPUs"
            )
        if gpus == 0:
            skipped["no_gpu"] = skipped.get("no_gpu", 0) + 1
            continue
        qos = row["qos"]
        if qos not in mapping:
            raise UserError(
                f"{path}:{line}: field 'qos' is {qos!r}; expected one of "
                f"{', '.join(sorted(mapping))} (or map it with --qos-map)"
            )
        created = _number(path, line, "creation_time", row["creation_time"])
        scheduled = _number(path, line, "scheduled_time", row["scheduled_time"], allow_empty=True)
        deleted = _number(path, line, "deletion_time", row["deletion_time"], allow_empty=True)
        if scheduled is None or deleted is None:
            skipped["never_scheduled"] = skipped.get("never_scheduled", 0) + 1
            continue
        assert created is not None
        duration = deleted - scheduled
        if duration <= 0:
            skipped["zero_duration"] = skipped.get("zero_duration", 0) + 1
            continue
        jobs.append(
            TraceJob(
                name=row["name"],
                arrival_seconds=created / time_scale,
                duration_seconds=duration / time_scale,
                gpus=int(gpus),
                criticality=mapping[qos],
                gpu_models=parse_gpu_models(row.get("gpu_spec")),
                gpu_milli=_gpu_milli(path, line, row.get("gpu_milli"), int(gpus)),
            )
        )
    jobs.sort(key=lambda j: (j.arrival_seconds, j.name))
    return TraceLoad(jobs=jobs, skipped=skipped)


def load_dlrm(
    path: str | Path,
    *,
    time_scale: float = 1.0,
    criticality: Criticality = Criticality.CRITICAL,
) -> TraceLoad:
    """GPU instances of the Alibaba 2025 DLRM serving trace (cluster-trace-gpu-v2025).

    Only role HN instances hold GPUs (gpu_request each); CN instances are skipped and counted.
    An instance arrives at creation_time (empty: it was there when the trace starts, so 0)
    and serves from scheduled_time (empty: from the start) to deletion_time (empty: to the
    end of the trace, the latest time it records). Serving is latency-sensitive: every
    instance is ``criticality`` (critical), one replica of the Deployment named by its
    app_name (the simulator's serving rebalance moves replicas, never stops them)."""
    path = Path(path)
    required = ("instance_sn", "role", "gpu_request", "creation_time", "scheduled_time")
    reader, _ = _open_csv(path, (*required, "deletion_time"))
    rows: list[tuple[int, dict[str, str]]] = []
    end = 0.0
    for line, row in enumerate(reader, start=2):
        for field in ("creation_time", "scheduled_time", "deletion_time"):
            value = _number(path, line, field, row[field], allow_empty=True)
            if value is not None:
                end = max(end, value)
        rows.append((line, row))
    jobs: list[TraceJob] = []
    skipped: dict[str, int] = {}
    for line, row in rows:
        gpus = _number(path, line, "gpu_request", row["gpu_request"], allow_empty=True) or 0.0
        if row["role"] != "HN" or gpus <= 0:
            skipped["no_gpu"] = skipped.get("no_gpu", 0) + 1
            continue
        created = _number(path, line, "creation_time", row["creation_time"], allow_empty=True)
        start = _number(path, line, "scheduled_time", row["scheduled_time"], allow_empty=True)
        stop = _number(path, line, "deletion_time", row["deletion_time"], allow_empty=True)
        arrival = created if created is not None else 0.0
        start = arrival if start is None else start
        duration = (end if stop is None else stop) - start
        if duration <= 0:
            skipped["zero_duration"] = skipped.get("zero_duration", 0) + 1
            continue
        jobs.append(
            TraceJob(
                row["instance_sn"],
                arrival / time_scale,
                duration / time_scale,
                max(1, math.ceil(gpus)),
                criticality,
                service=row.get("app_name") or None,
            )
        )
    jobs.sort(key=lambda j: (j.arrival_seconds, j.name))
    return TraceLoad(jobs=jobs, skipped=skipped)


def load_trace(
    path: str | Path,
    trace_format: str,
    *,
    time_scale: float = 1.0,
    qos_map: Mapping[str, Criticality] | None = None,
) -> TraceLoad:
    """Jobs of a trace file in one of TRACE_FORMATS; ``qos_map`` applies to openb only."""
    if trace_format == "openb":
        return load_openb(path, time_scale=time_scale, qos_map=qos_map)
    if qos_map is not None:
        raise UserError("--qos-map maps openb qos values; this trace format names no qos")
    if trace_format == "csv":
        return load_csv(path, time_scale=time_scale)
    if trace_format == "alibaba-dlrm":
        return load_dlrm(path, time_scale=time_scale)
    raise UserError(f"trace format {trace_format!r}: expected one of {', '.join(TRACE_FORMATS)}")


OPTIONAL_SECONDS_COLUMNS = (
    "deadline_seconds",
    "expected_duration_seconds",
    "idle_timeout_seconds",
)
"""Optional CSV columns in seconds; an empty cell means not given."""


def load_csv(path: str | Path, *, time_scale: float = 1.0) -> TraceLoad:
    """Jobs of a plain CSV: name, arrival_seconds, duration_seconds, gpus, criticality, and
    optionally checkpoint_interval_seconds (empty: the simulation's default; 0: never),
    gpu_models (``A|B``: the pool GPU models it may run on; empty: any), deadline_seconds
    (after arrival), expected_duration_seconds (empty with a deadline: the real duration),
    utilization_percent (0-100; empty: busy), idle_timeout_seconds (idle reclaim opt-in),
    return_to_core (``true``: a standard job the operator may move back to owned GPUs) and
    gpu_milli (of a one-GPU job: thousandths of the GPU it needs, a share where a pool shares).
    Every optional cell may be empty. Jobs of duration 0 are skipped and counted."""
    path = Path(path)
    required = ("name", "arrival_seconds", "duration_seconds", "gpus", "criticality")
    reader, header = _open_csv(path, required)
    has_checkpoints = "checkpoint_interval_seconds" in header
    optional = [c for c in OPTIONAL_SECONDS_COLUMNS if c in header]
    has_utilization = "utilization_percent" in header
    has_return = "return_to_core" in header
    jobs: list[TraceJob] = []
    skipped: dict[str, int] = {}
    allowed = {c.value: c for c in Criticality}
    for line, row in enumerate(reader, start=2):
        arrival = _number(path, line, "arrival_seconds", row["arrival_seconds"])
        duration = _number(path, line, "duration_seconds", row["duration_seconds"])
        gpus = _number(path, line, "gpus", row["gpus"])
        assert arrival is not None and duration is not None and gpus is not None
        if gpus < 1 or gpus != int(gpus) or gpus > MAX_GPUS_PER_JOB:
            raise UserError(
                f"{path}:{line}: field 'gpus' is {row['gpus']!r}; expected a whole number from 1 "
                f"to {MAX_GPUS_PER_JOB:,}"
            )
        crit = (row["criticality"] or "").strip()
        if crit not in allowed:
            raise UserError(
                f"{path}:{line}: field 'criticality' is {crit!r}; expected critical, standard "
                "or preemptible"
            )
        every = (
            _number(
                path,
                line,
                "checkpoint_interval_seconds",
                row["checkpoint_interval_seconds"],
                allow_empty=True,
            )
            if has_checkpoints
            else None
        )
        seconds: dict[str, float | None] = {}
        for column in optional:
            value = _number(path, line, column, row[column], allow_empty=True)
            if value is not None and value <= 0:
                raise UserError(
                    f"{path}:{line}: field {column!r} is {row[column]!r}; expected seconds > 0 "
                    "(or an empty cell)"
                )
            seconds[column] = None if value is None else value / time_scale
        utilization = (
            _number(path, line, "utilization_percent", row["utilization_percent"], allow_empty=True)
            if has_utilization
            else None
        )
        returns = (row["return_to_core"] or "").strip().lower() if has_return else ""
        if returns not in ("", "true", "false"):
            raise UserError(
                f"{path}:{line}: field 'return_to_core' is {row['return_to_core']!r}; expected "
                "true, false or an empty cell"
            )
        if utilization is not None and utilization > 100:
            raise UserError(
                f"{path}:{line}: field 'utilization_percent' is {row['utilization_percent']!r}; "
                "expected a percent from 0 to 100"
            )
        if duration == 0:
            # Holds no GPU for any time, as openb's and the DLRM trace's such pods (skipped
            # there too); a trace of only these has no end the simulation can run to.
            skipped["zero_duration"] = skipped.get("zero_duration", 0) + 1
            continue
        jobs.append(
            TraceJob(
                row["name"],
                arrival / time_scale,
                duration / time_scale,
                int(gpus),
                allowed[crit],
                None if every is None else every / time_scale,
                parse_gpu_models(row.get("gpu_models")),
                deadline_seconds=seconds.get("deadline_seconds"),
                expected_duration_seconds=seconds.get("expected_duration_seconds"),
                utilization_percent=utilization,
                idle_timeout_seconds=seconds.get("idle_timeout_seconds"),
                return_to_core=returns == "true",
                gpu_milli=_gpu_milli(path, line, row.get("gpu_milli"), int(gpus)),
            )
        )
    jobs.sort(key=lambda j: (j.arrival_seconds, j.name))
    return TraceLoad(jobs=jobs, skipped=skipped)


def synthetic(seed: int = 7, hours: float = 72.0) -> list[TraceJob]:
    """The built-in scenario: three days of a research cluster, seeded and deterministic.

    A daily cycle of critical inference and standard training jobs peaking in working hours
    over a steady stream of preemptible batch work, with a burst on the second day, and a
    few notebooks left open over night (:func:`idle_notebooks`).
    """
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    kinds = (
        # criticality, jobs per hour at peak, GPU choices, mean duration seconds
        (Criticality.CRITICAL, 2.4, (1, 1, 2, 4), 1.5 * 3600),
        (Criticality.STANDARD, 2.0, (1, 2, 4, 8), 3.0 * 3600),
        (Criticality.PREEMPTIBLE, 2.8, (1, 2, 4, 8), 2.5 * 3600),
    )
    horizon = hours * 3600
    for crit, peak_rate, sizes, mean in kinds:
        t = 0.0
        i = 0
        while True:
            # Thinning of a non-homogeneous Poisson process with a daily cycle.
            t += rng.expovariate(peak_rate / 3600)
            if t >= horizon:
                break
            hour = (t / 3600) % 24
            daily = (
                0.35 + 0.65 * max(0.0, math.sin(math.pi * (hour - 6) / 14))
                if 6 <= hour <= 20
                else 0.35
            )
            burst = 1.0 if not (30 * 3600 <= t <= 38 * 3600) else 1.6
            if crit == Criticality.PREEMPTIBLE:
                daily = 0.8
            if rng.random() > min(1.0, daily * burst):
                continue
            i += 1
            duration = min(rng.expovariate(1 / mean), 12 * 3600) + 300
            jobs.append(TraceJob(f"{crit.value}-{i:04d}", t, duration, rng.choice(sizes), crit))
    jobs += idle_notebooks(seed, hours)
    jobs.sort(key=lambda j: (j.arrival_seconds, j.name))
    return jobs


NOTEBOOK_IDLE_TIMEOUT_SECONDS = 3600.0
NOTEBOOK_UTILIZATION_PERCENT = 2.0


def idle_notebooks(seed: int = 7, hours: float = 72.0) -> list[TraceJob]:
    """Interactive notebooks opened in the afternoon and left holding their GPUs over night
    at ~2% utilization: two a day (one standard, one preemptible: a scratch notebook on
    spot), 1 or 2 GPUs, 8-14 h, opted in to idle reclaim (hybridgpu.io/idle-timeout: 1h).
    Their own random stream, so the rest of the scenario is the same with or without them."""
    rng = random.Random(f"{seed}:notebooks")
    out: list[TraceJob] = []
    for day in range(math.ceil(hours / 24)):
        for i in range(2):
            arrival = (day * 24 + rng.uniform(13, 18)) * 3600
            if arrival >= hours * 3600:
                continue
            out.append(
                TraceJob(
                    f"notebook-{day}-{i}",
                    arrival,
                    rng.uniform(8, 14) * 3600,
                    rng.choice((1, 2)),
                    (Criticality.STANDARD, Criticality.PREEMPTIBLE)[i],
                    utilization_percent=NOTEBOOK_UTILIZATION_PERCENT,
                    idle_timeout_seconds=NOTEBOOK_IDLE_TIMEOUT_SECONDS,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class SpotTrace:
    """A measured spot availability series: 1 while preempted, 0 while running, every ``gap``."""

    gap_seconds: float
    edges: list[int]
    """Sample indexes where the instance was preempted (0 -> 1)."""
    length: int

    def seconds_to_next_interruption(self, offset: int) -> float | None:
        """From sample ``offset`` (cyclic), seconds until the next preemption edge."""
        if not self.edges:
            return None
        offset %= self.length
        i = bisect.bisect_right(self.edges, offset)
        edge = self.edges[i] if i < len(self.edges) else self.edges[0] + self.length
        return (edge - offset) * self.gap_seconds


def load_spot_trace(path: str | Path) -> SpotTrace:
    """A preemption trace in the spot-traces JSON format ({"metadata": {"gap_seconds"}, "data"})."""
    path = Path(path)
    try:
        raw = json.loads(read_text(path, "spot trace"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise UserError(f"{path}: not a spot trace (JSON nested too deeply)") from None
    try:
        gap = float(raw["metadata"]["gap_seconds"])
        data = [int(x) for x in raw["data"]]
    except (KeyError, TypeError, ValueError, OverflowError):
        raise UserError(
            f'{path}: expected {{"metadata": {{"gap_seconds": N}}, "data": [0|1, ...]}}'
        ) from None
    check_gap_seconds(gap, path)
    if not data:
        raise UserError(f"{path}: field 'data' must be non-empty")
    if any(x not in (0, 1) for x in data):
        raise UserError(f"{path}: field 'data' must hold only 0 (running) and 1 (preempted)")
    edges = [i for i in range(1, len(data)) if data[i] == 1 and data[i - 1] == 0]
    return SpotTrace(gap_seconds=gap, edges=edges, length=len(data))


def check_gap_seconds(gap: float, path: str | Path) -> None:
    """UserError unless ``gap`` (metadata.gap_seconds of a spot-traces JSON file) is from 1
    second to MAX_SPAN_DAYS: the replay counts samples as seconds / gap, which a gap of 1e-320
    makes inf (and a gap of 1e-9 s would step the simulation through every sample)."""
    if not 1.0 <= gap <= MAX_SPAN_DAYS * 86400:  # nan too
        raise UserError(
            f"{path}: field 'metadata.gap_seconds' must be seconds between samples, a finite "
            f"number from 1 to {MAX_SPAN_DAYS * 86400:,.0f} ({MAX_SPAN_DAYS:g} days); got {gap:g}"
        )


# Arrival times beyond this many seconds (about 3 years) are taken for an absolute clock.
_EPOCH_LIKE_SECONDS = 1e8


def detect_trace_format(path: str | Path) -> str:
    """``openb`` or ``csv``, from the header line of a job trace file."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            first = handle.readline(65536)
    except IsADirectoryError:
        raise UserError(f"{path}: cannot read trace: is a directory") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read trace: {err.strerror}") from None
    header = {h.strip() for h in decode_text(first, path, "trace").strip().split(",")}
    if {"arrival_seconds", "duration_seconds"} <= header:
        return "csv"
    if {"creation_time", "num_gpu"} <= header:
        return "openb"
    if {"instance_sn", "role", "gpu_request"} <= header:
        return "alibaba-dlrm"
    raise UserError(
        f"{path}: cannot tell the trace format from its header; expected name,arrival_seconds,"
        "duration_seconds,gpus,criticality (csv) or an openb pod list (name,num_gpu,qos,"
        "creation_time,scheduled_time,deletion_time), or pass --trace-format"
    )


def starting_at_first_arrival(jobs: Sequence[TraceJob]) -> list[TraceJob]:
    """``jobs`` shifted in time so the first one arrives at 0 (for absolute clocks)."""
    if not jobs:
        return []
    first = min(j.arrival_seconds for j in jobs)
    return [replace(j, arrival_seconds=j.arrival_seconds - first) for j in jobs]


def _days(seconds: float) -> str:
    """``1,157 days``; past a billion days (a unit mix-up) ``1.16e+295 days``, not 296 digits."""
    days = seconds / 86400
    return f"{days:,.0f} days" if days < 1e9 else f"{days:.3g} days"


def check_span(
    jobs: Sequence[TraceJob], source: str, *, epoch_flag: str | None = "--epoch"
) -> None:
    """UserError when simulating ``jobs`` from time 0 would cover more than MAX_SPAN_DAYS, with a
    hint when the arrival times look like Unix epoch seconds."""
    if not jobs:
        return
    end = max(j.arrival_seconds + j.duration_seconds for j in jobs)
    if end <= MAX_SPAN_DAYS * 86400:
        return
    first = min(j.arrival_seconds for j in jobs)
    longest = max(jobs, key=lambda j: j.duration_seconds)
    if first > _EPOCH_LIKE_SECONDS:
        offer = f"pass {epoch_flag} to start at the first arrival, or " if epoch_flag else ""
        hint = (
            f"the first arrival is at {first:.4g} s, which looks like Unix epoch seconds: "
            f"{offer}subtract it from every arrival"
        )
    elif longest.duration_seconds > MAX_SPAN_DAYS * 86400 / 2:
        hint = f"job {longest.name!r} runs {_days(longest.duration_seconds)}"
    else:
        hint = "cut the trace, or compress it with a larger --time-scale"
    raise UserError(
        f"{source}: the trace spans {_days(end)} from time 0; the simulator covers at "
        f"most {MAX_SPAN_DAYS:g} days ({hint})"
    )
