"""An immutable picture of the cluster at one instant: the only input of ``core.decide``.

These are frozen slotted dataclasses rather than pydantic models: a snapshot of a large
cluster holds 100,000 pods, and building and reading them must cost microseconds, not the
validation pydantic does for objects that come from users (the CRD specs are pydantic).
Adapters (kube, sim) build snapshots from data that is already validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from hybridgpu.models.tier import Tier

if TYPE_CHECKING:  # the pydantic models are not needed to build or read a snapshot
    from hybridgpu.models.pool import GPUPoolSpec


class Criticality(StrEnum):
    """How much a workload may be disturbed (label ``hybridgpu.io/criticality``)."""

    CRITICAL = "critical"
    STANDARD = "standard"
    PREEMPTIBLE = "preemptible"


# Lower rank is served first.
CRITICALITY_RANK: dict[str, int] = {"critical": 0, "standard": 1, "preemptible": 2}


@dataclass(frozen=True, slots=True)
class PoolState:
    """A GPUPool as the operator sees it now."""

    name: str
    spec: GPUPoolSpec
    provisioning_nodes: int = 0
    """Nodes requested from the provider that have not joined the cluster yet."""
    spot_price_per_node_hour: float | None = None
    """Current price read from the provider (spot pools with pricing.fromProvider)."""
    launchable: bool = True
    """False while the provider has no capacity for the pool (a launch failed for capacity,
    or spot is unavailable): decide() grows another pool instead, or reports the block."""
    nodes_lasted: int = 0
    """Of this (spot) pool's nodes seen to run an hour without an interruption notice, those
    seen to run another hour without one (core/deadline.py, WINDOW_AGE_SECONDS)."""
    nodes_cut_short: int = 0
    """Of them, those that got their notice within that second hour."""

    @property
    def tier(self) -> Tier:
        return Tier(self.spec.tier)

    @property
    def gpus_per_node(self) -> int:
        return self.spec.gpu.per_node


@dataclass(frozen=True, slots=True)
class NodeState:
    """One GPU node."""

    name: str
    pool: str
    gpus: int
    ready: bool = True
    cordoned: bool = False
    releasing: bool = False
    """The operator cordoned it to release it; a release in progress."""
    created_at: float = 0.0
    idle_since: float | None = None
    """Start of the current stretch with no GPU pods or utilization below the pool's idle
    threshold; None while busy."""
    utilization_percent: float | None = None
    """Average GPU utilization over the policy window; None when there is no sample."""
    utilization_stale: bool = False
    interruption_deadline: float | None = None
    """Set when the provider announced this (spot) node will be taken away, at that time."""
    xid_errors: int = 0
    provider_id: str | None = None
    cordoned_by: str | None = None
    """Why the operator cordoned it (release, interruption, xid-errors); None when it did
    not (a cordon by a person is left alone)."""
    not_ready_since: float | None = None
    """When its Ready condition last turned False or Unknown; None while Ready."""
    deleting: bool = False
    """The Node object is being deleted (deletionTimestamp; a finalizer holds it, e.g.
    Karpenter's while it drains and terminates the machine): never capacity, never released
    or terminated again, and not a node that has joined; billed while its machine runs."""
    instance_terminated: bool = False
    """The provider says its instance is terminated (listed as terminated, or terminated by
    this operator) while the Node object is still there: a cloud keeps a terminated instance
    listed for a while (EC2 for about an hour). Not capacity, not touched, not billed."""
    reserved_for: str | None = None
    """The Job (``namespace/name``) the node is kept for (core/reserve.py): only its pods and
    critical pods may land on it while the reservation lasts; None: anyone's."""

    @property
    def leaving(self) -> bool:
        """Deleting, or its instance terminated: no longer part of the pool's capacity."""
        return self.deleting or self.instance_terminated

    @property
    def billed(self) -> bool:
        """Paid for: from launch until the provider says the instance is terminated."""
        return not self.instance_terminated


LWS_GANG_MARK = "#group-"
"""What separates a LeaderWorkerSet's name from its group's index in the group's gang."""


@dataclass(frozen=True, slots=True)
class GPUPod:
    """A pod that requests GPUs."""

    namespace: str
    name: str
    gpus: int
    criticality: Criticality
    node: str | None = None
    """Node it is bound to; None while pending."""
    job: str | None = None
    """``namespace/name`` of the owning batch/v1 Job; None for bare pods (never evicted)."""
    pool: str | None = None
    """Pool the pod is pinned to (nodeSelector hybridgpu.io/pool), if any."""
    pending_since: float = 0.0
    started_at: float | None = None
    gpu_models: tuple[str, ...] = ()
    """GPU models the pod may run on (node affinity or selector on nvidia.com/gpu.product,
    compared with a pool's gpu.model); empty: any."""
    bare: bool = False
    """Owned by nothing (no controller would recreate it)."""
    terminating: bool = False
    """Being deleted (it holds its GPUs until it has exited)."""
    idle_timeout_seconds: float | None = None
    """Opt-in to idle reclaim (annotation hybridgpu.io/idle-timeout on the pod or its Job):
    after this long below the utilization threshold its Job is suspended, or the bare pod
    evicted. None: never reclaimed."""
    reclaim_critical: bool = False
    """A critical pod is reclaimed only when this is also set (annotation
    hybridgpu.io/idle-reclaim-critical: "true")."""
    idle_since: float | None = None
    """Start of the current stretch with fresh per-pod GPU utilization below the pool's
    idle threshold; None while busy, or when its utilization is unknown or stale."""
    utilization_percent: float | None = None
    """The pod's GPU utilization over the policy window; None when unknown or stale."""
    input_error: str | None = None
    """Why one of its hybridgpu annotations was not understood (reported, then ignored)."""
    gang: str | None = None
    """The workload whose pods must all run at once (a JobSet, a PyTorchJob), as
    ``namespace/name``, or a LeaderWorkerSet's group, ``namespace/name#group-<index>``
    (``LWS_GANG_MARK``): decide() finds capacity for all its pending pods or for none."""
    gang_size: int = 1
    """How many pods the gang runs at once, the ones not created yet included."""
    serving: str | None = None
    """``namespace/name`` of the serving workload (Deployment) it is a replica of; None for
    anything else."""
    stateful: str | None = None
    """``Kind namespace/name`` of the StatefulSet or LeaderWorkerSet it is a replica of
    (serving that cannot surge: never rebalanced, see core/rebalance.py); None otherwise."""
    queued: bool = False
    """Admitted by a queue controller (Kueue label kueue.x-k8s.io/queue-name on the pod or
    its Job): never moved, suspended or evicted by the operator."""
    key: str = field(init=False, repr=False, compare=False)
    """``namespace/name``, computed once: decide() reads it in hot loops."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True)
class MoveIntent:
    """A multi-step move of a Job between pools, recorded on the Job (annotation)."""

    to_pool: str | None
    step: str
    since: float


@dataclass(frozen=True, slots=True)
class JobState:
    """A batch/v1 Job that runs GPU pods."""

    namespace: str
    name: str
    criticality: Criticality
    gpus_per_pod: int
    parallelism: int = 1
    suspended: bool = False
    pool: str | None = None
    """Pool its pod template is pinned to, if any."""
    started_at: float | None = None
    move: MoveIntent | None = None
    pinned_by_operator: bool = False
    """Its pool pin was set by an earlier move of the operator (not by its owner), so the
    operator may move it again, e.g. back to core when core has room."""
    gpu_models: tuple[str, ...] = ()
    """GPU models its pods may run on; empty: any."""
    checkpoint_seconds: float | None = None
    """Progress between its checkpoints (annotation hybridgpu.io/checkpoint-interval): a move
    loses the work since the last one. None: not said (a move loses only the policy's
    restartOverhead); 0: it never checkpoints (a move loses all it did)."""
    created_at: float | None = None
    """When the Job was created, seconds since the epoch."""
    deadline_at: float | None = None
    """When it must have finished (annotation hybridgpu.io/deadline: an RFC 3339 time, or a
    duration from creation), seconds since the epoch; None: no deadline."""
    expected_duration_seconds: float | None = None
    """Run time it needs from scratch (annotation hybridgpu.io/expected-duration)."""
    restarts: int = 0
    """Moves the operator started for it (annotation hybridgpu.io/restarts, counted by each
    move): a run after one first loads its checkpoint for restartOverhead before it makes
    progress, so that run's checkpoints count from the end of that start-up."""
    progress_seconds: float = 0.0
    """Work its earlier runs saved in checkpoints (annotation hybridgpu.io/progress, written
    by the operator when it stops the Job, or by the workload itself), seconds."""
    return_to_core: bool = False
    """A standard Job that may be moved from cloud nodes back to owned GPUs when they free
    up (annotation hybridgpu.io/return-to-core: "true"); it restarts from its checkpoint."""
    gang: bool = False
    """Its ``parallelism`` pods must all run at once (a JobSet, a PyTorchJob): it is moved
    whole, and capacity is found for all its pods or for none."""
    kind: str = "Job"
    """Its Kubernetes kind (Job, JobSet, RayJob, PyTorchJob, TrainJob): which adapter moves it."""
    input_error: str | None = None
    """Why one of its hybridgpu annotations was not understood (reported, then ignored)."""
    queued: bool = False
    """Managed by a queue controller (Kueue label kueue.x-k8s.io/queue-name): Kueue owns its
    suspend flag and placement, so the operator never suspends, resumes, moves or reclaims
    it; it only adds capacity for its pods."""
    key: str = field(init=False, repr=False, compare=False)
    """``namespace/name``, computed once."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True)
class RebalanceIntent:
    """A surge rebalance in flight, recorded on the workload (annotation
    hybridgpu.io/rebalance)."""

    node: str
    """The cloud node the replicas leave (cordoned for the move)."""
    pods: tuple[str, ...]
    step: str
    since: float


@dataclass(frozen=True, slots=True)
class ServingState:
    """A serving workload (a Deployment) whose pods request GPUs."""

    namespace: str
    name: str
    replicas: int
    """spec.replicas: what it asks for."""
    ready: int
    """status.readyReplicas."""
    stable: bool = True
    """No rollout in progress: the controller has seen the latest spec and every replica is
    updated and available."""
    autoscaled: bool = False
    """A HorizontalPodAutoscaler targets it: a surge would fight the autoscaler, so it is
    not rebalanced (reported)."""
    rebalance: RebalanceIntent | None = None
    given_up_at: float | None = None
    """When its last rebalance was rolled back or aborted (annotation
    hybridgpu.io/rebalance-given-up), seconds since the epoch; None: never."""
    kind: str = "Deployment"
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True)
class MetricsHealth:
    """Whether utilization data can be trusted."""

    available: bool = True
    age_seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class BudgetState:
    """Cloud spend so far this month."""

    spent_this_month_dollars: float = 0.0
    hours_left_in_month: float = 720.0


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything ``decide`` needs, frozen at ``taken_at`` (seconds since the epoch)."""

    taken_at: float
    pools: tuple[PoolState, ...]
    nodes: tuple[NodeState, ...] = ()
    pods: tuple[GPUPod, ...] = ()
    jobs: tuple[JobState, ...] = ()
    metrics: MetricsHealth = field(default_factory=MetricsHealth)
    budget: BudgetState = field(default_factory=BudgetState)
    serving: tuple[ServingState, ...] = ()
    """Serving workloads with GPU replicas (their pods name them in ``GPUPod.serving``)."""
    check_only_gangs: frozenset[str] = frozenset()
    """Gangs that only ask whether they fit on nodes that exist (a ProvisioningRequest of
    class check-capacity): decide() never buys capacity for them."""
