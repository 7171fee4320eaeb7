"""Wait versus launch in the simulator: pods wait for owned GPUs within their wait budget, the
simulated operator looks again when a wait ends, and the baselines never wait."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_simulate import CLUSTER

from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.compare import compare
from hybridgpu.sim.config import ClusterConfig, load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

HOUR = 3600.0


@pytest.fixture
def config(tmp_path: Path) -> ClusterConfig:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    return load_cluster(path)


def _train(name: str, arrival: float, expected: float | None) -> TraceJob:
    return TraceJob(
        name, arrival, HOUR, 8, Criticality.STANDARD, expected_duration_seconds=expected
    )


@pytest.mark.parametrize(
    ("expected", "want_cloud"),
    [
        # The first run states its end: the second waits 2 minutes for the owned node.
        (HOUR, False),
        # Nobody says when the first run ends: the second gets an on-demand node.
        (None, True),
    ],
)
def test_standard_work_waits_for_an_owned_node_that_frees_up_within_its_budget(
    config, expected: float | None, want_cloud: bool
) -> None:
    jobs = [_train("first", 0.0, expected), _train("second", HOUR - 120, expected)]
    result = Simulation("h", config.pools, config.policy.spec, jobs, SimSettings()).run()
    assert (result.cloud_cost_dollars > 0) == want_cloud
    assert result.unfinished_jobs == 0
    if not want_cloud:
        assert result.wait_seconds["standard"]["p95"] <= 125


def test_the_simulated_operator_looks_again_when_a_wait_ends(config) -> None:
    # The critical pod waits for the preemptible Job to pass minRuntime (1 minute); nothing
    # happens then but the end of the wait, and the operator must look at that moment.
    jobs = [
        TraceJob("batch", 0.0, 4 * HOUR, 8, Criticality.PREEMPTIBLE),
        TraceJob("svc", 30.0, HOUR, 8, Criticality.CRITICAL),
    ]
    result = Simulation("h", config.pools, config.policy.spec, jobs, SimSettings()).run()
    assert result.wait_seconds["critical"]["p95"] <= 31  # preempted at 60 s, on the tick
    assert result.cost_by_tier_dollars["elastic"] == 0


def test_the_baselines_never_wait(config) -> None:
    jobs = [_train("first", 0.0, HOUR), _train("second", HOUR - 120, HOUR)]
    results = compare(config.pools, config.policy.spec, jobs, SimSettings())
    assert results["hybridgpu"].cloud_cost_dollars == 0
    assert results["autoscaler_spot"].cost_by_tier_dollars["elastic"] > 0
