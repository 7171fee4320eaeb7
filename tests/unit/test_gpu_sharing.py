"""Fractional GPUs (issue 9): a job that needs a fraction of one GPU runs as a share on a pool
whose GPUs are shared (gpu.sharing: time-slicing, MPS, MIG); whole-GPU work never lands
there; with no shared pool the fraction is rounded up to the whole GPU, as Kubernetes
allocates nvidia.com/gpu."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.support.sim import BUNDLED_CLUSTER, sim_pool

from hybridgpu.cli import main
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ScaleUp
from hybridgpu.models.pool import GPUSharing, GPUSpec, physical_gpus, serves_models
from hybridgpu.models.snapshot import ClusterSnapshot, Criticality, GPUPod, PoolState
from hybridgpu.sim.compare import compare
from hybridgpu.sim.config import load_cluster, share_fractional
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob, load_csv, load_openb

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
POLICY = load_cluster(BUNDLED_CLUSTER).policy.spec.model_copy(update={"pending_grace_period": "0s"})


def _pool(name: str, tier: str, per_node: int, price: float, replicas: int | None) -> PoolState:
    pool = sim_pool(name, tier, per_node, 8, price)
    sharing = GPUSharing(replicas=replicas) if replicas else None
    gpu = GPUSpec(model="T4", per_node=per_node, sharing=sharing)
    spec = pool.spec.model_copy(update={"gpu": gpu})
    return PoolState(name=name, spec=spec)


def _pools() -> list[PoolState]:
    return [
        _pool("od-t4", "elastic", 1, 0.5, None),
        _pool("od-t4-shared", "elastic", 4, 0.5, 4),  # one T4 as four units
    ]


def test_sharing_counts_advertised_units_that_split_evenly() -> None:
    gpu = GPUSpec(model="T4", per_node=32, sharing=GPUSharing(replicas=4))
    assert physical_gpus(gpu) == 8
    with pytest.raises(ValidationError, match=r"multiple of sharing\.replicas"):
        GPUSpec(model="T4", per_node=6, sharing=GPUSharing(replicas=4))
    with pytest.raises(ValidationError):
        GPUSharing(replicas=1)


@pytest.mark.parametrize(
    ("models", "shared_pool", "whole_pool"),
    [
        ((), False, True),  # a whole GPU of any model: never a share
        (("T4",), False, True),
        (("T4-SHARED",), True, False),  # a share: only a shared pool
        (("T4", "T4-SHARED"), True, True),
        (("A10-SHARED",), False, False),
    ],
)
def test_one_rule_says_which_pools_may_run_a_pod(models, shared_pool, whole_pool) -> None:
    shared = GPUSpec(model="T4", per_node=4, sharing=GPUSharing(replicas=4))
    whole = GPUSpec(model="T4", per_node=1)
    assert serves_models(shared, models) is shared_pool
    assert serves_models(whole, models) is whole_pool


def test_a_fraction_becomes_units_of_the_shared_pool_else_a_whole_gpu() -> None:
    jobs = [
        TraceJob("quarter", 0, 60, 1, Criticality.STANDARD, gpu_milli=250),
        TraceJob("most", 0, 60, 1, Criticality.STANDARD, gpu_milli=810),
        TraceJob("whole", 0, 60, 1, Criticality.STANDARD),
        TraceJob("two", 0, 60, 2, Criticality.STANDARD),
        TraceJob("a10-only", 0, 60, 1, Criticality.STANDARD, gpu_models=("A10",), gpu_milli=100),
    ]
    out = {j.name: j for j in share_fractional(jobs, _pools())}
    assert (out["quarter"].gpus, out["quarter"].gpu_models) == (1, ("T4-SHARED",))
    assert (out["most"].gpus, out["most"].gpu_models) == (4, ("T4-SHARED",))  # ceil(3.24)
    assert out["whole"] == jobs[2] and out["two"] == jobs[3]
    assert out["a10-only"] == jobs[4]  # no shared A10: it keeps its whole GPU
    assert share_fractional(list(out.values()), _pools()) == list(out.values())  # idempotent
    without = share_fractional(jobs, _pools()[:1])
    assert without == jobs  # no shared pool: rounded up to one GPU, as before


@given(
    milli=st.lists(st.integers(1, 999), min_size=1, max_size=12),
    whole=st.integers(0, 6),
)
@example(milli=[1, 1, 1, 1, 251, 501] + [751] * 6, whole=0)  # 9 nodes' worth, maxNodes 8
@settings(max_examples=40, deadline=None)
def test_shares_and_whole_gpus_never_meet_on_a_pool(milli: list[int], whole: int) -> None:
    """decide() scales shared pools only for shares and whole pools only for whole GPUs."""
    jobs = [
        TraceJob(f"f{i}", 0, 60, 1, Criticality.STANDARD, gpu_milli=m) for i, m in enumerate(milli)
    ]
    jobs += [TraceJob(f"w{i}", 0, 60, 1, Criticality.STANDARD) for i in range(whole)]
    pods = tuple(
        GPUPod(
            namespace="ns",
            name=j.name,
            gpus=j.gpus,
            criticality=j.criticality,
            pending_since=0,
            gpu_models=j.gpu_models,
        )
        for j in share_fractional(jobs, _pools())
    )
    plan = decide(ClusterSnapshot(taken_at=60, pools=tuple(_pools()), pods=pods), POLICY, 60)
    ups = {a.pool: a for a in plan.actions if isinstance(a, ScaleUp)}
    units = sum(p.gpus for p in pods if p.gpu_models)
    assert ("od-t4" in ups) == (whole > 0)
    assert ("od-t4-shared" in ups) == (units > 0)
    if whole:
        assert ups["od-t4"].nodes == whole  # one whole T4 a pod
    if units:
        # Packed: every unit has a place, and no more nodes than the scheduler needs to place
        # the pods on new nodes: in its order (the longest pending, then by name), each on
        # the fullest node with room (first-fit decreasing would need fewer for some pods,
        # which the scheduler then does not place: 1,1,1,1,1,2,2,3 units fill three 4-unit
        # nodes largest first, but in the scheduler's order the 3-unit pod finds no room).
        bins: list[int] = []
        shares = sorted((p for p in pods if p.gpu_models), key=lambda p: (p.pending_since, p.key))
        for size in (p.gpus for p in shares):
            room = [(free, i) for i, free in enumerate(bins) if free >= size]
            if not room:
                bins.append(4 - size)
            else:
                bins[min(room)[1]] -= size
        # Both capped by the pool's maxNodes; what the cap holds back is reported blocked.
        cap = next(p.spec.max_nodes for p in _pools() if p.name == "od-t4-shared")
        assert min(-(-units // 4), cap) <= ups["od-t4-shared"].nodes <= min(len(bins), cap)
        if -(-units // 4) > cap:
            assert any(b.pool == "od-t4-shared" and b.cause == "max_nodes" for b in plan.blocked), (
                plan.explain()
            )


def test_shares_cost_less_than_whole_gpus_in_the_simulator() -> None:
    jobs = [TraceJob(f"f{i}", 0, 3600, 1, Criticality.STANDARD, gpu_milli=200) for i in range(8)]
    sim = SimSettings(spot_hazard_per_hour=0)
    shared = Simulation("h", _pools(), POLICY, share_fractional(jobs, _pools()), sim).run()
    whole = Simulation("h", _pools()[:1], POLICY, jobs, sim).run()
    assert shared.unfinished_jobs == whole.unfinished_jobs == 0
    # Eight 0.2-GPU jobs: one unit of a four-unit T4 each, two shared nodes, not eight.
    assert shared.cloud_cost_dollars < whole.cloud_cost_dollars / 3


def test_traces_carry_the_fraction(tmp_path: Path) -> None:
    openb = tmp_path / "openb.csv"
    openb.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1000,100,1,470,,LS,Running,0,3600,10\n"
        "p1,1000,100,1,1000,,BE,Running,0,3600,10\n"
        "p2,1000,100,2,1000,,BE,Running,0,3600,10\n"
    )
    assert [j.gpu_milli for j in load_openb(openb).jobs] == [470, None, None]
    plain = tmp_path / "t.csv"
    plain.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,gpu_milli\n"
        "a,0,60,1,standard,250\n"
        "b,0,60,1,standard,\n"
    )
    assert [j.gpu_milli for j in load_csv(plain).jobs] == [250, None]


def test_a_fraction_that_is_none_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,gpu_milli\na,0,60,1,standard,0\n"
    )
    assert main(["simulate", "--no-png", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "field 'gpu_milli' is '0'; expected thousandths of one GPU" in err


def test_every_policy_runs_shares_on_the_shared_example() -> None:
    config = load_cluster(REPO / "examples" / "cluster-heterogeneous-shared.yaml")
    jobs = [
        TraceJob(f"f{i}", i * 60, 1800, 1, Criticality.PREEMPTIBLE, gpu_milli=300)
        for i in range(20)
    ]
    results = compare(config.pools, config.policy.spec, jobs, SimSettings(spot_hazard_per_hour=0))
    assert all(r.unfinished_jobs == 0 for r in results.values())
