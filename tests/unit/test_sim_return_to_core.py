"""Return to core in the simulator: a standard job that opts in moves from its on-demand node
back to the owned node once that frees up, right after a checkpoint; others stay."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_simulate import CLUSTER

from hybridgpu.errors import UserError
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.config import ClusterConfig, load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob, load_csv

pytestmark = pytest.mark.unit

HOUR = 3600.0


@pytest.fixture
def config(tmp_path: Path) -> ClusterConfig:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    return load_cluster(path)


def _jobs(returns: bool) -> list[TraceJob]:
    # The critical service holds the owned node for an hour; the training job arriving
    # meanwhile starts on demand and runs 6 hours, checkpointing every 30 minutes.
    return [
        TraceJob("svc", 0.0, HOUR, 8, Criticality.CRITICAL),
        TraceJob("train", 60.0, 6 * HOUR, 8, Criticality.STANDARD, 1800.0, return_to_core=returns),
    ]


def test_an_opted_in_standard_job_returns_to_the_owned_node(config) -> None:
    stays = Simulation("h", config.pools, config.policy.spec, _jobs(False), SimSettings()).run()
    back = Simulation("h", config.pools, config.policy.spec, _jobs(True), SimSettings()).run()
    assert back.preemptions == 1 and stays.preemptions == 0
    assert back.unfinished_jobs == 0
    # About 5 of its 6 hours move to owned GPUs: the on-demand bill shrinks to about an hour.
    assert back.cost_by_tier_dollars["elastic"] < stays.cost_by_tier_dollars["elastic"] / 3
    # It moved right after a checkpoint: it lost the restart, not half an hour of work.
    assert back.gpu_hours["lost"] * 3600 / 8 <= 300 + 60


def test_the_trace_says_which_jobs_opt_in(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,return_to_core\n"
        "a,0,60,1,standard,true\nb,0,60,1,standard,\n"
    )
    assert [j.return_to_core for j in load_csv(trace).jobs] == [True, False]
    trace.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,return_to_core\n"
        "a,0,60,1,standard,maybe\n"
    )
    with pytest.raises(UserError, match="field 'return_to_core' is 'maybe'"):
        load_csv(trace)


def test_a_job_preempted_to_spot_returns_to_core_right_after_a_checkpoint(
    config: ClusterConfig,
) -> None:
    # Found as a bug: return to core counted a run's checkpoints from its start, but a run
    # after a move checkpoints after its restartOverhead start-up, so the Job moved a start-up
    # before its checkpoint and lost an interval (2,700 s lost per GPU). The operator now
    # counts its moves on the Job (hybridgpu.io/restarts) and counts a restart's checkpoints
    # from the end of its start-up; a first run's from its start (the test above).
    # Preempted off the owned node by the critical service 10 minutes in (its work since
    # its start lost), it restarts on spot (a 5-minute start-up, then a checkpoint every 30
    # minutes) and returns to the owned node once the service ends, right after a checkpoint.
    jobs = [
        TraceJob("batch", 0.0, 6 * HOUR, 4, Criticality.PREEMPTIBLE, 1800.0),
        TraceJob("svc", 600.0, HOUR, 8, Criticality.CRITICAL),
    ]
    settings = SimSettings()
    result = Simulation("h", config.pools, config.policy.spec, jobs, settings).run()
    assert result.preemptions == 2 and result.unfinished_jobs == 0
    restart = settings.restart_overhead_seconds
    # Lost per GPU: the 10 minutes before the preemption, the start-ups on spot and back on
    # the owned node, and at most two ticks past the checkpoint; not a checkpoint interval.
    assert result.gpu_hours["lost"] * 3600 / 4 <= 600 + 2 * restart + 60


def _held_by_batch(returns: bool) -> list[TraceJob]:
    # The training job starts on demand while the critical service holds the owned node; the
    # moment the service ends, preemptible batch work takes the whole node.
    return [
        TraceJob("svc", 0.0, HOUR, 8, Criticality.CRITICAL),
        TraceJob("train", 60.0, 6 * HOUR, 8, Criticality.STANDARD, 1800.0, return_to_core=returns),
        TraceJob("batch", HOUR, 6 * HOUR, 8, Criticality.PREEMPTIBLE, 1800.0),
    ]


def test_an_opted_in_job_returns_by_preempting_preemptible_work(config) -> None:
    # Owned GPUs never hold preemptible work while firm work pays on-demand prices: pending
    # firm work preempts it, and so does a running Job that opted in to return. Here the
    # training job's 8 on-demand GPUs ($32/h) come back to the owned node and the batch Job
    # goes to spot ($10/h) instead of the training job staying on demand for 6 hours.
    settings = SimSettings(spot_hazard_per_hour=0.0)
    policy = config.policy.spec
    stays = Simulation("h", config.pools, policy, _held_by_batch(False), settings).run()
    back = Simulation(
        "h", config.pools, policy, _held_by_batch(True), settings, check_quiet=True
    ).run()
    assert stays.preemptions == 0 and stays.unfinished_jobs == 0
    # The training job and the batch; the batch comes back once the owned node is idle again.
    assert back.preemptions == 3 and back.unfinished_jobs == 0
    assert back.cost_by_tier_dollars["elastic"] < stays.cost_by_tier_dollars["elastic"] / 3
    assert back.cost_by_tier_dollars["spot"] > 0
    assert back.cloud_cost_dollars < stays.cloud_cost_dollars


def test_a_job_already_late_does_not_return(config) -> None:
    # Found by bench/simulate_rules.py's return variant (seeds 10 and 15): an 8-GPU job that
    # had waited 10 minutes for its on-demand node returned to core and its restart made it
    # 15.2 minutes late, over the firm allowance of 15. A return must keep the Job within its
    # waitBudget (5m) plus a node's boot (10m): after a 12-minute boot the restart's 5
    # minutes do not fit, and the job stays where it runs.
    settings = SimSettings(spot_hazard_per_hour=0.0, provisioning_delay_seconds=720.0)
    late = Simulation("h", config.pools, config.policy.spec, _jobs(True), settings).run()
    assert late.preemptions == 0 and late.unfinished_jobs == 0
    on_time = Simulation("h", config.pools, config.policy.spec, _jobs(True), SimSettings()).run()
    assert on_time.preemptions == 1
