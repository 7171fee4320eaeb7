"""Reading a job trace for the planner, apart from planner.io so that a malformed trace is
reported without building the pydantic models of the CapacityPlan (a quarter of a CPU second,
seconds on a loaded machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridgpu.errors import UserError


def read_trace(path: str | Path, trace_format: str, time_scale: float, qos_map: str | None) -> Any:
    """The jobs of an openb or csv trace (``auto``: from its header), checked: a time scale
    above 0 and a span the replay can step through. A ``sim.traces.TraceLoad``."""
    from hybridgpu.sim.traces import check_span, detect_trace_format, load_trace, parse_qos_map

    if trace_format == "auto":
        trace_format = detect_trace_format(path)
    if not time_scale > 0:
        raise UserError(f"time scale must be > 0, got {time_scale}")
    if trace_format not in ("openb", "csv"):
        # Detected from the header, so the user may not have named a format at all.
        raise UserError(
            f"{path}: trace format {trace_format!r}; hybridgpu plan reads openb or csv job "
            "traces (--trace) and demand histories (--history)"
        )
    load = load_trace(
        path,
        trace_format,
        time_scale=time_scale,
        qos_map=parse_qos_map(qos_map) if trace_format == "openb" else None,
    )
    # The replay steps through every interval from time 0, as the simulator does.
    check_span(load.jobs, str(path), epoch_flag=None)
    return load
