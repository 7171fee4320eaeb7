"""CapacityPlan: how much GPU capacity to own versus rent."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hybridgpu.models.base import Condition, Duration, PositiveDuration, Rule, SpecModel
from hybridgpu.models.limits import (
    MAX_DOLLARS,
    MAX_DOLLARS_PER_HOUR,
    MAX_DOLLARS_PER_KWH,
    MAX_NODES,
    MAX_WATTS,
)
from hybridgpu.models.pool import GPUSharing

DEFAULT_COST_OF_CAPITAL_PERCENT_PER_YEAR = 8.0


class PrometheusHistory(SpecModel):
    """Demand history read from Prometheus with a range query."""

    url: str = Field(pattern=r"^https?://", description="Prometheus base URL.")
    query: str = Field(
        default='sum(hybridgpu_pool_gpus{state="allocated"}) '
        "+ (sum(hybridgpu_pending_gpu_requests) or vector(0))",
        min_length=1,
        description="PromQL giving GPUs in use (allocated plus pending); series with a "
        "criticality label (critical, standard, preemptible) are split by it, others count as "
        "standard (set preemptibleShare then).",
    )
    window: PositiveDuration = Field(default="30d", description="How far back to read.")
    step: PositiveDuration = Field(default="5m", description="Resolution of the range query.")


class TraceHistory(SpecModel):
    """Demand history from a job trace file."""

    path: str = Field(min_length=1, description="Path of the trace file inside the operator.")
    format: Literal["openb", "csv", "demand"] = Field(
        default="openb",
        description="openb: Alibaba openb pod list; csv: jobs (name, arrival_seconds, "
        "duration_seconds, gpus, criticality); demand: GPUs in use over time (time, critical, "
        "standard, preemptible).",
    )
    time_scale: float = Field(
        default=1.0,
        gt=0,
        description="Divide the trace's times by this factor (compresses a long trace).",
    )


class HistorySource(SpecModel):
    """Where past demand comes from: exactly one of prometheus or trace."""

    rules = (
        Rule(
            cel="has(self.prometheus) != has(self.trace)",
            message="set exactly one of history.prometheus or history.trace",
            check=lambda s: (s.prometheus is None) != (s.trace is None),
        ),
    )

    prometheus: PrometheusHistory | None = Field(default=None, description="Prometheus source.")
    trace: TraceHistory | None = Field(default=None, description="Trace source.")


class OwnedNodeCandidate(SpecModel):
    """A node type the company could buy."""

    name: str = Field(min_length=1, description="Name of the candidate, e.g. 8xH100.")
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs in one node.")
    capex_per_node: float = Field(
        gt=0, le=MAX_DOLLARS, description="Purchase price of one node, $."
    )
    amortization_years: float = Field(
        default=4.0,
        gt=0,
        le=15,
        description="Years of use: the capex is recovered over them (with the cost of capital), "
        "and the hardware is assumed bought again at their end.",
    )
    power_watts_per_node: float = Field(
        gt=0, le=MAX_WATTS, description="Wall power of one node, watts."
    )
    pue: float = Field(default=1.4, ge=1, le=3, description="Power usage effectiveness.")
    electricity_per_kwh: float = Field(
        default=0.12,
        alias="electricityPerKWh",
        ge=0,
        le=MAX_DOLLARS_PER_KWH,
        description="$ per kWh.",
    )
    ops_per_node_hour: float = Field(
        default=0.0, ge=0, le=MAX_DOLLARS_PER_HOUR, description="Operations $/node-hour."
    )
    max_nodes: int | None = Field(
        default=None, ge=0, le=MAX_NODES, description="Buy at most this many."
    )
    current_nodes: int = Field(
        default=0,
        ge=0,
        le=MAX_NODES,
        description="Nodes of this type owned today (the fleet the plan's saving is measured "
        "against); with pool, counted from the pool unless given here.",
    )
    pool: str | None = Field(
        default=None,
        min_length=1,
        description="A core GPUPool of this node type: the operator counts its nodes as "
        "currentNodes at every plan (an explicit currentNodes overrides).",
    )
    gpu_model: str | None = Field(
        default=None,
        description="GPU model (A100, H100, H200, B200, ...): default throughput from public "
        "MLPerf results when throughput is not given (docs/tco.md).",
    )
    throughput: Throughput | None = Field(
        default=None,
        description="Work one of its GPUs does relative to one GPU of the demand's class "
        "(cloud.gpuModel), per workload class.",
    )


class Throughput(SpecModel):
    """Work one GPU of a node type does relative to one GPU of the demand's class."""

    training: float | None = Field(
        default=None, gt=0, le=100, description="Relative throughput on training work."
    )
    inference: float | None = Field(
        default=None, gt=0, le=100, description="Relative throughput on inference work."
    )


class CommittedOfferSpec(SpecModel):
    """Committed cloud capacity on offer: a reservation, savings plan or lease."""

    rules = (
        Rule(
            cel="has(self.discountPercent) != has(self.perGpuHour)",
            message="set exactly one of discountPercent (off cloud.onDemandPerGpuHour) or "
            "perGpuHour",
            check=lambda s: (s.discount_percent is None) != (s.per_gpu_hour is None),
        ),
        Rule(
            cel="!has(self.adjustmentMonths) || self.adjustmentMonths <= 12 * self.termYears",
            message="adjustmentMonths must not exceed the term",
            check=lambda s: s.adjustment_months <= 12 * s.term_years,
        ),
        Rule(
            cel="!has(self.termStartedMonthsAgo) || "
            "self.termStartedMonthsAgo < 12 * self.termYears",
            message="termStartedMonthsAgo must be less than the term's months",
            check=lambda s: s.term_started_months_ago < 12 * s.term_years,
        ),
    )

    name: str = Field(min_length=1, description="Name of the offer, e.g. 3y-lease.")
    term_years: Literal[1, 3] = Field(description="Term in years: 1 or 3.")
    discount_percent: float | None = Field(
        default=None, ge=0, lt=100, description="Discount off cloud.onDemandPerGpuHour, percent."
    )
    per_gpu_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Effective hourly price per GPU, $ (instead of a discount).",
    )
    upfront_per_gpu: float = Field(
        default=0.0,
        ge=0,
        le=MAX_DOLLARS,
        description="Paid once per committed GPU per term, $; the plan spreads it over the "
        "term's hours.",
    )
    gpus_per_node: int = Field(
        default=8, ge=1, le=64, description="Capacity is committed in whole nodes of this size."
    )
    adjustment_months: int = Field(
        default=3,
        ge=1,
        le=36,
        description="Length of an adjustment window, months: the committed level may change "
        "at the start of each.",
    )
    max_decrease_percent: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="A window may lower the level by at most this percent of it (0: never "
        "within a term).",
    )
    max_increase_percent: float | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="A window may raise the level by at most this percent of it (a tranche "
        "that ends with the term); unset: by any amount. At a renewal either way is free.",
    )
    max_nodes: int | None = Field(
        default=None, ge=0, le=MAX_NODES, description="Commit to at most this many."
    )
    current_nodes: int = Field(
        default=0,
        ge=0,
        le=MAX_NODES,
        description="Committed today under this offer (a re-plan): paid until the term ends, "
        "so the plan keeps at least what the adjustment windows allow and says when a "
        "window should change it.",
    )
    term_started_months_ago: int = Field(
        default=0,
        ge=0,
        description="When today's term started, months ago: its adjustment windows and its "
        "end fall on that calendar (0: the term starts now).",
    )
    pool: str | None = Field(
        default=None,
        min_length=1,
        description="A GPUPool with spec.committed under this offer: the operator reads "
        "currentNodes (its committed nodes) and termStartedMonthsAgo (from its "
        "committed.termStart, else the pool's creation) at every plan; explicit values "
        "override.",
    )


class CloudPrices(SpecModel):
    """Rented capacity prices, per GPU-hour."""

    on_demand_per_gpu_hour: float = Field(
        gt=0, le=MAX_DOLLARS_PER_HOUR, description="On-demand $/GPU-hour."
    )
    spot_per_gpu_hour: float = Field(gt=0, le=MAX_DOLLARS_PER_HOUR, description="Spot $/GPU-hour.")
    spot_interruptions_per_hour: float = Field(
        default=0.005, ge=0, description="Interruptions per spot node-hour (hazard)."
    )
    spot_restart_overhead: Duration = Field(
        default="20m",
        description="Work lost per interruption or move: the restart plus, on average, half "
        "the jobs' checkpoint interval (20m: 5m + 30m / 2, as the simulator assumes).",
    )
    node_startup: Duration = Field(
        default="5m",
        description="Job traces: billed time from launching a cloud node until it runs work "
        "(boot and image pull, as the simulator's provisioning delay).",
    )
    gpu_model: str | None = Field(
        default=None,
        description="GPU model of the rented capacity and of the demand's GPUs (the unit of "
        "work candidates' throughput is relative to).",
    )
    peak_tflops_per_gpu: float | None = Field(
        default=None,
        gt=0,
        le=100000,
        description="Peak dense TFLOPS of one demand-class GPU at the model's precision, for "
        "MFU (default: the datasheet's dense BF16 figure for gpuModel).",
    )
    idle_before_release: Duration = Field(
        default="10m",
        description="Job traces: billed time an idle cloud node waits for work before it is "
        "released (the pools' scaleDown.idleFor plus about half a reconcile interval).",
    )


class CapacityPlanSpec(SpecModel):
    """Desired planning run."""

    rules = (
        Rule(
            cel="!has(self.modelFlopsPerToken) || has(self.tokensPerGpuHour)",
            message="modelFlopsPerToken needs tokensPerGpuHour (MFU is tokens/s x FLOPs per "
            "token over the GPUs' peak)",
            check=lambda s: s.model_flops_per_token is None or s.tokens_per_gpu_hour is not None,
        ),
    )

    history: HistorySource = Field(description="Where past demand comes from.")
    horizon_months: int = Field(default=36, ge=1, le=120, description="Planning horizon, months.")
    demand_growth_percent_per_year: float = Field(
        default=0.0, ge=-90, le=1000, description="Expected demand growth per year, percent."
    )
    cost_of_capital_percent_per_year: float = Field(
        default=DEFAULT_COST_OF_CAPITAL_PERCENT_PER_YEAR,
        ge=0,
        le=100,
        description="Annual rate the money spent on owned nodes costs (interest, or the return "
        "it would earn elsewhere), percent: an owned node-hour recovers its capex as an annuity "
        "over amortizationYears at this rate instead of capex / years.",
    )
    candidates: list[OwnedNodeCandidate] = Field(
        min_length=1,
        description="Node types that could be owned; each name once.",
        # A list keyed by name: the apiserver refuses a name used twice, as the CLI does.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    cloud: CloudPrices = Field(description="Prices of rented capacity.")
    owned_tranche_months: int | None = Field(
        default=None,
        ge=3,
        le=60,
        multiple_of=3,
        description="Owned nodes may be bought in tranches: at the start of every this many "
        "months (3: any quarter), the fleet never shrinking; the procurement plan searches "
        "the fleet of every tranche, and its cash flow and NPV pay each tranche's capex when "
        "it is bought. Unset: the whole fleet is bought at the start.",
    )
    committed: list[CommittedOfferSpec] = Field(
        default_factory=list,
        max_length=8,
        description="Committed cloud capacity on offer (reservations, savings plans, leases); "
        "each name once, at most 8 (every set of them is searched). The plan signs the best of "
        "nothing, one offer or several together (a long-term base and shorter top-ups), and "
        "each one's level per window.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    gpu_sharing: GPUSharing | None = Field(
        default=None,
        description="GPUs are shared (time-slicing, MPS, MIG) for jobs of a trace that need a "
        "fraction of one GPU (gpu_milli): such a job takes ceil(milli x replicas / 1000) of the "
        "replicas units of one GPU, owned or rented (a rented GPU is billed whole), as on a "
        "GPUPool with gpu.sharing; without it, a whole GPU.",
    )
    workload_class: Literal["training", "inference"] = Field(
        default="training",
        description="Which throughput of the candidates applies to the demand.",
    )
    tokens_per_gpu_hour: float | None = Field(
        default=None,
        ge=1,
        description="Tokens one GPU of the demand's class produces per busy hour (for the cost "
        "per million tokens); at least 1 (fewer would make that cost overflow).",
    )
    model_flops_per_token: float | None = Field(
        default=None,
        gt=0,
        description="FLOPs the model spends per token (about 6 x parameters to train, 2 x "
        "parameters to serve): with tokensPerGpuHour, the plan reports MFU.",
    )
    preemptible_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of demand that is preemptible (default: measured from the history). "
        "Not applied to a job trace (openb, csv): each job carries its own criticality.",
    )
    schedule: PositiveDuration = Field(default="24h", description="Recompute this often.")


class HeldCapacity(SpecModel):
    """Capacity held today that the plan started from."""

    name: str = Field(description="The candidate or committed offer.")
    kind: Literal["owned", "committed"] = Field(description="owned or committed.")
    nodes: int = Field(description="Nodes held today (currentNodes).")
    term_started_months_ago: int | None = Field(
        default=None, description="Committed: months since the current term started."
    )
    source: str = Field(description="Where it was read: 'spec', or 'GPUPool <name>'.")


class Recommendation(SpecModel):
    """Owned nodes recommended for one candidate type."""

    name: str = Field(description="Candidate name.")
    nodes: int = Field(description="Nodes to own.")


class MonthlyCost(SpecModel):
    """Projected monthly cost per tier, $."""

    core: float = Field(
        default=0.0, description="Owned: capital recovery (with the cost of capital), power, ops."
    )
    elastic: float = Field(default=0.0, description="On-demand cloud.")
    spot: float = Field(default=0.0, description="Spot cloud including restart overhead.")
    total: float = Field(default=0.0, description="Sum of the tiers.")


class OwnedCapital(SpecModel):
    """The recommended fleet's hardware money over the horizon, $."""

    capex: float = Field(description="Purchase price of the recommended owned nodes, $.")
    charged: float = Field(
        description="Capital charged over the horizon (part of monthlyCost.core): the value "
        "the hardware loses plus the cost of capital, $."
    )
    cost_of_capital: float = Field(description="The cost of capital within charged, $.")
    residual_value: float = Field(
        description="What the hardware is still worth at the end of the horizon (its book value: "
        "capex not yet recovered), $. Not charged to the plan; the sensitivity row "
        "'residual value' shows the plan when it is worth nothing."
    )


class SensitivityRow(SpecModel):
    """How the plan moves when one input changes."""

    parameter: str = Field(description="Input that was changed.")
    change: str = Field(description="How it was changed, e.g. +20%.")
    recommended_nodes: int = Field(description="Owned nodes recommended then.")
    monthly_cost: float = Field(description="Projected monthly TCO then, $.")


class FlipPoint(SpecModel):
    """The nearest change of one input, in one direction, that changes the recommended fleet."""

    parameter: str = Field(description="Input that was changed.")
    change: str = Field(
        description="The smallest change found that changes the fleet, e.g. +37.5%, or the "
        "end of the searched range, e.g. 'none to +300%'."
    )
    value: str = Field(description="The input's value at that change, with its unit.")
    recommended_nodes: int | None = Field(
        default=None, description="Owned nodes recommended from there (absent: no change found)."
    )
    recommendations: list[Recommendation] = Field(
        default_factory=list, description="Owned nodes per candidate type from there."
    )


class SupplyShare(SpecModel):
    """One kind of supply's share of the plan."""

    supply: str = Field(description="owned, committed, onDemand or spot.")
    gpu_hours_percent: float = Field(description="Share of the GPU-hours served, percent.")
    dollars_percent: float = Field(description="Share of the dollars, percent.")


class QuarterCashFlow(SpecModel):
    """Money paid in one quarter of the horizon, $ (not discounted)."""

    quarter: int = Field(description="Quarter of the horizon, from 1.")
    capex: float = Field(
        description="Owned hardware bought (at the start, and at its end of life)."
    )
    owned_operating: float = Field(description="Power with PUE and ops of the owned nodes.")
    committed: float = Field(description="Committed capacity, paid whether used or not.")
    on_demand: float = Field(description="Expected on-demand spend.")
    spot: float = Field(description="Expected spot spend, reruns included.")
    residual_value: float = Field(
        default=0.0, description="Book value of the owned hardware at the end (an inflow)."
    )
    total: float = Field(description="Paid in the quarter, less the residual value.")


class CommitmentChange(SpecModel):
    """A change of the committed level at the start of an adjustment window."""

    month: int = Field(description="Month of the horizon the window starts (0 = now).")
    from_nodes: int = Field(description="Committed nodes before.")
    to_nodes: int = Field(description="Committed nodes from then on.")
    offer: str | None = Field(default=None, description="The offer whose level changes.")


class OwnedTranche(SpecModel):
    """Owned nodes bought at the start of one month of the horizon."""

    month: int = Field(description="Month of the horizon the tranche is bought (0 = now).")
    candidate: str = Field(description="The candidate node type.")
    nodes: int = Field(description="Nodes bought then.")


class Commitment(SpecModel):
    """One committed offer the plan signs."""

    offer: str = Field(description="The offer's name.")
    term_years: int = Field(description="Its term, years.")
    nodes: int = Field(description="Committed nodes to sign for now.")


class ProcurementStatus(SpecModel):
    """What to sign: owned nodes, committed capacity and what is left to on demand and spot."""

    committed_offer: str | None = Field(
        default=None,
        description="The offer to sign (none); with several signed together, the base (the "
        "longer term): all of them are in commitments.",
    )
    committed_nodes: int = Field(
        default=0, description="Committed nodes of committedOffer to sign for now."
    )
    commitments: list[Commitment] = Field(
        default_factory=list,
        description="Every offer signed (none, one, or several together: e.g. a 3-year base and a "
        "1-year top-up) and its nodes for now.",
    )
    owned_nodes: int = Field(default=0, description="Owned nodes to buy now.")
    owned_tranches: list[OwnedTranche] = Field(
        default_factory=list,
        description="Every purchase of owned nodes over the horizon: now, and later tranches "
        "when spec.ownedTrancheMonths is set.",
    )
    base_owned_percent: float = Field(
        default=0.0,
        description="Share of the base capacity (owned + committed GPU-hours) that is owned.",
    )
    mix: list[SupplyShare] = Field(default_factory=list, description="Shares per supply.")
    total: float = Field(default=0.0, description="Cost over the horizon, $ (equivalent annual).")
    committed_after_horizon: float = Field(
        default=0.0,
        description="Committed payments due after the horizon (a term signed within it that "
        "ends later), $; the total includes what they do not earn back.",
    )
    npv: float = Field(
        default=0.0,
        description="Present value of the quarterly cash flow at the cost of capital, $.",
    )
    cost_per_million_tokens: float | None = Field(
        default=None, description="Total cost over the tokens of the demand, $ (tokensPerGpuHour)."
    )
    mfu_percent: float | None = Field(
        default=None,
        description="Model FLOPs utilization of a busy demand-class GPU, percent "
        "(modelFlopsPerToken).",
    )
    mfu_of_paid_capacity_percent: float | None = Field(
        default=None,
        description="MFU over every GPU-hour the plan pays for (idle owned and committed "
        "capacity included), percent.",
    )
    adjustments: list[CommitmentChange] = Field(
        default_factory=list, description="When an adjustment window should change the level."
    )
    next_adjustment: str | None = Field(
        default=None, description="The next adjustment window to use, in words."
    )
    cash_flow: list[QuarterCashFlow] = Field(default_factory=list, description="By quarter.")


class CapacityPlanStatus(SpecModel):
    """The computed plan."""

    recommendations: list[Recommendation] = Field(
        default_factory=list, description="Owned nodes per candidate type."
    )
    recommended_nodes: int | None = Field(default=None, description="Owned nodes in total.")
    expected_owned_utilization: float | None = Field(
        default=None, description="Expected utilization of the owned GPUs, 0..1."
    )
    expected_elastic_gpu_hours: float | None = Field(
        default=None, description="On-demand GPU-hours per month."
    )
    expected_spot_gpu_hours: float | None = Field(
        default=None, description="Spot GPU-hours per month."
    )
    monthly_cost: MonthlyCost | None = Field(default=None, description="Projected monthly TCO.")
    savings_vs_on_demand_percent: float | None = Field(
        default=None, description="Saving versus renting everything on demand, percent."
    )
    savings_vs_current_percent: float | None = Field(
        default=None, description="Saving versus today's fleet, percent."
    )
    break_even_utilization: float | None = Field(
        default=None, description="Utilization above which owning a node beats renting, 0..1."
    )
    owned_capital: OwnedCapital | None = Field(
        default=None, description="Capex, capital charged and residual value of the fleet."
    )
    sensitivity: list[SensitivityRow] = Field(
        default_factory=list, description="Small sensitivity table."
    )
    flip_points: list[FlipPoint] = Field(
        default_factory=list,
        description="Per input and direction, the nearest change that changes the recommendation.",
    )
    procurement: ProcurementStatus | None = Field(
        default=None,
        description="The mix to sign: owned, committed, on demand and spot, by quarter.",
    )
    held: list[HeldCapacity] = Field(
        default_factory=list,
        description="What is held today that the plan started from (currentNodes, read from "
        "the GPUPools named by candidates[].pool and committed[].pool, or from the spec).",
    )
    last_computed: str | None = Field(default=None, description="RFC 3339 time of the run.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, HistoryAvailable."
    )
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status reflects."
    )
