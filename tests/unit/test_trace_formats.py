"""Trace formats: the 2025 DLRM serving trace, format detection, and shifting a trace in
time without losing what its jobs carry."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.shared import shared_file

from hybridgpu.cli import main
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.traces import (
    TraceJob,
    detect_trace_format,
    load_dlrm,
    starting_at_first_arrival,
)

pytestmark = pytest.mark.unit

DLRM = (
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,"
    "rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,"
    "creation_time,scheduled_time,deletion_time\n"
    "i0,HN,app_0,12,12,1,1,25,25,120,120,640,800,8,,,\n"  # there all along
    "i1,HN,app_0,12,12,1,1,25,25,120,120,640,800,8,100,160,\n"  # to the end
    "i2,CN,app_0,12,12,0,0,25,25,120,120,640,800,8,100,160,500\n"  # no GPU
    "i3,HN,app_1,12,12,1,1,25,25,120,120,640,800,8,,,1000\n"  # gone at 1000
    "i4,HN,app_1,12,12,1,1,25,25,120,120,640,800,8,200,260,3600\n"
)


def test_dlrm_instances_serve_from_start_to_deletion_or_the_end(tmp_path: Path) -> None:
    path = tmp_path / "dlrm.csv"
    path.write_text(DLRM)
    assert detect_trace_format(path) == "alibaba-dlrm"
    load = load_dlrm(path)
    got = {j.name: (j.arrival_seconds, j.duration_seconds, j.gpus) for j in load.jobs}
    assert got == {
        "i0": (0, 3600, 1),
        "i1": (100, 3600 - 160, 1),
        "i3": (0, 1000, 1),
        "i4": (200, 3600 - 260, 1),
    }
    assert {j.criticality for j in load.jobs} == {Criticality.CRITICAL}
    assert load.skipped == {"no_gpu": 1}


def test_dlrm_bad_time_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "dlrm.csv"
    path.write_text(DLRM.replace(",200,260,3600", ",200,soon,3600"))
    assert main(["simulate", "--no-png", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "field 'scheduled_time' is 'soon'" in err


def test_shifting_a_trace_keeps_each_jobs_checkpoints_and_models() -> None:
    job = TraceJob("a", 1.7e9, 60, 1, Criticality.STANDARD, 600.0, ("T4",))
    (shifted,) = starting_at_first_arrival([job])
    assert shifted.arrival_seconds == 0
    assert (shifted.checkpoint_seconds, shifted.gpu_models) == (600.0, ("T4",))


def test_the_real_dlrm_trace_has_its_documented_gpu_instances() -> None:
    path = shared_file("traces/alibaba-dlrm/disaggregated_DLRM_trace.csv")
    load = load_dlrm(path)
    # The README's 7,386 GPU (HN) instances, of which 16 never served a second.
    assert len(load.jobs) + load.skipped["zero_duration"] == 7386
    assert load.skipped == {"no_gpu": 23871 - 7386, "zero_duration": 16}


def test_one_job_is_one_job(tmp_path: Path, capsys) -> None:
    path = tmp_path / "one.csv"
    path.write_text("name,arrival_seconds,duration_seconds,gpus,criticality\na,0,600,1,standard\n")
    assert main(["simulate", "--no-png", "--trace", str(path)]) == 0
    assert capsys.readouterr().out.startswith("hybridgpu simulate: 1 job from ")
