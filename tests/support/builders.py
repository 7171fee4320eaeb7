"""Builders for pure test objects: short to write, explicit about what matters."""

from __future__ import annotations

from typing import Any

from hybridgpu.models import GPUPoolSpec, ScalingPolicySpec
from hybridgpu.models.actions import (
    CordonUnhealthy,
    HandleInterruption,
    MoveJob,
    Plan,
    ReleaseNode,
    ScaleUp,
)
from hybridgpu.models.snapshot import (
    BudgetState,
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    MetricsHealth,
    NodeState,
    PoolState,
)

NOW = 1_000_000.0

PRICES = {"elastic": 24.0, "spot": 8.0}


def pool(
    name: str,
    tier: str,
    *,
    per_node: int = 8,
    min_nodes: int = 0,
    max_nodes: int = 10,
    price: float | None = None,
    idle_for: str = "10m",
    provisioning: int = 0,
    **spec: Any,
) -> PoolState:
    body: dict[str, Any] = {
        "tier": tier,
        "gpu": {"model": "A100", "perNode": per_node, "powerWatts": 400},
        "minNodes": min_nodes,
        "maxNodes": max_nodes,
        "scaleDown": {"idleFor": idle_for},
    }
    if tier == "core":
        body["pricing"] = {"capexPerNode": 200000, "powerWattsPerNode": 5000}
        body["provider"] = {"type": "static"}
    else:
        body["pricing"] = {"perNodeHour": price if price is not None else PRICES[tier]}
        body["provider"] = {"type": "fake"}
    body.update(spec)
    return PoolState(
        name=name, spec=GPUPoolSpec.model_validate(body), provisioning_nodes=provisioning
    )


def node(name: str, pool_name: str, gpus: int = 8, **kw: Any) -> NodeState:
    return NodeState(name=name, pool=pool_name, gpus=gpus, created_at=NOW - 86400, **kw)


def running(
    name: str,
    node_name: str,
    gpus: int,
    crit: str = "standard",
    *,
    job: bool = True,
    started: float = NOW - 3600,
    ns: str = "team",
    pool_pin: str | None = None,
    checkpoint: float | None = None,
    expected: float | None = None,
    returns: bool = False,
    created: float | None = None,
) -> tuple[GPUPod, JobState | None]:
    c = Criticality(crit)
    pod = GPUPod(
        namespace=ns,
        name=f"{name}-pod",
        gpus=gpus,
        criticality=c,
        node=node_name,
        job=f"{ns}/{name}" if job else None,
        pool=pool_pin,
        pending_since=started - 10,
        started_at=started,
    )
    state = (
        JobState(
            ns,
            name,
            c,
            gpus,
            started_at=started,
            pool=pool_pin,
            checkpoint_seconds=checkpoint,
            expected_duration_seconds=expected,
            return_to_core=returns,
            created_at=created,
        )
        if job
        else None
    )
    return pod, state


def pending(
    name: str,
    gpus: int,
    crit: str = "standard",
    *,
    since: float = NOW - 60,
    job: bool = True,
    ns: str = "team",
    pool_pin: str | None = None,
    models: tuple[str, ...] = (),
    created: float | None = None,
) -> tuple[GPUPod, JobState | None]:
    c = Criticality(crit)
    pod = GPUPod(
        namespace=ns,
        name=f"{name}-pod",
        gpus=gpus,
        criticality=c,
        job=f"{ns}/{name}" if job else None,
        pool=pool_pin,
        pending_since=since,
        gpu_models=models,
    )
    state = (
        JobState(ns, name, c, gpus, pool=pool_pin, gpu_models=models, created_at=created)
        if job
        else None
    )
    return pod, state


def snapshot(
    pools: list[PoolState],
    nodes: list[NodeState] = (),  # type: ignore[assignment]
    workloads: list[tuple[GPUPod, JobState | None]] = (),  # type: ignore[assignment]
    *,
    metrics: MetricsHealth | None = None,
    spent: float = 0.0,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_at=NOW,
        pools=tuple(pools),
        nodes=tuple(nodes),
        pods=tuple(p for p, _ in workloads),
        jobs=tuple(j for _, j in workloads if j is not None),
        metrics=metrics or MetricsHealth(),
        budget=BudgetState(spent_this_month_dollars=spent),
    )


def policy(**spec: Any) -> ScalingPolicySpec:
    return ScalingPolicySpec.model_validate(spec)


STANDARD_POOLS = [
    pool("core", "core", max_nodes=2, min_nodes=2),
    pool("elastic", "elastic"),
    pool("spot", "spot"),
]


def gang(
    name: str,
    size: int,
    gpus: int,
    crit: str = "standard",
    *,
    created: int | None = None,
    since: float = NOW - 60,
    ns: str = "team",
    pool_pin: str | None = None,
) -> list[tuple[GPUPod, JobState | None]]:
    """A workload of ``size`` pods that must run at once (a JobSet), ``created`` of them
    (default all) pending: the workload's state, then its pods."""
    c = Criticality(crit)
    key = f"{ns}/{name}"
    state = JobState(ns, name, c, gpus, parallelism=size, pool=pool_pin, gang=True)
    pods = [
        GPUPod(
            namespace=ns,
            name=f"{name}-{i}",
            gpus=gpus,
            criticality=c,
            job=key,
            pool=pool_pin,
            pending_since=since,
            gang=key,
            gang_size=size,
        )
        for i in range(size if created is None else created)
    ]
    return [(pods[0], state), *((p, None) for p in pods[1:])]


def core_and_spot_pool_specs(
    core_selector: dict[str, str] | None = None, spot_selector: dict[str, str] | None = None
) -> dict[str, GPUPoolSpec]:
    """Two GPUPool specs of 8-A100 nodes a workload moves between: ``core`` (owned, static)
    and ``spot`` (tainted ``hybridgpu.io/spot=true:NoSchedule``), each selecting its nodes by
    the given nodeSelector (by default the ``hybridgpu.io/pool`` label)."""
    core: dict[str, Any] = {
        "tier": "core",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 2,
        "provider": {"type": "static"},
        "pricing": {"capexPerNode": 200000},
    }
    spot: dict[str, Any] = {
        "tier": "spot",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 8,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 8},
        "taints": [{"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}],
    }
    if core_selector:
        core["nodeSelector"] = core_selector
    if spot_selector:
        spot["nodeSelector"] = spot_selector
    return {"core": GPUPoolSpec.model_validate(core), "spot": GPUPoolSpec.model_validate(spot)}


def plan_summary(plan: Plan, *, node_actions: bool = False) -> list[tuple[object, ...]]:
    """A plan's scale-ups and Job moves as tuples, in order (``("scale_up", pool, nodes)``,
    ``(kind, job, to_pool)``); with ``node_actions`` also its releases, interruption handling
    and cordons (``(kind, node)``)."""
    out: list[tuple[object, ...]] = []
    for a in plan.actions:
        if isinstance(a, ScaleUp):
            out.append(("scale_up", a.pool, a.nodes))
        elif isinstance(a, MoveJob):
            out.append((a.kind.value, a.job_key, a.to_pool))
        elif node_actions and isinstance(a, ReleaseNode | HandleInterruption | CordonUnhealthy):
            out.append((a.kind.value, a.node))
    return out
