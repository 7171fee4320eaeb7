"""`simulate --json` and `plan --json` carry what their text reports show, so a consumer
never parses the text: the jobs a trace load skipped, counted by reason (every reason named,
0 when none), the jobs --skip-infeasible left out, the notes, and the figures the text
prints beside the status (jobs, growth, owned GPUs, work GPU-hours, the headline peer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridgpu.cli import main

REPO = Path(__file__).resolve().parents[2]
REASONS = ["no_gpu", "never_scheduled", "zero_duration", "infeasible"]

# One job runs; one ran 0 s; one asks more GPUs than any node (--skip-infeasible).
TRACE = """\
name,arrival_seconds,duration_seconds,gpus,criticality
a,0,3600,1,standard
b,60,0,1,standard
c,120,3600,2,preemptible
huge,130,3600,1000,standard
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return out


def _simulate(trace: Path, *extra: str) -> list[str]:
    return ["simulate", "--no-png", "--workers", "1", "--trace", str(trace), *extra]


def _plan(trace: Path, *extra: str) -> list[str]:
    config = str(REPO / "examples" / "plan.yaml")
    return ["plan", "--config", config, "--workers", "1", "--trace", str(trace), *extra]


def test_simulate_json_counts_the_skipped_jobs_by_reason(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(_run(_simulate(trace, "--skip-infeasible", "--json"), capsys))
    skipped = report["skipped"]
    assert list(skipped["by_reason"]) == REASONS
    assert skipped["by_reason"] == {
        "no_gpu": 0,
        "never_scheduled": 0,
        "zero_duration": 1,
        "infeasible": 1,
    }
    assert skipped["total"] == 2
    (huge,) = skipped["infeasible_jobs"]
    assert huge["name"] == "huge" and "needs 1000 GPUs on one node" in huge["reason"]
    assert report["jobs"] == 2
    # The notes are the text report's, word for word.
    text = _run(_simulate(trace, "--skip-infeasible"), capsys)
    assert report["notes"] and all(f"  {note}\n" in text for note in report["notes"])


def test_simulate_json_has_the_text_reports_other_figures(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(_run(_simulate(trace, "--skip-infeasible", "--json"), capsys))
    assert report["headline_peer"] == "autoscaler_spot"  # the "x peer" columns' peer
    for name, policy in report["policies"].items():
        tiers = sum(policy["gpu_hours"].get(t, 0.0) for t in ("core", "elastic", "spot"))
        assert policy["work_gpu_hours"] == pytest.approx(tiers, abs=0.2), name


def test_simulate_json_of_the_synthetic_scenario_names_every_reason_at_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--no-png", "--workers", "1", "--hours", "2", "--json"]
    report = json.loads(_run(argv, capsys))
    assert report["skipped"] == {
        "total": 0,
        "by_reason": dict.fromkeys(REASONS, 0),
        "infeasible_jobs": [],
    }
    assert report["notes"] == []


def test_plan_json_counts_the_skipped_jobs_by_reason(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(_run(_plan(trace, "--skip-infeasible", "--json"), capsys))
    assert report["skipped"] == {
        "total": 2,
        "byReason": {"no_gpu": 0, "never_scheduled": 0, "zero_duration": 1, "infeasible": 1},
        "infeasibleJobs": ["huge"],
    }
    assert "skipped: 1 zero duration" in report["notes"]
    # The text report says so too (it said nothing of the 0-second job before).
    text = _run(_plan(trace, "--skip-infeasible"), capsys)
    assert "note: skipped: 1 zero duration" in text.splitlines()


def test_plan_json_has_the_text_reports_other_figures(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(_run(_plan(trace, "--skip-infeasible", "--json"), capsys))
    text = _run(_plan(trace, "--skip-infeasible"), capsys)
    assert report["jobs"] == 2 and "2 jobs replayed" in text
    growth = report["demandGrowthPercentPerYear"]
    assert f"demand growth {growth:+.0f}%/year" in text
    assert f"owned GPUs {report['ownedGpus']}," in text
    for node_type in report["nodeTypes"]:
        gpus, price = node_type["gpusPerNode"], node_type["nodeHourDollars"]
        assert f"{node_type['name']:<16} " in text
        assert f"x {gpus} GPUs   ${price:,.2f}/node-hour" in text
    assert report["ownedHardwarePurchases"] >= report["status"]["ownedCapital"]["capex"]


def test_plan_json_of_a_demand_history_skips_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "demand.csv"
    history.write_text("time,critical,standard,preemptible\n0,4,2,1\n3600,6,2,0\n7200,3,1,2\n")
    config = str(REPO / "examples" / "plan.yaml")
    argv = ["plan", "--config", config, "--workers", "1", "--history", str(history), "--json"]
    report = json.loads(_run(argv, capsys))
    assert report["skipped"] == {
        "total": 0,
        "byReason": dict.fromkeys(REASONS, 0),
        "infeasibleJobs": [],
    }
    assert report["jobs"] == 0
