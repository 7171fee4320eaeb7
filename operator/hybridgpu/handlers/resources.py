"""Thin GPUPool and ScalingPolicy handlers: validate the spec, write observedGeneration and
a Ready condition, and wake the reconcile loop. All decisions live in ``core``."""

from __future__ import annotations

import time
from typing import Any

import kopf
from pydantic import BaseModel, ValidationError

from hybridgpu.handlers.loop import Reconciler, nodes_of_deleted_pools
from hybridgpu.kube.convert import is_bare
from hybridgpu.kube.errors import Conflict, KubeError
from hybridgpu.kube.moves import read_move
from hybridgpu.kube.names import GPUPOOLS, GROUP, SCALINGPOLICIES, VERSION
from hybridgpu.kube.status import condition, merge_conditions
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import GPUPoolSpec, Tier

POLICY_NOT_FOUND = "PolicyNotFound"
POLICY_GRACE_SECONDS = 3.0
"""How long a pool's handler looks for a ScalingPolicy that does not exist yet before it
says PolicyNotFound (the policy applied just after the pool, from the same file)."""
POLICY_POLL_SECONDS = 0.25


def validation_message(err: ValidationError) -> str:
    """One line per problem: ``field: message``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in err.errors()
    )


def _accept(
    model: type[BaseModel],
    plural: str,
    name: str,
    spec: Any,
    meta: Any,
    status: Any,
    memo: kopf.Memo,
) -> BaseModel:
    reconciler: Reconciler = memo["reconciler"]
    generation = meta.get("generation")
    old = list((status or {}).get("conditions") or [])
    try:
        valid = model.model_validate(dict(spec))
    except ValidationError as err:
        message = validation_message(err)
        ready = condition("Ready", False, "InvalidSpec", message, generation)
        _write(reconciler, plural, name, generation, old, ready)
        raise kopf.PermanentError(f"invalid spec: {message}") from err
    if isinstance(valid, GPUPoolSpec) and _no_policy(
        reconciler, name, valid.policy, generation, wait_seconds=POLICY_GRACE_SECONDS
    ):
        return valid
    kept = [c for c in old if c.get("type") != "Ready"]
    ready = condition("Ready", True, "Accepted", "spec is valid", generation)
    _write(reconciler, plural, name, generation, kept, ready)
    reconciler.trigger_all()
    return valid


def _no_policy(
    reconciler: Reconciler,
    pool: str,
    policy: str,
    generation: int | None,
    *,
    wait_seconds: float = 0.0,
) -> bool:
    """Whether the ScalingPolicy that pool ``pool`` names is missing (or being deleted):
    then nothing ticks the pool, so its status (Ready=False, PolicyNotFound) and a Warning
    Event say so, until that policy's first tick writes the pool's status. A policy that
    does not exist yet is looked for again for ``wait_seconds``: `kubectl apply -f` of a file
    with the pools before their policy (every example) creates it a moment later."""
    deadline = time.monotonic() + wait_seconds
    while True:
        found = _live_policy(reconciler, policy)
        if not _policy_gone(found):
            return False
        if found is not None or time.monotonic() >= deadline:
            break  # being deleted (it will not come back), or not created in time
        time.sleep(POLICY_POLL_SECONDS)
    message = (
        f"spec.policy names ScalingPolicy {policy!r}, which does not exist: nothing scales, "
        f"releases or reports this pool until it does (create it, or set spec.policy to one "
        f"of `kubectl get scalingpolicies`)"
    )
    ready = condition("Ready", False, POLICY_NOT_FOUND, message, generation)
    _write(reconciler, GPUPOOLS, pool, generation, [], ready)
    _warn(reconciler, pool, POLICY_NOT_FOUND, message)
    return True


def _live_policy(reconciler: Reconciler, policy: str) -> dict[str, Any] | None:
    """The ScalingPolicy ``policy`` as the apiserver has it, or None when there is none."""
    try:
        return reconciler.cluster.get_custom(SCALINGPOLICIES, policy)
    except KubeError as err:
        raise kopf.TemporaryError(str(err), delay=5) from err


def _bare_pods_on(nodes: set[str], pods: list[dict[str, Any]]) -> list[str]:
    """``namespace/name on node`` of every unfinished bare pod (owned by nothing) on
    ``nodes`` that is not being deleted: a release never evicts one (nothing would recreate
    it), so each keeps its node, and the pool's deletion waits for it."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if (
            node in nodes
            and is_bare(pod)
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ):
            out.append(f"{meta.get('namespace')}/{meta.get('name')} on {node}")
    return sorted(out)


def _policy_gone(found: dict[str, Any] | None) -> bool:
    """Whether a ScalingPolicy as ``_live_policy`` read it ticks nothing: missing, or being
    deleted."""
    return found is None or bool((found.get("metadata") or {}).get("deletionTimestamp"))


def _warn(reconciler: Reconciler, pool: str, reason: str, message: str) -> None:
    """A Warning Event on the pool (`kubectl describe gpupool` lists it), posted as the ticks
    post theirs (``PlanExecutor.warn_pools``: the same message at most once a minute; a
    failure to post it is logged, never raised)."""
    reconciler.executor.warn_pools(reason, {pool: message})


def _write(
    reconciler: Reconciler,
    plural: str,
    name: str,
    generation: int | None,
    old: list[dict[str, Any]],
    ready: Any,
) -> None:
    """Write Ready onto the conditions as they are now, at the version read (a tick may
    write the same list meanwhile: kopf's copy of the object, or a read a moment before
    the write, would drop that tick's conditions)."""
    for _ in range(5):
        try:
            live = reconciler.cluster.get_custom(plural, name)
            version = None
            if live is not None:
                old = list((live.get("status") or {}).get("conditions") or [])
                version = (live.get("metadata") or {}).get("resourceVersion")
            merged = merge_conditions(old, [ready], time.time())
            others = [c for c in old if c.get("type") != "Ready"]
            reconciler.cluster.patch_status(
                plural,
                name,
                {"observedGeneration": generation, "conditions": [*others, *merged]},
                resource_version=version,
            )
            return
        except Conflict:
            continue  # written meanwhile: read it again
        except KubeError as err:
            raise kopf.TemporaryError(str(err), delay=5) from err
    raise kopf.TemporaryError(f"{plural}/{name} kept changing; Ready not written", delay=1)


@kopf.on.resume(GROUP, VERSION, GPUPOOLS)
@kopf.on.create(GROUP, VERSION, GPUPOOLS)
@kopf.on.update(GROUP, VERSION, GPUPOOLS, field="spec")
def gpupool_changed(
    name: str, spec: Any, meta: Any, status: Any, memo: kopf.Memo, **_: Any
) -> None:
    _accept(GPUPoolSpec, GPUPOOLS, name, spec, meta, status, memo)


@kopf.on.delete(GROUP, VERSION, GPUPOOLS)
def gpupool_deleted(name: str, spec: Any, meta: Any, memo: kopf.Memo, **_: Any) -> None:
    """Hold the pool (finalizer) until no Job is still moving into it (the loop rolls such
    moves back once the pool is being deleted) and, for an elastic or spot pool, until its
    policy's ticks have drained and released its nodes: none is left running (and billed)
    with nothing managing it. An owned (core) pool goes at once; its nodes are never
    touched."""
    reconciler: Reconciler = memo["reconciler"]
    try:
        objects = reconciler.reads.read_objects()
        jobs = [*objects.jobs, *objects.workloads]
    except KubeError as err:
        raise kopf.TemporaryError(str(err), delay=5) from err
    incoming = [
        f"{j['metadata']['namespace']}/{j['metadata']['name']}"
        for j in jobs
        if (move := read_move((j.get("metadata") or {}).get("annotations"))) is not None
        and move.to_pool == name
    ]
    if incoming:
        reconciler.trigger_all()
        raise kopf.TemporaryError(f"Jobs still moving into {name}: {incoming}", delay=2)
    try:
        pool = GPUPoolSpec.model_validate(dict(spec))
    except ValidationError:
        return  # never reconciled: it has no nodes of the operator's
    if pool.tier == Tier.CORE:
        return
    try:
        live = reconciler.reads.list_pools()
    except KubeError as err:
        raise kopf.TemporaryError(str(err), delay=5) from err
    left = sorted(n for _, n in nodes_of_deleted_pools({name: pool}, live, objects.nodes))
    if not left:
        return
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    policy = _live_policy(reconciler, pool.policy)
    if policy is not None and bool((policy.get("spec") or {}).get("dryRun")):
        # dryRun never acts on nodes: the pool goes, and says what it leaves running.
        _warn(
            reconciler,
            name,
            "NodesLeftRunning",
            f"deleted with {len(left)} node(s) left running ({shown}): ScalingPolicy "
            f"{pool.policy!r} is in dryRun, which never releases nodes; delete them yourself "
            "or turn dryRun off before deleting the pool",
        )
        return
    if _policy_gone(policy):
        # No tick of the policy will drain the pool (deleted with it, or before it): this
        # handler does, as a tick would, every retry until the nodes are gone.
        errors = reconciler.drain_without_policy(name, pool)
        drained_by = f"ScalingPolicy {pool.policy!r} is gone, so this pool's deletion does it"
        if errors:
            drained_by += f" (last error: {errors[-1]})"
    else:
        drained_by = f"ScalingPolicy {pool.policy!r} does it"
    kept = _bare_pods_on(set(left), objects.pods)
    holding = (
        f"; bare pod(s) are never evicted and keep their node until you delete them: "
        f"{', '.join(kept[:5])}{f' and {len(kept) - 5} more' if len(kept) > 5 else ''}"
        if kept
        else ""
    )
    message = (
        f"deleting: {len(left)} node(s) of this {pool.tier} pool are drained and released "
        f"first ({shown}); {drained_by}{holding}"
    )
    ready = condition("Ready", False, "Draining", message, meta.get("generation"))
    _write(reconciler, GPUPOOLS, name, meta.get("generation"), [], ready)
    reconciler.trigger_all()
    raise kopf.TemporaryError(message, delay=10)


@kopf.on.resume(GROUP, VERSION, SCALINGPOLICIES)
@kopf.on.create(GROUP, VERSION, SCALINGPOLICIES)
@kopf.on.update(GROUP, VERSION, SCALINGPOLICIES, field="spec")
def scalingpolicy_changed(
    name: str, spec: Any, meta: Any, status: Any, memo: kopf.Memo, **_: Any
) -> None:
    _accept(ScalingPolicySpec, SCALINGPOLICIES, name, spec, meta, status, memo)


@kopf.on.delete(GROUP, VERSION, SCALINGPOLICIES, optional=True)
def scalingpolicy_deleted(name: str, memo: kopf.Memo, **_: Any) -> None:
    """The pools that name a deleted policy are no longer ticked: their status says so
    (PolicyNotFound) instead of showing the last tick's counts as current."""
    reconciler: Reconciler = memo["reconciler"]
    try:
        pools = reconciler.reads.list_pools()
    except KubeError as err:
        raise kopf.TemporaryError(str(err), delay=5) from err
    for raw in pools:
        meta = raw.get("metadata") or {}
        if (
            meta.get("deletionTimestamp")
            or (raw.get("spec") or {}).get("policy", "default") != name
        ):
            continue
        _no_policy(reconciler, meta["name"], name, meta.get("generation"))
