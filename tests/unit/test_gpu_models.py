"""GPU models: a job that may run only on some models lands only on pools of those models,
in decide(), in the simulator and when read from Kubernetes or a trace; a model no pool has
is an error up front."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.sim import BUNDLED_CLUSTER, sim_pool

from hybridgpu.cli import main
from hybridgpu.core.decide import decide
from hybridgpu.kube.convert import pod_spec_gpu_models
from hybridgpu.models.actions import ScaleUp
from hybridgpu.models.snapshot import ClusterSnapshot, Criticality, GPUPod, NodeState, PoolState
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob, load_csv, load_openb

pytestmark = pytest.mark.unit


def _pools() -> list[PoolState]:
    def model(pool: PoolState, name: str) -> PoolState:
        gpu = pool.spec.gpu.model_copy(update={"model": name})
        return PoolState(name=pool.name, spec=pool.spec.model_copy(update={"gpu": gpu}))

    return [
        model(sim_pool("core-v100", "core", 8, 1, 100_000), "V100"),
        model(sim_pool("od-v100", "elastic", 1, 8, 3.0), "V100"),
        model(sim_pool("od-t4", "elastic", 1, 8, 5.0), "T4"),  # dearer, but the model asked
        model(sim_pool("spot-v100", "spot", 1, 8, 1.0), "V100"),
    ]


POLICY = load_cluster(BUNDLED_CLUSTER).policy.spec.model_copy(update={"pending_grace_period": "0s"})


def _pending(name: str, models: tuple[str, ...], crit: Criticality) -> GPUPod:
    return GPUPod(
        namespace="ns", name=name, gpus=1, criticality=crit, pending_since=0, gpu_models=models
    )


@pytest.mark.parametrize(
    ("models", "crit", "want"),
    [
        ((), Criticality.STANDARD, ["od-v100"]),
        (("T4",), Criticality.STANDARD, ["od-t4"]),
        (("T4", "V100"), Criticality.STANDARD, ["od-v100"]),
        (("V100",), Criticality.PREEMPTIBLE, ["spot-v100"]),
        (("T4",), Criticality.PREEMPTIBLE, []),  # no T4 spot pool, no on-demand for it
        (("H100",), Criticality.STANDARD, []),
    ],
)
def test_decide_grows_only_pools_of_an_allowed_model(models, crit, want) -> None:
    busy = GPUPod(namespace="ns", name="busy", gpus=8, criticality=Criticality.CRITICAL, node="n0")
    node = NodeState(name="n0", pool="core-v100", gpus=8)
    snap = ClusterSnapshot(
        taken_at=60,
        pools=tuple(_pools()),
        nodes=(node,),
        pods=(busy, _pending("p", models, crit)),
    )
    plan = decide(snap, POLICY, 60)
    assert [a.pool for a in plan.actions if isinstance(a, ScaleUp)] == want
    if not want:
        assert plan.blocked


def test_a_pod_names_its_models_by_selector_or_required_affinity() -> None:
    assert pod_spec_gpu_models({"nodeSelector": {"nvidia.com/gpu.product": "T4"}}) == ("T4",)
    term = {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["V100", "A100"]},
            {"key": "zone", "operator": "In", "values": ["a"]},
        ]
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    assert pod_spec_gpu_models({"affinity": affinity}) == ("A100", "V100")
    assert pod_spec_gpu_models({}) == ()


def test_the_simulator_runs_a_job_only_on_its_models() -> None:
    jobs = [
        TraceJob("t4-job", 0, 3600, 1, Criticality.STANDARD, gpu_models=("T4",)),
        TraceJob("any-job", 0, 3600, 1, Criticality.STANDARD),
    ]
    result = Simulation("h", _pools(), POLICY, jobs, SimSettings(spot_hazard_per_hour=0)).run()
    assert result.unfinished_jobs == 0
    # The T4 job paid the T4 price for its hour; the other ran on the owned V100 node.
    assert result.gpu_hours["elastic"] == pytest.approx(1.0)
    assert result.cost_by_tier_dollars["elastic"] >= 5.0


def test_traces_carry_gpu_models(tmp_path: Path) -> None:
    openb = tmp_path / "openb.csv"
    openb.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,100,1,1000,V100M32|V100M16,LS,Running,0,3600,10\n"
        "p1,1000,100,1,1000,,BE,Running,0,3600,10\n"
    )
    assert [j.gpu_models for j in load_openb(openb).jobs] == [("V100M16", "V100M32"), ()]
    plain = tmp_path / "t.csv"
    plain.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,gpu_models\n"
        "a,0,60,1,standard,T4\n"
        "b,0,60,1,standard,\n"
    )
    assert [j.gpu_models for j in load_csv(plain).jobs] == [("T4",), ()]


def test_a_model_no_pool_has_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,gpu_models\n"
        "a,0,60,1,standard,H100|B200\n"
    )
    assert main(["simulate", "--no-png", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "job 'a' may run only on GPU model(s) B200, H100 (its gpu_spec" in err
    assert "gpu_models in a CSV); the pools have V100-16GB" in err
    assert str(trace) in err


def test_an_openb_gpu_spec_naming_no_pools_model_is_one_line_and_exit_2(
    tmp_path: Path, capsys
) -> None:
    """Issue 9's bad input: the file, the field (gpu_spec) and what the pools have."""
    openb = tmp_path / "openb.csv"
    openb.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,100,1,1000,H100,LS,Running,0,3600,10\n"
    )
    assert main(["simulate", "--no-png", "--trace", str(openb)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(openb) in err and "job 'p0'" in err
    assert "H100 (its gpu_spec in an openb trace" in err and "the pools have V100-16GB" in err
