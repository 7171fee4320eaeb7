"""Serving replicas in the simulator: the operator's view of them, and the surge rebalance.

A trace job with a ``service`` is one replica of that serving workload (a Deployment): the
operator sees its pod with ``serving`` set and no Job. A rebalance (RebalanceReplica) is
played as the executor (kube/serving.py) does it: the cloud node is cordoned, the surge
replica takes its owned GPUs at once and becomes Ready ``surge_ready_seconds`` later (it loads
its model meanwhile); only then does the cloud replica go, so the workload never serves from
fewer replicas. The instance's lifetime is unchanged (no restart, no lost work); an emptied
cloud node is released at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hybridgpu.core.cost import is_cloud
from hybridgpu.models.actions import RebalanceReplica
from hybridgpu.models.snapshot import GPUPod, RebalanceIntent, ServingState

if TYPE_CHECKING:
    from hybridgpu.sim.engine import Simulation, _Job, _Node

NAMESPACE = "sim"


@dataclass
class Surge:
    job: int
    core_node: str
    cloud_node: str
    since: float


@dataclass
class ServingBook:
    """The surges in flight and what rebalance did in one run."""

    surges: dict[int, Surge] = field(default_factory=dict)
    started: int = 0
    completed: int = 0
    given_up: int = 0
    """Surges whose replica ended (its instance was deleted) before the surge was Ready."""
    views: dict[str, tuple[tuple[int, int, RebalanceIntent | None], ServingState]] = field(
        default_factory=dict
    )
    """Per workload, the operator's last view of it and the (replicas, ready, rebalance) it
    was built from (``serving_states``)."""


def workload_of(job: _Job) -> str | None:
    service = job.trace.service
    return None if service is None else f"{NAMESPACE}/{service}"


def serving_states(sim: Simulation) -> tuple[ServingState, ...]:
    """The serving workloads of the running and pending replicas (the simulation's per
    workload counts of them, kept as jobs change)."""
    intents: dict[str, RebalanceIntent] = {}
    for surge in sim.serving.surges.values():
        job = sim.jobs[surge.job]
        if job.trace.service is not None:
            intent = intents.get(job.trace.service)
            pods = (*intent.pods, job.trace.name) if intent is not None else (job.trace.name,)
            intents[job.trace.service] = RebalanceIntent(
                node=surge.cloud_node, pods=pods, step="surge", since=surge.since
            )
    views = sim.serving.views
    states = []
    for service, (count, running) in sorted(sim._replicas.items()):
        built_from = (count, running, intents.get(service))
        seen = views.get(service)
        if seen is None or seen[0] != built_from:
            # Most workloads are as they were at the last snapshot: their view is reused.
            state = ServingState(
                NAMESPACE, service, replicas=count, ready=running, rebalance=built_from[2]
            )
            seen = views[service] = (built_from, state)
        states.append(seen[1])
    return tuple(states)


def surge_pods(sim: Simulation) -> list[GPUPod]:
    """The surge replicas, not Ready yet, on the owned GPUs they hold."""
    out = []
    for surge in sim.serving.surges.values():
        job = sim.jobs[surge.job]
        out.append(
            GPUPod(
                namespace=NAMESPACE,
                name=f"{job.trace.name}-surge",
                gpus=job.trace.gpus,
                criticality=job.trace.criticality,
                node=surge.core_node,
                pending_since=surge.since,
                serving=workload_of(job),
            )
        )
    return out


def start(sim: Simulation, action: RebalanceReplica) -> None:
    """Cordon the cloud node and give each surge replica owned GPUs of ``action.to_pool``."""
    for pod in action.pods:
        job = sim.by_trace_name.get(pod)
        if job is not None:
            _start_one(sim, action, job)


def _start_one(sim: Simulation, action: RebalanceReplica, job: _Job) -> None:
    if job.node != action.node or job.index in sim.serving.surges:
        return
    cloud = sim.nodes.get(action.node)
    gpus = job.trace.gpus
    placeable = sim._placeable.get(action.to_pool)
    best = placeable.best_fit(gpus) if placeable is not None else None
    if cloud is None or best is None:
        return
    core = sim.nodes[best]  # the scheduler's best fit
    core.free -= gpus
    sim._node_changed(core)
    cloud.cordoned = True
    sim._node_changed(cloud)
    sim.serving.surges[job.index] = Surge(job.index, core.name, cloud.name, sim.now)
    sim.serving.started += 1
    sim._push(sim.now + sim.settings.surge_ready_seconds, "surge", job.index)


def ready(sim: Simulation, index: int) -> None:
    """The surge replica is Ready: the cloud replica goes, an emptied cloud node with it."""
    surge = sim.serving.surges.pop(index, None)
    if surge is None:
        return
    job = sim.jobs[index]
    core = sim.nodes[surge.core_node]
    cloud = sim.nodes.get(surge.cloud_node)
    gpus = job.trace.gpus
    if job.done or job.node != surge.cloud_node or cloud is None:
        core.free += gpus  # the replica ended first: the surge is scaled back
        sim._node_changed(core)
        sim.serving.given_up += 1
    else:
        _move_running(sim, job, cloud, core)
        sim.serving.completed += 1
    if cloud is None or any(s.cloud_node == cloud.name for s in sim.serving.surges.values()):
        return
    if cloud.jobs:
        cloud.cordoned = False
        sim._node_changed(cloud)
    else:
        sim.releases += 1
        sim._remove(cloud)


def _move_running(sim: Simulation, job: _Job, cloud: _Node, core: _Node) -> None:
    """Hand the running replica from ``cloud`` to ``core`` (whose GPUs it already holds)
    without stopping it: its finish stays where it was, the time so far counts on the cloud."""
    assert job.run_started is not None
    gpus = job.trace.gpus
    used = gpus * sim._utilization(job)
    ran = sim.now - job.run_started
    sim.work_by_tier[cloud.tier] += ran * gpus / 3600
    cloud.free += gpus
    cloud.jobs.discard(job.index)
    cloud.used_gpu_percent = cloud.used_gpu_percent - used if cloud.jobs else 0.0
    sim._refresh_idle(cloud)
    core.jobs.add(job.index)
    core.used_gpu_percent += used
    sim._refresh_idle(core)
    job.progress += max(ran - job.run_overhead, 0.0)
    job.run_overhead = max(job.run_overhead - ran, 0.0)
    job.run_started = sim.now
    job.node = core.name
    sim._serving_on_cloud += sim._rebalance_source(core) - sim._rebalance_source(cloud)
    sim._node_changed(cloud)
    sim._node_changed(core)
    sim._job_changed(job.index)


def owned_gpus_free(sim: Simulation) -> bool:
    """Whether any owned or committed node has a free GPU a rebalance could use (the
    per-pool tallies; an empty committed node counts as empty, not as free GPUs)."""
    return any(
        tally.busy_free_gpus > 0 or (tally.empty > 0 and name in sim._committed_pools)
        for name, tally in sim._tally.items()
        if not is_cloud(sim.pools[name].spec.tier) or name in sim._committed_pools
    )
