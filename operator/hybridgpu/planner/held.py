"""What is held today, read from the cluster for a CapacityPlan: the nodes of the core GPUPool
a candidate names (``candidates[].pool``), and the commitment and term start of the committed
GPUPool an offer names (``committed[].pool``). An explicit ``currentNodes`` or
``termStartedMonthsAgo`` in the spec overrides what the pool says.

Dicts in (GPUPools and Nodes as the API returns them), a spec out: no I/O here; the
CapacityPlan timer lists the objects."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hybridgpu.kube.convert import pool_of_node, pool_selector
from hybridgpu.models.capacityplan import CapacityPlanSpec, HeldCapacity
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.timestamps import parse_rfc3339
from hybridgpu.planner.model import HOURS_PER_MONTH

Obj = Mapping[str, Any]
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600.0


@dataclass(frozen=True, slots=True)
class PoolHolding:
    """One GPUPool as the plan reads it."""

    name: str
    tier: str
    nodes: int
    """Nodes of the pool in the cluster now (its selector's, as the operator counts them)."""
    gpus_per_node: int
    committed_nodes: int | None = None
    committed_term_years: int | None = None
    term_start_seconds: float | None = None
    """When the commitment's current term started: committed.termStart, else the pool's
    creation."""


def parse_time_seconds(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 date or date-time (UTC when no offset)."""
    return parse_rfc3339(text)


def pool_holdings(pools: Sequence[Obj], nodes: Sequence[Obj]) -> dict[str, PoolHolding]:
    """Every valid GPUPool by name, with its nodes counted (a pool whose spec does not
    validate is left out: the operator does not run it either)."""
    specs: dict[str, GPUPoolSpec] = {}
    created: dict[str, float | None] = {}
    for pool in pools:
        meta = pool.get("metadata") or {}
        name = str(meta.get("name"))
        try:
            specs[name] = GPUPoolSpec.model_validate(pool.get("spec") or {})
        except ValidationError:
            continue
        stamp = meta.get("creationTimestamp")
        created[name] = parse_time_seconds(str(stamp)) if stamp else None
    selectors = {name: pool_selector(name, spec) for name, spec in specs.items()}
    counts = dict.fromkeys(specs, 0)
    for node in nodes:
        owner = pool_of_node(dict(node), selectors)
        if owner is not None:
            counts[owner] += 1
    out = {}
    for name, spec in specs.items():
        committed = spec.committed
        out[name] = PoolHolding(
            name=name,
            tier=spec.tier,
            nodes=counts[name],
            gpus_per_node=spec.gpu.per_node,
            committed_nodes=None if committed is None else committed.nodes,
            committed_term_years=None if committed is None else committed.term_years,
            term_start_seconds=(
                None
                if committed is None
                else parse_time_seconds(committed.term_start)
                if committed.term_start
                else created[name]
            ),
        )
    return out


def months_into_term(start_seconds: float, now_seconds: float, term_years: int) -> int:
    """Whole months since the current term started (a term that ended renewed: counted in
    the term running now); 0 for a start in the future."""
    months = math.floor(max(now_seconds - start_seconds, 0.0) / SECONDS_PER_MONTH + 1e-9)
    return months % (12 * term_years)


def with_held_capacity(
    spec: CapacityPlanSpec, pools: Mapping[str, PoolHolding], now_seconds: float
) -> tuple[CapacityPlanSpec, list[HeldCapacity]]:
    """``spec`` with ``currentNodes`` (and an offer's ``termStartedMonthsAgo``) read from the
    GPUPools it names, where the spec does not give them; and what is held, with where each
    figure came from. A pool that is missing, of another tier or node size is a ValueError
    naming the field."""
    held: list[HeldCapacity] = []
    candidates = []
    for i, c in enumerate(spec.candidates):
        nodes, source = c.current_nodes, "spec"
        if c.pool is not None and "current_nodes" not in c.model_fields_set:
            pool = _pool(pools, c.pool, f"candidates[{i}].pool")
            if pool.tier != "core":
                raise ValueError(
                    f"candidates[{i}].pool: GPUPool {c.pool} is tier {pool.tier}, not core"
                )
            nodes, source = pool.nodes, f"GPUPool {c.pool}"
        candidates.append(c.model_copy(update={"current_nodes": nodes}))
        held.append(HeldCapacity(name=c.name, kind="owned", nodes=nodes, source=source))
    offers = []
    for i, o in enumerate(spec.committed):
        update: dict[str, Any] = {}
        source = "spec"
        if o.pool is not None:
            field = f"committed[{i}].pool"
            pool = _pool(pools, o.pool, field)
            if pool.committed_nodes is None or pool.committed_term_years is None:
                raise ValueError(f"{field}: GPUPool {o.pool} has no spec.committed")
            if pool.committed_term_years != o.term_years:
                raise ValueError(
                    f"{field}: GPUPool {o.pool} is committed for {pool.committed_term_years} "
                    f"year(s), the offer's term is {o.term_years}"
                )
            if pool.gpus_per_node != o.gpus_per_node:
                raise ValueError(
                    f"{field}: GPUPool {o.pool} has {pool.gpus_per_node} GPUs per node, the "
                    f"offer commits nodes of {o.gpus_per_node} (gpusPerNode)"
                )
            if "current_nodes" not in o.model_fields_set:
                update["current_nodes"] = pool.committed_nodes
            if "term_started_months_ago" not in o.model_fields_set:
                start = pool.term_start_seconds
                update["term_started_months_ago"] = (
                    0 if start is None else months_into_term(start, now_seconds, o.term_years)
                )
            if update:
                source = f"GPUPool {o.pool}"
        offer = o.model_copy(update=update)
        offers.append(offer)
        held.append(
            HeldCapacity(
                name=o.name,
                kind="committed",
                nodes=offer.current_nodes,
                term_started_months_ago=offer.term_started_months_ago,
                source=source,
            )
        )
    return spec.model_copy(update={"candidates": candidates, "committed": offers}), held


def _pool(pools: Mapping[str, PoolHolding], name: str, field: str) -> PoolHolding:
    found = pools.get(name)
    if found is None:
        raise ValueError(f"{field}: no valid GPUPool named {name}")
    return found


def names_pools(spec: CapacityPlanSpec) -> bool:
    """Whether the spec reads anything from GPUPools."""
    return any(c.pool for c in spec.candidates) or any(o.pool for o in spec.committed)
