"""The serving rebalance in the simulator: replicas that landed on an on-demand node while
core was full move to core once it frees up, by surge (never stopped), and the on-demand node
goes; with rebalance off they stay there for the rest of their life."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.builders import pool
from tests.unit.test_simulate import CLUSTER

from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.config import ClusterConfig, load_cluster
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

HOUR = 3600.0


@pytest.fixture
def config(tmp_path: Path) -> ClusterConfig:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    return load_cluster(path)


def _trace() -> list[TraceJob]:
    # A critical batch job holds the owned node for an hour; two serving replicas (of two
    # Deployments) arriving meanwhile start on demand and serve for ten hours.
    return [
        TraceJob("batch", 0.0, HOUR, 8, Criticality.CRITICAL),
        TraceJob("web-0", 60.0, 10 * HOUR, 2, Criticality.CRITICAL, service="web"),
        TraceJob("api-0", 60.0, 10 * HOUR, 2, Criticality.CRITICAL, service="api"),
    ]


def _run(config: ClusterConfig, enabled: bool) -> PolicyResult:
    policy = config.policy.spec.model_copy(
        update={"rebalance": config.policy.spec.rebalance.model_copy(update={"enabled": enabled})}
    )
    return Simulation("h", config.pools, policy, _trace(), SimSettings(), check_quiet=True).run()


def test_replicas_move_to_core_by_surge_and_the_on_demand_node_goes(config) -> None:
    stays = _run(config, enabled=False)
    moved = _run(config, enabled=True)
    assert stays.rebalances == 0 and moved.rebalances == 2
    assert moved.serving_disruptions == 0 and stays.serving_disruptions == 0
    assert moved.preemptions == 0 and moved.unfinished_jobs == 0
    assert moved.gpu_hours["lost"] == 0.0
    # Ten hours on demand shrink to about one plus the surge (5 min): at $32/h.
    assert stays.cost_by_tier_dollars["elastic"] >= 10 * 32
    assert moved.cost_by_tier_dollars["elastic"] < 1.5 * 32
    # Their GPU-hours: on demand from boot until the surge was Ready (about an hour), on core
    # for the rest of their ten hours; nothing run twice.
    assert moved.gpu_hours["elastic"] < 4 * 1.2
    assert moved.gpu_hours["core"] > 8 + 4 * 8.8
    assert moved.work_gpu_hours == pytest.approx(stays.work_gpu_hours)
    assert moved.releases == 1


def test_a_replica_that_ends_during_its_surge_gives_the_owned_gpus_back(config) -> None:
    trace = [
        TraceJob("batch", 0.0, HOUR, 8, Criticality.CRITICAL),
        # Starts on demand once a node booted (5 min), ends 3.5 min after core freed up at
        # 1 h: within the 5-minute surge.
        TraceJob("web-0", 60.0, HOUR - 90, 2, Criticality.CRITICAL, service="web"),
    ]
    sim = Simulation("h", config.pools, config.policy.spec, trace, SimSettings(), check_quiet=True)
    result = sim.run()
    assert sim.serving.started == 1 and sim.serving.given_up == 1
    assert result.rebalances == 0 and result.serving_disruptions == 0
    assert result.unfinished_jobs == 0
    assert not sim.serving.surges
    assert all(n.free == n.gpus for n in sim.nodes.values())


def test_replicas_on_demand_move_to_a_commitment_once_it_frees_up() -> None:
    """A commitment of one 8-GPU node held by a batch job for an hour: the serving replicas
    arriving meanwhile start on demand and move onto the committed GPUs once they free up
    (before, they stayed on demand for their ten hours beside idle committed GPUs, and the
    simulator skipped the ticks that could move them as quiet)."""
    pools = [
        pool(
            "reserved",
            "elastic",
            max_nodes=1,
            price=32.0,
            committed={"nodes": 1, "termYears": 1, "perNodeHour": 20.0},
        ),
        pool("elastic", "elastic", price=32.0),
    ]
    policy = ScalingPolicySpec()
    assert policy.rebalance.enabled
    result = Simulation("h", pools, policy, _trace(), SimSettings(), check_quiet=True).run()
    assert result.rebalances == 2 and result.serving_disruptions == 0
    assert result.unfinished_jobs == 0 and result.gpu_hours["lost"] == 0.0
    # The commitment for the 10 h the trace runs ($20/h) and the on-demand node for about
    # the batch job's hour plus the surge, not for the replicas' ten hours.
    committed = 20.0 * result.end_seconds / HOUR
    assert result.cost_by_tier_dollars["elastic"] - committed < 1.5 * 32
