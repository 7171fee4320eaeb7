"""ScalingPolicy: how the operator behaves."""

from __future__ import annotations

from pydantic import Field

from hybridgpu.models.base import Condition, Duration, PositiveDuration, Rule, SpecModel
from hybridgpu.models.limits import MAX_DOLLARS, MAX_DOLLARS_PER_HOUR


class PrometheusSpec(SpecModel):
    """Where GPU utilization comes from."""

    url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="Prometheus base URL, e.g. http://prometheus.monitoring:9090. Absent: no "
        "utilization data, so idle release only uses pod allocation and never runs blind.",
    )
    utilization_query: str = Field(
        default="DCGM_FI_DEV_GPU_UTIL",
        min_length=1,
        description="Metric (or PromQL) of per-GPU utilization in percent; "
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio) is also understood.",
    )
    window: PositiveDuration = Field(
        default="5m", description="Utilization is averaged over this window."
    )
    stale_after: Duration = Field(
        default="2m", description="A sample older than this is stale: nothing is released on it."
    )
    tokens_query: str = Field(
        default="vllm:generation_tokens_total",
        description="Counter of tokens generated (vLLM's by default), one series per server "
        "with a node label (Hostname, node or kubernetes_node); gives "
        "hybridgpu_cost_per_million_tokens_dollars per pool. Empty: not read.",
    )


class ScaleUpSpec(SpecModel):
    """Limits on adding nodes."""

    max_nodes_per_tick: int = Field(
        default=10, ge=1, le=10000, description="At most this many new nodes per pool per tick."
    )


class PreemptionSpec(SpecModel):
    """Moving preemptible Jobs off core to make room for critical and standard work."""

    enabled: bool = Field(default=True, description="Preempt preemptible Jobs on core.")
    move_to_spot: bool = Field(
        default=True, description="Move preempted Jobs to a spot pool (else requeue in place)."
    )
    min_runtime: Duration = Field(
        default="1m", description="A Job that has run less than this is not preempted."
    )
    checkpoint_grace_period: Duration = Field(
        default="2m", description="Time a suspended Job's pods get to checkpoint and exit."
    )
    restart_overhead: Duration = Field(
        default="5m",
        description="Work a moved Job loses to restart (start-up plus time since its last "
        "checkpoint); used to decide whether a move pays.",
    )
    max_per_tick: int = Field(
        default=10, ge=0, le=10000, description="At most this many moves per tick."
    )
    allow_on_demand_for_preemptible: bool = Field(
        default=False,
        description="Let preemptible pods run on elastic (on-demand) nodes. False: the "
        "admission webhook holds them to core and spot nodes (node affinity on "
        "hybridgpu.io/tier), so elastic nodes bought for critical work stay theirs. Read "
        "from the ScalingPolicy named default.",
    )


class ConsolidationSpec(SpecModel):
    """Moving preemptible work from elastic to cheaper spot nodes."""

    enabled: bool = Field(default=True, description="Move preemptible Jobs from elastic to spot.")
    min_savings_per_hour: float = Field(
        default=0.5,
        ge=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Only move when it saves at least this many dollars/hour.",
    )


class RebalanceSpec(SpecModel):
    """Serving replicas (Deployments) on on-demand or spot nodes move to owned or committed
    GPUs that are free (paid whether used or not), by
    surge: the new replica is Ready before the cloud one goes, so none is ever unavailable."""

    enabled: bool = Field(
        default=True,
        description="Rebalance serving replicas from on-demand and spot nodes to free owned or "
        "committed GPUs when it "
        "empties a cloud node and saves at least consolidation.minSavingsPerHour.",
    )
    max_per_tick: int = Field(
        default=5,
        ge=0,
        le=1000,
        description="At most this many cloud nodes emptied by rebalance at once (moves in "
        "flight count), and never more than disruption.maxNodesPerTick.",
    )
    surge_timeout: PositiveDuration = Field(
        default="10m",
        description="A surge replica not Ready after this long is given up: the workload is "
        "scaled back (the unready replica goes) and the cloud node uncordoned.",
    )
    headroom_percent: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="Percent of the owned and committed GPUs (on their nodes that exist) a "
        "rebalance leaves free for new arrivals, rounded down: it takes only the free GPUs "
        "beyond them, so a critical pod created next starts at once instead of waiting for a "
        "cloud node to boot. 0: take every free GPU.",
    )


class DisruptionSpec(SpecModel):
    """Limits on removing nodes."""

    max_nodes_per_tick: int = Field(
        default=5, ge=0, le=10000, description="At most this many nodes released per tick."
    )
    max_percent: float = Field(
        default=20.0,
        gt=0,
        le=100,
        description="At most this percent of a pool's nodes released per tick (at least one).",
    )


class BudgetSpec(SpecModel):
    """Cloud (elastic + spot) spend limits; owned core cost is sunk and not counted."""

    max_hourly_cost: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="No scale-up may take cloud spend above this, $/hour.",
    )
    monthly_limit: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DOLLARS,
        description="No scale-up once cloud spend this month reaches this, $.",
    )


class WaitBudgetSpec(SpecModel):
    """How long pending work of each criticality may wait for owned GPUs that free up soon,
    instead of getting a new cloud node (0s: never waits)."""

    critical: Duration = Field(
        default="60s",
        description="Critical pods wait for owned GPUs at most this long (counted from the "
        "Job's creation, less the progress it has saved; else from when the pod became "
        "pending).",
    )
    standard: Duration = Field(
        default="5m", description="Standard pods wait for owned GPUs at most this long."
    )
    preemptible: Duration = Field(
        default="2h",
        description="Preemptible pods (preempted ones included) wait for owned GPUs at most "
        "this long, instead of spot.",
    )


class ScalingPolicySpec(SpecModel):
    """Desired behaviour of the operator."""

    rules = (
        Rule(
            cel="!has(self.budget) || !has(self.budget.maxHourlyCost) || "
            "!has(self.budget.monthlyLimit) || "
            "self.budget.maxHourlyCost <= self.budget.monthlyLimit",
            message="budget.maxHourlyCost cannot exceed budget.monthlyLimit",
            check=lambda s: (
                s.budget.max_hourly_cost is None
                or s.budget.monthly_limit is None
                or s.budget.max_hourly_cost <= s.budget.monthly_limit
            ),
            field_path=".budget",
        ),
    )

    prometheus: PrometheusSpec = Field(
        default_factory=PrometheusSpec, description="Where utilization comes from."
    )
    interval: PositiveDuration = Field(
        default="30s", description="Time between reconcile ticks (> 0)."
    )
    pending_grace_period: Duration = Field(
        default="5s",
        description="A GPU pod must be pending this long before it counts as unmet demand.",
    )
    scale_up: ScaleUpSpec = Field(default_factory=ScaleUpSpec, description="Scale-up limits.")
    preemption: PreemptionSpec = Field(
        default_factory=PreemptionSpec, description="Preemption of preemptible Jobs."
    )
    consolidation: ConsolidationSpec = Field(
        default_factory=ConsolidationSpec, description="Elastic-to-spot consolidation."
    )
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, description="Node release limits."
    )
    rebalance: RebalanceSpec = Field(
        default_factory=RebalanceSpec,
        description="Serving replicas moved from on-demand and spot nodes to free owned or "
        "committed GPUs by surge.",
    )
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="Cloud spend limits.")
    wait_budget: WaitBudgetSpec = Field(
        default_factory=WaitBudgetSpec,
        description="Wait versus launch: a pod that fits nowhere waits instead of getting a "
        "new cloud node when owned GPUs free up for it within its criticality's budget "
        "(Jobs that state hybridgpu.io/expected-duration end then; preemptible Jobs may be "
        "moved once past preemption.minRuntime).",
    )
    dry_run: bool = Field(
        default=False, description="Decide and report (Events, metrics, status) but act on nothing."
    )


class BudgetStatus(SpecModel):
    """Cloud spend against the budget."""

    spent_this_month: float = Field(default=0.0, description="Cloud dollars spent this month.")
    projected_month: float = Field(
        default=0.0, description="Spent plus the current hourly rate until the month ends, $."
    )
    hourly_cost: float = Field(default=0.0, description="Cloud spend rate now, $/hour.")


class ScalingPolicyStatus(SpecModel):
    """Observed state of a ScalingPolicy."""

    last_tick: str | None = Field(default=None, description="RFC 3339 time of the last tick.")
    decisions: dict[str, int] = Field(
        default_factory=dict, description="Actions decided in the last tick, by kind."
    )
    last_plan: list[str] = Field(
        default_factory=list,
        description="The last plan's actions with their reasons (at most 50), for "
        "`hybridgpu explain`.",
    )
    budget: BudgetStatus = Field(default_factory=BudgetStatus, description="Spend.")
    conditions: list[Condition] = Field(
        default_factory=list, description="MetricsAvailable, BudgetExceeded, OperatorReady."
    )
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status reflects."
    )
