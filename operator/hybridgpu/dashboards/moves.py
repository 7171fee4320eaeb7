"""The moves and reclaims dashboard: Jobs the operator moved between tiers (preempted to
make room, consolidated onto spot, sent to on-demand for a deadline, requeued off an
interrupted spot node) and the idle GPUs it took back from workloads opted in to reclaim."""

from __future__ import annotations

from typing import Any

from hybridgpu.dashboards import names as n
from hybridgpu.dashboards.panels import (
    TIER,
    bars_panel,
    label_variable,
    new_dashboard,
    query,
    row,
    stat_panel,
    timeseries_panel,
)
from hybridgpu.models.actions import ActionKind

UID = "hybridgpu-moves"
FILE = "hybridgpu-moves.json"

MOVE_ACTIONS = (
    ActionKind.PREEMPT,
    ActionKind.CONSOLIDATE,
    ActionKind.DEADLINE,
    ActionKind.HANDLE_INTERRUPTION,
    ActionKind.RECLAIM_IDLE,
)
"""Decisions that move or stop running work (the rest add or remove capacity)."""


def _over(name: str, window: str, *matchers: str) -> str:
    return f"increase({n.select(name, *matchers)}[{window}])"


def build() -> Any:
    """The dashboard builder."""
    moved_to_tier = 'to_tier=~"$tier"'
    # preemptions_total's reason for a deadline move is the action's kind
    deadline = f'reason="{ActionKind.DEADLINE.value}"'
    move_actions = 'action=~"' + "|".join(kind.value for kind in MOVE_ACTIONS) + '"'
    moves_range = f"sum({_over(n.PREEMPTIONS, '$__range', moved_to_tier)})"
    reclaimed = n.select(n.RECLAIMED_GPU_HOURS, TIER)
    return (
        new_dashboard(
            UID,
            "hybridgpu: moves and reclaims",
            "Jobs moved between tiers and idle GPUs reclaimed by the hybridgpu operator.",
            ["gpu", "moves"],
        )
        .with_variable(label_variable("tier", "Tier", n.POOL_NODES))
        # ---------------------------------------------------------------- totals
        .with_row(row("Over the range"))
        .with_panel(
            stat_panel(
                "Jobs moved",
                "Jobs moved between tiers over the dashboard's range, to the selected tiers "
                "(requeued Jobs have to_tier requeue: select All to count them).",
                [query(moves_range, "moves")],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Moved to meet a deadline",
                "Jobs sent to on-demand capacity because waiting longer would miss their deadline.",
                [
                    query(
                        f"sum({_over(n.PREEMPTIONS, '$__range', moved_to_tier, deadline)})",
                        "deadline moves",
                    )
                ],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Idle GPU-hours reclaimed",
                "GPU-hours that workloads opted in to idle reclaim had held below the idle "
                "threshold when the operator suspended or evicted them.",
                [query(f"sum({_over(n.RECLAIMED_GPU_HOURS, '$__range', TIER)})", "GPU-h")],
                unit="short",
                width=6,
            )
        )
        .with_panel(
            stat_panel(
                "Spot interruptions",
                "Nodes the provider announced it will take away: their Jobs were requeued.",
                [query(f"sum({_over(n.SPOT_INTERRUPTIONS, '$__range')})", "interruptions")],
                unit="short",
                width=6,
            )
        )
        # ---------------------------------------------------------------- moves
        .with_row(row("Moves"))
        .with_panel(
            timeseries_panel(
                "Moves by reason",
                "Jobs moved per interval: preempt (made room on core for more critical "
                "work), consolidate (elastic → spot, cheaper), deadline (→ on-demand).",
                [
                    query(
                        "sum by (reason) "
                        f"({_over(n.PREEMPTIONS, '$__rate_interval', moved_to_tier)})",
                        "{{reason}}",
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
                "Moves by route",
                "Where moved Jobs came from and went to, per interval (to_tier requeue: "
                "requeued in place).",
                [
                    query(
                        "sum by (from_tier, to_tier) "
                        f"({_over(n.PREEMPTIONS, '$__rate_interval', moved_to_tier)})",
                        "{{from_tier}} → {{to_tier}}",
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
                "Decisions that move or stop work",
                "Decisions per interval, counted once while they are carried out: "
                + ", ".join(kind.value for kind in MOVE_ACTIONS)
                + ".",
                [
                    query(
                        f"sum by (action) ({_over(n.DECISIONS, '$__rate_interval', move_actions)})",
                        "{{action}}",
                    )
                ],
                unit="short",
                width=12,
                counts=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Spot interruptions by pool",
                "Nodes the provider announced it will take away, per interval.",
                [
                    query(
                        f"sum by (pool) ({_over(n.SPOT_INTERRUPTIONS, '$__rate_interval')})",
                        "{{pool}}",
                    )
                ],
                unit="short",
                width=12,
                counts=True,
            )
        )
        # ---------------------------------------------------------------- reclaims
        .with_row(row("Idle reclaims"))
        .with_panel(
            timeseries_panel(
                "Idle GPU-hours reclaimed by tier",
                "Idle GPU-hours reclaimed per interval, by the tier the workload ran on.",
                [
                    query(
                        f"sum by (tier) (increase({reclaimed}[$__rate_interval]))",
                        "{{tier}}",
                    )
                ],
                unit="short",
                width=12,
                stacked=True,
            )
        )
        .with_panel(
            bars_panel(
                "Idle GPU-hours reclaimed by namespace over the range (top 10)",
                "Which teams' workloads held GPUs idle the longest.",
                [
                    query(
                        f"topk(10, sum by (namespace) (increase({reclaimed}[$__range])))",
                        "{{namespace}}",
                        instant=True,
                    )
                ],
                unit="short",
                width=12,
            )
        )
    )
