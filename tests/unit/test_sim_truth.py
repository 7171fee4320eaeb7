"""The simulator's figures hold up to a sceptical reader: time only moves forward, work is
conserved (what is lost is counted), and the fluid bound is never beaten by a policy that
meets the wait SLO it assumes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.sim import BUNDLED_CLUSTER as _BUNDLED
from tests.support.sim import sim_cluster as _cluster
from tests.support.sim import sim_pool as _pool

from hybridgpu.errors import UserError
from hybridgpu.models.snapshot import Criticality, PoolState
from hybridgpu.sim.compare import BOUND, WaitSLO, compare, unserved_gpu_seconds
from hybridgpu.sim.config import BOOT_TIME_ANNOTATION, load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit


jobs_strategy = st.lists(
    st.tuples(
        st.floats(0, 8 * 3600, allow_nan=False),
        st.floats(300, 4 * 3600, allow_nan=False),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from(list(Criticality)),
    ),
    min_size=1,
    max_size=14,
).map(lambda rows: [TraceJob(f"j{n}", *row) for n, row in enumerate(rows)])


class _ClockWatch(Simulation):
    """A simulation that records the time of every tick, launch, job start and event."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[float, str]] = []

    def _tick(self) -> Any:
        self.seen.append((self.now, "tick"))
        return super()._tick()

    def _launch(self, pool: PoolState, ready_at: float) -> Any:
        self.seen.append((self.now, "launch"))
        return super()._launch(pool, ready_at)

    def _start(self, job: Any, node: Any) -> None:
        self.seen.append((self.now, "start"))
        super()._start(job, node)

    def _handle(self, kind: str, payload: object) -> int:
        self.seen.append((self.now, kind))
        return super()._handle(kind, payload)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=jobs_strategy,
    interval=st.sampled_from(["10s", "30s", "45s", "5m"]),
    hazard=st.sampled_from([0.0, 0.5]),
)
def test_the_clock_never_runs_backwards(jobs, interval, hazard) -> None:
    config = load_cluster(_BUNDLED)
    policy = config.policy.spec.model_copy(update={"interval": interval})
    sim = _ClockWatch(
        "h",
        config.pools,
        policy,
        jobs,
        SimSettings(spot_hazard_per_hour=hazard, seed=len(jobs)),
    )
    sim.run()
    times = [t for t, _ in sim.seen]
    assert times, "nothing happened"
    backwards = [(a, b) for a, b in zip(sim.seen, sim.seen[1:], strict=False) if b[0] < a[0]]
    assert not backwards, backwards[:3]


def test_a_quiet_spell_does_not_send_the_next_tick_into_the_past() -> None:
    """Two jobs hours apart: the operator stops ticking in between (nothing to do), and its
    first tick after the second arrival happens after that arrival, not at the stale time
    one interval after its last tick."""
    config = load_cluster(_BUNDLED)
    jobs = [
        TraceJob("a", 0, 600, 8, Criticality.STANDARD),
        TraceJob("b", 6 * 3600, 600, 8, Criticality.STANDARD),
        TraceJob("c", 6 * 3600 + 5, 600, 40, Criticality.STANDARD),
    ]
    sim = _ClockWatch("h", config.pools, config.policy.spec, jobs, SimSettings())
    sim.run()
    after = [t for t, kind in sim.seen if kind == "tick" and t >= 3600]
    assert after and after[0] >= 6 * 3600


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=jobs_strategy,
    hazard=st.sampled_from([0.0, 0.3, 2.0]),
    every=st.sampled_from([0, 600, 1800]),
)
def test_work_run_is_the_trace_plus_what_was_lost(jobs, hazard, every) -> None:
    config = load_cluster(_BUNDLED)
    settings_ = SimSettings(spot_hazard_per_hour=hazard, checkpoint_interval_seconds=every, seed=3)
    result = Simulation("h", config.pools, config.policy.spec, jobs, settings_).run()
    assert result.unfinished_jobs == 0
    trace = sum(j.gpus * j.duration_seconds for j in jobs) / 3600
    assert result.work_gpu_hours == pytest.approx(trace + result.gpu_hours["lost"], abs=1e-6)


def test_work_since_the_last_checkpoint_is_lost_on_a_move() -> None:
    """A preemptible 8-GPU job on the only owned node is moved to spot when a critical job
    arrives at 10 minutes: with a checkpoint every 5 minutes it loses the minutes since its
    last checkpoint plus the restart start-up; with one every 30 minutes it loses all it did."""
    pools = _cluster(1, 4.0, 1.25)
    config = load_cluster(_BUNDLED)
    jobs = [
        TraceJob("batch", 0, 7200, 8, Criticality.PREEMPTIBLE),
        TraceJob("svc", 600, 4 * 3600, 8, Criticality.CRITICAL),
    ]
    lost = {}
    for every in (300, 1800, 0):
        s = SimSettings(
            checkpoint_interval_seconds=every, restart_overhead_seconds=0, spot_hazard_per_hour=0
        )
        result = Simulation("h", pools, config.policy.spec, jobs, s).run()
        assert result.preemptions == 1
        lost[every] = result.gpu_hours["lost"]
    # Saved progress is a multiple of 300 s below the move time (600 s + up to a tick).
    assert lost[1800] == pytest.approx(lost[0])
    assert lost[1800] - lost[300] == pytest.approx(8 * 600 / 3600)


def test_a_cloud_node_is_billed_at_least_the_minimum() -> None:
    pools = [_pool("od", "elastic", 1, 4, 3.6)]
    config = load_cluster(_BUNDLED)
    policy = config.policy.spec.model_copy(update={"interval": "10s"})
    jobs = [TraceJob("a", 0, 5, 1, Criticality.STANDARD)]
    quick = SimSettings(provisioning_delay_seconds=0, billing_minimum_seconds=3600)
    result = Simulation("h", pools, policy, jobs, quick).run()
    assert result.cost_by_tier_dollars["elastic"] == pytest.approx(3.6)


def _boot_cluster(tmp_path: Path, annotation: str | None) -> Path:
    """One elastic pool of one-GPU nodes, with ``sim.hybridgpu.io/boot-time`` when given."""
    metadata: dict[str, Any] = {"name": "od"}
    if annotation is not None:
        metadata["annotations"] = {BOOT_TIME_ANNOTATION: annotation}
    pool = {
        "apiVersion": "hybridgpu.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": metadata,
        "spec": {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 1},
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 3.6},
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(pool))
    return path


@pytest.mark.parametrize(("annotation", "boot"), [(None, 300.0), ("20m", 1200.0), ("90s", 90.0)])
def test_a_pool_boots_in_the_time_its_cluster_file_gives(tmp_path, annotation, boot) -> None:
    config = load_cluster(_boot_cluster(tmp_path, annotation))
    assert dict(config.boot_seconds) == ({} if annotation is None else {"od": boot})
    policy = config.policy.spec.model_copy(update={"interval": "10s"})
    jobs = [TraceJob("a", 0, 600, 1, Criticality.CRITICAL)]
    physics = SimSettings(provisioning_delay_seconds=300, boot_seconds_by_pool=config.boot_seconds)
    result = Simulation("h", list(config.pools), policy, jobs, physics).run()
    # The job waits for the one node its pool boots: launched within a tick and the grace
    # period of its arrival, Ready ``boot`` later.
    wait = result.wait_seconds["critical"]["p50"]
    assert boot <= wait <= boot + 30


def test_a_boot_time_that_is_not_a_duration_is_one_line_naming_the_pool(tmp_path) -> None:
    with pytest.raises(UserError) as err:
        load_cluster(_boot_cluster(tmp_path, "eight minutes"))
    message = str(err.value)
    assert "\n" not in message
    for part in ("cluster.yaml (document 1)", "GPUPool 'od'", BOOT_TIME_ANNOTATION, "8m"):
        assert part in message


def test_unserved_work_is_what_earliest_deadline_first_cannot_fit() -> None:
    # 8 GPUs; two 8-GPU-hour jobs due at 1.25 h: 10 GPU-hours fit, 6 do not.
    assert unserved_gpu_seconds([(0, 4500, 8 * 3600), (0, 4500, 8 * 3600)], 8) == pytest.approx(
        6 * 3600
    )
    # A later job with an early deadline is served first; the earlier, looser one waits.
    jobs = [(0, 7200, 8 * 3600), (1800, 3600, 4 * 3600)]
    assert unserved_gpu_seconds(jobs, 8) == pytest.approx(0)
    # Gaps in demand leave capacity unused: it cannot be banked.
    assert unserved_gpu_seconds([(0, 10, 80), (100, 110, 160)], 8) == pytest.approx(80)
    assert unserved_gpu_seconds([], 8) == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=jobs_strategy,
    core_nodes=st.integers(1, 2),
    od=st.sampled_from([2.0, 4.0]),
    spot=st.sampled_from([0.5, 1.5, 5.0]),  # 5.0: spot dearer than on-demand
    hazard=st.sampled_from([0.0, 0.5]),
)
def test_no_policy_that_meets_the_slo_beats_the_fluid_bound(
    jobs, core_nodes, od, spot, hazard
) -> None:
    pools = _cluster(core_nodes, od, spot)
    policy = load_cluster(_BUNDLED).policy.spec
    slo = WaitSLO()
    results = compare(pools, policy, jobs, SimSettings(spot_hazard_per_hour=hazard), slo=slo)
    bound = results[BOUND]
    for name, result in results.items():
        if name in (BOUND, "on_demand") or not slo.met_by(result):
            continue  # on_demand has no owned fleet: the bound is for this cluster's fleet
        assert result.cloud_cost_dollars >= bound.cloud_cost_dollars - 1e-6, name
        assert result.total_cost_dollars >= bound.total_cost_dollars - 1e-6, name


def test_owned_only_meets_no_slo_when_it_queues() -> None:
    """The policy that used to beat the bound did so by making work wait hours."""
    pools = _cluster(1, 4.0, 1.25)
    policy = load_cluster(_BUNDLED).policy.spec
    jobs = [TraceJob(f"j{i}", 0, 3 * 3600, 8, Criticality.STANDARD) for i in range(3)]
    results = compare(pools, policy, jobs, SimSettings())
    assert results["owned_only"].cloud_cost_dollars < results[BOUND].cloud_cost_dollars
    assert not WaitSLO().met_by(results["owned_only"])
    assert math.isfinite(results["owned_only"].max_lateness_seconds["standard"])


def test_a_csv_trace_sets_each_jobs_checkpoint_interval(tmp_path: Path, capsys) -> None:
    from hybridgpu.cli import main
    from hybridgpu.sim.traces import load_csv

    trace = tmp_path / "t.csv"
    trace.write_text(
        "name,arrival_seconds,duration_seconds,gpus,criticality,checkpoint_interval_seconds\n"
        "a,0,3600,1,preemptible,600\n"
        "b,0,3600,1,preemptible,0\n"
        "c,0,3600,1,preemptible,\n"
    )
    assert [j.checkpoint_seconds for j in load_csv(trace).jobs] == [600, 0, None]
    trace.write_text(trace.read_text().replace(",600\n", ",soon\n"))
    assert main(["simulate", "--no-png", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "field 'checkpoint_interval_seconds' is 'soon'" in err


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, hazard=st.sampled_from([0.0, 1.0]), minimum=st.sampled_from([0, 3600]))
def test_explain_terms_sum_to_the_gap_to_the_cent(jobs, hazard, minimum) -> None:
    from hybridgpu.sim.report import explain_gap

    pools = _cluster(1, 4.0, 1.25)
    policy = load_cluster(_BUNDLED).policy.spec
    s = SimSettings(spot_hazard_per_hour=hazard, billing_minimum_seconds=minimum)
    results = compare(pools, policy, jobs, s)
    bound = results[BOUND]
    for name, result in results.items():
        if name == BOUND:
            continue
        gap = explain_gap(result, bound)
        want = result.cloud_cost_dollars - bound.cloud_cost_dollars
        assert abs(sum(gap.values()) - want) < 0.01, name
        for key in ("provisioning", "idle_nodes", "half_empty_nodes", "billing_minimum"):
            assert gap[key] >= 0, (name, key)


def test_cloud_work_while_owned_gpus_sat_free_is_priced() -> None:
    """A standard job overflows to an on-demand node while the owned node is busy; when the
    owned node frees up after an hour it keeps running in the cloud (reactive never moves
    it): every cloud GPU-hour from then on is counted as work while owned GPUs sat free."""
    pools = _cluster(1, 4.0, 1.25)
    policy = load_cluster(_BUNDLED).policy.spec
    jobs = [
        TraceJob("a", 0, 3600, 8, Criticality.STANDARD),
        TraceJob("b", 60, 3 * 3600, 8, Criticality.STANDARD),
    ]
    finished: dict[str, float] = {}

    class Watch(Simulation):
        def _stop(self, job: Any, *, requeue: bool, pool: str | None = None) -> None:
            if not requeue:
                finished[job.trace.name] = self.now
            super()._stop(job, requeue=requeue, pool=pool)

    from hybridgpu.sim.compare import _without_moves

    steady = _without_moves(policy, on_demand_for_all=True)
    result = Watch("r", pools[:3], steady, jobs, SimSettings()).run()
    assert finished["a"] == 3600
    expected = 8 * 4.0 * (finished["b"] - 3600) / 3600
    assert result.cost_terms_dollars["work_while_owned_gpus_free"] == pytest.approx(expected)


def test_long_runs_are_charted_in_days() -> None:
    from hybridgpu.sim.report import time_axis

    assert time_axis(80) == ("hours", 1.0)
    assert time_axis(3576) == ("days", 24.0)


@pytest.mark.parametrize("criticality", [Criticality.CRITICAL, Criticality.STANDARD])
def test_a_node_idle_release_cannot_drain_does_not_wake_decide_every_tick(criticality) -> None:
    """A firm job at 5% GPU utilization for 6 hours on an on-demand node: the node reads
    idle past its idleFor the whole time, but idle release drains only preemptible Jobs, so
    decide() is called only while the node is launched and boots, not at every heartbeat;
    run on every skipped tick too (``check_quiet``), it plans nothing there."""
    pools = [_pool("od-8g", "elastic", 8, 4, 24.0)]
    policy = load_cluster(_BUNDLED).policy.spec
    jobs = [TraceJob("low", 0, 6 * 3600, 8, criticality, utilization_percent=5.0)]
    checked = Simulation("on_demand", pools, policy, jobs, SimSettings(), check_quiet=True)
    assert checked.run().unfinished_jobs == 0  # raises when a skipped tick would have acted
    sim = Simulation("on_demand", pools, policy, jobs, SimSettings())
    sim.run()
    assert sim.ticks > 30  # a heartbeat every 10 minutes while the node is up
    assert sim.decisions < 10
