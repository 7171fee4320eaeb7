"""Status bodies of GPUPool and ScalingPolicy, built from a snapshot and a plan. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hybridgpu.core.cost import (
    committed_idle,
    pool_hour_dollars,
    powered,
    projected_month_dollars,
)
from hybridgpu.core.decide import JOINING_GRACE_SECONDS
from hybridgpu.kube.convert import rfc3339
from hybridgpu.models.actions import Plan, ReleaseNode, ScaleUp
from hybridgpu.models.base import Condition
from hybridgpu.models.policy import BudgetStatus, ScalingPolicyStatus
from hybridgpu.models.pool import (
    CommittedUsage,
    GPUCounts,
    GPUPoolSpec,
    GPUPoolStatus,
    NodeCounts,
    Tier,
)
from hybridgpu.models.snapshot import ClusterSnapshot, NodeState

CORDONED_FOR_XID = "xid-errors"

MAX_PLAN_LINES = 50


def condition(type_: str, ok: bool, reason: str, message: str, generation: int | None) -> Condition:
    return Condition(
        type=type_,
        status="True" if ok else "False",
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def merge_conditions(
    old: Iterable[Mapping[str, Any]], new: Iterable[Condition], now: float
) -> list[dict[str, Any]]:
    """New conditions as wire dicts; lastTransitionTime kept from ``old`` when the status
    did not change, else ``now``."""
    previous = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        before = previous.get(cond.type)
        changed = before is None or before.get("status") != cond.status
        stamp = rfc3339(now) if changed or not before else before.get("lastTransitionTime")
        out.append(cond.model_copy(update={"last_transition_time": stamp}).to_wire())
    return out


def pool_status(
    name: str,
    snapshot: ClusterSnapshot,
    plan: Plan,
    *,
    generation: int | None,
    old_conditions: Iterable[Mapping[str, Any]] = (),
    provider_error: str | None = None,
    unregistered: Sequence[str] = (),
    last_scale_time: str | None = None,
    allocated_by_node: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The status of pool ``name`` after a tick, as a wire dict.

    ``unregistered``: one line per instance replaced because it never became a Node.
    ``allocated_by_node``: :func:`gpus_allocated_by_node` of ``snapshot``, when the caller
    has it (one pass over the pods for all pools instead of one per pool).
    """
    pool = next(p for p in snapshot.pools if p.name == name)
    nodes = [n for n in snapshot.nodes if n.pool == name]
    if allocated_by_node is None:
        allocated_by_node = gpus_allocated_by_node(snapshot)
    allocated = sum(allocated_by_node.get(name, 0) for name in {n.name for n in nodes})
    total_gpus = sum(n.gpus for n in nodes)
    utils = [n.utilization_percent for n in nodes if n.utilization_percent is not None]
    # A Node whose instance the provider says is terminated is no longer paid for.
    billed = sum(1 for n in nodes if n.billed) + pool.provisioning_nodes
    idle_commitment = committed_idle(pool.spec, allocated)
    blocked = [b for b in plan.blocked if b.pool == name]
    capacity_blocked = [b for b in blocked if not b.cause.startswith("budget")]
    budget_blocked = [b for b in blocked if b.cause.startswith("budget")]
    conditions = [
        ready_condition(pool.spec, len(nodes), generation),
        condition(
            "ScalingBlocked",
            bool(capacity_blocked),
            capacity_blocked[0].cause if capacity_blocked else "NotBlocked",
            "; ".join(b.reason for b in capacity_blocked) or "scale-ups are not limited",
            generation,
        ),
        condition(
            "BudgetLimited",
            bool(budget_blocked),
            "BudgetExceeded" if budget_blocked else "WithinBudget",
            "; ".join(b.reason for b in budget_blocked) or "within budget",
            generation,
        ),
        condition(
            "ProviderError",
            provider_error is not None,
            "ProviderFailed" if provider_error else "ProviderOK",
            provider_error or "the provider answers",
            generation,
        ),
        nodes_unhealthy(nodes, unregistered, generation, plan.decided_at),
    ]
    scaled = any(isinstance(a, ScaleUp | ReleaseNode) and a.pool == name for a in plan.actions)
    status = GPUPoolStatus(
        nodes=NodeCounts(
            total=len(nodes),
            ready=sum(1 for n in nodes if n.ready),
            cordoned=sum(1 for n in nodes if n.cordoned),
            provisioning=pool.provisioning_nodes,
            powered_off=max(0, pool.spec.max_nodes - billed) if powered(pool.spec) else None,
        ),
        gpus=GPUCounts(total=total_gpus, allocated=allocated, idle=max(0, total_gpus - allocated)),
        utilization=round(sum(utils) / len(utils), 1) if utils else None,
        # Billed from launch: instances on their way cost as much as joined nodes.
        cost_per_hour=round(pool_hour_dollars(pool.spec, billed, pool.spot_price_per_node_hour), 4),
        committed=None
        if idle_commitment is None or pool.spec.committed is None
        else CommittedUsage(
            nodes=pool.spec.committed.nodes,
            gpus=idle_commitment.gpus,
            idle_gpus=idle_commitment.idle_gpus,
            wasted_per_hour=round(idle_commitment.wasted_per_hour, 4),
        ),
        last_scale_time=rfc3339(plan.decided_at) if scaled else last_scale_time,
        observed_generation=generation,
    ).to_wire()
    status["conditions"] = merge_conditions(old_conditions, conditions, plan.decided_at)
    return status


def ready_condition(spec: GPUPoolSpec, nodes: int, generation: int | None) -> Condition:
    """Ready: the pool was reconciled; with more nodes than maxNodes (lowered below what the
    pool has) the reason and message say so and what follows: nothing is added, and only
    idle cloud nodes go; owned ones are never removed."""
    observed = f"{nodes} node(s) observed"
    if nodes <= spec.max_nodes:
        return condition("Ready", True, "Reconciled", observed, generation)
    if spec.tier != Tier.CORE:
        then = "idle ones are released as scaleDown allows; busy ones are left alone"
    elif spec.power is not None:
        then = "owned nodes are never deleted, only powered off when idle as power allows"
    else:
        then = "owned (core) nodes are never removed"
    return condition(
        "Ready",
        True,
        "AboveMaxNodes",
        f"{observed}, {nodes - spec.max_nodes} above maxNodes={spec.max_nodes}: no node is "
        f"added; {then}",
        generation,
    )


def gpus_allocated_by_node(snapshot: ClusterSnapshot) -> dict[str, int]:
    """GPUs the snapshot's pods bound to each node request."""
    out: dict[str, int] = {}
    for pod in snapshot.pods:
        node = pod.node
        if node is not None:
            out[node] = out.get(node, 0) + pod.gpus
    return out


def nodes_unhealthy(
    nodes: Sequence[NodeState],
    unregistered: Sequence[str],
    generation: int | None,
    now: float,
) -> Condition:
    """NodesUnhealthy: capacity paid for that does not serve work (instances that never
    registered, NotReady nodes, Ready nodes that report no GPUs past the joining grace,
    nodes cordoned for GPU errors or by a person)."""
    not_ready = sorted(n.name for n in nodes if not n.ready)
    no_gpus = sorted(
        n.name
        for n in nodes
        if n.ready and n.gpus == 0 and now - n.created_at >= JOINING_GRACE_SECONDS
    )
    gpu_errors = sorted(
        n.name for n in nodes if n.xid_errors > 0 or n.cordoned_by == CORDONED_FOR_XID
    )
    by_person = sorted(
        n.name
        for n in nodes
        if n.cordoned
        and not n.releasing
        and n.interruption_deadline is None
        and n.cordoned_by is None
    )
    found = [
        ("RegistrationTimeout", list(unregistered)),
        ("NotReady", [f"{n} is NotReady" for n in not_ready]),
        ("NoGPUs", [f"{n} reports no GPUs (its device plugin?)" for n in no_gpus]),
        ("GPUErrors", [f"{n} reports GPU XID errors" for n in gpu_errors]),
        ("CordonedByUser", [f"{n} was cordoned by someone else: left alone" for n in by_person]),
    ]
    reasons = [(reason, lines) for reason, lines in found if lines]
    if not reasons:
        return condition("NodesUnhealthy", False, "Healthy", "every node serves work", generation)
    message = "; ".join(line for _, lines in reasons for line in lines)
    return condition("NodesUnhealthy", True, reasons[0][0], message, generation)


NO_PROMETHEUS = "no Prometheus configured"
"""The metrics reason of a policy without spec.prometheus.url (its ticks never run blind)."""


def metrics_condition(available: bool, reason: str, generation: int | None) -> Condition:
    """MetricsAvailable: fresh utilization, none configured (idle then means no GPU pod on
    the node), or unavailable (nothing is released until it is back)."""
    if not available:
        return condition(
            "MetricsAvailable",
            False,
            "MetricsUnavailable",
            f"utilization data unavailable ({reason or 'stale'}): no node is released until "
            "it is back",
            generation,
        )
    if reason == NO_PROMETHEUS:
        return condition(
            "MetricsAvailable",
            True,
            "NoPrometheus",
            "no Prometheus configured (spec.prometheus.url): a node counts as idle when no "
            "GPU pod runs on it; GPU utilization is not read",
            generation,
        )
    return condition(
        "MetricsAvailable", True, "MetricsFresh", "utilization data is fresh", generation
    )


def policy_status(
    plan: Plan,
    *,
    generation: int | None,
    spent_this_month: float,
    hours_left_in_month: float,
    metrics_reason: str = "",
    dry_run: bool = False,
    old_conditions: Iterable[Mapping[str, Any]] = (),
    operator_problems: Sequence[str] = (),
    operator_reason: str = "ChecksPassed",
) -> dict[str, Any]:
    """The status of a ScalingPolicy after a tick, as a wire dict. ``operator_problems``
    (one line each) are why the operator cannot work as configured (its start-up checks)."""
    lines = plan.explain()
    if dry_run:
        lines = ["dry run: nothing was changed", *lines]
    budget_reasons = [b.reason for b in plan.blocked if b.cause.startswith("budget")]
    conditions = [
        metrics_condition(plan.metrics_available, metrics_reason, generation),
        condition(
            "BudgetExceeded",
            plan.budget_exceeded,
            "BudgetExceeded" if plan.budget_exceeded else "WithinBudget",
            "; ".join(budget_reasons)
            or ("budget exceeded" if plan.budget_exceeded else "cloud spend is within budget"),
            generation,
        ),
        condition(
            "OperatorReady",
            not operator_problems,
            operator_reason if operator_problems else "ChecksPassed",
            "; ".join(operator_problems)
            or "the Kubernetes API, the CRDs and every pool's provider were checked",
            generation,
        ),
    ]
    status = ScalingPolicyStatus(
        last_tick=rfc3339(plan.decided_at),
        decisions=plan.counts(),
        last_plan=lines[:MAX_PLAN_LINES],
        budget=BudgetStatus(
            spent_this_month=round(spent_this_month, 4),
            projected_month=round(
                projected_month_dollars(
                    spent_this_month, plan.cloud_cost_per_hour, hours_left_in_month
                ),
                2,
            ),
            hourly_cost=round(plan.cloud_cost_per_hour, 4),
        ),
        observed_generation=generation,
    ).to_wire()
    status["decisions"] = plan.counts()
    status["conditions"] = merge_conditions(old_conditions, conditions, plan.decided_at)
    return status
