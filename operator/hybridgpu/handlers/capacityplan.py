"""The CapacityPlan timer: every ``spec.schedule`` (or when the spec changes) read the demand
history, run the planner and write the plan to status. Thin: parsing and the model live in
``planner.io`` and ``planner.plan``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from hybridgpu.errors import UserError
from hybridgpu.inputs import describe_validation_error
from hybridgpu.kube.errors import KubeError
from hybridgpu.models.base import Condition, parse_duration_seconds
from hybridgpu.models.capacityplan import CapacityPlanSpec, HeldCapacity
from hybridgpu.models.crd import GROUP, VERSION
from hybridgpu.models.timestamps import format_rfc3339, parse_rfc3339
from hybridgpu.planner.held import PoolHolding, names_pools, pool_holdings, with_held_capacity
from hybridgpu.planner.plan import plan_from_spec, plan_status

CAPACITYPLANS = "capacityplans"
# How often the timer looks whether a plan is due; the plan's own period is spec.schedule.
CHECK_INTERVAL_SECONDS = 60.0


def _rfc3339(at: float) -> str:
    return format_rfc3339(at)


def _seconds(text: Any) -> float | None:
    try:
        return parse_rfc3339(str(text))
    except ValueError:
        return None


def plan_is_due(
    status: Mapping[str, Any], schedule: str, generation: int | None, now: float
) -> bool:
    """A new spec, no plan yet, or the last one older than ``schedule``."""
    if status.get("observedGeneration") != generation:
        return True
    last = _seconds(status.get("lastComputed")) if status.get("lastComputed") else None
    return last is None or now - last >= parse_duration_seconds(schedule)


def _conditions(
    old: list[Mapping[str, Any]], new: list[Condition], now: float
) -> list[dict[str, Any]]:
    """``new`` as wire dicts, keeping lastTransitionTime when a condition's status held."""
    before = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prior = before.get(cond.type)
        held = prior is not None and prior.get("status") == cond.status
        stamp = prior.get("lastTransitionTime") if held and prior else _rfc3339(now)
        out.append(cond.model_copy(update={"last_transition_time": stamp}).to_wire())
    return out


def _procurement_note(procurement: Mapping[str, Any] | None) -> str:
    """The commitment to sign and the next adjustment window, when there is an offer."""
    if not procurement or not procurement.get("committedOffer"):
        return ""
    signed = procurement.get("commitments") or [
        {"offer": procurement["committedOffer"], "nodes": procurement.get("committedNodes", 0)}
    ]
    what = " and ".join(f"{c.get('nodes', 0)} node(s) of {c['offer']}" for c in signed)
    return f"; commit {what}: {procurement.get('nextAdjustment', '')}"


def _read_history(spec: CapacityPlanSpec, now: float) -> tuple[list[Any], list[Any]]:
    from hybridgpu.planner.io import history_from_spec_trace, prometheus_history
    from hybridgpu.planner.plan import share_replicas

    if spec.history.trace is not None:
        return history_from_spec_trace(spec.history.trace, share_replicas=share_replicas(spec))
    prom = spec.history.prometheus
    assert prom is not None  # the spec's rule: exactly one source
    samples = prometheus_history(prom.url, prom.query, prom.window, prom.step, end_seconds=now)
    return samples, []


def compute_status(
    spec_body: Mapping[str, Any],
    status: Mapping[str, Any],
    generation: int | None,
    now: float,
    read_pools: Callable[[], Mapping[str, PoolHolding]] | None = None,
) -> dict[str, Any]:
    """The status to write: the plan and Ready/HistoryAvailable conditions (wire dict).
    ``read_pools`` gives the GPUPools (with their nodes counted) when the spec names some."""
    old = list(status.get("conditions") or [])

    def failed(kind: str, reason: str, message: str) -> dict[str, Any]:
        conds = [
            Condition(
                type="Ready",
                status="False",
                reason=reason,
                message=message,
                observed_generation=generation,
            ),
            Condition(
                type="HistoryAvailable",
                status="True" if kind == "plan" else "False",
                reason=reason,
                message=message,
                observed_generation=generation,
            ),
        ]
        return {"observedGeneration": generation, "conditions": _conditions(old, conds, now)}

    try:
        spec = CapacityPlanSpec.model_validate(dict(spec_body))
    except ValidationError as err:
        return failed("spec", "InvalidSpec", describe_validation_error(err, "spec."))
    held: list[HeldCapacity] = []
    if names_pools(spec):
        try:
            if read_pools is None:
                raise KubeError("the GPUPools are not readable here", retryable=True)
            spec, held = with_held_capacity(spec, read_pools(), now)
        except KubeError as err:
            return failed("plan", "PoolsUnavailable", f"cannot read the GPUPools: {err}")
        except ValueError as err:
            return failed("plan", "InvalidSpec", str(err))
    try:
        history, jobs = _read_history(spec, now)
    except UserError as err:
        return failed("history", "HistoryUnavailable", str(err))
    try:
        result = plan_from_spec(spec, history, jobs)
    except ValueError as err:
        return failed("plan", "CannotPlan", str(err))
    if not held:
        _, held = with_held_capacity(spec, {}, now)
    body = plan_status(result).model_copy(update={"held": held}).to_wire()
    hours = sum(s.hours for s in history)
    conds = [
        Condition(
            type="Ready",
            status="True",
            reason="Planned",
            message=f"own {body['recommendedNodes']} node(s); saves "
            f"{body['savingsVsOnDemandPercent']:.1f}% vs all on-demand"
            + _procurement_note(body.get("procurement")),
            observed_generation=generation,
        ),
        Condition(
            type="HistoryAvailable",
            status="True",
            reason="HistoryRead",
            message=f"{hours:,.1f} hours of demand",
            observed_generation=generation,
        ),
    ]
    body["lastComputed"] = _rfc3339(now)
    body["observedGeneration"] = generation
    body["conditions"] = _conditions(old, conds, now)
    return body


@kopf.timer(GROUP, VERSION, CAPACITYPLANS, interval=CHECK_INTERVAL_SECONDS, initial_delay=5.0)
def capacityplan_timer(
    spec: Any,
    meta: Any,
    status: Any,
    patch: kopf.Patch,
    memo: kopf.Memo | None = None,
    **_: Any,
) -> None:
    """Recompute the plan when it is due and write it to status."""
    now = time.time()
    generation = meta.get("generation")
    current = dict(status or {})
    schedule = (spec or {}).get("schedule") or "24h"
    try:
        due = plan_is_due(current, schedule, generation, now)
    except ValueError:
        due = True  # an invalid schedule: compute_status reports the invalid spec
    if not due:
        return
    cache = None if memo is None else memo.get("watch_cache")

    def read_pools() -> Mapping[str, PoolHolding]:
        if cache is None:
            raise KubeError("no watch cache (the operator has not started)", retryable=True)
        return pool_holdings(cache.list_pools(), cache.list_nodes())

    patch.status.update(compute_status(spec or {}, current, generation, now, read_pools))
