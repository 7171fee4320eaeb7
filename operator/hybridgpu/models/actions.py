"""The actions of a plan. Each carries the reason a person reads in Events and `explain`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class ActionKind(StrEnum):
    HANDLE_INTERRUPTION = "handle_interruption"
    PREEMPT = "preempt"
    SCALE_UP = "scale_up"
    CONSOLIDATE = "consolidate"
    RELEASE_NODE = "release_node"
    CORDON_UNHEALTHY = "cordon_unhealthy"
    DEADLINE = "deadline"
    """A Job with a deadline moves to on-demand: waiting longer would miss it."""
    RECLAIM_IDLE = "reclaim_idle"
    REBALANCE = "rebalance"
    """A serving replica moves from a cloud node to owned GPUs by surge."""
    POWER_ON = "power_on"
    """Powered-off owned nodes are powered on (a ScaleUp of an owned pool with power)."""
    POWER_OFF = "power_off"
    """An idle owned node with no pods is powered off (a ReleaseNode of such a pool)."""
    RESERVE_NODE = "reserve_node"
    """A new on-demand node is kept for the Job the deadline rule moved there (a taint only
    that Job's pods, and critical pods, tolerate)."""
    UNRESERVE_NODE = "unreserve_node"
    """A node's reservation ends: its Job's pods are on nodes, the Job no longer waits for
    it, another pod took it, or it has lasted RESERVATION_SECONDS."""


@dataclass(frozen=True, slots=True)
class HandleInterruption:
    """Cordon and drain a node the provider will take away; its Jobs requeue."""

    pool: str
    node: str
    reason: str
    kind: ActionKind = ActionKind.HANDLE_INTERRUPTION


@dataclass(frozen=True, slots=True)
class MoveJob:
    """Suspend a Job, repin its pod template to ``to_pool`` (None: requeue in place), resume."""

    namespace: str
    job: str
    from_pool: str | None
    to_pool: str | None
    gpus: int
    reason: str
    kind: ActionKind = ActionKind.PREEMPT

    @property
    def job_key(self) -> str:
        return f"{self.namespace}/{self.job}"


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """Ask the pool's provider for ``nodes`` more nodes (kind power_on: owned machines that
    were powered off)."""

    pool: str
    nodes: int
    reason: str
    kind: ActionKind = ActionKind.SCALE_UP


@dataclass(frozen=True, slots=True)
class ReserveNode:
    """Keep ``node`` for the pods of Job ``job`` (``namespace/name``): only they, and
    critical pods, may land on it; ``job`` None ends the node's reservation."""

    pool: str
    node: str
    job: str | None
    reason: str
    kind: ActionKind = ActionKind.RESERVE_NODE


@dataclass(frozen=True, slots=True)
class ReleaseNode:
    """Cordon, drain and terminate one idle elastic or spot node (kind power_off: power off
    an owned node with no pods; it is never drained)."""

    pool: str
    node: str
    reason: str
    kind: ActionKind = ActionKind.RELEASE_NODE


@dataclass(frozen=True, slots=True)
class CordonUnhealthy:
    """Cordon a node whose GPUs report XID errors."""

    pool: str
    node: str
    reason: str
    kind: ActionKind = ActionKind.CORDON_UNHEALTHY


@dataclass(frozen=True, slots=True)
class ReclaimIdle:
    """Suspend a Job (``job`` True) or evict a bare pod whose GPUs sat idle past its
    idle-timeout; the GPUs go back to the pool."""

    namespace: str
    name: str
    """The Job's name, or the bare pod's."""
    job: bool
    pool: str
    node: str
    gpus: int
    idle_seconds: float
    """How long its GPUs have been below the utilization threshold."""
    held_dollars: float
    """What those GPUs cost while idle (their pool's price per GPU-hour times the idle
    GPU-hours), dollars."""
    reason: str
    kind: ActionKind = ActionKind.RECLAIM_IDLE

    @property
    def idle_gpu_hours(self) -> float:
        return self.gpus * self.idle_seconds / 3600.0


class RebalanceResult(StrEnum):
    """How a surge rebalance went (hybridgpu_rebalances_total's result label)."""

    STARTED = "started"
    COMPLETED = "completed"
    """The replica runs on owned GPUs; none was unavailable."""
    ROLLED_BACK = "rolled_back"
    """The surge replica was not Ready in time: scaled back, the cloud replica stays."""
    ABORTED = "aborted"
    """Someone else changed the workload mid-move (its replicas, or its pods): left to them."""


@dataclass(frozen=True, slots=True)
class RebalanceReplica:
    """Move the replicas a serving workload (a Deployment) has on one cloud node off it by
    surge: cordon the node, add as many replicas (they can only land elsewhere: on the owned
    GPUs decide found free), wait until they are Ready, then remove the cloud replicas; the
    emptied node is released. The workload never has fewer Ready replicas than it asks for."""

    namespace: str
    workload: str
    """The Deployment's name."""
    pods: tuple[str, ...]
    """Its replicas on the cloud node (their pods' names)."""
    node: str
    from_pool: str
    to_pool: str
    gpus: int
    """GPUs of those replicas together."""
    replicas: int
    """The Deployment's replicas when decided: it surges to replicas + len(pods), then back."""
    reason: str
    timeout_seconds: float = 600.0
    """A surge replica not Ready by then is given up (policy rebalance.surgeTimeout)."""
    kind: ActionKind = ActionKind.REBALANCE

    @property
    def workload_key(self) -> str:
        return f"{self.namespace}/{self.workload}"


Action = (
    HandleInterruption
    | MoveJob
    | ScaleUp
    | ReleaseNode
    | ReserveNode
    | CordonUnhealthy
    | ReclaimIdle
    | RebalanceReplica
)


@dataclass(frozen=True, slots=True)
class Blocked:
    """Capacity that was wanted but not added, and why (maxNodes, per-tick cap, budget)."""

    pool: str
    nodes: int
    reason: str
    cause: str
    """One of: max_nodes, max_per_tick, budget_hourly, budget_monthly, no_pool, no_capacity."""


class GangState(StrEnum):
    """What decide() found for a gang this tick (``Plan.gangs``)."""

    PLACED = "placed"
    """Every pod fits on free GPUs of nodes that exist now."""
    COMING = "coming"
    """Every pod has a place, some on nodes on their way or bought in this plan."""
    WAITING = "waiting"
    """Every pod waits for owned GPUs that free up within its waitBudget (core/gang_wait.py);
    no cloud node is bought for it."""
    BLOCKED = "blocked"
    """Not all of it fits, and capacity for all of it cannot be bought now: none is."""


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Where decide() put every pod of one gang, or why it could not."""

    state: GangState
    pools: tuple[str, ...] = ()
    """The pools its pods were placed in, by name."""
    cause: str = ""
    """Why it is blocked (a Blocked cause: max_nodes, max_per_tick, budget_hourly, ...)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What ``decide`` wants done, in order, and what it could not do."""

    decided_at: float
    actions: tuple[Action, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    pending_gpus: dict[str, int] = field(default_factory=dict)
    """Unmet GPU requests by criticality at decision time."""
    cloud_cost_per_hour: float = 0.0
    """Projected cloud spend rate after the plan, $/hour."""
    budget_exceeded: bool = False
    metrics_available: bool = True
    notes: tuple[str, ...] = ()
    recheck_at: float | None = None
    """When this plan goes stale by itself, seconds since the epoch: a pod waiting for owned
    GPUs reaches the end of its wait budget, or the GPUs it waits for should be free. None:
    only a change in the cluster changes it."""
    gangs: dict[str, GangPlacement] = field(default_factory=dict)
    """What became of each gang past its grace period (``GPUPod.gang`` -> placement); a
    ProvisioningRequest's answer is read from here."""
    progress_seconds_by_job: dict[str, float] = field(default_factory=dict)
    """Work each running Job with an expected duration has saved so far (``namespace/name``
    -> seconds): recorded on the Job when the operator stops it, so its next run's deadline
    arithmetic starts from there."""

    def counts(self) -> dict[str, int]:
        """Number of actions by kind."""
        out: dict[str, int] = {}
        for action in self.actions:
            out[action.kind.value] = out.get(action.kind.value, 0) + 1
        return out

    def explain(self) -> list[str]:
        """One line per action and per blocked request, as `hybridgpu explain` prints them."""
        lines = [f"{a.kind.value}: {a.reason}" for a in self.actions]
        lines += [f"blocked ({b.cause}) {b.pool}: {b.reason}" for b in self.blocked]
        lines += list(self.notes)
        return lines
