"""Spot prices that move (issue 9): a price series per spot pool is billed per interval in
every policy, seen by decide() as the pool's current provider price, and the fluid bound
stays a bound under it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.sim import BUNDLED_CLUSTER, sim_cluster, sim_pool

from hybridgpu.errors import UserError
from hybridgpu.models.snapshot import Criticality
from hybridgpu.sim.compare import BOUND, WaitSLO, compare
from hybridgpu.sim.config import load_cluster
from hybridgpu.sim.engine import SimSettings, Simulation
from hybridgpu.sim.prices import PriceSteps, SpotPrices, load_spot_prices
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit


def test_a_price_holds_until_the_next_and_is_integrated_per_interval() -> None:
    steps = PriceSteps.of([(3600, 3.0), (0, 1.0), (7200, 2.0)])
    assert steps.price_at(-5) == 1.0  # the first price also holds before its row
    assert steps.price_at(3599.9) == 1.0
    assert steps.price_at(3600) == 3.0
    assert steps.price_at(10**6) == 2.0  # the last one for ever
    # Half an hour at $1, an hour at $3, half an hour at $2.
    assert steps.node_dollars(1800, 9000) == pytest.approx(0.5 + 3 + 1)
    assert steps.node_dollars(9000, 1800) == 0
    assert steps.next_change_after(3600) == 7200
    assert steps.next_change_after(7200) is None
    assert steps.lowest(3600, 7000) == 3.0
    assert steps.lowest(3600, 7200) == 2.0


def test_the_price_file_is_read_and_bad_rows_are_named(tmp_path: Path) -> None:
    good = tmp_path / "prices.csv"
    good.write_text(
        "# where from\nseconds,pool,price_per_node_hour\n0,spot-8g,7.34\n"
        "# later\n3600,spot-8g,9.5\n\n"
    )
    prices = load_spot_prices(good)
    assert prices.by_pool["spot-8g"].price_at(4000) == 9.5
    bad = {
        "when,pool,price\n0,a,1\n": "expected a CSV with the header seconds,pool,price_per",
        "seconds,pool,price_per_node_hour\nsoon,a,1\n": "row 2: field 'seconds' is 'soon'",
        "seconds,pool,price_per_node_hour\n0,a,-1\n": "row 2: field 'price_per_node_hour' is '-1'",
        "seconds,pool,price_per_node_hour\n0,a,nan\n": "field 'price_per_node_hour' is 'nan'",
        "seconds,pool,price_per_node_hour\n0,,1\n": "row 2: field 'pool' is empty",
        "seconds,pool,price_per_node_hour\n\n0,a\n": "row 3 has 2 fields",
        "seconds,pool,price_per_node_hour\n": "no prices",
    }
    for text, message in bad.items():
        good.write_text(text)
        with pytest.raises(UserError, match=message):
            load_spot_prices(good)
    prices.check_pools(["spot-8g", "spot-1g"], "f.csv")
    with pytest.raises(UserError, match="field 'pool' is 'spot-8g'; expected a spot pool"):
        prices.check_pools(["spot-1g"], "f.csv")


def test_simulate_names_a_price_file_for_a_pool_that_is_not_spot(tmp_path: Path, capsys) -> None:
    from hybridgpu.cli import main

    prices = tmp_path / "prices.csv"
    prices.write_text("seconds,pool,price_per_node_hour\n0,od-8g,1.0\n")
    assert main(["simulate", "--no-png", "--hours", "2", "--spot-prices", str(prices)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(prices) in err and "field 'pool' is 'od-8g'; expected a spot pool" in err
    example = Path(__file__).resolve().parents[2] / "examples/spot-prices-bundled.csv"
    args = ["simulate", "--no-png", "--json", "--hours", "2", "--spot-prices", str(example)]
    assert main(args) == 0


def _spot_only(price_steps: dict[str, list[tuple[float, float]]]) -> tuple[list, SimSettings]:
    pools = [sim_pool("spot-a", "spot", 1, 8, 1.0), sim_pool("spot-b", "spot", 1, 8, 2.0)]
    prices = SpotPrices({p: PriceSteps.of(pts) for p, pts in price_steps.items()})
    quick = SimSettings(
        provisioning_delay_seconds=0,
        billing_minimum_seconds=0,
        spot_hazard_per_hour=0,
        spot_prices=prices,
    )
    return pools, quick


def test_a_spot_node_is_billed_at_each_intervals_price() -> None:
    """A two-hour preemptible job on a spot node whose price triples after an hour: the node
    is billed $1/h up to the change and $3/h after it, to the second it is released."""
    pools, quick = _spot_only({"spot-a": [(0, 1.0), (3600, 3.0)]})
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec.model_copy(update={"interval": "10s"})
    jobs = [TraceJob("a", 0, 7200, 1, Criticality.PREEMPTIBLE)]
    sim = Simulation("h", pools[:1], policy, jobs, quick)
    result = sim.run()
    [node] = sim.removed
    assert node.removed_at is not None and node.launched_at < 3600 < node.removed_at
    want = (3600 - node.launched_at) / 3600 * 1.0 + (node.removed_at - 3600) / 3600 * 3.0
    assert result.cost_by_tier_dollars["spot"] == pytest.approx(want)
    # The same run at the constant first price bills a third as much for the second hour.
    flat = Simulation("h", pools[:1], policy, jobs, _spot_only({})[1]).run()
    assert result.cost_by_tier_dollars["spot"] - flat.cost_by_tier_dollars["spot"] > 1.9
    # Cloud dollars by cause still add up to the cloud spend.
    assert sum(result.cost_terms_dollars.values()) == pytest.approx(result.cloud_cost_dollars)


def test_decide_grows_the_spot_pool_that_is_cheapest_now() -> None:
    """spot-a costs $1 until 10 h, then $5; spot-b a steady $2. Work arriving before the
    change gets a spot-a node, work arriving after it a spot-b node: the operator sees the
    price in force (the snapshot's provider price), not the one it started with."""
    pools, quick = _spot_only({"spot-a": [(0, 1.0), (36000, 5.0)]})
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec
    jobs = [
        TraceJob("early", 0, 3600, 1, Criticality.PREEMPTIBLE),
        TraceJob("late", 12 * 3600, 3600, 1, Criticality.PREEMPTIBLE),
    ]
    sim = Simulation("h", pools, policy, jobs, quick)
    sim.run()
    launched = sorted((n.launched_at, n.pool) for n in sim.removed)
    assert [pool for _, pool in launched] == ["spot-a", "spot-b"]


series_strategy = st.lists(
    st.tuples(st.floats(0, 12 * 3600, allow_nan=False), st.sampled_from([0.2, 1.0, 6.0])),
    min_size=1,
    max_size=5,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=st.lists(
        st.tuples(
            st.floats(0, 8 * 3600, allow_nan=False),
            st.floats(300, 4 * 3600, allow_nan=False),
            st.sampled_from([1, 2, 8]),
            st.sampled_from(list(Criticality)),
        ),
        min_size=1,
        max_size=12,
    ).map(lambda rows: [TraceJob(f"j{n}", *row) for n, row in enumerate(rows)]),
    one_gpu=series_strategy,
    eight_gpu=series_strategy,
    hazard=st.sampled_from([0.0, 0.5]),
)
def test_no_policy_that_meets_the_slo_beats_the_bound_when_spot_prices_move(
    jobs, one_gpu, eight_gpu, hazard
) -> None:
    """The bound property of test_sim_truth, with each spot pool's GPU price moving between
    $0.20, $1 and $6 (dearer than on-demand's $4) over the run."""
    pools = sim_cluster(1, 4.0, 1.0)
    prices = SpotPrices(
        {
            "spot-1g": PriceSteps.of(one_gpu),
            "spot-8g": PriceSteps.of([(at, 8 * p) for at, p in eight_gpu]),
        }
    )
    policy = load_cluster(BUNDLED_CLUSTER).policy.spec
    slo = WaitSLO()
    s = SimSettings(spot_hazard_per_hour=hazard, spot_prices=prices)
    results = compare(pools, policy, jobs, s, slo=slo)
    bound = results[BOUND]
    for name, result in results.items():
        if name == BOUND:
            continue
        assert sum(result.cost_terms_dollars.values()) == pytest.approx(
            result.cloud_cost_dollars, abs=0.01
        ), name
        if name == "on_demand" or not slo.met_by(result):
            continue
        assert result.cloud_cost_dollars >= bound.cloud_cost_dollars - 1e-6, name
        assert result.total_cost_dollars >= bound.total_cost_dollars - 1e-6, name
