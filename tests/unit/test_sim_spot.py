"""Spot capacity that is not there and interruptions that come together: the loaders, the
simulator's replay, and decide()'s fallback when a pool cannot launch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.support.sim import BUNDLED_CLUSTER as _BUNDLED
from tests.support.sim import sim_cluster as _cluster

from hybridgpu.cli import main
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ScaleUp
from hybridgpu.models.snapshot import ClusterSnapshot, Criticality, GPUPod
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.spot import load_availability_trace, load_correlated_trace
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit


def _series(tmp_path: Path, data: list[int], gap: float = 600) -> Path:
    path = tmp_path / "series.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def test_availability_counts_are_read_in_the_direction_asked(tmp_path: Path) -> None:
    path = _series(tmp_path, [0, 16, 8, 16])
    assert load_availability_trace(path).launchable == (True, False, True, False)
    assert load_availability_trace(path, counts="available").launchable == (
        False,
        True,
        True,
        True,
    )


def test_a_correlated_trace_preempts_shares_of_the_group(tmp_path: Path) -> None:
    trace = load_correlated_trace(_series(tmp_path, [0, 2, 2, 4, 0, 1], gap=300))
    assert trace.drops == ((1, 0.5), (3, 0.5), (5, 0.25))
    assert trace.next_drop(0, 0) == (300, 0.5)
    assert trace.next_drop(0, 300) == (900, 0.5)
    assert trace.next_drop(0, 1500) == (2100, 0.5)  # wraps around to index 1 of cycle 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", 'expected {"metadata"'),
        ('{"metadata": {"gap_seconds": 0}, "data": [1]}', "gap_seconds' must be"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1, -1]}', "whole numbers >= 0"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1.5]}', "whole numbers >= 0"),
        ("not json", "not JSON"),
    ],
)
def test_a_bad_series_is_one_line_and_exit_2(tmp_path: Path, capsys, text, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    for flag in ("--spot-availability", "--spot-correlated"):
        assert main(["simulate", "--no-png", "--hours", "2", flag, str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert message in err and str(path) in err


def test_conflicting_spot_flags_are_an_error(tmp_path: Path, capsys) -> None:
    path = _series(tmp_path, [0, 1])
    assert main(["simulate", "--no-png", "--spot-correlated", str(path), "--spot-hazard", "1"]) == 2
    assert "--spot-correlated replaces" in capsys.readouterr().err


def test_a_spot_pool_without_capacity_is_never_grown_and_decide_says_why() -> None:
    pools = _cluster(0, 4.0, 1.25)
    spot_1g = next(p for p in pools if p.name == "spot-1g")
    blocked = [replace(p, launchable=False) if p.spec.tier == "spot" else p for p in pools]
    pod = GPUPod(
        namespace="ns", name="p", gpus=1, criticality=Criticality.PREEMPTIBLE, pending_since=0
    )
    policy = load_cluster(_BUNDLED).policy.spec.model_copy(update={"pending_grace_period": "0s"})
    plan = decide(ClusterSnapshot(taken_at=60, pools=tuple(blocked), pods=(pod,)), policy, 60)
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)]
    assert any(b.cause == "no_capacity" for b in plan.blocked), plan.blocked
    # One spot pool without capacity: the other one grows instead.
    some = [replace(p, launchable=False) if p is spot_1g else p for p in pools]
    plan = decide(ClusterSnapshot(taken_at=60, pools=tuple(some), pods=(pod,)), policy, 60)
    assert [a.pool for a in plan.actions if isinstance(a, ScaleUp)] == ["spot-8g"]


def test_while_spot_is_unavailable_preemptible_work_waits_for_owned_gpus(tmp_path: Path) -> None:
    pools = _cluster(1, 4.0, 1.25)
    policy = load_cluster(_BUNDLED).policy.spec
    jobs = [TraceJob(f"b{i}", 0, 3600, 8, Criticality.PREEMPTIBLE) for i in range(3)]
    never = load_availability_trace(_series(tmp_path, [1, 1, 1]))
    result = Simulation("h", pools, policy, jobs, SimSettings(spot_availability=never)).run()
    assert result.cost_by_tier_dollars["spot"] == 0
    assert result.cost_by_tier_dollars["elastic"] == 0
    assert result.unfinished_jobs == 0
    assert result.max_lateness_seconds["preemptible"] >= 2 * 3600


def test_correlated_interruptions_take_nodes_together(tmp_path: Path) -> None:
    pools = [p for p in _cluster(0, 4.0, 1.25) if p.name in ("od-1g", "spot-1g")]
    policy = load_cluster(_BUNDLED).policy.spec
    jobs = [TraceJob(f"b{i}", 0, 4 * 3600, 1, Criticality.PREEMPTIBLE) for i in range(6)]
    together = load_correlated_trace(_series(tmp_path, [0, 4] * 4, gap=1800))
    notices: list[float] = []

    class Watch(Simulation):
        def _handle(self, kind: str, payload: Any) -> int:
            node = self.nodes.get(payload) if kind == "notice" else None
            if node is not None and node.interruption_deadline is None:
                notices.append(self.now)
            return super()._handle(kind, payload)

    result = Watch("h", pools, policy, jobs, SimSettings(spot_correlated=together)).run()
    assert result.unfinished_jobs == 0
    assert result.spot_interruptions == len(notices) > 0
    # Every drop of the trace is the whole group: all live spot nodes at the same moment.
    assert max(notices.count(t) for t in set(notices)) >= 6


@pytest.mark.parametrize(("availability", "premium_hours"), [([1, 1, 1], 3 * 8), ([0, 0, 0], 0)])
def test_on_demand_paid_for_want_of_spot_is_a_term_of_its_own(
    tmp_path: Path, availability: list[int], premium_hours: int
) -> None:
    """Preemptible work allowed on on-demand runs there when spot has no capacity: what it
    paid above the spot price is `spot_unavailable` in --explain, not work the bound avoids;
    with spot capacity it runs on spot and the term is zero."""
    pools = _cluster(0, 4.0, 1.25)  # no owned GPUs: on-demand or spot
    base = load_cluster(_BUNDLED).policy.spec
    preemption = base.preemption.model_copy(update={"allow_on_demand_for_preemptible": True})
    policy = base.model_copy(update={"preemption": preemption})
    jobs = [TraceJob(f"b{i}", 0, 3600, 8, Criticality.PREEMPTIBLE) for i in range(3)]
    series = load_availability_trace(_series(tmp_path, availability))
    settings = SimSettings(spot_availability=series, spot_hazard_per_hour=0)
    result = Simulation("h", pools, policy, jobs, settings).run()
    assert result.unfinished_jobs == 0
    terms = result.cost_terms_dollars
    # 3 jobs x 8 GPUs x 1 h above the spot price of 1.25 a GPU-hour (on-demand 4.0).
    assert terms["spot_unavailable"] == pytest.approx(premium_hours * (4.0 - 1.25))
    assert sum(terms.values()) == pytest.approx(result.cloud_cost_dollars, abs=0.01)
    assert all(v >= -1e-9 for v in terms.values()), terms
