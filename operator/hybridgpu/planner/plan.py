"""The plan: the cheapest fleet, the fleets it is compared with, how it moves with its inputs,
and the CapacityPlan status of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any

from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.capacityplan import (
    CapacityPlanSpec,
    CapacityPlanStatus,
    Commitment,
    CommitmentChange,
    MonthlyCost,
    OwnedCapital,
    OwnedTranche,
    ProcurementStatus,
    QuarterCashFlow,
    Recommendation,
    SensitivityRow,
    SupplyShare,
)
from hybridgpu.models.capacityplan import (
    FlipPoint as FlipPointStatus,
)
from hybridgpu.planner.cost import CostModel, SharedWork, SideBySide, Task
from hybridgpu.planner.fast import (
    EXACT_SEARCH,
    FAST_PROCUREMENT_FLEETS,
    PROCUREMENT_LEVELS,
    SearchInfo,
    choose_search,
    fast_fleet,
    model_inputs,
    runners_up_among,
)
from hybridgpu.planner.finance import (
    ModelFlopsUtilization,
    QuarterCash,
    adjustments,
    cash_flow,
    cost_per_million_tokens,
    mix,
    model_flops_utilization,
    next_adjustment_text,
    npv,
)
from hybridgpu.planner.generations import (
    GenerationComparison,
    WorkCost,
    compare,
    default_peak_tflops,
    relative_throughput,
)
from hybridgpu.planner.model import (
    CloudRates,
    DemandSample,
    FleetCost,
    JobDemand,
    OwnedNodeType,
    PlanInputs,
    Usage,
)
from hybridgpu.planner.optimize import (
    OwnedSizeCost,
    cost_by_owned_gpus,
    optimal_fleet,
    runners_up,
)
from hybridgpu.planner.procure import (
    CommittedOffer,
    Procurement,
    ProcurementModel,
    check_plan_size,
    costed,
    optimal_procurement,
    replay_ahead,
)
from hybridgpu.planner.sensitivity import (
    FlipPoint,
    SensitivityCase,
    flip_points,
    sensitivity_cases,
)


@dataclass(frozen=True, slots=True)
class CapitalFigures:
    """A fleet's hardware money over the horizon, dollars: ``charged`` (in the core cost) is
    the value the hardware loses plus the cost of capital; ``residual_value`` is what it is
    still worth at the end (book value), not charged."""

    capex: float
    """The purchase price of the fleet bought at the start."""
    purchases: float
    """Everything bought over the horizon (nodes are bought again at the end of their life)."""
    charged: float
    residual_value: float

    @property
    def cost_of_capital(self) -> float:
        return self.charged - (self.purchases - self.residual_value)


def capital_figures(inputs: PlanInputs, nodes: Sequence[int]) -> CapitalFigures:
    """Capex, capital charged over the horizon and residual value of ``nodes`` (per type)."""
    years = inputs.horizon_months / 12
    pairs = list(zip(inputs.node_types, nodes, strict=True))
    return CapitalFigures(
        capex=sum(n * t.capex_dollars for t, n in pairs),
        purchases=sum(n * t.capex_dollars * t.purchases(years) for t, n in pairs),
        charged=sum(n * t.capital_per_year_dollars * years for t, n in pairs),
        residual_value=sum(n * t.residual_value_dollars(years) for t, n in pairs),
    )


@dataclass(frozen=True)
class CapacityPlanResult:
    """The recommendation, the fleets it is compared with, and how it moves with its inputs."""

    inputs: PlanInputs
    recommended: FleetCost
    current: FleetCost
    all_on_demand_dollars: float
    cost_model: CostModel = field(repr=False, compare=False)
    """The recommendation's cost model: what ``cost_curve`` costs every size with."""
    runners_up: tuple[OwnedSizeCost | None, OwnedSizeCost | None] = (None, None)
    """The cheapest fleets owning fewer and more GPUs than the recommendation (None when
    there is none): how flat the cost is around the choice."""
    sensitivity: tuple[SensitivityCase, ...] = field(default=())
    flip_points: tuple[FlipPoint, ...] = field(default=())
    procurement: Procurement | None = None
    """The mix to sign: owned, committed (the best offer, if any), on demand and spot."""
    offers: tuple[CommittedOffer, ...] = ()
    cost_of_capital_per_year: float = 0.0
    tokens_per_gpu_hour: float | None = None
    flops_per_token: float | None = None
    peak_tflops_per_gpu: tuple[float, str] | None = None
    """The demand-class GPU's peak dense TFLOPS and where it came from."""
    search: SearchInfo = EXACT_SEARCH
    """How the plan was searched (``fast``: the sensitivity table and flip points are the
    aggregate model's, every fleet's dollars a replay; planner/fast.py)."""

    @property
    def mfu(self) -> ModelFlopsUtilization | None:
        """Model FLOPs utilization, when the token rate, the model's FLOPs per token and the
        GPU's peak are known."""
        if (
            self.procurement is None
            or self.tokens_per_gpu_hour is None
            or self.flops_per_token is None
            or self.peak_tflops_per_gpu is None
        ):
            return None
        return model_flops_utilization(
            self.inputs,
            self.procurement,
            self.demand_gpu_hours,
            self.tokens_per_gpu_hour,
            self.flops_per_token,
            *self.peak_tflops_per_gpu,
        )

    @property
    def cash_flow(self) -> list[QuarterCash]:
        return [] if self.procurement is None else cash_flow(self.inputs, self.procurement)

    @property
    def npv_dollars(self) -> float:
        """Present value of the procurement's cash flow at the cost of capital."""
        return npv(self.cash_flow, self.cost_of_capital_per_year, self.inputs.horizon_months)

    @property
    def demand_gpu_hours(self) -> float:
        """Demand over the horizon (grown), GPU-hours of the demand's class."""
        return self.recommended.demand_gpu_hours

    @property
    def cost_per_million_tokens(self) -> float | None:
        if self.procurement is None:
            return None
        return cost_per_million_tokens(
            self.procurement.total_dollars, self.demand_gpu_hours, self.tokens_per_gpu_hour
        )

    @property
    def generations(self) -> GenerationComparison:
        """Candidates, committed offers and on demand by dollars per unit of work."""
        od = self.inputs.cloud.on_demand_per_gpu_hour
        options = [
            WorkCost(
                name=t.name,
                kind="owned",
                throughput=t.throughput,
                dollars_per_work_hour=t.work_hour_dollars,
                watts_per_work_unit=t.watts_per_work_unit,
                paid_when_idle=True,
            )
            for t in self.inputs.node_types
        ]
        options += [
            WorkCost(o.name, "committed", 1.0, o.effective_per_gpu_hour, None, True)
            for o in self.offers
        ]
        options.append(WorkCost("onDemand", "onDemand", 1.0, od, None, False))
        return compare(options)

    @cached_property
    def cost_curve(self) -> tuple[OwnedSizeCost, ...]:
        """Every owned size (its cheapest node mix) and its total cost: with a trace, one
        replay per size the plan did not cost already (for the chart)."""
        return tuple(cost_by_owned_gpus(self.cost_model))

    @property
    def capital(self) -> CapitalFigures:
        """The recommended fleet's capex, capital charged and residual value."""
        return capital_figures(self.inputs, self.recommended.nodes)

    @property
    def months(self) -> float:
        return float(self.inputs.horizon_months)

    def monthly(self, dollars: float) -> float:
        return dollars / self.months

    @property
    def savings_vs_on_demand(self) -> float:
        """Share of the all-on-demand bill saved, 0..1."""
        return _saving(self.recommended.total_dollars, self.all_on_demand_dollars)

    @property
    def savings_vs_current(self) -> float:
        """Share of today's fleet's total cost saved, 0..1."""
        return _saving(self.recommended.total_dollars, self.current.total_dollars)

    @property
    def break_even_utilization(self) -> float:
        """Utilization above which owning the cheapest node type beats renting on demand, 0..1."""
        return min(break_even_utilizations(self.inputs).values())


def _saving(cost: float, reference: float) -> float:
    return 0.0 if reference <= 0 else 1.0 - cost / reference


def break_even_utilizations(inputs: PlanInputs) -> dict[str, float]:
    """Per node type: the share of hours a GPU must be busy for owning to beat on demand."""
    od = inputs.cloud.on_demand_per_gpu_hour
    return {t.name: t.work_hour_dollars / od for t in inputs.node_types}


def plan_capacity(
    inputs: PlanInputs,
    *,
    with_sensitivity: bool = True,
    offers: Sequence[CommittedOffer] = (),
    cost_of_capital_per_year: float | None = None,
    tokens_per_gpu_hour: float | None = None,
    with_procurement: bool = True,
    flops_per_token: float | None = None,
    peak_tflops_per_gpu: tuple[float, str] | None = None,
    owned_tranche_months: int | None = None,
    search: str = "auto",
    side_by_side: SideBySide | None = None,
) -> CapacityPlanResult:
    """The cheapest owned fleet for ``inputs`` and everything reported about it; with
    ``with_procurement`` the mix to sign as well (owned, the best committed offer, on demand,
    spot, period by period). ``search``: ``exact``, ``fast`` (a job trace: planner/fast.py)
    or ``auto`` (fast above ``fast.FAST_ABOVE_JOBS`` jobs). ``side_by_side``: where the fast
    search makes independent replays, and a demand history's plan its flip-point searches,
    at once (None: one after the other); the same plan. A plan too large to search is a
    ValueError before any work (``check_plan_size``)."""
    check_plan_size(inputs, offers if with_procurement else (), owned_tranche_months)
    if choose_search(search, inputs) == "fast":
        return _fast_plan(
            inputs,
            with_sensitivity=with_sensitivity,
            offers=offers,
            cost_of_capital_per_year=cost_of_capital_per_year,
            tokens_per_gpu_hour=tokens_per_gpu_hour,
            with_procurement=with_procurement,
            flops_per_token=flops_per_token,
            peak_tflops_per_gpu=peak_tflops_per_gpu,
            owned_tranche_months=owned_tranche_months,
            side_by_side=side_by_side,
        )
    shared = SharedWork()
    model = CostModel(inputs, shared)
    nodes = optimal_fleet(model)
    current = tuple(t.current_nodes for t in inputs.node_types)
    cases: list[SensitivityCase] = []
    flips: list[FlipPoint] = []
    if with_sensitivity:
        cases = sensitivity_cases(inputs, shared)
        # A demand history's flip points (the fast search's aggregate model) side by side: a
        # trace's would replay in each worker what the others replay too.
        flips = flip_points(inputs, nodes, shared, None if inputs.jobs else side_by_side)
    return CapacityPlanResult(
        inputs=inputs,
        recommended=model.fleet_cost(nodes),
        current=model.fleet_cost(current),
        all_on_demand_dollars=model.all_on_demand_dollars(),
        cost_model=model,
        runners_up=runners_up(model, model.owned_gpus(nodes)),
        sensitivity=tuple(cases),
        flip_points=tuple(flips),
        procurement=(
            optimal_procurement(inputs, offers, shared, owned_tranche_months)
            if with_procurement
            else None
        ),
        offers=tuple(offers),
        cost_of_capital_per_year=(
            cost_of_capital_per_year
            if cost_of_capital_per_year is not None
            else min((t.cost_of_capital_per_year for t in inputs.node_types), default=0.0)
        ),
        tokens_per_gpu_hour=tokens_per_gpu_hour,
        flops_per_token=flops_per_token,
        peak_tflops_per_gpu=peak_tflops_per_gpu,
    )


def _fast_plan(
    inputs: PlanInputs,
    *,
    with_sensitivity: bool,
    offers: Sequence[CommittedOffer],
    cost_of_capital_per_year: float | None,
    tokens_per_gpu_hour: float | None,
    with_procurement: bool,
    flops_per_token: float | None,
    peak_tflops_per_gpu: tuple[float, str] | None,
    owned_tranche_months: int | None,
    side_by_side: SideBySide | None = None,
) -> CapacityPlanResult:
    """``plan_capacity`` by the fast search (planner/fast.py): the aggregate model's plan,
    the owned fleet searched from its optimum by replays, every fleet printed priced by
    replay."""
    step, fluid_inputs = model_inputs(inputs)
    aggregate = plan_capacity(
        fluid_inputs,
        with_sensitivity=False,  # below, beside the model's procurement
        offers=offers,
        cost_of_capital_per_year=cost_of_capital_per_year,
        tokens_per_gpu_hour=tokens_per_gpu_hour,
        with_procurement=False,
        flops_per_token=flops_per_token,
        peak_tflops_per_gpu=peak_tflops_per_gpu,
        owned_tranche_months=owned_tranche_months,
        search="exact",
    )
    shared = SharedWork(fast=True, side_by_side=side_by_side)
    model = CostModel(inputs, shared)
    current = tuple(t.current_nodes for t in inputs.node_types)
    # Today's fleet and all on demand are priced below: replayed while a worker is idle.
    nodes, sizes = fast_fleet(model, aggregate.recommended.owned_gpus, spare=(current, None))
    model_shared = aggregate.cost_model.shared

    def model_flip_points(_: object) -> tuple[FlipPoint, ...]:
        return tuple(flip_points(fluid_inputs, aggregate.recommended.nodes, model_shared))

    def model_sensitivity(_: object) -> tuple[SensitivityCase, ...]:
        return tuple(sensitivity_cases(fluid_inputs, model_shared))

    def model_procurement(_: object) -> Procurement:
        procurement_inputs = model_inputs(inputs, PROCUREMENT_LEVELS)[1]
        calibrated = SharedWork(fast=True)
        calibrated.cloud_scale = _cloud_scale(
            CostModel(procurement_inputs, SharedWork(fast=True)).usage(nodes),
            model.usage(nodes),
        )
        return optimal_procurement(
            procurement_inputs,
            offers,
            calibrated,
            owned_tranche_months,
            max_fleets=FAST_PROCUREMENT_FLEETS,
        )

    # The aggregate model's sensitivity table, flip points and procurement depend on
    # nothing of each other (the longest first: the others fill the workers beside it).
    tasks: dict[str, Task] = {}
    if with_sensitivity:
        tasks["flip points"] = model_flip_points
    if with_procurement:
        tasks["procurement"] = model_procurement
    if with_sensitivity:
        tasks["sensitivity"] = model_sensitivity
    model_work = _at_once(tasks, side_by_side)
    if with_sensitivity:
        aggregate = replace(
            aggregate,
            sensitivity=model_work["sensitivity"],
            flip_points=model_work["flip points"],
        )
    procurement = None
    if with_procurement:
        chosen = model_work["procurement"]
        candidates = _procurement_candidates(inputs, chosen, nodes, offers, shared)
        replay_ahead(inputs, candidates, shared)
        # Each candidate priced period by period on the whole history (seconds on a long
        # trace): side by side, with the replays just made.
        priced = _at_once(
            {
                str(i): partial(_costed_task, inputs, plan, shared)
                for i, plan in enumerate(candidates)
            },
            side_by_side,
        )
        procurement = min(
            (priced[str(i)] for i in range(len(candidates))),
            key=lambda plan: plan.total_dollars,
        )
    return replace(
        aggregate,
        inputs=inputs,
        recommended=model.fleet_cost(nodes),
        current=model.fleet_cost(current),
        all_on_demand_dollars=model.all_on_demand_dollars(),
        cost_model=model,
        runners_up=runners_up_among(sizes, model.owned_gpus(nodes)),
        procurement=procurement,
        search=SearchInfo(
            "fast",
            replays=len(sizes),
            model_levels=len(fluid_inputs.history),
            model_step_gpus=step,
            model_nodes=aggregate.recommended.nodes,
        ),
    )


def _at_once(tasks: dict[str, Task], side_by_side: SideBySide | None) -> dict[str, Any]:
    """Every task's result, the tasks run side by side when there are workers."""
    if side_by_side is None or side_by_side.workers < 2 or len(tasks) < 2:
        return {name: task(None) for name, task in tasks.items()}
    return side_by_side.run(tasks)


def _costed_task(
    inputs: PlanInputs, plan: Procurement, shared: SharedWork, _: object
) -> Procurement:
    return costed(inputs, plan, shared)


def _cloud_scale(fluid: Usage, replayed: Usage) -> tuple[float, float]:
    """On-demand and spot GPU-hours replayed over the fluid model's, at one fleet (1 where
    the fluid model has none)."""

    def ratio(replay: float, model: float) -> float:
        return replay / model if model > 0 and replay > 0 else 1.0

    return ratio(replayed.elastic, fluid.elastic), ratio(replayed.spot, fluid.spot)


def _procurement_candidates(
    inputs: PlanInputs,
    chosen: Procurement,
    nodes: tuple[int, ...],
    offers: Sequence[CommittedOffer],
    shared: SharedWork,
) -> list[Procurement]:
    """What the fast search prices by replay for the mix to sign: the aggregate model's
    choice; the same commitments beside the owned fleet the replays chose; and that fleet
    with no commitment (when no offer is held today). Without tranches only."""
    out = [chosen]
    if chosen.fleets:
        return out
    if nodes != chosen.nodes:
        out.append(replace(chosen, nodes=nodes, periods=()))
    if chosen.offers and not any(o.current_units > 0 for o in offers):
        periods = ProcurementModel(inputs, (), shared).periods
        out.append(Procurement((), nodes, tuple(() for _ in periods)))
    return out


def peak_of_spec(spec: CapacityPlanSpec) -> tuple[float, str] | None:
    """The demand-class GPU's peak dense TFLOPS for MFU (cloud.peakTflopsPerGpu, else the
    datasheet default of cloud.gpuModel); None without modelFlopsPerToken."""
    if spec.model_flops_per_token is None:
        return None
    if spec.cloud.peak_tflops_per_gpu is not None:
        peak, source = spec.cloud.peak_tflops_per_gpu, "spec"
    else:
        found = default_peak_tflops(spec.cloud.gpu_model)
        if found is None:
            raise ValueError(
                "modelFlopsPerToken needs the GPUs' peak: set cloud.peakTflopsPerGpu (no "
                f"datasheet default for cloud.gpuModel {spec.cloud.gpu_model or '(unset)'})"
            )
        peak, source = found, "datasheet default (dense BF16)"
    tokens = spec.tokens_per_gpu_hour or 0.0
    # A busy GPU cannot do more than its peak: more is a unit slip (and 1e300 x 1e300 is inf).
    if not tokens / 3600.0 * spec.model_flops_per_token <= peak * 1e12:
        raise ValueError(
            f"tokensPerGpuHour {tokens:g} x modelFlopsPerToken {spec.model_flops_per_token:g} "
            f"is more than the GPU's peak of {peak:g} TFLOPS ({source}): MFU cannot exceed "
            "100%; check their units (tokens per GPU-hour, FLOPs per token)"
        )
    return peak, source


def plan_from_spec(
    spec: CapacityPlanSpec,
    history: Sequence[DemandSample],
    jobs: Sequence[JobDemand] = (),
    *,
    with_sensitivity: bool = True,
    search: str = "auto",
    side_by_side: SideBySide | None = None,
) -> CapacityPlanResult:
    """The plan of a CapacityPlan spec: the owned fleet, and the mix to sign with its
    committed offers, cash flow at the spec's cost of capital and token rate (``search``,
    ``side_by_side``: ``plan_capacity``'s)."""
    return plan_capacity(
        inputs_from_spec(spec, history, jobs),
        with_sensitivity=with_sensitivity,
        offers=offers_from_spec(spec),
        cost_of_capital_per_year=spec.cost_of_capital_percent_per_year / 100.0,
        tokens_per_gpu_hour=spec.tokens_per_gpu_hour,
        flops_per_token=spec.model_flops_per_token,
        peak_tflops_per_gpu=peak_of_spec(spec),
        owned_tranche_months=spec.owned_tranche_months,
        search=search,
        side_by_side=side_by_side,
    )


def offers_from_spec(spec: CapacityPlanSpec) -> list[CommittedOffer]:
    """The committed offers of a CapacityPlan spec (a discount is off the on-demand price)."""
    od = spec.cloud.on_demand_per_gpu_hour
    return [
        CommittedOffer(
            name=o.name,
            term_years=o.term_years,
            per_gpu_hour=(
                o.per_gpu_hour
                if o.per_gpu_hour is not None
                else od * (1 - (o.discount_percent or 0) / 100)
            ),
            upfront_per_gpu=o.upfront_per_gpu,
            gpus_per_unit=o.gpus_per_node,
            adjustment_months=o.adjustment_months,
            max_decrease=o.max_decrease_percent / 100.0,
            max_increase=(
                None if o.max_increase_percent is None else o.max_increase_percent / 100.0
            ),
            max_units=o.max_nodes,
            current_units=o.current_nodes,
            started_months_ago=o.term_started_months_ago,
        )
        for o in spec.committed
    ]


def inputs_from_spec(
    spec: CapacityPlanSpec,
    history: Sequence[DemandSample],
    jobs: Sequence[JobDemand] = (),
) -> PlanInputs:
    """PlanInputs of a CapacityPlan spec and a demand history (and its jobs, for a trace)."""
    cloud = spec.cloud
    return PlanInputs(
        history=tuple(history),
        node_types=tuple(
            OwnedNodeType(
                name=c.name,
                gpus_per_node=c.gpus_per_node,
                capex_dollars=c.capex_per_node,
                amortization_years=c.amortization_years,
                power_watts=c.power_watts_per_node,
                pue=c.pue,
                electricity_per_kwh=c.electricity_per_kwh,
                ops_per_node_hour=c.ops_per_node_hour,
                max_nodes=c.max_nodes,
                current_nodes=c.current_nodes,
                cost_of_capital_per_year=spec.cost_of_capital_percent_per_year / 100.0,
                throughput=candidate_throughput(spec, c)[0],
            )
            for c in spec.candidates
        ),
        cloud=CloudRates(
            on_demand_per_gpu_hour=cloud.on_demand_per_gpu_hour,
            spot_per_gpu_hour=cloud.spot_per_gpu_hour,
            spot_interruptions_per_hour=cloud.spot_interruptions_per_hour,
            spot_restart_overhead_hours=parse_duration_seconds(cloud.spot_restart_overhead) / 3600,
            node_startup_hours=parse_duration_seconds(cloud.node_startup) / 3600,
            idle_release_hours=parse_duration_seconds(cloud.idle_before_release) / 3600,
        ),
        horizon_months=spec.horizon_months,
        demand_growth_per_year=spec.demand_growth_percent_per_year / 100.0,
        preemptible_share=spec.preemptible_share,
        jobs=tuple(jobs),
        share_replicas=share_replicas(spec),
    )


def share_replicas(spec: CapacityPlanSpec) -> int:
    """How many ways GPUs are shared for fractional jobs (spec.gpuSharing), 1: not shared."""
    return spec.gpu_sharing.replicas if spec.gpu_sharing is not None else 1


def candidate_throughput(spec: CapacityPlanSpec, candidate: Any) -> tuple[float, str]:
    """A candidate's throughput for the spec's workload class, and its source."""
    given = candidate.throughput
    explicit = None if given is None else getattr(given, spec.workload_class)
    return relative_throughput(
        explicit, candidate.gpu_model, spec.cloud.gpu_model, spec.workload_class
    )


def procurement_status(result: CapacityPlanResult) -> ProcurementStatus | None:
    """The procurement part of the CapacityPlan status."""
    plan = result.procurement
    if plan is None:
        return None
    shares = mix(result.inputs, plan)
    changes = adjustments(plan)
    return ProcurementStatus(
        committed_offer=plan.offer.name if plan.offer is not None else None,
        committed_nodes=plan.schedule[0] if plan.offer is not None and plan.schedule else 0,
        commitments=[
            Commitment(
                offer=o.name,
                term_years=o.term_years,
                nodes=plan.schedule_of(i)[0] if plan.levels else 0,
            )
            for i, o in enumerate(plan.offers)
        ],
        owned_nodes=sum(plan.nodes),
        owned_tranches=[
            OwnedTranche(month=month, candidate=t.name, nodes=n)
            for month, added in plan.tranches()
            for t, n in zip(result.inputs.node_types, added, strict=True)
            if n
        ],
        base_owned_percent=round(100 * shares.base_owned_share, 2),
        mix=[
            SupplyShare(
                supply=k,
                gpu_hours_percent=round(100 * shares.gpu_hours[k], 2),
                dollars_percent=round(100 * shares.dollars[k], 2),
            )
            for k in shares.gpu_hours
        ],
        total=round(plan.total_dollars, 2),
        committed_after_horizon=round(plan.periods[-1].after_horizon_paid_dollars, 2),
        npv=round(result.npv_dollars, 2),
        cost_per_million_tokens=(
            None
            if result.cost_per_million_tokens is None
            else round(result.cost_per_million_tokens, 4)
        ),
        mfu_percent=None if result.mfu is None else round(100 * result.mfu.busy, 2),
        mfu_of_paid_capacity_percent=(
            None if result.mfu is None else round(100 * result.mfu.paid, 2)
        ),
        adjustments=[
            CommitmentChange(
                month=a.month, from_nodes=a.from_units, to_nodes=a.to_units, offer=a.offer
            )
            for a in changes
        ],
        next_adjustment=next_adjustment_text(plan),
        cash_flow=[
            QuarterCashFlow(
                quarter=q.index + 1,
                capex=round(q.capex, 2),
                owned_operating=round(q.owned_operating, 2),
                committed=round(q.committed, 2),
                on_demand=round(q.on_demand, 2),
                spot=round(q.spot, 2),
                residual_value=round(q.residual_value, 2),
                total=round(q.total, 2),
            )
            for q in result.cash_flow
        ],
    )


def plan_status(result: CapacityPlanResult) -> CapacityPlanStatus:
    """The CapacityPlan status fields of a result (conditions and times are the caller's)."""
    fleet = result.recommended
    months = result.months
    capital = result.capital
    return CapacityPlanStatus(
        recommendations=_recommendations(result.inputs, fleet.nodes),
        recommended_nodes=sum(fleet.nodes),
        expected_owned_utilization=round(fleet.owned_utilization, 4),
        expected_elastic_gpu_hours=round(fleet.elastic_gpu_hours / months, 1),
        expected_spot_gpu_hours=round(fleet.spot_gpu_hours / months, 1),
        monthly_cost=MonthlyCost(
            core=round(fleet.core_dollars / months, 2),
            elastic=round(fleet.elastic_dollars / months, 2),
            spot=round(fleet.spot_dollars / months, 2),
            total=round(fleet.total_dollars / months, 2),
        ),
        savings_vs_on_demand_percent=round(100 * result.savings_vs_on_demand, 2),
        savings_vs_current_percent=round(100 * result.savings_vs_current, 2),
        break_even_utilization=round(result.break_even_utilization, 4),
        sensitivity=[
            SensitivityRow(
                parameter=c.parameter,
                change=c.change,
                recommended_nodes=c.total_nodes,
                monthly_cost=round(c.monthly_dollars, 2),
            )
            for c in result.sensitivity
        ],
        owned_capital=OwnedCapital(
            capex=round(capital.capex, 2),
            charged=round(capital.charged, 2),
            cost_of_capital=round(capital.cost_of_capital, 2),
            residual_value=round(capital.residual_value, 2),
        ),
        flip_points=[
            FlipPointStatus(
                parameter=f.parameter,
                change=f.label,
                value=f.value,
                recommended_nodes=None if f.nodes is None else sum(f.nodes),
                recommendations=[] if f.nodes is None else _recommendations(result.inputs, f.nodes),
            )
            for f in result.flip_points
        ],
        procurement=procurement_status(result),
    )


def _recommendations(inputs: PlanInputs, nodes: Sequence[int]) -> list[Recommendation]:
    return [
        Recommendation(name=t.name, nodes=n) for t, n in zip(inputs.node_types, nodes, strict=True)
    ]
