"""`hybridgpu plan`: how many GPU nodes to own, and how much to rent (the TCO planner).

Parsing and output only; the model is ``planner.plan``, the inputs ``planner.io``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hybridgpu.errors import FigureNotFinite, RunsFailed, UserError, require_finite
from hybridgpu.inputs import (
    describe_validation_error,
    file_name,
    positive_number,
    worker_count,
)


def add_parsers(sub: Any) -> None:
    """Register ``hybridgpu plan``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan",
        help="recommend how many GPU nodes to own vs rent, from measured demand",
        description="Find the owned fleet (nodes per candidate type) with the lowest total cost "
        "of ownership over the horizon, renting the rest on demand (critical/standard) and on "
        "spot (preemptible), from a demand history, a job trace or Prometheus. Prices and "
        "candidates come from --config (a CapacityPlan manifest or its spec).",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--history",
        type=file_name,
        metavar="FILE",
        help="CSV of GPUs in use over time: time,critical,standard,preemptible "
        "(or time,criticality,gpus)",
    )
    source.add_argument("--trace", type=file_name, metavar="FILE", help="job trace file")
    source.add_argument("--prometheus", type=file_name, metavar="URL", help="Prometheus base URL")
    parser.add_argument(
        "--trace-format",
        choices=("openb", "csv"),
        default=None,
        help="default: detected from the trace's header",
    )
    parser.add_argument(
        "--time-scale",
        type=positive_number,
        default=None,
        help="divide the trace's times by this factor (default 1)",
    )
    parser.add_argument(
        "--skip-infeasible",
        action="store_true",
        help="leave out (and report) trace jobs needing more GPUs than the largest candidate "
        "node (default: such a job is an error)",
    )
    parser.add_argument("--qos-map", help="openb qos mapping, e.g. LS=standard,BE=preemptible")
    parser.add_argument("--window", default=None, help="Prometheus: how far back (default 30d)")
    parser.add_argument("--step", default=None, help="Prometheus: resolution (default 5m)")
    parser.add_argument("--query", default=None, help="Prometheus: PromQL of GPUs in use")
    parser.add_argument(
        "--config",
        "-c",
        type=file_name,
        metavar="PLAN.yaml",
        required=True,
        help="CapacityPlan manifest or spec: candidates, prices, horizon, growth",
    )
    parser.add_argument(
        "--search",
        choices=("auto", "exact", "fast"),
        default="auto",
        help="a job trace: 'exact' replays it at every owned size and committed level that can "
        "win; 'fast' searches an aggregate model of it and replays only a few owned sizes "
        "around its optimum, pricing the answer by replay (docs/tco.md); default 'auto': fast "
        "above 10,000 jobs",
    )
    parser.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="the fast search's replays, or a demand history's flip-point searches, made at "
        "once, each in a process of its own (default: the CPUs this process may use; 1: one "
        "after the other, in this process); the plan is the same",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--png", type=file_name, metavar="FILE", help="chart: duration curve and cost curve"
    )
    parser.set_defaults(func=run)


def _side_by_side(workers: int | None) -> Any:
    """Where the fast search makes replays at once: ``workers`` forked processes (None: one
    per CPU this process may use), as `hybridgpu simulate --workers` runs its policies."""
    from hybridgpu.planner.cost import SideBySide
    from hybridgpu.sim.parallel import run_all, usable_cpus

    count = usable_cpus() if workers is None else workers

    def run(tasks: Any) -> Any:
        return run_all(tasks, workers=count, doing="replaying")

    return SideBySide(run, count)


def _config_errors(failed: RunsFailed, config: str) -> RunsFailed:
    """Work of the plan made side by side that failed, its ValueErrors the config's (exit 2),
    as one alone is."""
    failures = [
        (name, UserError(f"{config}: {error}") if isinstance(error, ValueError) else error)
        for name, error in failed.failures
    ]
    errors = RunsFailed(failed.doing, failed.runs, failures)
    for note in getattr(failed, "__notes__", ()):  # the tracebacks, for --debug
        errors.add_note(note)
    return errors


def _largest_node(spec: Any) -> tuple[str, int]:
    best = max(spec.candidates, key=lambda c: c.gpus_per_node)
    return best.name, best.gpus_per_node


def _history(
    args: argparse.Namespace, skipped: list[str] | None, left_out: dict[str, int]
) -> tuple[list[Any], list[Any], Any, str]:
    """The demand history, its jobs (traces), the spec and where the history came from;
    trace jobs no candidate node can hold are an error, or named in ``skipped`` when it is
    a list; ``left_out`` is given the counts of the jobs reading a trace skipped, by reason."""
    from hybridgpu.planner.traceread import read_trace
    from hybridgpu.sim.traces import detect_trace_format

    read = None
    if args.trace and not args.history:
        trace_format = args.trace_format or detect_trace_format(args.trace)
        if trace_format != "demand":
            # The trace before the config: a malformed one is reported before the
            # CapacityPlan's models are built (a quarter of a CPU second).
            scale = 1.0 if args.time_scale is None else args.time_scale
            read = read_trace(args.trace, trace_format, scale, args.qos_map)
    from hybridgpu.planner.io import (
        history_from_spec_trace,
        load_demand_csv,
        load_plan_spec,
        load_trace,
        prometheus_history,
    )
    from hybridgpu.planner.plan import share_replicas

    if args.history:
        spec = load_plan_spec(
            args.config, history={"trace": {"path": args.history, "format": "demand"}}
        )
        return load_demand_csv(args.history), [], spec, f"{args.history} (demand)"
    if args.trace:
        scale = 1.0 if args.time_scale is None else args.time_scale
        trace_format = args.trace_format or detect_trace_format(args.trace)
        spec = load_plan_spec(
            args.config,
            history={"trace": {"path": args.trace, "format": trace_format}},
        )
        samples, jobs = load_trace(
            args.trace,
            trace_format,
            time_scale=scale,
            qos_map=args.qos_map,
            largest_node=_largest_node(spec),
            skipped=skipped,
            read=read,
            share_replicas=share_replicas(spec),
            left_out=left_out,
        )
        return samples, jobs, spec, f"{args.trace} ({trace_format}, time scale {scale:g})"
    if args.prometheus:
        spec = load_plan_spec(args.config, history={"prometheus": {"url": args.prometheus}})
        prom = spec.history.prometheus
        query = args.query or (prom.query if prom else None)
        window = args.window or (prom.window if prom else "30d")
        step = args.step or (prom.step if prom else "5m")
        samples = prometheus_history(
            args.prometheus,
            query or "",
            window,
            step,
            end_seconds=time.time(),
        )
        return samples, [], spec, f"{args.prometheus} (last {window}, step {step})"
    spec = load_plan_spec(args.config)
    if spec.history.trace is not None:
        trace = spec.history.trace
        base = Path(args.config).resolve().parent
        samples, jobs = history_from_spec_trace(
            trace,
            base,
            largest_node=_largest_node(spec),
            skipped=skipped,
            share_replicas=share_replicas(spec),
            left_out=left_out,
        )
        return samples, jobs, spec, f"{trace.path} ({trace.format})"
    prom = spec.history.prometheus
    assert prom is not None
    samples = prometheus_history(
        prom.url, prom.query, prom.window, prom.step, end_seconds=time.time()
    )
    return samples, [], spec, f"{prom.url} (last {prom.window}, step {prom.step})"


def run(args: argparse.Namespace) -> int:
    if (args.window or args.step or args.query) and not args.prometheus:
        raise UserError("--window, --step and --query need --prometheus URL")
    if args.time_scale is not None and not args.trace:
        raise UserError("--time-scale needs --trace FILE")
    if (args.trace_format or args.qos_map or args.skip_infeasible) and not args.trace:
        raise UserError("--trace-format, --qos-map and --skip-infeasible need --trace FILE")
    if args.search != "auto" and (args.history or args.prometheus):
        # A demand history is planned on duration curves (choose_search: always exact).
        source = "--history" if args.history else "--prometheus"
        raise UserError(
            f"--search chooses how a job trace is replayed; {source} gives GPUs in use, "
            "planned without replays: pass --trace FILE, or no --search"
        )
    if args.png is not None:
        _check_png(args.png)
    skipped: list[str] | None = [] if args.skip_infeasible else None
    left_out: dict[str, int] = {}
    samples, jobs, spec, source = _history(args, skipped, left_out)
    from pydantic import ValidationError

    from hybridgpu.planner import progress
    from hybridgpu.planner.plan import (
        break_even_utilizations,
        plan_from_spec,
        plan_status,
    )

    progress.enable(sys.stderr)  # a long plan (a large trace) says how far it is
    try:
        result = plan_from_spec(
            spec, samples, jobs, search=args.search, side_by_side=_side_by_side(args.workers)
        )
    except ValueError as err:
        raise UserError(f"{args.config}: {err}") from None
    except RunsFailed as err:
        raise _config_errors(err, args.config) from None
    finally:
        progress.enable(None)
    inputs = result.inputs
    try:
        status = plan_status(result)
    except ValidationError as err:  # the status' figures are checked finite (allow_inf_nan)
        if err.errors()[0]["type"] != "finite_number":
            raise
        raise FigureNotFinite(f"plan: status.{describe_validation_error(err)}") from None
    # Every figure the JSON or the text report shows, checked before either is printed.
    out: dict[str, Any] = {
        "source": source,
        "historyHours": round(sum(s.hours for s in samples), 2),
        "jobs": len(inputs.jobs),
        "skipped": _skipped_json(left_out, skipped),
        "horizonMonths": spec.horizon_months,
        "demandGrowthPercentPerYear": round(100 * inputs.demand_growth_per_year, 2),
        "ownedGpus": result.recommended.owned_gpus,
        "nodeTypes": [
            {
                "name": t.name,
                "gpusPerNode": t.gpus_per_node,
                "nodeHourDollars": round(t.node_hour_dollars, 4),
            }
            for t in inputs.node_types
        ],
        "ownedHardwarePurchases": round(result.capital.purchases, 2),
        "status": status.to_wire(),
        "breakEvenUtilizationByType": {
            k: round(v, 4) for k, v in break_even_utilizations(inputs).items()
        },
        "monthlyCostAllOnDemand": round(result.monthly(result.all_on_demand_dollars), 2),
        "monthlyCostCurrentFleet": round(result.monthly(result.current.total_dollars), 2),
        "currentNodes": {t.name: t.current_nodes for t in inputs.node_types},
        "nextBest": _runner_ups(result),
        "procurement": _procurement_json(result),
        "generations": _generations_json(result, spec),
        "search": _search_json(result),
        "notes": _notes(inputs, skipped, left_out),
    }
    require_finite(out, "plan")
    png = _write_png(result, args.png) if args.png else None
    if args.json:
        if png is not None:
            out["png"] = str(png)
        print(json.dumps(out, indent=2))
        return 0
    print(_text_report(result, source, skipped, left_out))
    if png is not None:
        print(f"chart: {png}")
    return 0


def _check_png(path: str) -> None:
    """The chart's name is checked before the plan runs, not after."""
    if Path(path).suffix.lower() != ".png":
        raise UserError(f"--png {path}: the chart is a PNG; expected a file name ending in .png")
    if Path(path).is_dir():
        raise UserError(f"--png {path}: is a directory; expected a file name ending in .png")


def _skipped_json(left_out: dict[str, int], skipped: list[str] | None) -> dict[str, Any]:
    """``skipped`` of `plan --json`: the trace's jobs left out, by reason (every reason of
    SKIP_REASONS, 0 when none; the same reasons as `simulate --json`), and the names of
    those larger than any candidate node (--skip-infeasible)."""
    from hybridgpu.sim.traces import skipped_counts

    infeasible = skipped or []
    counts = skipped_counts(left_out, len(infeasible))
    return {"total": sum(counts.values()), "byReason": counts, "infeasibleJobs": infeasible}


def _notes(
    inputs: Any, skipped: list[str] | None = None, left_out: dict[str, int] | None = None
) -> list[str]:
    """What the user should know about how the inputs were used."""
    from hybridgpu.sim.traces import skipped_text

    notes = []
    if left_out and any(left_out.values()):
        notes.append(f"skipped: {skipped_text(left_out)}")
    if skipped:
        shown = ", ".join(skipped[:5]) + (
            f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        )
        notes.append(
            f"skipped {len(skipped)} job(s) larger than any candidate node "
            f"(--skip-infeasible): {shown}"
        )
    if inputs.jobs and inputs.preemptible_share is not None:
        notes.append(
            "preemptibleShare is not applied to a job trace: each job's own criticality is used"
        )
    return notes


def _search_json(result: Any) -> dict[str, Any]:
    """How the plan was searched (``--search``)."""
    info = result.search
    out: dict[str, Any] = {"method": info.method}
    if info.method == "fast":
        out.update(
            ownedSizesReplayed=info.replays,
            modelLevels=info.model_levels,
            modelStepGpus=info.model_step_gpus,
            modelRecommendedNodes=sum(info.model_nodes),
            fromModel=["sensitivity", "flipPoints", "procurement choice"],
        )
    return out


def _search_text(result: Any) -> str:
    inputs = result.inputs
    info = result.search
    if not inputs.jobs:
        return "fluid demand (duration curves)"
    if info.method == "fast":
        return (
            f"{len(inputs.jobs):,} jobs, fast search: an aggregate model of "
            f"{info.model_levels:,} demand levels ({sum(info.model_nodes)} nodes at its optimum), "
            f"{info.replays} owned sizes replayed around it; every fleet's dollars are a replay, "
            "the sensitivity table, flip points and the procurement choice the model's"
        )
    return f"{len(inputs.jobs):,} jobs replayed at each owned size that can win (exact search)"


def _money(dollars: float) -> str:
    return f"${dollars:,.0f}"


def _text_report(
    result: Any,
    source: str,
    skipped: list[str] | None = None,
    left_out: dict[str, int] | None = None,
) -> str:
    from hybridgpu.planner.plan import break_even_utilizations

    inputs = result.inputs
    fleet = result.recommended
    months = result.months
    hist_hours = sum(s.hours for s in inputs.history)
    lines = [
        f"hybridgpu plan: {hist_hours:,.1f} h of demand from {source}",
        f"horizon {inputs.horizon_months} months, demand growth "
        f"{100 * inputs.demand_growth_per_year:+.0f}%/year, " + _search_text(result),
        "",
        "recommended owned fleet:",
    ]
    be = break_even_utilizations(inputs)
    for t, n in zip(inputs.node_types, fleet.nodes, strict=True):
        lines.append(
            f"  {t.name:<16} {n:>4} nodes x {t.gpus_per_node} GPUs   "
            f"${t.node_hour_dollars:,.2f}/node-hour   break-even utilization {be[t.name]:.0%}"
        )
    lines += [
        f"  owned GPUs {fleet.owned_gpus}, expected utilization {fleet.owned_utilization:.0%}",
        f"  elastic (on-demand) {fleet.elastic_gpu_hours / months:,.0f} GPU-h/month, "
        f"spot {fleet.spot_gpu_hours / months:,.0f} GPU-h/month (reruns included)",
        *_runner_up_lines(result),
        "",
        "monthly TCO:",
        f"  core     {_money(result.monthly(fleet.core_dollars)):>14}   "
        "(capital recovery, power x PUE, ops)",
        f"  elastic  {_money(result.monthly(fleet.elastic_dollars)):>14}",
        f"  spot     {_money(result.monthly(fleet.spot_dollars)):>14}",
        f"  total    {_money(result.monthly(fleet.total_dollars)):>14}",
        "",
        *_capital_lines(result),
        "",
        f"saving vs all on-demand ({_money(result.monthly(result.all_on_demand_dollars))}/month): "
        f"{result.savings_vs_on_demand:.1%}",
        f"saving vs today's fleet ({_current(result)}, "
        f"{_money(result.monthly(result.current.total_dollars))}/month): "
        f"{result.savings_vs_current:.1%}",
        "",
        "sensitivity:"
        + (
            " (the fast search's aggregate model: its own fleet today "
            f"{_fleet(result, result.search.model_nodes)}, its dollars)"
            if result.search.method == "fast"
            else ""
        ),
        f"  {'input':<20} {'change':>9} {'owned nodes':>12} {'$/month':>14}",
    ]
    for case in result.sensitivity:
        lines.append(
            f"  {case.parameter:<20} {case.change:>9} {case.total_nodes:>12} "
            f"{_money(case.monthly_dollars):>14}"
        )
    lines += _flip_lines(result)
    lines += _procurement_lines(result)
    lines += _generation_lines(result)
    lines += [f"note: {note}" for note in _notes(inputs, skipped, left_out)]
    return "\n".join(lines)


def _fleet(result: Any, nodes: tuple[int, ...]) -> str:
    names = [t.name for t in result.inputs.node_types]
    owned = [f"{n} x {name}" for n, name in zip(nodes, names, strict=True) if n]
    return " + ".join(owned) or "nothing owned"


def _runner_ups(result: Any) -> list[dict[str, Any]]:
    """The cheapest fleets with fewer and with more owned GPUs, and how much dearer."""
    best = result.recommended.total_dollars
    return [
        {
            "ownedGpus": size.owned_gpus,
            "nodes": _fleet(result, size.nodes),
            "monthlyCost": round(result.monthly(size.total_dollars), 2),
            "overRecommendedPercent": round(100 * (size.total_dollars / best - 1), 2),
        }
        for size in result.runners_up
        if size is not None
    ]


def _runner_up_lines(result: Any) -> list[str]:
    alternatives = [
        f"{r['nodes']} +{r['overRecommendedPercent']:.1f}%" for r in _runner_ups(result)
    ]
    if not alternatives:
        return []
    # A projection: two fleets a few percent apart can trade places in reality (docs/tco.md).
    return [f"  next best: {'; '.join(alternatives)} (projected total over the horizon)"]


def _capital_lines(result: Any) -> list[str]:
    """Capex, what the plan charges of it, and the residual value it does not charge."""
    inputs = result.inputs
    capital = result.capital
    if capital.capex == 0:
        return []
    rates = ", ".join(
        dict.fromkeys(
            f"{t.amortization_years:g} years at {100 * t.cost_of_capital_per_year:g}%/year"
            for t in inputs.node_types
        )
    )
    lines = [
        f"owned hardware: {_money(capital.capex)} to buy, recovered over {rates}",
        f"  charged over {inputs.horizon_months} months: {_money(capital.charged)} = "
        f"{_money(capital.purchases - capital.residual_value)} of the hardware's value + "
        f"{_money(capital.cost_of_capital)} cost of capital",
    ]
    if capital.purchases > capital.capex:
        lines.append(
            f"  nodes whose life ends within the horizon are bought again: "
            f"{_money(capital.purchases)} bought in all"
        )
    if capital.residual_value > 0:
        share = capital.residual_value / capital.capex
        lines += [
            f"  residual value after {inputs.horizon_months} months: "
            f"{_money(capital.residual_value)} ({share:.0%} of the purchase price, its book value)",
            "  not charged: the plan assumes the hardware is kept or sold at that value "
            "(sensitivity: 'residual value none')",
        ]
    return lines


def _flip_lines(result: Any) -> list[str]:
    """Per input, the nearest change down and up that changes the recommended fleet."""
    if not result.flip_points:
        return []

    def fleet(nodes: tuple[int, ...]) -> str:
        return _fleet(result, nodes)

    today = result.recommended.nodes
    source = ""
    if result.search.method == "fast":
        today = result.search.model_nodes
        source = "the fast search's aggregate model, "
    lines = [
        "",
        "where the recommendation changes (one input at a time, the nearest change each way; "
        f"{source}today {fleet(today)}):",
    ]
    for point in result.flip_points:
        if point.nodes is None:
            lines.append(f"  {point.parameter:<20} {point.label}: no change")
        else:
            lines.append(
                f"  {point.parameter:<20} {point.label} ({point.value}): {fleet(point.nodes)}"
            )
    return lines


SUPPLY_NAMES = {"owned": "owned", "committed": "committed", "onDemand": "on demand", "spot": "spot"}
SUPPLY_COLORS = {
    "owned": "tab:blue",
    "committed": "tab:green",
    "onDemand": "tab:red",
    "spot": "tab:purple",
}


def _offer_json(offer: Any) -> dict[str, Any]:
    return {
        "name": offer.name,
        "termYears": offer.term_years,
        "effectivePerGpuHour": round(offer.effective_per_gpu_hour, 4),
        "gpusPerNode": offer.gpus_per_unit,
        "adjustmentMonths": offer.adjustment_months,
        "maxDecreasePercent": round(100 * offer.max_decrease, 2),
        "maxIncreasePercent": (
            None if offer.max_increase is None else round(100 * offer.max_increase, 2)
        ),
    }


def _procurement_json(result: Any) -> dict[str, Any] | None:
    """The mix to sign, its cash flow by quarter and NPV (``--json``)."""
    from hybridgpu.planner.finance import adjustments, mix, next_adjustment_text

    plan = result.procurement
    if plan is None:
        return None
    shares = mix(result.inputs, plan)
    offer = plan.offer
    signed = [
        _offer_json(o)
        | {
            "nodesByWindow": [
                {"month": p.period.start_month, "nodes": u}
                for p, u in zip(plan.periods, plan.schedule_of(i), strict=True)
            ]
        }
        for i, o in enumerate(plan.offers)
    ]
    return {
        "committedOffer": None if offer is None else _offer_json(offer),
        "ownedNodes": {
            t.name: n for t, n in zip(result.inputs.node_types, plan.nodes, strict=True)
        },
        "ownedTranches": [
            {
                "month": month,
                "nodes": {
                    t.name: n for t, n in zip(result.inputs.node_types, added, strict=True) if n
                },
            }
            for month, added in plan.tranches()
        ],
        "committedNodesByWindow": [
            {"month": p.period.start_month, "nodes": u}
            for p, u in zip(plan.periods, plan.schedule, strict=True)
        ],
        "committedOffers": signed,
        "mix": {
            "gpuHoursPercent": {k: round(100 * v, 2) for k, v in shares.gpu_hours.items()},
            "dollarsPercent": {k: round(100 * v, 2) for k, v in shares.dollars.items()},
        },
        "baseSplit": {
            "ownedPercent": round(100 * shares.base_owned_share, 2),
            "committedPercent": round(100 * (1 - shares.base_owned_share), 2)
            if plan.offer is not None or shares.base_owned_share > 0
            else 0.0,
        },
        "committedAfterHorizon": {
            "months": plan.periods[-1].after_horizon_months,
            "paidDollars": round(plan.periods[-1].after_horizon_paid_dollars, 2),
            "chargedDollars": round(plan.periods[-1].after_horizon_dollars, 2),
        },
        "totalDollars": round(plan.total_dollars, 2),
        "monthlyCost": round(result.monthly(plan.total_dollars), 2),
        "savingVsOwnedOnlyPlanPercent": round(
            100 * (1 - plan.total_dollars / result.recommended.total_dollars), 2
        )
        if result.recommended.total_dollars > 0
        else 0.0,
        "npv": round(result.npv_dollars, 2),
        "costOfCapitalPercentPerYear": round(100 * result.cost_of_capital_per_year, 2),
        "costPerMillionTokens": None
        if result.cost_per_million_tokens is None
        else round(result.cost_per_million_tokens, 4),
        "mfu": None
        if result.mfu is None
        else {
            "peakTflopsPerGpu": result.mfu.peak_tflops_per_gpu,
            "peakSource": result.mfu.peak_source,
            "busyGpuPercent": round(100 * result.mfu.busy, 2),
            "paidCapacityPercent": round(100 * result.mfu.paid, 2),
        },
        "adjustments": [
            {"month": a.month, "offer": a.offer, "fromNodes": a.from_units, "toNodes": a.to_units}
            for a in adjustments(plan)
        ],
        "nextAdjustment": next_adjustment_text(plan),
        "cashFlowByQuarter": [
            {
                "quarter": q.index + 1,
                "capex": round(q.capex, 2),
                "ownedOperating": round(q.owned_operating, 2),
                "committed": round(q.committed, 2),
                "onDemand": round(q.on_demand, 2),
                "spot": round(q.spot, 2),
                "residualValue": round(q.residual_value, 2),
                "total": round(q.total, 2),
            }
            for q in result.cash_flow
        ],
    }


def _generations_json(result: Any, spec: Any) -> dict[str, Any]:
    """Candidates, committed offers and on demand per unit of work (``--json``)."""
    from hybridgpu.planner.plan import candidate_throughput

    comparison = result.generations
    sources = {c.name: candidate_throughput(spec, c)[1] for c in spec.candidates}
    od = result.inputs.cloud.on_demand_per_gpu_hour
    return {
        "workloadClass": spec.workload_class,
        "unitOfWork": f"one {spec.cloud.gpu_model or 'demand-class'} GPU busy for an hour",
        "options": [
            {
                "name": o.name,
                "kind": o.kind,
                "throughput": round(o.throughput, 4),
                "throughputSource": sources.get(o.name, "the demand's class"),
                "dollarsPerWorkHour": round(o.dollars_per_work_hour, 4),
                "wattsPerWorkUnit": None
                if o.watts_per_work_unit is None
                else round(o.watts_per_work_unit, 1),
                "breakEvenUtilization": round(min(o.dollars_per_work_hour / od, 1.0), 4)
                if o.paid_when_idle
                else None,
            }
            for o in comparison.options
        ],
        "winner": comparison.winner,
        "flipUtilization": round(comparison.flip_utilization, 4),
        "runnerUp": comparison.runner_up,
        "runnerUpDearerPercent": round(100 * comparison.runner_up_margin, 2),
    }


def _procurement_lines(result: Any) -> list[str]:
    """The mix to sign, in words and a quarterly cash flow."""
    from hybridgpu.planner.finance import mix, next_adjustment_text

    plan = result.procurement
    if plan is None:
        return []
    shares = mix(result.inputs, plan)
    offer = plan.offer
    lines = ["", "procurement (owned + committed + on demand + spot, by adjustment window):"]
    lines.append(f"  buy: {_fleet(result, plan.nodes)}")
    for month, added in plan.tranches()[1:]:
        lines.append(f"  buy in month {month}: {_fleet(result, added)}")
    if offer is None:
        offered = ", ".join(o.name for o in result.offers) or "none offered"
        lines.append(f"  commit: nothing ({offered})")
    else:
        for i, signed in enumerate(plan.offers):
            schedule = ", ".join(
                f"m{p.period.start_month}:{u}"
                for p, u in zip(plan.periods, plan.schedule_of(i), strict=True)
            )
            lines.append(
                f"  commit: {signed.name} ({signed.term_years}-year, "
                f"${signed.effective_per_gpu_hour:,.2f}/GPU-hour), nodes of "
                f"{signed.gpus_per_unit} GPUs by window start month: {schedule}"
            )
        lines.append(f"  next adjustment window: {next_adjustment_text(plan)}")
        last = plan.periods[-1]
        if last.after_horizon_paid_dollars > 0:
            lines.append(
                f"  the term{'s run' if len(plan.offers) > 1 else ' runs'} "
                f"{last.after_horizon_months} month(s) past the horizon: "
                f"{_money(last.after_horizon_paid_dollars)} more to pay, "
                f"{_money(last.after_horizon_dollars)} of it not earned back at the last "
                "window's demand (in the total)"
            )
    lines.append(
        "  mix of GPU-hours: "
        + ", ".join(f"{SUPPLY_NAMES[k]} {v:.0%}" for k, v in shares.gpu_hours.items())
    )
    lines.append(
        "  mix of dollars:   "
        + ", ".join(f"{SUPPLY_NAMES[k]} {v:.0%}" for k, v in shares.dollars.items())
    )
    if offer is not None:
        lines.append(
            f"  base capacity: {shares.base_owned_share:.0%} owned, "
            f"{1 - shares.base_owned_share:.0%} committed"
        )
    saving = 1 - plan.total_dollars / result.recommended.total_dollars
    lines.append(
        f"  total {_money(result.monthly(plan.total_dollars))}/month "
        f"({saving:+.1%} vs owning and renting only), NPV of the cash flow at "
        f"{100 * result.cost_of_capital_per_year:g}%/year: {_money(result.npv_dollars)}"
    )
    if result.cost_per_million_tokens is not None:
        lines.append(f"  cost per million tokens: ${result.cost_per_million_tokens:,.4f}")
    if result.mfu is not None:
        m = result.mfu
        lines.append(
            f"  MFU: {m.busy:.1%} of a busy GPU's peak ({m.peak_tflops_per_gpu:,.0f} TFLOPS, "
            f"{m.peak_source}), {m.paid:.1%} of every GPU-hour paid for"
        )
    lines.append(
        f"  {'quarter':>7} {'capex':>12} {'owned opex':>12} {'committed':>12} "
        f"{'on demand':>12} {'spot':>12} {'total':>13}"
    )
    for q in result.cash_flow:
        residual = f"  (residual value {_money(q.residual_value)} back)" if q.residual_value else ""
        lines.append(
            f"  {q.index + 1:>7} {_money(q.capex):>12} {_money(q.owned_operating):>12} "
            f"{_money(q.committed):>12} {_money(q.on_demand):>12} {_money(q.spot):>12} "
            f"{_money(q.total):>13}{residual}"
        )
    return lines


def _generation_lines(result: Any) -> list[str]:
    """Dollars and watts per unit of work, who wins and where on demand takes over."""
    comparison = result.generations
    lines = ["", "per unit of work (one demand-class GPU busy for an hour):"]
    for o in comparison.options:
        watts = "" if o.watts_per_work_unit is None else f", {o.watts_per_work_unit:,.0f} W"
        lines.append(
            f"  {o.name:<16} {o.kind:<9} throughput {o.throughput:.2f}x  "
            f"${o.dollars_per_work_hour:,.3f}{' at full use' if o.paid_when_idle else ''}{watts}"
        )
    runner = (
        f"; {comparison.runner_up} is {comparison.runner_up_margin:.0%} dearer at any utilization"
        if comparison.runner_up
        else ""
    )
    lines.append(
        f"  cheapest: {comparison.winner} above {comparison.flip_utilization:.0%} utilization, "
        f"on demand below{runner}"
    )
    return lines


def _current(result: Any) -> str:
    parts = [
        f"{n} x {t.name}"
        for t, n in zip(result.inputs.node_types, result.current.nodes, strict=True)
        if n
    ]
    return ", ".join(parts) or "nothing owned"


def _draw_procurement(result: Any, cash_axis: Any, mix_axis: Any) -> None:
    """Cash flow by quarter (stacked by what is paid) and the mix of supply."""
    from hybridgpu.planner.finance import mix

    flows = result.cash_flow
    quarters = [q.index + 1 for q in flows]
    bottom = [0.0] * len(flows)
    for label, color, values in (
        ("capex", "tab:blue", [q.capex for q in flows]),
        ("owned power + ops", "tab:cyan", [q.owned_operating for q in flows]),
        ("committed", SUPPLY_COLORS["committed"], [q.committed for q in flows]),
        ("on demand", SUPPLY_COLORS["onDemand"], [q.on_demand for q in flows]),
        ("spot", SUPPLY_COLORS["spot"], [q.spot for q in flows]),
    ):
        if any(values):
            cash_axis.bar(quarters, values, bottom=bottom, label=label, color=color)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    residual = [-q.residual_value for q in flows]
    if any(residual):
        cash_axis.bar(quarters, residual, label="residual value (back)", color="tab:gray")
    cash_axis.axhline(0, color="black", linewidth=0.5)
    cash_axis.set_xlabel("quarter")
    cash_axis.set_ylabel("$ paid in the quarter")
    cash_axis.set_title(
        f"Cash flow (NPV at {100 * result.cost_of_capital_per_year:g}%/year: "
        f"{_money(result.npv_dollars)})"
    )
    cash_axis.legend(fontsize="small")
    plan = result.procurement
    if plan is None:
        mix_axis.set_axis_off()
        return
    shares = mix(result.inputs, plan)
    rows = (("GPU-hours", shares.gpu_hours), ("dollars", shares.dollars))
    lefts = [0.0] * len(rows)
    for kind in SUPPLY_NAMES:
        widths = [100 * values[kind] for _, values in rows]
        mix_axis.barh(
            [name for name, _ in rows],
            widths,
            left=lefts,
            label=SUPPLY_NAMES[kind],
            color=SUPPLY_COLORS[kind],
        )
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    mix_axis.set_xlim(0, 100)
    mix_axis.set_xlabel("% of the horizon")
    offer = " + ".join(o.name for o in plan.offers) or "no commitment"
    mix_axis.set_title(f"Mix of supply ({offer}; base {shares.base_owned_share:.0%} owned)")
    mix_axis.legend(fontsize="small")


def _write_png(result: Any, path: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybridgpu.planner.model import DemandSample, duration_curve

    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--png {path}: cannot create the directory: {err.strerror}") from None
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    (left, right), (cash_axis, mix_axis) = axes
    history = result.inputs.history
    firm_only = [DemandSample(x.hours, x.firm_gpus, 0.0) for x in history]
    for samples, label in ((history, "all demand"), (firm_only, "critical + standard")):
        points = duration_curve(samples)
        if points:
            hours = [0.0] + [h for h, _ in points]
            gpus = [points[0][1]] + [g for _, g in points]
            left.step(hours, gpus, where="pre", label=f"{label} (history, before growth)")
    left.axhline(
        result.recommended.owned_gpus,
        color="tab:green",
        linestyle="--",
        label=f"owned: {result.recommended.owned_gpus} GPUs",
    )
    left.set_xlabel("hours demand is at or above the level")
    left.set_ylabel("GPUs")
    left.set_title("Demand duration curve")
    left.legend()
    months = result.months
    right.plot(
        [c.owned_gpus for c in result.cost_curve],
        [c.total_dollars / months for c in result.cost_curve],
        marker=".",
    )
    right.axvline(
        result.recommended.owned_gpus, color="tab:green", linestyle="--", label="recommended"
    )
    right.set_xlabel("owned GPUs (cheapest node mix)")
    right.set_ylabel("TCO, $/month")
    right.set_title("Total cost over owned size")
    right.legend()
    _draw_procurement(result, cash_axis, mix_axis)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as err:
        raise UserError(f"--png {path}: cannot write: {err.strerror}") from None
    finally:
        plt.close(fig)
    return out
