"""Reading a cluster file: the same GPUPool and ScalingPolicy manifests a user applies with
kubectl, so the simulator and the operator read one configuration."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hybridgpu.core.placement import placement_tiers
from hybridgpu.errors import UserError
from hybridgpu.inputs import describe_validation_error, read_yaml_documents
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.pool import Tier, product_label, serves_models
from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import PoolState
from hybridgpu.sim.traces import TraceJob

_KINDS: dict[str, type[GPUPool] | type[ScalingPolicy]] = {
    "GPUPool": GPUPool,
    "ScalingPolicy": ScalingPolicy,
}


@dataclass(frozen=True)
class ClusterConfig:
    """Pools and the policy that drives them."""

    pools: tuple[PoolState, ...]
    policy: ScalingPolicy
    boot_seconds: Mapping[str, float] = field(default_factory=dict)
    """Launch to Ready of the pools that say (annotation BOOT_TIME_ANNOTATION), by pool
    name; the others boot in the simulation's default (``simulate --provisioning-delay``)."""


BOOT_TIME_ANNOTATION = "sim.hybridgpu.io/boot-time"
"""On a GPUPool of a cluster file: how long the pool's nodes take from launch to Ready in
the simulator (image pull included), e.g. ``8m`` for an 8-GPU node with a large image. The
operator ignores it: on a real cluster the provider's nodes take the time they take."""


def _boot_seconds(pool: GPUPool, source: str) -> float | None:
    """The pool's BOOT_TIME_ANNOTATION in seconds; None when absent."""
    text = (pool.metadata.annotations or {}).get(BOOT_TIME_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_duration_seconds(text)
    except ValueError:
        raise UserError(
            f"{source}: GPUPool {pool.metadata.name!r}: annotation {BOOT_TIME_ANNOTATION} is "
            f"{text!r}; expected a duration from launch to Ready, e.g. 300s, 8m or 1h"
        ) from None


def parse_manifest(doc: Any, source: str) -> GPUPool | ScalingPolicy:
    """One manifest as a model; raises UserError naming ``source`` and the field."""
    if not isinstance(doc, dict):
        raise UserError(
            f"{source}: expected a Kubernetes object (a mapping), got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    model = _KINDS.get(str(kind))
    if model is None:
        raise UserError(f"{source}: kind {kind!r} is not GPUPool or ScalingPolicy")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise UserError(
            f"{source}: {kind} field 'metadata' is {metadata!r}; expected a mapping with a name, "
            "e.g. metadata: {name: core}"
        )
    name = metadata.get("name", "?")
    try:
        return model.model_validate(doc)
    except ValidationError as err:
        raise UserError(f"{source}: {kind} {name!r}: {describe_validation_error(err)}") from None


def load_cluster(path: str | Path) -> ClusterConfig:
    """Pools and the ScalingPolicy (default if absent) of a multi-document YAML file."""
    path = Path(path)
    docs = read_yaml_documents(path, "cluster file")
    pools: list[PoolState] = []
    policies: list[ScalingPolicy] = []
    boot: dict[str, float] = {}
    for i, doc in enumerate(docs, start=1):
        source = f"{path} (document {i})"
        obj = parse_manifest(doc, source)
        if isinstance(obj, GPUPool):
            pools.append(PoolState(name=obj.metadata.name, spec=obj.spec))
            seconds = _boot_seconds(obj, source)
            if seconds is not None:
                boot[obj.metadata.name] = seconds
        else:
            policies.append(obj)
    if not pools:
        raise UserError(f"{path}: no GPUPool found; expected at least one GPUPool manifest")
    for kind, names in (
        ("GPUPool", [p.name for p in pools]),
        ("ScalingPolicy", [p.metadata.name for p in policies]),
    ):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            # kubectl apply would keep the last one; which one the simulator used is a guess.
            raise UserError(f"{path}: {kind} name(s) used twice: {', '.join(dupes)}")
    policy = next((p for p in policies if p.metadata.name == "default"), None)
    if policy is None:
        policy = (
            policies[0]
            if policies
            else ScalingPolicy.model_validate(
                {
                    "apiVersion": "hybridgpu.io/v1alpha1",
                    "kind": "ScalingPolicy",
                    "metadata": {"name": "default"},
                }
            )
        )
    return ClusterConfig(pools=tuple(pools), policy=policy, boot_seconds=boot)


@dataclass(frozen=True)
class Infeasible:
    """A job no pool it may use can ever run: more GPUs than the largest node."""

    job: TraceJob
    reason: str


TIER_ORDER = (Tier.CORE.value, Tier.ELASTIC.value, Tier.SPOT.value)


def share_fractional(jobs: Sequence[TraceJob], pools: Sequence[PoolState]) -> list[TraceJob]:
    """Jobs that need a fraction of one GPU (``gpu_milli``) as shares of the pools that share
    their GPUs (``gpu.sharing``): ceil(milli x replicas / 1000) units, restricted to those
    pools' ``<model>-SHARED`` products, as a pod selects them in Kubernetes. The replicas are
    those of the first such pool in tier order (owned first) whose model the job may use;
    pools sharing with other replicas would give other units, so they are left out. A job no
    shared pool can take keeps its whole GPU. Idempotent: a resolved job has no gpu_milli."""
    shared = [p for p in pools if p.spec.gpu.sharing is not None and p.spec.max_nodes > 0]
    if not shared:
        return list(jobs)
    shared.sort(key=lambda p: (TIER_ORDER.index(p.spec.tier), p.name))
    out: list[TraceJob] = []
    for job in jobs:
        milli = job.gpu_milli
        usable = [p for p in shared if not job.gpu_models or p.spec.gpu.model in job.gpu_models]
        if milli is None or job.gpus != 1 or not usable:
            out.append(job)
            continue
        sharing = usable[0].spec.gpu.sharing
        assert sharing is not None
        products = sorted(
            {
                product_label(p.spec.gpu)
                for p in usable
                if p.spec.gpu.sharing is not None
                and p.spec.gpu.sharing.replicas == sharing.replicas
            }
        )
        units = max(1, math.ceil(milli * sharing.replicas / 1000))
        out.append(replace(job, gpus=units, gpu_models=tuple(products), gpu_milli=None))
    return out


def infeasible_jobs(jobs: Sequence[TraceJob], pools: Sequence[PoolState]) -> list[Infeasible]:
    """Jobs that could never start: each needs a GPU model no pool has, or more GPUs than any
    node of the pools it may use (core and elastic; spot too for preemptible jobs), or than
    any elastic node (the on_demand baseline runs on elastic pools only)."""
    have = sorted({product_label(p.spec.gpu) for p in pools})

    def largest(tiers: set[str], models: tuple[str, ...]) -> PoolState | None:
        usable = [
            p
            for p in pools
            if p.spec.tier in tiers and p.spec.max_nodes > 0 and serves_models(p.spec.gpu, models)
        ]
        return max(usable, key=lambda p: (p.spec.gpu.per_node, p.name), default=None)

    found: list[Infeasible] = []
    for job in jobs:
        models = job.gpu_models
        if models and not set(models) & set(have):
            found.append(
                Infeasible(
                    job,
                    f"may run only on GPU model(s) {', '.join(models)} (its gpu_spec in an "
                    f"openb trace, gpu_models in a CSV); the pools have {', '.join(have)}",
                )
            )
            continue
        # Whatever the policy allows preemptible work, spot and owned nodes are its own.
        tiers = set(placement_tiers(job.criticality, on_demand_for_preemptible=True))
        best = largest(tiers, models)
        elastic = largest({Tier.ELASTIC.value}, models)
        if best is None or job.gpus > best.spec.gpu.per_node:
            shown = (
                f"the largest node it may use has {best.spec.gpu.per_node} "
                f"(pool {best.name}, {best.spec.gpu.model})"
                if best is not None
                else "no pool with maxNodes > 0 may run it"
            )
            found.append(Infeasible(job, f"needs {job.gpus} GPUs on one node; {shown}"))
        elif elastic is None or job.gpus > elastic.spec.gpu.per_node:
            shown = (
                f"the largest elastic node it may use has {elastic.spec.gpu.per_node} "
                f"(pool {elastic.name})"
                if elastic is not None
                else "no elastic pool has its GPU model"
            )
            found.append(
                Infeasible(
                    job,
                    f"needs {job.gpus} GPUs on one node; {shown}, so the on_demand baseline "
                    "could never run it",
                )
            )
    return found


def feasible_jobs(
    jobs: Sequence[TraceJob], pools: Sequence[PoolState], source: str, *, skip: bool
) -> tuple[list[TraceJob], list[Infeasible]]:
    """``jobs`` without the ones no pool can run, and those; UserError naming the first of
    them unless ``skip``."""
    jobs = share_fractional(jobs, pools)
    bad = infeasible_jobs(jobs, pools)
    if bad and not skip:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UserError(
            f"{source}: job {bad[0].job.name!r} {bad[0].reason}{more}; fix the trace or the "
            "pools, or pass --skip-infeasible to leave such jobs out"
        )
    dropped = {id(b.job) for b in bad}
    return [j for j in jobs if id(j) not in dropped], bad
