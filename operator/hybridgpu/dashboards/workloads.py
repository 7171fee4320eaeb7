"""The workload adapters dashboard: what the operator did with each suspendable batch kind
(batch/v1 Job, JobSet, RayJob, PyTorchJob, TrainJob), which it moves through one adapter interface
(kube/workloads), and how gang demand (workloads whose pods must all run at once, and Kueue's
ProvisioningRequests) fared: placed, coming or blocked, and why."""

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
from hybridgpu.models.actions import GangState

UID = "hybridgpu-workloads"
FILE = "hybridgpu-workloads.json"

KIND = 'kind=~"$kind"'


def _state(*states: GangState) -> str:
    return 'state=~"' + "|".join(s.value for s in states) + '"'


def _increase(name: str, window: str, *matchers: str) -> str:
    return f"increase({n.select(name, KIND, *matchers)}[{window}])"


def build() -> Any:
    """The dashboard builder."""
    blocked = _state(GangState.BLOCKED)
    admitted = _state(GangState.PLACED, GangState.COMING)
    return (
        new_dashboard(
            UID,
            "hybridgpu: workloads",
            "Workloads the hybridgpu operator moved, by kind (Job, JobSet, RayJob, "
            "PyTorchJob, TrainJob), and gang demand placed all at once or blocked.",
            ["gpu", "workloads", "gangs"],
        )
        .with_variable(label_variable("kind", "Kind", n.WORKLOADS))
        # ---------------------------------------------------------------- totals
        .with_row(row("Now and over the range"))
        .with_panel(
            stat_panel(
                "Workloads moved",
                "Workloads of the selected kinds moved between pools over the dashboard's "
                "range (a gang moves whole and counts once).",
                [query(f"sum({_increase(n.WORKLOAD_MOVES, '$__range')})", "moves")],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Gangs admitted",
                "Gangs that got a place for all their pods over the range: on nodes that "
                "exist (placed) or on nodes on their way or bought for them (coming).",
                [
                    query(
                        f"sum({_increase(n.GANG_DECISIONS, '$__range', admitted)})",
                        "admitted",
                    )
                ],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Gangs blocked now",
                "Gangs past their grace period that do not all fit and for which no capacity "
                "could be bought in the last tick: none of their pods got any.",
                [query(f"sum({n.select(n.GANGS, KIND, blocked)})", "blocked")],
                unit="short",
                width=6,
                thresholds=[(None, "green"), (1, "orange")],
            )
        )
        .with_panel(
            stat_panel(
                "Workloads moving now",
                "Workloads suspended by a move of the operator that has not finished "
                "(their pods are ending, or they wait to be repointed and resumed).",
                [
                    query(
                        f"sum({n.select(n.WORKLOADS, KIND, n.equals('state', 'moving'))})", "moving"
                    )
                ],
                unit="short",
                width=6,
            )
        )
        # ---------------------------------------------------------------- moves
        .with_row(row("Moves"))
        .with_panel(
            timeseries_panel(
                "Moves by kind",
                "Workloads moved per interval, by kind.",
                [
                    query(
                        f"sum by (kind) ({_increase(n.WORKLOAD_MOVES, '$__rate_interval')})",
                        "{{kind}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Moves by reason and route",
                "Workloads moved per interval: preempt (made room on core), consolidate "
                "(elastic → spot), deadline (→ on-demand); from tier → to tier (requeue: in "
                "place).",
                [
                    query(
                        "sum by (reason, from_tier, to_tier) "
                        f"({_increase(n.WORKLOAD_MOVES, '$__rate_interval')})",
                        "{{reason}}: {{from_tier}} → {{to_tier}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Workloads by kind and state",
                "GPU workloads each policy's tick saw: running, suspended (by their owner), "
                "moving (a move of the operator in flight), queued (Kueue's: never moved).",
                [
                    query(
                        f"sum by (kind, state) ({n.select(n.WORKLOADS, KIND)})",
                        "{{kind}} {{state}}",
                    )
                ],
                unit="short",
                width=24,
                stacked=True,
            )
        )
        # ---------------------------------------------------------------- gangs
        .with_row(row("Gangs"))
        .with_panel(
            timeseries_panel(
                "Gangs by state",
                "Gangs past their grace period in the last tick: placed (fits on nodes that "
                "exist), coming (nodes on their way or bought for all of it), blocked.",
                [
                    query(
                        f"sum by (state) ({n.select(n.GANGS, KIND)})",
                        "{{state}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Gang decisions by state",
                "Gangs that became placed, coming or blocked, per interval (a gang counts "
                "again only when its state changes).",
                [
                    query(
                        f"sum by (kind, state) ({_increase(n.GANG_DECISIONS, '$__rate_interval')})",
                        "{{kind}} {{state}}",
                    )
                ],
                unit="short",
                width=12,
                counts=True,
            )
        )
        .with_panel(
            bars_panel(
                "Why gangs were blocked over the range",
                "Gangs that became blocked, by the limit that stopped them: max_nodes, "
                "max_per_tick, budget_hourly, budget_monthly, no_pool, no_capacity.",
                [
                    query(
                        f"sum by (cause) ({_increase(n.GANG_DECISIONS, '$__range', blocked)})",
                        "{{cause}}",
                        instant=True,
                    )
                ],
                unit="short",
                width=24,
            )
        )
    )
