"""`hybridgpu plan` with committed offers and hardware generations: the JSON a finance team
reads (mix, quarterly cash flow, NPV, throughput-normalised comparison), the chart, and bad
input as one line and exit 2."""

from __future__ import annotations

import json

import pytest

from hybridgpu.planner.finance import QuarterCash, npv

pytestmark = pytest.mark.unit

PLAN = """\
horizonMonths: 12
costOfCapitalPercentPerYear: {rate}
demandGrowthPercentPerYear: 40
tokensPerGpuHour: 1000000
candidates:
  - name: 8xH100
    gpuModel: H100
    gpusPerNode: 8
    capexPerNode: 280000
    powerWattsPerNode: 10200
  - name: 8xB200
    gpuModel: B200
    gpusPerNode: 8
    capexPerNode: 500000
    powerWattsPerNode: 14300
cloud:
  gpuModel: H100
  onDemandPerGpuHour: 6.88
  spotPerGpuHour: 2.75
  spotInterruptionsPerHour: 0
committed:
  - {{name: 1y, termYears: 1, discountPercent: 37}}
  - {{name: 3y, termYears: 3, discountPercent: 55, maxDecreasePercent: 10}}
"""


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from hybridgpu.cli import main

    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path):
    config = tmp_path / "plan.yaml"
    config.write_text(PLAN.format(rate=8))
    history = tmp_path / "demand.csv"
    # 40 firm GPUs all day, 40 more firm GPUs half the day, 16 preemptible.
    rows = [(h * 3600, 40 + (40 if h % 24 >= 12 else 0), 16) for h in range(48)]
    history.write_text(
        "time,standard,preemptible\n" + "".join(f"{t},{f},{p}\n" for t, f, p in rows)
    )
    return config, history


def test_json_carries_the_mix_cash_flow_npv_and_generations(capsys, files):
    config, history = files
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    report = json.loads(out)
    procurement = report["procurement"]
    mix = procurement["mix"]
    for kind in ("gpuHoursPercent", "dollarsPercent"):
        assert set(mix[kind]) == {"owned", "committed", "onDemand", "spot"}
        assert sum(mix[kind].values()) == pytest.approx(100, abs=0.05)
    flows = procurement["cashFlowByQuarter"]
    assert [q["quarter"] for q in flows] == [1, 2, 3, 4]
    # Cloud spend in the cash flow is the plan's, quarter by quarter.
    paid = sum(q["committed"] + q["onDemand"] + q["spot"] for q in flows)
    owned_hourly_total = procurement["totalDollars"] - paid
    assert owned_hourly_total >= 0
    # Capex is paid in the first quarter only (4-year hardware, a 12-month horizon) and
    # most of it comes back as residual value at the end.
    assert flows[0]["capex"] > 0 and all(q["capex"] == 0 for q in flows[1:])
    assert 0 < flows[-1]["residualValue"] < flows[0]["capex"]
    rebuilt = [
        QuarterCash(
            q["quarter"] - 1,
            q["capex"],
            q["ownedOperating"],
            q["committed"],
            q["onDemand"],
            q["spot"],
            q["residualValue"],
        )
        for q in flows
    ]
    assert procurement["npv"] == pytest.approx(npv(rebuilt, 0.08, 12), abs=1.0)
    # A 3-year term in a 12-month plan is owed 24 months more; what it does not earn back
    # then is in the total, never more than what is owed.
    offer = procurement["committedOffer"]
    after = procurement["committedAfterHorizon"]
    assert after["months"] == (24 if offer is not None and offer["termYears"] == 3 else 0)
    assert 0 <= after["chargedDollars"] <= after["paidDollars"]
    # 1M tokens per GPU-hour: the cost per million tokens is dollars per demand GPU-hour.
    assert procurement["costPerMillionTokens"] > 0
    generations = report["generations"]
    by_name = {o["name"]: o for o in generations["options"]}
    assert by_name["8xB200"]["throughput"] == 2.0  # MLPerf Training default vs H100
    assert by_name["8xB200"]["throughputSource"] == "MLPerf default"
    assert by_name["8xB200"]["dollarsPerWorkHour"] < by_name["8xH100"]["dollarsPerWorkHour"]
    assert by_name["8xB200"]["wattsPerWorkUnit"] < by_name["8xH100"]["wattsPerWorkUnit"]
    assert generations["winner"] == "8xB200"
    assert generations["flipUtilization"] == pytest.approx(
        by_name["8xB200"]["dollarsPerWorkHour"] / 6.88, abs=1e-4
    )


def test_npv_at_no_cost_of_capital_is_the_sum_of_the_cash_flow(capsys, files):
    config, history = files
    config.write_text(PLAN.format(rate=0))
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    procurement = json.loads(out)["procurement"]
    flows = procurement["cashFlowByQuarter"]
    assert procurement["npv"] == pytest.approx(sum(q["total"] for q in flows), abs=1.0)


def test_owned_tranches_in_the_json_and_the_cash_flow(capsys, files):
    """ownedTrancheMonths: 3 on demand growing 200% a year over 12 months: the plan buys
    owned nodes now and in later quarters, and each quarter's capex is what it buys then."""
    config, history = files
    text = PLAN.format(rate=8).replace(
        "demandGrowthPercentPerYear: 40", "demandGrowthPercentPerYear: 200"
    )
    config.write_text(text + "ownedTrancheMonths: 3\n")
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    procurement = json.loads(out)["procurement"]
    tranches = procurement["ownedTranches"]
    assert tranches[0]["month"] == 0 and len(tranches) > 1
    capex = {"8xH100": 280000, "8xB200": 500000}
    flows = procurement["cashFlowByQuarter"]
    for quarter in flows:
        bought = [t for t in tranches if t["month"] // 3 == quarter["quarter"] - 1]
        want = sum(n * capex[name] for t in bought for name, n in t["nodes"].items())
        assert quarter["capex"] == pytest.approx(want, abs=0.01)
    assert procurement["ownedNodes"] == {name: tranches[0]["nodes"].get(name, 0) for name in capex}
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history))
    assert code == 0, err
    assert f"buy in month {tranches[1]['month']}:" in out


def test_npv_discounts_later_money():
    flows = [
        QuarterCash(0, 100.0, 10.0, 5.0, 1.0, 2.0),
        QuarterCash(1, 0.0, 10.0, 5.0, 1.0, 2.0, 30.0),
    ]
    assert npv(flows, 0.0, 6) == pytest.approx(sum(q.total for q in flows))
    assert npv(flows, 0.1, 6) < npv(flows, 0.0, 6) + 30.0


def test_text_report_and_chart(capsys, files, tmp_path):
    config, history = files
    png = tmp_path / "plan.png"
    code, out, err = run_cli(
        capsys, "--config", str(config), "--history", str(history), "--png", str(png)
    )
    assert code == 0, err
    assert "procurement (owned + committed + on demand + spot" in out
    assert "mix of GPU-hours" in out and "NPV of the cash flow" in out
    assert "per unit of work" in out
    assert png.stat().st_size > 20_000


BAD = {
    "an offer with a discount and a price": (
        "discountPercent: 37}}",
        "discountPercent: 37, perGpuHour: 3.0}}",
        ["plan.yaml", "exactly one of discountPercent"],
    ),
    "a two-year term": ("termYears: 1,", "termYears: 2,", ["plan.yaml", "termYears"]),
    "a window longer than the term": (
        "discountPercent: 37}}",
        "discountPercent: 37, adjustmentMonths: 18}}",
        ["plan.yaml", "adjustmentMonths must not exceed the term"],
    ),
    "a term started longer ago than it lasts": (
        "discountPercent: 37}}",
        "discountPercent: 37, termStartedMonthsAgo: 12}}",
        ["plan.yaml", "termStartedMonthsAgo must be less than the term's months"],
    ),
    "nine offers": (
        "discountPercent: 37}}\n",
        "discountPercent: 37}}\n"
        + "".join(f"  - {{{{name: x{i}, termYears: 1, discountPercent: 30}}}}\n" for i in range(7)),
        ["plan.yaml", "committed"],
    ),
    "negative nodes held": (
        "discountPercent: 37}}",
        "discountPercent: 37, currentNodes: -1}}",
        ["plan.yaml", "currentNodes"],
    ),
    "model FLOPs without a token rate": (
        "tokensPerGpuHour: 1000000",
        "modelFlopsPerToken: 1.4e11",
        ["plan.yaml", "modelFlopsPerToken needs tokensPerGpuHour"],
    ),
    "MFU for a GPU without a datasheet peak": (
        "cloud:\n  gpuModel: H100\n",
        "modelFlopsPerToken: 1.4e11\ncloud:\n  gpuModel: MI300X\n",
        ["plan.yaml", "set cloud.peakTflopsPerGpu", "MI300X"],
    ),
    "a negative throughput": (
        "gpuModel: B200\n",
        "gpuModel: B200\n    throughput: {{training: -1}}\n",
        ["plan.yaml", "throughput.training"],
    ),
    "owned tranches off the quarters": (
        "tokensPerGpuHour: 1000000",
        "tokensPerGpuHour: 1000000\nownedTrancheMonths: 4",
        ["plan.yaml", "ownedTrancheMonths"],
    ),
    "demand grown past what can be searched": (
        "horizonMonths: 12\ncostOfCapitalPercentPerYear: {rate}\ndemandGrowthPercentPerYear: 40",
        "horizonMonths: 120\ncostOfCapitalPercentPerYear: {rate}\ndemandGrowthPercentPerYear: 1000",
        ["plan.yaml", "owned fleet search", "peaks at", "candidates[].maxNodes"],
    ),
    "an unknown workload class": (
        "tokensPerGpuHour: 1000000",
        "tokensPerGpuHour: 1000000\nworkloadClass: gaming",
        ["plan.yaml", "workloadClass"],
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_one_line_and_exit_2(capsys, files, name):
    old, new, want = BAD[name]
    config, history = files
    text = PLAN.replace(old, new)
    assert text != PLAN, "the case does not change the plan"
    config.write_text(text.format(rate=8))
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 2, err
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    for part in want:
        assert part in err


def test_a_replan_starts_from_the_commitment_held_today(capsys, files):
    """2 nodes of the 3-year lease held, signed 7 months ago (quarterly windows on its
    calendar): the first window runs 2 months at 2 nodes at least, and the plan names the
    windows to use from there."""
    config, history = files
    config.write_text(
        PLAN.replace(
            "maxDecreasePercent: 10}}",
            "maxDecreasePercent: 10, currentNodes: 2, termStartedMonthsAgo: 7}}",
        ).format(rate=8)
    )
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    procurement = json.loads(out)["procurement"]
    assert procurement["committedOffer"]["name"] == "3y"
    windows = procurement["committedNodesByWindow"]
    assert [w["month"] for w in windows[:3]] == [0, 2, 5]
    assert windows[0]["nodes"] == 2  # between windows: what is held
    # Within the term (it ends in month 29), 2 x 0.9 rounds up to 2: never fewer.
    assert all(w["nodes"] >= 2 for w in windows if w["month"] < 29)
    changes = procurement["adjustments"]
    if changes:
        first = changes[0]
        assert procurement["nextAdjustment"].startswith(
            ("raise" if first["toNodes"] > first["fromNodes"] else "lower")
            + f" the commitment from {first['fromNodes']} to {first['toNodes']}"
        )


def test_mfu_of_a_busy_gpu_and_of_the_capacity_paid_for(capsys, files):
    """A 70B-parameter model served (2 x 70e9 FLOPs per token) at 1M tokens per H100-hour:
    278 tokens/s x 1.4e11 FLOPs over the H100's 989 dense BF16 TFLOPS is 3.93%; over every
    GPU-hour paid for it is less (idle owned or committed GPUs, reruns, boot time)."""
    config, history = files
    config.write_text(
        PLAN.replace(
            "tokensPerGpuHour: 1000000", "tokensPerGpuHour: 1000000\nmodelFlopsPerToken: 1.4e11"
        ).format(rate=8)
    )
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    mfu = json.loads(out)["procurement"]["mfu"]
    assert mfu["peakTflopsPerGpu"] == 989.0
    assert mfu["peakSource"].startswith("datasheet")
    assert mfu["busyGpuPercent"] == pytest.approx(100 * 1e6 / 3600 * 1.4e11 / 989e12, abs=0.01)
    assert 0 < mfu["paidCapacityPercent"] < mfu["busyGpuPercent"]
    # A GPU without a datasheet default: its peak is given.
    config.write_text(
        PLAN.replace(
            "tokensPerGpuHour: 1000000", "tokensPerGpuHour: 1000000\nmodelFlopsPerToken: 1.4e11"
        )
        .replace(
            "  gpuModel: H100\n  onDemand",
            "  gpuModel: MI300X\n  peakTflopsPerGpu: 1307\n  onDemand",
        )
        .format(rate=8)
    )
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    mfu = json.loads(out)["procurement"]["mfu"]
    assert (mfu["peakTflopsPerGpu"], mfu["peakSource"]) == (1307.0, "spec")


FALLING = """\
horizonMonths: 36
costOfCapitalPercentPerYear: 0
demandGrowthPercentPerYear: -50
candidates:
  - {name: 8xH100, gpusPerNode: 8, capexPerNode: 900000, powerWattsPerNode: 10200}
cloud: {onDemandPerGpuHour: 6.88, spotPerGpuHour: 2.75}
committed:
  - {name: 1y, termYears: 1, discountPercent: 37, gpusPerNode: 1}
  - {name: 3y, termYears: 3, discountPercent: 55, gpusPerNode: 1}
"""


def test_a_three_year_base_and_a_one_year_top_up_are_signed_together(capsys, tmp_path):
    """Firm demand of 8 GPUs falling 50% a year, owning far too dear: the 3-year lease
    (which cannot be lowered in its term) takes what is left at the end, the 1-year one the
    rest, lowered at each renewal. --json lists both with their levels, the adjustments name
    the offer, the text report prints both, and the CapacityPlan's status and Ready message
    carry both."""
    from hybridgpu.handlers.capacityplan import compute_status

    config = tmp_path / "plan.yaml"
    config.write_text(FALLING)
    history = tmp_path / "demand.csv"
    history.write_text("time,standard\n" + "".join(f"{h * 3600},8\n" for h in range(24)))
    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history), "--json")
    assert code == 0, err
    procurement = json.loads(out)["procurement"]
    signed = procurement["committedOffers"]
    assert [o["name"] for o in signed] == ["3y", "1y"]
    assert procurement["committedOffer"]["name"] == "3y"  # the base
    base = [w["nodes"] for w in signed[0]["nodesByWindow"]]
    top_up = [w["nodes"] for w in signed[1]["nodesByWindow"]]
    assert len(set(base)) == 1 and base[0] > 0
    assert top_up[0] > top_up[-1] >= 0
    assert base == [w["nodes"] for w in procurement["committedNodesByWindow"]]
    assert {a["offer"] for a in procurement["adjustments"]} == {"1y"}
    assert procurement["nextAdjustment"].startswith("lower the 1y commitment from ")

    code, out, err = run_cli(capsys, "--config", str(config), "--history", str(history))
    assert code == 0, err
    assert "commit: 3y (3-year" in out and "commit: 1y (1-year" in out

    import yaml

    spec = yaml.safe_load(FALLING) | {
        "history": {"trace": {"path": str(history), "format": "demand"}}
    }
    status = compute_status(spec, {}, 1, 0.0)
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "True", ready
    commitments = status["procurement"]["commitments"]
    assert [(c["offer"], c["termYears"]) for c in commitments] == [("3y", 3), ("1y", 1)]
    assert f"commit {base[0]} node(s) of 3y and {top_up[0]} node(s) of 1y:" in ready["message"]
