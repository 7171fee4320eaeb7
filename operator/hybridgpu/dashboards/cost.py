"""The cost dashboard: what the GPU fleet costs, what is wasted, capacity and demand, the
operator's actions, the budget and the operator's health."""

from __future__ import annotations

from typing import Any

from hybridgpu.dashboards import names as n
from hybridgpu.dashboards.panels import (
    POOL,
    TIER,
    bars_panel,
    dashed_red,
    gauge_panel,
    label_variable,
    new_dashboard,
    query,
    row,
    stat_panel,
    timeseries_panel,
)

UID = "hybridgpu-cost"
FILE = "hybridgpu-cost.json"


def _increase(name: str, *matchers: str, over: str = "$__range") -> str:
    return f"increase({n.select(name, *matchers)}[{over}])"


def build() -> Any:
    """The dashboard builder."""
    cost_rate = n.select(n.POOL_COST_PER_HOUR, POOL, TIER)
    idle_over_range = f"sum({_increase(n.IDLE_GPU_COST, POOL, TIER)})"
    cost_over_range = f"sum({_increase(n.COST, POOL, TIER)})"
    quantile = "histogram_quantile({q}, sum by (le) (rate({b}[$__rate_interval])))"
    board = (
        new_dashboard(
            UID,
            "hybridgpu: GPU cost",
            "Cost, waste, capacity and decisions of the hybridgpu operator (hybridgpu_* metrics).",
            ["gpu", "cost"],
        )
        .with_variable(label_variable("tier", "Tier", n.POOL_NODES))
        .with_variable(label_variable("pool", "Pool", n.select(n.POOL_NODES, TIER)))
        # ---------------------------------------------------------------- cost
        .with_row(row("Cost"))
        .with_panel(
            stat_panel(
                "Spend rate now",
                "What every selected pool costs per hour right now (provisioning instances "
                "included).",
                [query(f"sum({cost_rate})", "$/h")],
                unit="currencyUSD",
                width=5,
                sparkline=True,
            )
        )
        .with_panel(
            stat_panel(
                "Cost over the range",
                "Cost of the selected pools over the dashboard's time range.",
                [query(cost_over_range, "$")],
                unit="currencyUSD",
                width=5,
            )
        )
        .with_panel(
            stat_panel(
                "Idle GPU cost over the range",
                "Cost of GPUs no pod requested: waste of owned (core) capacity, idle rent on "
                "cloud.",
                [query(idle_over_range, "$")],
                unit="currencyUSD",
                width=5,
            )
        )
        .with_panel(
            stat_panel(
                "Idle share of cost",
                "Idle GPU cost ÷ total cost over the range.",
                [query(f"{idle_over_range} / {cost_over_range}", "idle share")],
                unit="percentunit",
                width=4,
                thresholds=[(None, "green"), (0.3, "orange"), (0.5, "red")],
            )
        )
        .with_panel(
            stat_panel(
                "Effective cost per GPU-hour",
                "All pools' cost ÷ GPU-hours allocated to pods, since the operator started.",
                [query(f"max({n.EFFECTIVE_COST_PER_GPU_HOUR})", "$/GPU-h")],
                unit="currencyUSD",
                width=5,
                sparkline=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Cost per hour by tier",
                f"Sum of {n.POOL_COST_PER_HOUR} by tier (core is sunk cost: paid whether used "
                "or not).",
                [query(f"sum by (tier) ({cost_rate})", "{{tier}}")],
                unit="currencyUSD",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Cumulative cost by tier",
                f"{n.COST}: cost accumulated since the operator started (a counter: it "
                "restarts at 0 with the operator; 'Cost over the range' above is "
                "restart-proof).",
                [query(f"sum by (tier) ({n.select(n.COST, POOL, TIER)})", "{{tier}}")],
                unit="currencyUSD",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Idle GPU cost (waste) by tier, $/h",
                f"Rate of {n.IDLE_GPU_COST}: what idle GPUs cost per hour; the "
                f"'committed' lines ({n.COMMITTED_IDLE_COST}) are the part of it that is "
                "committed capacity (reserved, savings plan, lease) paid for and unused.",
                [
                    query(
                        "sum by (tier) (rate("
                        f"{n.select(n.IDLE_GPU_COST, POOL, TIER)}[$__rate_interval])) * 3600",
                        "{{tier}}",
                    ),
                    query(
                        "sum by (pool) (rate("
                        f"{n.select(n.COMMITTED_IDLE_COST, POOL)}[$__rate_interval])) * 3600",
                        "committed {{pool}}",
                    ),
                ],
                unit="currencyUSD",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            bars_panel(
                "Cost by namespace over the range (top 10)",
                "Cost of the GPUs allocated to each namespace's pods.",
                [
                    query(
                        f"topk(10, sum by (namespace) ({_increase(n.NAMESPACE_COST, TIER)}))",
                        "{{namespace}}",
                        instant=True,
                    )
                ],
                unit="currencyUSD",
                width=12,
            )
        )
        # ---------------------------------------------------------------- capacity
        .with_row(row("Capacity and demand"))
        .with_panel(
            timeseries_panel(
                "GPUs by pool and state",
                "GPUs allocated to pods and idle, per pool.",
                [
                    query(
                        f"sum by (pool, state) ({n.select(n.POOL_GPUS, POOL, TIER)})",
                        "{{pool}} {{state}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Nodes by pool and state",
                "ready, not_ready, cordoned, provisioning (launched, not joined yet).",
                [
                    query(
                        f"sum by (pool, state) ({n.select(n.POOL_NODES, POOL, TIER)})",
                        "{{pool}} {{state}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU utilization by pool",
                "Average DCGM utilization of the pool's nodes with fresh samples. A gap means "
                "no fresh data (the operator then releases nothing), not 0%.",
                [
                    query(
                        f"max by (pool) ({n.select(n.POOL_GPU_UTILIZATION, POOL, TIER)})",
                        "{{pool}}",
                    )
                ],
                unit="percentunit",
                width=12,
                ratio=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Pending GPU requests by criticality",
                "GPUs requested by pending pods with no capacity yet. Critical demand that "
                "stays pending needs attention.",
                [query(f"sum by (criticality) ({n.PENDING_GPU_REQUESTS})", "{{criticality}}")],
                unit="short",
                width=12,
                stacked=True,
            )
        )
        # ---------------------------------------------------------------- actions
        .with_row(row("Actions"))
        .with_panel(
            timeseries_panel(
                "Preemptions",
                "Jobs moved between tiers per interval: reason preempt (made room on core), "
                "consolidate (elastic → spot) or deadline (to on-demand to meet a deadline).",
                [
                    query(
                        "sum by (from_tier, to_tier, reason) "
                        f"({_increase(n.PREEMPTIONS, over='$__rate_interval')})",
                        "{{reason}} {{from_tier}} → {{to_tier}}",
                    )
                ],
                unit="short",
                width=8,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Spot interruptions",
                "Nodes the provider announced it will take away, per interval.",
                [
                    query(
                        "sum by (pool) "
                        f"({_increase(n.SPOT_INTERRUPTIONS, POOL, over='$__rate_interval')})",
                        "{{pool}}",
                    )
                ],
                unit="short",
                width=8,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Scale events",
                "Scale-ups (up) and node releases (down) decided, per interval.",
                [
                    query(
                        "sum by (pool, direction) "
                        f"({_increase(n.SCALE_EVENTS, POOL, over='$__rate_interval')})",
                        "{{pool}} {{direction}}",
                    )
                ],
                unit="short",
                width=8,
                counts=True,
            )
        )
        # ---------------------------------------------------------------- budget, operator
        .with_row(row("Budget and operator"))
        .with_panel(
            dashed_red(
                timeseries_panel(
                    "Budget: spent vs limit",
                    "Cloud spend this month against the ScalingPolicy's budget.monthlyLimit "
                    "(no limit line: no limit set).",
                    [
                        query(f"max({n.BUDGET_SPENT})", "spent this month"),
                        query(f"max({n.BUDGET_LIMIT})", "monthly limit"),
                    ],
                    unit="currencyUSD",
                    width=8,
                ),
                "monthly limit",
            )
        )
        .with_panel(
            gauge_panel(
                "Budget used",
                "Spent this month ÷ monthly limit.",
                [query(f"max({n.BUDGET_SPENT}) / max({n.BUDGET_LIMIT})", "used")],
                unit="percentunit",
                width=4,
                thresholds=[(None, "green"), (0.8, "orange"), (0.95, "red")],
            )
        )
        .with_panel(
            timeseries_panel(
                "Effective cost per GPU-hour",
                "All pools' cost ÷ GPU-hours allocated to pods, since the operator started: "
                "what a used GPU-hour really costs.",
                [query(f"max({n.EFFECTIVE_COST_PER_GPU_HOUR})", "$/GPU-h")],
                unit="currencyUSD",
                width=6,
            )
        )
        .with_panel(
            timeseries_panel(
                "Reconcile duration",
                "Time one reconcile tick takes (snapshot, decide, act, report).",
                [
                    query(quantile.format(q=q, b=n.RECONCILE_DURATION_BUCKET), f"p{p}")
                    for q, p in (("0.5", 50), ("0.95", 95), ("0.99", 99))
                ],
                unit="s",
                width=6,
            )
        )
        .with_panel(
            timeseries_panel(
                "Decisions by action",
                "Actions decided per interval; a decision repeated by consecutive ticks while "
                "it is carried out counts once.",
                [
                    query(
                        f"sum by (action) ({_increase(n.DECISIONS, over='$__rate_interval')})",
                        "{{action}}",
                    )
                ],
                unit="short",
                width=24,
                stacked=True,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Cost per million tokens by pool",
                "The pool's cost ÷ the tokens its nodes generated (the ScalingPolicy's "
                "prometheus.tokensQuery) × 10⁶, since the operator started. Empty for pools "
                "that serve no tokens.",
                [
                    query(
                        f"max by (pool) ({n.select(n.COST_PER_MILLION_TOKENS, POOL, TIER)})",
                        "{{pool}}",
                    )
                ],
                unit="currencyUSD",
                width=12,
            )
        )
        .with_panel(
            stat_panel(
                "Since the last tick",
                "Time since the leader last decided a plan (status.lastTick of the freshest "
                "ScalingPolicy). More than a few intervals: see the runbook 'The operator "
                "is down or not ticking'.",
                [query(f"time() - max({n.LAST_TICK})", "age")],
                unit="s",
                width=4,
                height=8,
                thresholds=[(None, "green"), (120, "orange"), (600, "red")],
            )
        )
        .with_panel(
            stat_panel(
                "Conditions",
                "Each ScalingPolicy's and GPUPool's status conditions as the last tick wrote "
                "them (kubectl get sp,gp -o wide shows the same).",
                [
                    query(
                        f"max by (policy, condition) ({n.POLICY_CONDITION})",
                        "{{policy}} {{condition}}",
                    ),
                    query(
                        f"max by (pool, condition) ({n.select(n.POOL_CONDITION, POOL, TIER)})",
                        "{{pool}} {{condition}}",
                    ),
                ],
                unit="none",
                width=8,
                height=8,
                mappings={"1": "True", "0": "False"},
            )
        )
        .with_panel(
            stat_panel(
                "Nodes no GPUPool manages",
                "Cloud nodes labelled for a GPUPool that does not exist, by that pool: billed, "
                "and nothing releases them. See the runbook 'Nodes no GPUPool manages'.",
                [query(f"sum by (pool) ({n.UNMANAGED_NODES})", "{{pool}}")],
                unit="short",
                width=4,
                height=8,
                thresholds=[(None, "green"), (1, "red")],
            )
        )
    )
    return board
