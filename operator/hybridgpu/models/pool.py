"""GPUPool: one pool of identical GPU nodes in one capacity tier."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hybridgpu.models.base import Condition, Duration, Rule, SpecModel
from hybridgpu.models.limits import (
    MAX_DOLLARS,
    MAX_DOLLARS_PER_HOUR,
    MAX_DOLLARS_PER_KWH,
    MAX_NODES,
    MAX_WATTS,
)
from hybridgpu.models.tier import Tier as Tier  # re-exported: callers import it from here

SHARED_SUFFIX = "-SHARED"
"""What NVIDIA's GPU feature discovery appends to a node's nvidia.com/gpu.product label when
its GPUs are shared (time-slicing or MPS): pods that ask for a share select it."""


class GPUSharing(SpecModel):
    """The pool's GPUs are shared: the device plugin advertises each GPU as ``replicas``
    nvidia.com/gpu units (time-slicing, MPS), or each node is partitioned into MIG slices of
    one profile. Pods that want a share of a GPU select the pool's ``<model>-SHARED``
    product; pods that want whole GPUs never land here."""

    strategy: Literal["time-slicing", "mps", "mig"] = Field(
        default="time-slicing", description="How the GPUs are shared."
    )
    replicas: int = Field(
        ge=2, le=48, description="Units (nvidia.com/gpu) each physical GPU is advertised as."
    )


class GPUSpec(SpecModel):
    """The GPUs in every node of the pool."""

    rules = (
        Rule(
            cel="!has(self.sharing) || self.perNode % self.sharing.replicas == 0",
            message="with sharing, perNode counts the advertised units: a multiple of "
            "sharing.replicas (e.g. 8 GPUs x 4 replicas = 32)",
            check=lambda s: s.sharing is None or s.per_node % s.sharing.replicas == 0,
        ),
    )

    model: str = Field(min_length=1, description="GPU model, e.g. A100-80GB, H100, V100, L4.")
    per_node: int = Field(
        ge=1,
        le=512,
        description="GPUs per node (nvidia.com/gpu capacity); with sharing, the units the "
        "node advertises (physical GPUs x sharing.replicas).",
    )
    sharing: GPUSharing | None = Field(
        default=None,
        description="The GPUs are shared (time-slicing, MPS, MIG): only pods asking for a "
        "share (node affinity on the <model>-SHARED product) run here.",
    )
    memory_gib: int | None = Field(
        default=None, alias="memoryGiB", ge=1, description="Memory of one GPU in GiB."
    )
    power_watts: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WATTS,
        description="Board power of one GPU in watts (for the core cost model).",
    )


class AWSProviderSpec(SpecModel):
    """Where the pool's instances come from in AWS. Credentials never go here."""

    rules = (
        Rule(
            cel="has(self.autoScalingGroupName) != has(self.launchTemplateName)",
            message="set exactly one of autoScalingGroupName or launchTemplateName",
            check=lambda s: (s.auto_scaling_group_name is None) != (s.launch_template_name is None),
        ),
        Rule(
            cel="!has(self.launchTemplateName) || "
            "(has(self.instanceTypes) && size(self.instanceTypes) > 0)",
            message="launchTemplateName needs instanceTypes (the EC2 Fleet's instance types)",
            check=lambda s: s.launch_template_name is None or len(s.instance_types) > 0,
        ),
    )

    region: str = Field(min_length=1, description="AWS region, e.g. us-east-1.")
    auto_scaling_group_name: str | None = Field(
        default=None, description="EC2 Auto Scaling group that holds the pool's instances."
    )
    launch_template_name: str | None = Field(
        default=None, description="Launch template for an EC2 Fleet (spot pools)."
    )
    instance_types: list[str] = Field(
        default_factory=list,
        description="Instance types the fleet may use, e.g. [p3.2xlarge, g5.xlarge].",
    )
    interruption_queue_url: str | None = Field(
        default=None,
        alias="interruptionQueueURL",
        description="SQS queue fed by EventBridge with spot interruption and rebalance notices.",
    )


class KwokProviderSpec(SpecModel):
    """How the kwok provider's fake nodes come up (local trials on a control plane with kwok)."""

    boot_delay: Duration | None = Field(
        default=None,
        description="Time from a scale-up until the kwok Node exists, like a cloud instance "
        "booting (default: $HYBRIDGPU_KWOK_DELAY_SECONDS of the operator, else 10s).",
    )


class KarpenterProviderSpec(SpecModel):
    """The Karpenter NodePool that provisions the pool's nodes; hybridgpu only sets its limits."""

    node_pool: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
        description="Name of the karpenter.sh/v1 NodePool. hybridgpu sets its "
        "spec.limits[nvidia.com/gpu] to the GPUs of the nodes it allows (never above maxNodes x "
        "gpu.perNode) and releases a node by deleting its NodeClaim; Karpenter launches.",
    )


class ClusterAPIProviderSpec(SpecModel):
    """The Cluster API MachineDeployment whose replicas are the pool's nodes."""

    machine_deployment: str = Field(
        min_length=3,
        max_length=317,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
        description="NAMESPACE/NAME of the cluster.x-k8s.io MachineDeployment. hybridgpu raises "
        "spec.replicas (never above maxNodes) and removes a chosen Machine by annotating it "
        "cluster.x-k8s.io/delete-machine before lowering replicas.",
    )


class ProviderSpec(SpecModel):
    """How nodes of the pool are created and removed."""

    rules = (
        Rule(
            cel="!has(self.type) || self.type != 'aws' || has(self.aws)",
            message="provider.aws is required when provider.type is aws",
            check=lambda s: s.type != "aws" or s.aws is not None,
        ),
        Rule(
            cel="!has(self.type) || self.type != 'karpenter' || has(self.karpenter)",
            message="provider.karpenter is required when provider.type is karpenter",
            check=lambda s: s.type != "karpenter" or s.karpenter is not None,
        ),
        Rule(
            cel="!has(self.type) || self.type != 'clusterapi' || has(self.clusterapi)",
            message="provider.clusterapi is required when provider.type is clusterapi",
            check=lambda s: s.type != "clusterapi" or s.clusterapi is not None,
        ),
    )

    type: Literal["static", "aws", "karpenter", "clusterapi", "kwok", "fake"] = Field(
        default="static",
        description="static: nodes are what they are (owned hardware); aws: EC2 launched by "
        "hybridgpu; karpenter: a Karpenter NodePool provisions, hybridgpu sets its limits and "
        "deletes NodeClaims; clusterapi: a Cluster API MachineDeployment (any cloud or bare "
        "metal); kwok: fake nodes on a cluster that runs kwok (local trials, `make demo`); "
        "fake: in memory, for the simulator and tests (run against a cluster, its instances "
        "never become Nodes).",
    )
    aws: AWSProviderSpec | None = Field(default=None, description="AWS settings (type aws).")
    karpenter: KarpenterProviderSpec | None = Field(
        default=None, description="Karpenter settings (type karpenter)."
    )
    clusterapi: ClusterAPIProviderSpec | None = Field(
        default=None, description="Cluster API settings (type clusterapi)."
    )
    kwok: KwokProviderSpec | None = Field(
        default=None, description="kwok settings (type kwok; optional)."
    )


class PricingSpec(SpecModel):
    """What a node costs. Core pools: capex, power and ops. Elastic/spot: a price per hour."""

    capex_per_node: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DOLLARS,
        description="Core: purchase price of one node in dollars.",
    )
    amortization_years: float | None = Field(
        default=None, gt=0, le=15, description="Core: years the capex is spread over (default 4)."
    )
    power_watts_per_node: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WATTS,
        description="Core: wall power of one node in watts (default: GPU power x perNode x 1.3).",
    )
    pue: float | None = Field(
        default=None, ge=1, le=3, description="Core: power usage effectiveness (default 1.4)."
    )
    electricity_per_kwh: float | None = Field(
        default=None,
        alias="electricityPerKWh",
        ge=0,
        le=MAX_DOLLARS_PER_KWH,
        description="Core: electricity price in dollars per kWh (default 0.12).",
    )
    ops_per_node_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Core: operations cost per node-hour in dollars (default 0).",
    )
    per_node_hour: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Elastic/spot: price of one node-hour in dollars.",
    )
    from_provider: bool | None = Field(
        default=None,
        description="Spot: read the current spot price from the provider (perNodeHour is the "
        "fallback when the provider has none).",
    )


class CommittedSpec(SpecModel):
    """Committed cloud capacity (a reserved instance, savings plan or lease): paid every hour
    of its term whether used or not."""

    nodes: int = Field(
        ge=1, le=MAX_NODES, description="Nodes committed to (paid whether used or not)."
    )
    term_years: Literal[1, 3] = Field(description="Term of the commitment in years: 1 or 3.")
    per_node_hour: float = Field(
        ge=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Effective hourly price of one committed node in dollars, paid every hour "
        "of the term (pricing.perNodeHour is the on-demand list price of the same node).",
    )
    upfront_per_node: float = Field(
        default=0.0,
        ge=0,
        le=MAX_DOLLARS,
        description="Paid once per node at the start of the term, dollars; spread over the "
        "term's hours in the cost metrics.",
    )
    term_start: str | None = Field(
        default=None,
        pattern=r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$",
        description="When the current term started (RFC 3339 date or date-time, UTC when no "
        "offset is given); default: the pool's creation. A CapacityPlan offer naming this pool "
        "plans from it (its windows and renewals fall on the term's calendar).",
    )


class ScaleDownSpec(SpecModel):
    """When idle elastic/spot nodes are released."""

    enabled: bool = Field(default=True, description="Release idle nodes of this pool.")
    idle_utilization_percent: float = Field(
        default=10.0,
        ge=0,
        le=100,
        description="A node whose GPU utilization stays below this percent counts as idle.",
    )
    idle_for: Duration = Field(
        default="10m", description="How long a node must stay idle before it is released."
    )


class PowerSpec(SpecModel):
    """Owned nodes that may be powered off while idle and powered on again when work needs
    them (core pools whose machines a provider adds and removes: Cluster API on bare metal,
    where deleting a Machine deprovisions and powers off its host)."""

    min_powered_on: int = Field(
        default=0,
        ge=0,
        le=MAX_NODES,
        description="Never fewer owned nodes powered on (or booting) than this: capacity for "
        "work that cannot wait for a boot.",
    )
    idle_for: Duration = Field(
        default="30m",
        description="An owned node with no pods at all for this long may be powered off.",
    )
    boot_time: Duration = Field(
        default="10m",
        description="From power-on until the node is Ready and takes pods (firmware, OS, "
        "joining). A pod gets a powered-on owned node only when it may wait this long beyond "
        "a cloud node's boot; else the cloud serves it.",
    )
    power_per_node_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DOLLARS_PER_HOUR,
        description="Dollars per hour one powered-on node costs in electricity (what powering "
        "it off saves; default: pricing.powerWattsPerNode x pue x electricityPerKWh).",
    )


class Taint(SpecModel):
    """A taint the operator puts on the pool's nodes."""

    key: str = Field(min_length=1, description="Taint key.")
    value: str | None = Field(default=None, description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="NoSchedule, PreferNoSchedule or NoExecute."
    )


def _from_provider(s: GPUPoolSpec) -> bool:
    return bool(s.pricing.from_provider)


_CORE_ONLY_PRICING = (
    "amortizationYears",
    "powerWattsPerNode",
    "pue",
    "electricityPerKWh",
    "opsPerNodeHour",
)
"""PricingSpec fields of the core cost model (capex aside, which has a rule of its own)."""


def _core_pricing_set(s: GPUPoolSpec) -> list[str]:
    """The core-only pricing fields set on ``s``, by their wire names."""
    wire = s.pricing.model_dump(by_alias=True, exclude_none=True)
    return [f for f in _CORE_ONLY_PRICING if f in wire]


class GPUPoolSpec(SpecModel):
    """Desired state of a GPUPool."""

    rules = (
        Rule(
            cel="!has(self.minNodes) || self.minNodes <= self.maxNodes",
            message="minNodes must not exceed maxNodes",
            check=lambda s: s.min_nodes <= s.max_nodes,
            field_path=".minNodes",
        ),
        Rule(
            cel="self.tier != 'core' || has(self.pricing.capexPerNode)",
            message="core pools need pricing.capexPerNode (the purchase price of one node)",
            check=lambda s: s.tier != "core" or s.pricing.capex_per_node is not None,
            field_path=".pricing",
        ),
        Rule(
            cel="self.tier != 'core' || !has(self.pricing.perNodeHour)",
            message="core pools are priced by capex, power and ops: pricing.perNodeHour is for "
            "elastic and spot pools",
            check=lambda s: s.tier != "core" or s.pricing.per_node_hour is None,
            field_path=".pricing",
        ),
        Rule(
            cel="self.tier == 'core' || has(self.pricing.perNodeHour) || "
            "(has(self.pricing.fromProvider) && self.pricing.fromProvider)",
            message="elastic and spot pools need pricing.perNodeHour (or, for spot, "
            "pricing.fromProvider: true)",
            check=lambda s: (
                s.tier == "core" or s.pricing.per_node_hour is not None or _from_provider(s)
            ),
            field_path=".pricing",
        ),
        Rule(
            cel="self.tier == 'core' || !has(self.pricing.capexPerNode)",
            message="pricing.capexPerNode is for core pools; elastic and spot pools use "
            "pricing.perNodeHour",
            check=lambda s: s.tier == "core" or s.pricing.capex_per_node is None,
            field_path=".pricing",
        ),
        Rule(
            cel="self.tier == 'core' || !("
            + " || ".join(f"has(self.pricing.{f})" for f in _CORE_ONLY_PRICING)
            + ")",
            message="pricing."
            + ", ".join(_CORE_ONLY_PRICING[:-1])
            + " and "
            + _CORE_ONLY_PRICING[-1]
            + " price owned (core) nodes; elastic and spot pools are "
            "priced by pricing.perNodeHour only",
            check=lambda s: s.tier == "core" or not _core_pricing_set(s),
            field_path=".pricing",
        ),
        Rule(
            cel="!has(self.pricing.fromProvider) || !self.pricing.fromProvider || "
            "self.tier == 'spot'",
            message="pricing.fromProvider reads spot prices and is only valid on spot pools",
            check=lambda s: not _from_provider(s) or s.tier == "spot",
            field_path=".pricing",
        ),
        Rule(
            cel="self.tier != 'core' || !has(self.provider) || !has(self.provider.type) || "
            "!(self.provider.type in ['aws', 'karpenter'])",
            message="core pools are owned hardware: provider.type must be static, clusterapi, "
            "kwok or fake",
            check=lambda s: s.tier != "core" or s.provider.type not in ("aws", "karpenter"),
            field_path=".provider",
        ),
        Rule(
            cel="self.tier == 'core' || (has(self.provider) && has(self.provider.type) && "
            "self.provider.type != 'static')",
            message="elastic and spot pools scale through a cloud provider: provider.type must "
            "be aws, karpenter, clusterapi, kwok or fake",
            check=lambda s: s.tier == "core" or s.provider.type != "static",
            field_path=".provider",
        ),
        Rule(
            cel="!has(self.power) || self.tier == 'core'",
            message="power is for owned (core) pools: cloud nodes are released, not powered off",
            check=lambda s: s.power is None or s.tier == "core",
            field_path=".power",
        ),
        Rule(
            cel="!has(self.power) || (has(self.provider) && has(self.provider.type) && "
            "self.provider.type in ['clusterapi', 'kwok', 'fake'])",
            message="power needs a provider that adds and removes the owned machines: "
            "provider.type clusterapi (or kwok, fake)",
            check=lambda s: s.power is None or s.provider.type in ("clusterapi", "kwok", "fake"),
            field_path=".power",
        ),
        Rule(
            cel="!has(self.power) || !has(self.power.minPoweredOn) || "
            "self.power.minPoweredOn <= self.maxNodes",
            message="power.minPoweredOn must not exceed maxNodes (the owned machines)",
            check=lambda s: s.power is None or s.power.min_powered_on <= s.max_nodes,
            field_path=".power",
        ),
        Rule(
            cel="!has(self.committed) || self.tier == 'elastic'",
            message="committed capacity is rented cloud capacity: committed is for elastic pools",
            check=lambda s: s.committed is None or s.tier == "elastic",
            field_path=".committed",
        ),
        Rule(
            cel="!has(self.committed) || self.maxNodes == self.committed.nodes",
            message="a committed pool holds exactly its commitment: maxNodes must equal "
            "committed.nodes (put on-demand burst in a pool of its own)",
            check=lambda s: s.committed is None or s.max_nodes == s.committed.nodes,
            field_path=".committed",
        ),
    )

    tier: Tier = Field(
        description="core: owned nodes (never terminated); elastic: on-demand cloud nodes; "
        "spot: spot/preemptible cloud nodes."
    )
    node_selector: dict[str, str] | None = Field(
        default=None,
        description="Labels that select the pool's nodes (default: hybridgpu.io/pool=<name>).",
    )
    gpu: GPUSpec = Field(description="The GPUs in each node.")
    min_nodes: int = Field(default=0, ge=0, description="Never fewer nodes than this.")
    max_nodes: int = Field(ge=0, le=MAX_NODES, description="Never more nodes than this.")
    provider: ProviderSpec = Field(
        default_factory=ProviderSpec, description="Where nodes come from (default static)."
    )
    pricing: PricingSpec = Field(description="What a node costs.")
    scale_down: ScaleDownSpec = Field(
        default_factory=ScaleDownSpec, description="When idle nodes are released."
    )
    committed: CommittedSpec | None = Field(
        default=None,
        description="Elastic pools: committed capacity (reserved instances, savings plan, "
        "lease). Its nodes are filled before on-demand ones, never released below the "
        "commitment, and billed whether used or not; idle committed GPUs are reported as waste.",
    )
    power: PowerSpec | None = Field(
        default=None,
        description="Core pools (opt-in): owned nodes idle for power.idleFor are powered off "
        "(their Machine deleted) down to power.minPoweredOn, and powered on again (replicas "
        "raised) when pending work needs owned capacity, before any cloud node is bought. "
        "maxNodes is the number of owned machines.",
    )
    taints: list[Taint] = Field(
        default_factory=list, description="Taints the operator puts on the pool's nodes."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels the operator puts on the pool's nodes."
    )
    policy: str = Field(
        default="default", min_length=1, description="Name of the ScalingPolicy that drives it."
    )


class NodeCounts(SpecModel):
    """Node counts of a pool."""

    total: int = Field(default=0, description="Nodes in the pool.")
    ready: int = Field(default=0, description="Ready nodes.")
    cordoned: int = Field(default=0, description="Cordoned nodes.")
    provisioning: int = Field(default=0, description="Nodes requested that have not joined yet.")
    powered_off: int | None = Field(
        default=None,
        description="Core pools with power: owned machines powered off (maxNodes less the "
        "nodes on or booting); absent for other pools.",
    )


class GPUCounts(SpecModel):
    """GPU counts of a pool."""

    total: int = Field(default=0, description="GPUs on the pool's nodes.")
    allocated: int = Field(default=0, description="GPUs requested by running pods.")
    idle: int = Field(default=0, description="GPUs no pod requests.")


class CommittedUsage(SpecModel):
    """How much of a pool's commitment is used now."""

    nodes: int = Field(default=0, description="Nodes committed to.")
    gpus: int = Field(default=0, description="GPUs committed to (nodes x gpu.perNode).")
    idle_gpus: int = Field(default=0, description="Committed GPUs no pod requests (or absent).")
    wasted_per_hour: float = Field(
        default=0.0, description="What the idle committed GPUs cost, dollars per hour."
    )


class GPUPoolStatus(SpecModel):
    """Observed state of a GPUPool."""

    nodes: NodeCounts = Field(default_factory=NodeCounts, description="Node counts.")
    gpus: GPUCounts = Field(default_factory=GPUCounts, description="GPU counts.")
    utilization: float | None = Field(
        default=None, description="Average GPU utilization in percent (absent when unknown)."
    )
    cost_per_hour: float | None = Field(
        default=None, description="What the pool costs now, in dollars per hour."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, ScalingBlocked, BudgetLimited, ProviderError, NodesUnhealthy.",
    )
    committed: CommittedUsage | None = Field(
        default=None, description="Committed pools: the commitment and how much of it is idle."
    )
    last_scale_time: str | None = Field(default=None, description="Last scale-up or release.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the status reflects."
    )


def serves_models(gpu: GPUSpec, models: tuple[str, ...]) -> bool:
    """Whether a pool with these GPUs may run a pod restricted to GPU ``models`` (empty: any
    whole GPU). A shared pool runs only pods that name its ``<model>-SHARED`` product; a
    pod that names a shared product runs only there. One rule for decide(), the simulator
    and its checks."""
    if gpu.sharing is not None:
        return product_label(gpu) in models
    return not models or gpu.model in models


def product_label(gpu: GPUSpec) -> str:
    """The nvidia.com/gpu.product value of the pool's nodes: ``<model>-SHARED`` when shared."""
    return gpu.model + SHARED_SUFFIX if gpu.sharing is not None else gpu.model


def physical_gpus(gpu: GPUSpec) -> int:
    """Physical GPUs in one node (the advertised units over the sharing replicas)."""
    return gpu.per_node // gpu.sharing.replicas if gpu.sharing is not None else gpu.per_node
