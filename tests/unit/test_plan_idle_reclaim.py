"""The plan counts an idle notebook as the operator runs it (issue 9, plan against simulator):
a job opted in to idle reclaim whose GPUs sit below the idle threshold holds them until its
idle timeout, not its whole duration. Counted whole, the synthetic traces' overnight
notebooks made the plan buy one owned node too few on bench/tco_plan_vs_sim.py's trace 8."""

from __future__ import annotations

import pytest

from hybridgpu.models.snapshot import Criticality
from hybridgpu.planner.io import jobs_of_trace
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit


def test_an_idle_notebook_holds_its_gpus_until_reclaimed() -> None:
    hours = 3600.0
    trace = [
        TraceJob(
            "notebook",
            0,
            12 * hours,
            2,
            Criticality.STANDARD,
            utilization_percent=2.0,
            idle_timeout_seconds=hours,
        ),
        TraceJob(
            "busy",
            0,
            12 * hours,
            2,
            Criticality.STANDARD,
            utilization_percent=80.0,
            idle_timeout_seconds=hours,
        ),
        TraceJob("no-opt-in", 0, 12 * hours, 2, Criticality.STANDARD, utilization_percent=2.0),
        TraceJob(
            "short",
            0,
            0.5 * hours,
            1,
            Criticality.STANDARD,
            utilization_percent=2.0,
            idle_timeout_seconds=hours,
        ),
    ]
    assert [j.duration_seconds / hours for j in jobs_of_trace(trace)] == [1.0, 12.0, 12.0, 0.5]
