"""hybridgpu alone on the bundled scenario over many scenario seeds: is a rule a saving or noise?

    .venv/bin/python bench/simulate_seeds.py [--seeds 7-26] [--json] [--against BEFORE.json]

One decision changed in decide() reshuffles everything after it, so a seed's total moves by
about 4% either way for reasons that have nothing to do with the rule (docs/benchmarks.md,
"Rules measured and not kept"). This runs only hybridgpu and the fluid bound (the baselines do
not change with hybridgpu's rules), one line per seed: total and cloud dollars, x the bound,
critical p95 wait, the worst lateness per class, unfinished jobs, whether the wait SLO held,
and the --explain terms; then the sums. Compare two commits over the same seeds: save the
first one's ``--json`` and give it to the second as ``--against``, which adds the paired
difference of the totals (mean per seed with its standard error, and how many seeds went
down, up or stayed): a rule is beyond noise only when the mean is well outside its error.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.sim.compare import (  # noqa: E402
    WaitSLO,
    core_sunk_per_hour,
    fluid_bound,
    policy_runs,
    simulation,
    trace_window_seconds,
)
from hybridgpu.sim.config import load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings  # noqa: E402
from hybridgpu.sim.report import explain_gap  # noqa: E402
from hybridgpu.sim.traces import synthetic  # noqa: E402

CLUSTER = ROOT / "operator" / "hybridgpu" / "sim" / "scenarios" / "default-cluster.yaml"


def seed_list(text: str) -> list[int]:
    """``7-26`` or ``7,1,2``: the scenario seeds."""
    if "-" in text:
        low, high = (int(x) for x in text.split("-", 1))
        return list(range(low, high + 1))
    return [int(x) for x in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="7-26", help="scenario seeds: 7-26 or 7,1,2 (7-26)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    parser.add_argument(
        "--against",
        metavar="BEFORE.json",
        help="an earlier run's --json output: add the paired difference per seed",
    )
    args = parser.parse_args()
    before: dict[str, float] | None = None
    if args.against:
        try:
            with open(args.against) as f:
                before = {k: float(v["total_dollars"]) for k, v in json.load(f)["seeds"].items()}
        except OSError as exc:
            print(f"simulate_seeds: --against: {exc}", file=sys.stderr)
            return 2
        except (ValueError, KeyError, TypeError):
            print(
                f"simulate_seeds: --against {args.against}: not this script's --json output",
                file=sys.stderr,
            )
            return 2
    config = load_cluster(CLUSTER)
    pools, policy = policy_runs(config.pools, config.policy.spec)["hybridgpu"]
    slo = WaitSLO()
    rows: dict[str, dict[str, object]] = {}
    sums = {"total_dollars": 0.0, "cloud_dollars": 0.0, "bound_cloud_dollars": 0.0}
    start = time.process_time()
    for seed in seed_list(args.seeds):
        jobs = synthetic(seed=seed)
        settings = SimSettings(spot_hazard_per_hour=0.05, seed=7)
        result = simulation("hybridgpu", pools, policy, jobs, settings).run()
        window = trace_window_seconds(jobs)
        core = core_sunk_per_hour(config.pools) * window / 3600 + result.owned_power_window_dollars
        total = result.cloud_cost_dollars + core
        bound = fluid_bound(config.pools, jobs, window, slo)
        row: dict[str, object] = {
            "total_dollars": round(total, 2),
            "cloud_dollars": round(result.cloud_cost_dollars, 2),
            "cloud_over_bound": round(result.cloud_cost_dollars / bound.cloud_cost_dollars, 2),
            "critical_p95_wait_seconds": round(result.wait_seconds["critical"]["p95"], 1),
            "max_lateness_hours": {
                k: round(v / 3600, 2) for k, v in result.max_lateness_seconds.items()
            },
            "unfinished_jobs": result.unfinished_jobs,
            "meets_slo": slo.met_by(result),
            "explain": {k: round(v, 2) for k, v in explain_gap(result, bound).items()},
        }
        rows[str(seed)] = row
        sums["total_dollars"] += total
        sums["cloud_dollars"] += result.cloud_cost_dollars
        sums["bound_cloud_dollars"] += bound.cloud_cost_dollars
        if not args.json:
            wait = row["critical_p95_wait_seconds"]
            print(
                f"seed {seed:>3}: total {total:>8,.0f}  cloud {result.cloud_cost_dollars:>7,.0f}"
                f"  x bound {row['cloud_over_bound']:>5}  crit p95 {wait} s"
                f"  late h {row['max_lateness_hours']}  unfinished {result.unfinished_jobs}"
                f"  SLO {'yes' if row['meets_slo'] else 'no'}",
                flush=True,
            )
    summary = {k: round(v, 2) for k, v in sums.items()}
    cpu = round(time.process_time() - start, 1)
    paired = None if before is None else paired_difference(rows, before)
    if args.json:
        out: dict[str, object] = {"seeds": rows, "sum": summary, "cpu_seconds": cpu}
        if paired is not None:
            out["against"] = paired
        print(json.dumps(out, indent=2))
    else:
        print(
            f"sum: total {summary['total_dollars']:,.0f}  cloud {summary['cloud_dollars']:,.0f}"
            f"  bound cloud {summary['bound_cloud_dollars']:,.0f}  ({cpu} CPU s)"
        )
        if paired is not None:
            print(
                f"against {args.against}: {paired['seeds']} seeds, total"
                f" {paired['sum_dollars']:+,.0f}, per seed {paired['mean_dollars']:+,.1f}"
                f" +- {_or_nan(paired['standard_error_dollars']):,.1f} (standard error);"
                f" down {paired['down']}, up {paired['up']}, same {paired['same']}"
            )
    return 0


def _or_nan(value: float | int | None) -> float:
    return math.nan if value is None else float(value)


def paired_difference(
    rows: dict[str, dict[str, object]], before: dict[str, float]
) -> dict[str, float | int | None]:
    """This run's total minus ``before``'s, seed by seed, over the seeds both have (the
    standard error is None with fewer than two)."""
    diffs = [
        float(row["total_dollars"]) - before[seed]  # type: ignore[arg-type]
        for seed, row in rows.items()
        if seed in before
    ]
    error = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
    return {
        "seeds": len(diffs),
        "sum_dollars": round(sum(diffs), 2),
        "mean_dollars": round(statistics.fmean(diffs), 2) if diffs else 0.0,
        "standard_error_dollars": None if error is None else round(error, 2),
        "down": sum(1 for d in diffs if d < -0.005),
        "up": sum(1 for d in diffs if d > 0.005),
        "same": sum(1 for d in diffs if abs(d) <= 0.005),
    }


if __name__ == "__main__":
    sys.exit(main())
