"""The serving rebalance dashboard: serving replicas (Deployments) the operator moved from
cloud nodes to owned GPUs by surge, how those moves ended, and the on-demand spend they cut."""

from __future__ import annotations

from typing import Any

from hybridgpu.dashboards import names as n
from hybridgpu.dashboards.panels import (
    bars_panel,
    label_variable,
    new_dashboard,
    query,
    row,
    stat_panel,
    timeseries_panel,
)
from hybridgpu.models.actions import RebalanceResult
from hybridgpu.models.pool import Tier

UID = "hybridgpu-serving"
FILE = "hybridgpu-serving.json"


def _result(*results: RebalanceResult) -> str:
    return 'result=~"' + "|".join(r.value for r in results) + '"'


def build() -> Any:
    """The dashboard builder."""
    namespace = 'namespace=~"$namespace"'
    completed = n.select(n.REBALANCES, namespace, _result(RebalanceResult.COMPLETED))
    failed = n.select(
        n.REBALANCES, namespace, _result(RebalanceResult.ROLLED_BACK, RebalanceResult.ABORTED)
    )
    every = n.select(n.REBALANCES, namespace)
    on_demand = n.select(n.POOL_COST_PER_HOUR, n.equals("tier", Tier.ELASTIC.value))
    return (
        new_dashboard(
            UID,
            "hybridgpu: serving rebalance",
            "Serving replicas moved from cloud nodes to owned GPUs by surge (the new replica "
            "Ready before the cloud one goes) by the hybridgpu operator.",
            ["gpu", "serving"],
        )
        .with_variable(label_variable("namespace", "Namespace", n.REBALANCES))
        # ---------------------------------------------------------------- totals
        .with_row(row("Over the range"))
        .with_panel(
            stat_panel(
                "Replicas rebalanced to owned GPUs",
                "Serving replicas that moved off a cloud node by surge over the dashboard's "
                "range, none unavailable meanwhile; the emptied node was released.",
                [query(f"sum(increase({completed}[$__range]))", "replicas")],
                unit="short",
                width=8,
            )
        )
        .with_panel(
            stat_panel(
                "Rebalances rolled back or aborted",
                "Surges given up: the new replica was not Ready within rebalance.surgeTimeout "
                "(scaled back), or someone else changed the Deployment's replicas mid-move.",
                [query(f"sum(increase({failed}[$__range]))", "given up")],
                unit="short",
                width=8,
                thresholds=[(None, "green"), (1, "orange")],
            )
        )
        .with_panel(
            stat_panel(
                "On-demand spend rate now",
                "What the elastic (on-demand) pools cost now, $/h: what rebalancing serving "
                "replicas onto owned GPUs brings down.",
                [query(f"sum({on_demand})", "$/h")],
                unit="currencyUSD",
                width=8,
            )
        )
        # ---------------------------------------------------------------- over time
        .with_row(row("Rebalances"))
        .with_panel(
            timeseries_panel(
                "Rebalances by result",
                "Surges started and how they ended, per interval: completed, rolled_back (the "
                "surge replica was not Ready in time), aborted (the Deployment changed).",
                [
                    query(
                        f"sum by (result) (increase({every}[$__rate_interval]))",
                        "{{result}}",
                    )
                ],
                unit="short",
                width=12,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "On-demand spend rate by pool",
                "Cost per hour of each elastic pool: it drops as replicas leave their nodes.",
                [query(f"sum by (pool) ({on_demand})", "{{pool}}")],
                unit="currencyUSD",
                width=12,
            )
        )
        .with_panel(
            bars_panel(
                "Replicas rebalanced by namespace over the range (top 10)",
                "Which teams' serving workloads moved to owned GPUs.",
                [
                    query(
                        f"topk(10, sum by (namespace) (increase({completed}[$__range])))",
                        "{{namespace}}",
                        instant=True,
                    )
                ],
                unit="short",
                width=12,
            )
        )
        .with_panel(
            bars_panel(
                "Rebalances by route over the range",
                "Completed rebalances by the tier the replica left and the tier it went to.",
                [
                    query(
                        f"sum by (from_tier, to_tier) (increase({completed}[$__range]))",
                        "{{from_tier}} → {{to_tier}}",
                        instant=True,
                    )
                ],
                unit="short",
                width=12,
            )
        )
    )
