"""The fast search's replays made side by side (issue 14: `plan` on 200,000 jobs): the sizes
a step of the search costs at once, today's fleet and all on demand are replayed in worker
processes, and the plan is the one made replaying them one after the other."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hybridgpu.planner.cost as cost_module
import hybridgpu.planner.procure as procure_module
from hybridgpu.cli import main
from hybridgpu.planner.cost import CostModel, SharedWork, SideBySide, Task
from hybridgpu.planner.fast import local_search, two_scale_search
from hybridgpu.planner.io import history_from_jobs, jobs_of_trace, load_plan_spec
from hybridgpu.planner.model import DemandSample, JobDemand, PlanInputs, Usage
from hybridgpu.planner.optimize import cheapest_mixes, optimal_fleet
from hybridgpu.planner.plan import plan_from_spec, plan_status
from hybridgpu.planner.procure import CommittedOffer, Procurement, costed
from hybridgpu.planner.replay import replay_committed, replay_jobs
from hybridgpu.planner.sensitivity import flip_points
from hybridgpu.sim import parallel
from hybridgpu.sim.traces import synthetic
from support.planner import CLOUD, node_type

pytestmark = pytest.mark.unit

EXAMPLE_PLAN = Path(__file__).resolve().parents[2] / "examples" / "plan.yaml"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    costs=st.lists(st.integers(0, 50).map(float), min_size=1, max_size=80),
    coarse=st.integers(1, 4),
    data=st.data(),
)
def test_the_search_is_told_ahead_exactly_the_sizes_it_costs_next(
    costs: list[float], coarse: int, data: st.DataObject
) -> None:
    """Every size is announced before it is costed, and what is announced together is
    costed right after, nothing else: replays made ahead are never wasted. The answer is
    the one found without announcements."""
    start = data.draw(st.integers(0, len(costs) - 1))
    asked: list[tuple[str, list[int]]] = []

    def cost(i: int) -> float:
        asked.append(("cost", [i]))
        return costs[i]

    def ahead(indices: list[int]) -> None:
        asked.append(("ahead", list(indices)))

    alone = two_scale_search(lambda i: costs[i], len(costs), start, coarse)
    assert two_scale_search(cost, len(costs), start, coarse, ahead) == alone
    position = 0
    while position < len(asked):
        kind, indices = asked[position]
        assert kind == "ahead", f"size {indices} costed without being announced"
        following = [i for _, (i,) in asked[position + 1 : position + 1 + len(indices)]]
        assert following == indices  # announced together, costed right after, in order
        assert all(k == "cost" for k, _ in asked[position + 1 : position + 1 + len(indices)])
        position += 1 + len(indices)
    assert local_search(cost, len(costs), start, ahead=ahead) == local_search(
        lambda i: costs[i], len(costs), start
    )


def _trace_plan_inputs(hours: float) -> tuple[Any, Any, Any]:
    jobs = jobs_of_trace(synthetic(seed=3, hours=hours))
    spec = load_plan_spec(EXAMPLE_PLAN, history={"trace": {"path": "synthetic", "format": "csv"}})
    return spec, history_from_jobs(jobs), jobs


def test_a_plan_replayed_in_batches_makes_the_same_replays_and_the_same_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Side by side (two workers, the batches run here to be counted) the fast plan makes
    exactly the replays it makes one at a time (owned fleets and, for the procurement, with
    committed nodes), several of them in batches of two, and prints the same plan."""
    spec, history, jobs = _trace_plan_inputs(240)
    made: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = []

    def counted(jobs: Any, sizes: Any, *args: Any, **kwargs: Any) -> Usage:
        made.append((tuple(sizes), None))
        return replay_jobs(jobs, sizes, *args, **kwargs)

    def counted_committed(
        jobs: Any, sizes: Any, cloud: Any, committed: Any, **kwargs: Any
    ) -> tuple[Usage, bool]:
        made.append((tuple(sizes), tuple(committed)))
        return replay_committed(jobs, sizes, cloud, committed, **kwargs)

    monkeypatch.setattr(cost_module, "replay_jobs", counted)
    monkeypatch.setattr(procure_module, "replay_committed", counted_committed)
    in_turn = plan_from_spec(spec, history, jobs, search="fast")
    made_in_turn = sorted(made, key=repr)
    made.clear()
    batches: list[int] = []  # of replays (the aggregate model's flip points: another one)

    def batch(tasks: Mapping[str, Task]) -> dict[str, Any]:
        done = {name: task(None) for name, task in tasks.items()}
        if all(isinstance(result, Usage | tuple) for result in done.values()):
            batches.append(len(tasks))
        return done

    side = plan_from_spec(spec, history, jobs, search="fast", side_by_side=SideBySide(batch, 2))
    assert in_turn.search.method == side.search.method == "fast"
    assert sorted(made, key=repr) == made_in_turn  # no replay more, none fewer
    assert any(committed for _, committed in made_in_turn)  # the procurement's replays too
    assert batches and all(size == 2 for size in batches)
    assert sum(batches) >= len(made_in_turn) // 2  # most of them in batches
    status = plan_status(side).model_dump(mode="json")
    assert status == plan_status(in_turn).model_dump(mode="json")
    assert side.recommended == in_turn.recommended
    assert side.current == in_turn.current
    assert side.all_on_demand_dollars == in_turn.all_on_demand_dollars
    assert side.runners_up == in_turn.runners_up and side.procurement == in_turn.procurement
    # Every replay recorded under the fleet it is of, as in turn (the losing candidates'
    # procurement replays too, which the printed plan does not show).
    shared, alone = side.cost_model.shared, in_turn.cost_model.shared
    assert shared.replays == alone.replays
    assert shared.committed_replays == alone.committed_replays
    assert shared.enough_committed == alone.enough_committed and not shared.made_ahead


def test_the_cli_prints_the_same_plan_with_any_workers(tmp_path: Path, capsys: Any) -> None:
    """`hybridgpu plan --workers N` forks replays to worker processes: the JSON is the one
    of --workers 1, byte for byte."""
    assert parallel.can_fork()  # else --workers 2 would replay in this process too
    trace = tmp_path / "trace.csv"
    with trace.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("name", "arrival_seconds", "duration_seconds", "gpus", "criticality"))
        for j in synthetic(seed=5, hours=48):
            row = (j.name, j.arrival_seconds, j.duration_seconds, j.gpus, j.criticality.value)
            writer.writerow(row)
    argv = ["plan", "--config", str(EXAMPLE_PLAN), "--trace", str(trace), "--json"]
    outputs = []
    for workers in ("1", "2"):
        assert main([*argv, "--search", "fast", "--workers", workers]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["search"]["method"] == "fast"


def _bad_factor(_: object) -> None:
    raise ValueError("demand factors must be positive")


def test_the_plans_work_failing_side_by_side_is_bad_input_a_line_each(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """Work of the plan made at once in worker processes that fails with the ValueError a bad
    config gives is bad input (exit 2), every failure named, as one alone is."""
    import hybridgpu.planner.plan as plan_module

    def plan_from_spec(*args: Any, side_by_side: SideBySide, **kwargs: Any) -> object:
        return side_by_side.run({"flip points": _bad_factor, "sensitivity": _bad_factor})

    monkeypatch.setattr(plan_module, "plan_from_spec", plan_from_spec)
    history = tmp_path / "demand.csv"
    history.write_text("time,critical\n0,8\n3600,16\n")
    argv = ["plan", "--config", str(EXAMPLE_PLAN), "--history", str(history), "--workers", "2"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "hybridgpu: error: 2 of 2 runs failed:\n"
        f"  replaying flip points: {EXAMPLE_PLAN}: demand factors must be positive\n"
        f"  replaying sensitivity: {EXAMPLE_PLAN}: demand factors must be positive\n"
    )


@SETTINGS
@given(
    variants=st.lists(
        st.tuples(
            st.sampled_from([0.5, 1.0, 1.2, 2.0]),
            st.sampled_from([0.5, 0.9, 1.0, 1.5]),
            st.sampled_from([0.0, 0.3, 2.0]),
        ),
        min_size=1,
        max_size=6,
    ),
    bound=st.sampled_from([None, 0, 2, 5]),
    peak=st.integers(1, 60),
)
def test_the_node_mixes_shared_by_a_plans_variants_are_those_of_each_variant(
    variants: list[tuple[float, float, float]], bound: int | None, peak: int
) -> None:
    """The plan's variants (sensitivity, flip points: node prices, demand growth) share one
    knapsack per node prices and peak demand: each variant's cheapest mixes are the ones
    made for it alone."""
    shared = SharedWork()
    for eight, four, growth in variants:
        inputs = PlanInputs(
            history=(DemandSample(10.0, float(peak), 0.0),),
            demand_growth_per_year=growth,
            node_types=(
                replace(node_type("eight", 8, eight), max_nodes=bound),
                node_type("four", 4, four),
            ),
            cloud=CLOUD,
        )
        assert cheapest_mixes(CostModel(inputs, shared)) == cheapest_mixes(CostModel(inputs))


def test_the_flip_points_searched_side_by_side_are_those_searched_in_turn() -> None:
    """A demand history's flip points (the fast search's aggregate model), every lever and
    direction searched at once, come out as searched one after the other, in order."""
    _, history, _ = _trace_plan_inputs(60)
    inputs = PlanInputs(
        history=tuple(history),
        node_types=(node_type("eight", 8, 2.0), node_type("four", 4, 2.3)),
        cloud=CLOUD,
        horizon_months=24,
        demand_growth_per_year=0.2,
    )
    nodes = optimal_fleet(CostModel(inputs))
    batches: list[int] = []

    def batch(tasks: Mapping[str, Task]) -> dict[str, Any]:
        batches.append(len(tasks))
        return {name: task(None) for name, task in tasks.items()}

    in_turn = flip_points(inputs, nodes, SharedWork())
    side = flip_points(inputs, nodes, SharedWork(), SideBySide(batch, 2))
    assert side == in_turn
    assert batches == [len(in_turn)] and len({p.parameter for p in in_turn}) > 2
    assert any(p.found for p in in_turn)


class _Counted:
    """Replays counted as they are made, and the batches of tasks the side-by-side runner is
    given (run here, in order)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = []
        self.batches: list[int] = []

        def owned(jobs: Any, sizes: Any, *args: Any, **kwargs: Any) -> Usage:
            self.made.append((tuple(sizes), None))
            return replay_jobs(jobs, sizes, *args, **kwargs)

        def committed(
            jobs: Any, sizes: Any, cloud: Any, committed: Any, **kwargs: Any
        ) -> tuple[Usage, bool]:
            self.made.append((tuple(sizes), tuple(committed)))
            return replay_committed(jobs, sizes, cloud, committed, **kwargs)

        monkeypatch.setattr(cost_module, "replay_jobs", owned)
        monkeypatch.setattr(procure_module, "replay_committed", committed)

    def run(self, tasks: Mapping[str, Task]) -> dict[str, Any]:
        self.batches.append(len(tasks))
        return {name: task(None) for name, task in tasks.items()}

    def taken(self) -> list[tuple[tuple[int, ...], tuple[int, ...] | None]]:
        """The replays made since the last call."""
        made, self.made = self.made, []
        return made


# Firm 8-GPU jobs one after the other (one 8-GPU node serves them all) and small preemptible
# ones beside them: a replay takes microseconds.
SMALL_JOBS = tuple(
    JobDemand(i * 3600.0, 3000.0, g, p)
    for i in range(6)
    for g, p in ((8, False), (2, True), (1, True))
)


def _small_inputs(*gpus_per_node: int, horizon_months: int = 12) -> PlanInputs:
    return PlanInputs(
        history=tuple(history_from_jobs(SMALL_JOBS)),
        node_types=tuple(node_type(f"t{i}", g, 1.0 + 0.1 * i) for i, g in enumerate(gpus_per_node)),
        cloud=CLOUD,
        horizon_months=horizon_months,
        jobs=SMALL_JOBS,
    )


@pytest.mark.parametrize(
    ("asked_before", "made_before", "fleets", "replayed_ahead"),
    [
        pytest.param(
            [(0, 1, 0)],
            [],
            [(0, 1, 0), (1, 0, 0), (0, 2, 0)],
            [(4,), (8, 8)],
            id="a fleet replayed when asked (SharedWork.replays)",
        ),
        pytest.param(
            [],
            [(0, 1, 0), (1, 0, 0)],
            [(0, 1, 0), (1, 0, 0), (0, 2, 0), (2, 0, 0)],
            [(8, 8), (4, 4)],
            id="fleets replayed ahead before (SharedWork.made_ahead)",
        ),
        pytest.param(
            [],
            [],
            [(1, 1, 0), (0, 1, 1), (0, 2, 0)],
            [(4, 8), (8, 8)],
            id="the same GPUs of two node types of one size, in another order",
        ),
    ],
)
def test_a_replay_held_already_is_not_made_ahead_again(
    monkeypatch: pytest.MonkeyPatch,
    asked_before: list[tuple[int, ...]],
    made_before: list[tuple[int, ...]],
    fleets: list[tuple[int, ...]],
    replayed_ahead: list[tuple[int, ...]],
) -> None:
    """``CostModel.replay_ahead`` hands the workers only the fleets whose replay is neither
    made (when asked, or ahead) nor already in the batch (node types of one size: the same
    replay's key); asked afterwards, every fleet is served without a replay more, and costs
    what it costs replayed in turn with the same replays in all."""
    inputs = _small_inputs(4, 8, 4)
    counted = _Counted(monkeypatch)
    shared = SharedWork(side_by_side=SideBySide(counted.run, 2))
    model = CostModel(inputs, shared)
    for nodes in asked_before:
        model.usage(nodes)
    model.replay_ahead(made_before)
    before = counted.taken()
    counted.batches.clear()
    model.replay_ahead(fleets)
    assert counted.taken() == [(sizes, None) for sizes in replayed_ahead]
    assert counted.batches == [len(replayed_ahead)]
    usages = [model.usage(nodes) for nodes in [*asked_before, *fleets]]
    assert counted.taken() == [] and not shared.made_ahead

    alone = CostModel(inputs)  # no workers: every replay made when asked
    assert [alone.usage(nodes) for nodes in [*asked_before, *fleets]] == usages
    made_alone = counted.taken()
    assert sorted(before + [(s, None) for s in replayed_ahead]) == sorted(made_alone)


def test_a_committed_replay_an_earlier_one_answers_is_made_ahead_but_not_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Procurement's replays made at once: one committed node is enough for the trace's firm
    jobs, which only the replay itself tells, so the workers replay two committed nodes
    beside it; that replay is then left out as costing in turn leaves it out (answered by
    the one node's), and costing afterwards makes no committed replay. A period committing
    nothing is the fleet search's owned-only replay: not made ahead. The plan is the one
    costed in turn."""
    inputs = _small_inputs(8, 4, horizon_months=9)
    offer = CommittedOffer(name="lease", term_years=1, per_gpu_hour=2.0, gpus_per_unit=8)
    plan = Procurement((offer,), (1, 0), ((0,), (1,), (2,)))
    counted = _Counted(monkeypatch)
    alone = SharedWork()
    in_turn = costed(inputs, plan, alone)
    assert counted.taken() == [((8,), None), ((8,), (8,))]  # two nodes: answered by one
    assert alone.enough_committed  # (the trace makes one committed node enough)

    shared = SharedWork(side_by_side=SideBySide(counted.run, 2))
    procure_module.replay_ahead(inputs, [plan], shared)
    assert counted.batches == [2]
    assert counted.taken() == [((8,), (8,)), ((8,), (8, 8))]
    assert shared.committed_replays == alone.committed_replays
    assert shared.enough_committed == alone.enough_committed
    assert costed(inputs, plan, shared) == in_turn
    assert counted.taken() == [((8,), None)]  # the owned-only replay, made when asked


def test_committed_replays_an_earlier_enough_replay_answers_are_not_made_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once one committed node was found enough beside a fleet, a plan committing more
    nodes beside it wants no replay: none is made ahead, none when costed, and its cost is
    the one costed in turn."""
    inputs = _small_inputs(8, 4, horizon_months=9)
    offer = CommittedOffer(name="lease", term_years=1, per_gpu_hour=2.0, gpus_per_unit=8)
    first = Procurement((offer,), (1, 0), ((1,), (1,), (1,)))
    more = Procurement((offer,), (1, 0), ((2,), (3,), (4,)))
    counted = _Counted(monkeypatch)
    alone = SharedWork()
    in_turn = [costed(inputs, plan, alone) for plan in (first, more)]
    # One node enough, the others answered by it; the owned-only replay: the months the
    # commitment runs past the horizon, at nothing committed.
    made_in_turn = [((8,), (8,)), ((8,), None)]
    assert counted.taken() == made_in_turn

    shared = SharedWork(side_by_side=SideBySide(counted.run, 2))
    costed(inputs, first, shared)
    assert counted.taken() == made_in_turn and shared.enough_committed
    procure_module.replay_ahead(inputs, [more], shared)
    assert counted.batches == [] and counted.taken() == []
    assert costed(inputs, more, shared) == in_turn[1]
    assert counted.taken() == []
    assert shared.committed_replays == alone.committed_replays
