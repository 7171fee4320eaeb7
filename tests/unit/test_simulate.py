"""`hybridgpu simulate`: the engine on small traces, the CLI output, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.shared import shared_file

from hybridgpu.cli import main
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.compare import WaitSLO, compare, fluid_bound
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation, percentile
from hybridgpu.sim.traces import TraceJob, load_openb, load_spot_trace, synthetic

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = """
apiVersion: hybridgpu.io/v1alpha1
kind: GPUPool
metadata: {name: core}
spec:
  tier: core
  gpu: {model: A100, perNode: 8}
  minNodes: 1
  maxNodes: 1
  pricing: {capexPerNode: 100000, powerWattsPerNode: 4000}
---
apiVersion: hybridgpu.io/v1alpha1
kind: GPUPool
metadata: {name: elastic}
spec:
  tier: elastic
  gpu: {model: A100, perNode: 8}
  maxNodes: 4
  provider: {type: fake}
  pricing: {perNodeHour: 32}
  scaleDown: {idleFor: 2m}
---
apiVersion: hybridgpu.io/v1alpha1
kind: GPUPool
metadata: {name: spot}
spec:
  tier: spot
  gpu: {model: A100, perNode: 8}
  maxNodes: 4
  provider: {type: fake}
  pricing: {perNodeHour: 10}
  scaleDown: {idleFor: 2m}
---
apiVersion: hybridgpu.io/v1alpha1
kind: ScalingPolicy
metadata: {name: default}
spec: {interval: 30s, pendingGracePeriod: 0s}
"""
TRACE = """name,arrival_seconds,duration_seconds,gpus,criticality
batch-1,0,7200,8,preemptible
svc-1,600,3600,4,critical
train-1,900,3600,8,standard
train-2,1000,1800,2,standard
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    return cluster, trace


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hybridgpu.cli", *args], capture_output=True, text=True, check=False
    )


def test_json_output_has_every_policy_and_field(files, tmp_path) -> None:
    cluster, trace = files
    proc = run_cli(
        "simulate",
        "--cluster",
        str(cluster),
        "--trace",
        str(trace),
        "--trace-format",
        "csv",
        "--json",
        "--png",
        str(tmp_path / "chart.png"),
        "--spot-hazard",
        "0",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["policies"]) == {
        "hybridgpu",
        "autoscaler_spot",
        "on_demand",
        "reactive",
        "owned_only",
        "fluid_bound",
    }
    for result in out["policies"].values():
        for key in (
            "total_cost_dollars",
            "cloud_cost_dollars",
            "meets_slo",
            "max_lateness_seconds",
            "cost_by_tier_dollars",
            "gpu_hours",
            "wait_seconds",
            "preemptions",
            "spot_interruptions",
            "unfinished_jobs",
        ):
            assert key in result
        assert set(result["wait_seconds"]) == {"critical", "standard", "preemptible"}
        assert result["unfinished_jobs"] == 0
    hybrid = out["policies"]["hybridgpu"]
    # The critical service preempts the batch job off core; the batch job finishes on spot.
    assert hybrid["preemptions"] >= 1
    assert hybrid["cost_by_tier_dollars"]["spot"] > 0
    assert out["policies"]["on_demand"]["cost_by_tier_dollars"]["core"] == 0
    assert (tmp_path / "chart.png").stat().st_size > 10_000
    assert hybrid["total_cost_dollars"] < out["policies"]["on_demand"]["total_cost_dollars"]
    assert hybrid["meets_slo"]
    assert (
        out["policies"]["fluid_bound"]["total_cost_dollars"] <= hybrid["total_cost_dollars"] + 1e-6
    )


def test_the_critical_job_never_waits_for_a_cloud_node(files) -> None:
    cluster, trace = files
    config = load_cluster(cluster)
    from hybridgpu.sim.traces import load_csv

    jobs = load_csv(trace).jobs
    result = Simulation("h", config.pools, config.policy.spec, jobs, SimSettings()).run()
    # The critical pod gets core as soon as the preemptible Job is moved (next tick).
    assert result.wait_seconds["critical"]["p95"] <= 30
    assert result.unfinished_jobs == 0


def test_the_default_scenario_is_deterministic_and_beats_on_demand() -> None:
    jobs = synthetic(seed=3, hours=12)
    config = load_cluster(ROOT / "operator/hybridgpu/sim/scenarios/default-cluster.yaml")
    settings = SimSettings(spot_hazard_per_hour=0.05, seed=3)
    first = compare(config.pools, config.policy.spec, jobs, settings)
    second = compare(config.pools, config.policy.spec, jobs, settings)
    assert {k: v.to_json() for k, v in first.items()} == {k: v.to_json() for k, v in second.items()}
    assert first["hybridgpu"].total_cost_dollars < first["on_demand"].total_cost_dollars
    assert first["hybridgpu"].unfinished_jobs == 0
    assert first["fluid_bound"].total_cost_dollars <= first["hybridgpu"].total_cost_dollars


def test_fluid_bound_prices_demand_above_core_at_its_cheapest_eligible_price(files) -> None:
    config = load_cluster(files[0])
    jobs = [
        TraceJob("a", 0, 3600, 8, Criticality.CRITICAL),  # fills core
        TraceJob("b", 0, 3600, 8, Criticality.STANDARD),  # above core: on-demand
        TraceJob("c", 0, 3600, 8, Criticality.PREEMPTIBLE),  # above core: spot
    ]
    # No slack: nothing can wait for the owned node to free up.
    bound = fluid_bound(config.pools, jobs, 3600, WaitSLO(0, 0))
    assert bound.cost_by_tier_dollars["elastic"] == pytest.approx(32)
    assert bound.cost_by_tier_dollars["spot"] == pytest.approx(10)
    # With 15 minutes of slack the owned node runs 10 of the 16 firm GPU-hours by 1.25 h: 6
    # go on demand ($4/GPU-h). With an hour of slack the preemptible job (due at 2 h) gets
    # the owned node from 1.25 h: 6 of its 8 GPU-hours; 2 go to spot ($1.25/GPU-h).
    relaxed = fluid_bound(config.pools, jobs, 3600, WaitSLO(900, 3600))
    assert relaxed.cost_by_tier_dollars["elastic"] == pytest.approx(6 * 4)
    assert relaxed.cost_by_tier_dollars["spot"] == pytest.approx(2 * 1.25)


def test_percentile() -> None:
    assert percentile([], 95) == 0
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 95) == pytest.approx(9.5)


def test_openb_loads_and_maps_qos(tmp_path: Path) -> None:
    trace = tmp_path / "openb.csv"
    trace.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,100,1,500,,LS,Running,0,3600,10\n"
        "p1,1000,100,0,0,,BE,Running,0,3600,10\n"
        "p2,1000,100,2,1000,,BE,Failed,100,200,\n"
        "p3,1000,100,8,1000,V100,BE,Succeeded,100,7300,100\n"
        "p4,1000,100,4,1000,,Burstable,Running,50,1050,60\n"
    )
    load = load_openb(trace, time_scale=2)
    assert [(j.name, j.gpus, j.criticality.value) for j in load.jobs] == [
        ("p0", 1, "critical"),
        ("p4", 4, "standard"),
        ("p3", 8, "preemptible"),
    ]
    assert load.jobs[0].duration_seconds == (3600 - 10) / 2
    assert load.skipped == {"no_gpu": 1, "never_scheduled": 1}


def test_spot_trace_edges(tmp_path: Path) -> None:
    path = tmp_path / "spot.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 10}, "data": [0, 0, 1, 1, 0, 0, 0, 1]}))
    trace = load_spot_trace(path)
    assert trace.edges == [2, 7]
    assert trace.seconds_to_next_interruption(0) == 20
    assert trace.seconds_to_next_interruption(3) == 40
    assert trace.seconds_to_next_interruption(7) == 30  # wraps around to index 2


def test_measured_spot_trace_has_its_documented_preemptions() -> None:
    trace = load_spot_trace(
        shared_file("traces/spot-preemptions/aws-us-east-1c_p3.2xlarge_2023-04-22.json")
    )
    assert len(trace.edges) == 41


BAD_INPUT = {
    "missing cluster file": (["--cluster", "/nonexistent.yaml"], "cannot read cluster file"),
    "unknown field in a pool": (
        ["--cluster", "{unknown}"],
        "GPUPool 'core': spec.surprise: unknown field",
    ),
    "minNodes above maxNodes": (["--cluster", "{minmax}"], "minNodes must not exceed maxNodes"),
    "trace value not a number": (
        ["--trace", "{badtrace}", "--trace-format", "csv"],
        "trace.csv:2: field 'gpus' is 'two'",
    ),
    "trace criticality unknown": (
        ["--trace", "{badcrit}", "--trace-format", "csv"],
        "field 'criticality' is 'urgent'",
    ),
    "openb file without its columns": (
        ["--trace", "{badcrit}", "--trace-format", "openb"],
        "missing column(s)",
    ),
    "negative time scale": (["--time-scale", "-1"], "--time-scale: expected a finite number > 0"),
    "bad qos map": (["--trace", "{badcrit}", "--qos-map", "LS=vip"], "--qos-map"),
}


@pytest.mark.parametrize(("args", "message"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, args, message) -> None:
    paths = {
        "unknown": CLUSTER.replace("tier: core", "tier: core\n  surprise: 1", 1),
        "minmax": CLUSTER.replace("minNodes: 1", "minNodes: 3", 1),
    }
    for name, text in paths.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    (tmp_path / "trace.csv").write_text(TRACE.replace("7200,8,", "7200,two,"))
    (tmp_path / "crit.csv").write_text(TRACE.replace(",critical\n", ",urgent\n"))
    mapping = {
        "{unknown}": str(tmp_path / "unknown.yaml"),
        "{minmax}": str(tmp_path / "minmax.yaml"),
        "{badtrace}": str(tmp_path / "trace.csv"),
        "{badcrit}": str(tmp_path / "crit.csv"),
    }
    argv = ["simulate", "--no-png", *(mapping.get(a, a) for a in args)]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert message in err
    assert "Traceback" not in err


def test_work_is_conserved_when_nothing_is_moved(files) -> None:
    """Every GPU-hour of the trace is run exactly once when no job is preempted (a job that
    starts at time 0 included)."""
    cluster, trace = files
    from hybridgpu.sim.traces import load_csv

    config = load_cluster(cluster)
    jobs = load_csv(trace).jobs
    policy = config.policy.spec.model_copy(
        update={"preemption": config.policy.spec.preemption.model_copy(update={"enabled": False})}
    )
    result = Simulation("r", config.pools, policy, jobs, SimSettings()).run()
    work = result.work_gpu_hours
    assert work == pytest.approx(sum(j.gpus * j.duration_seconds for j in jobs) / 3600)
    assert result.preemptions == 0
