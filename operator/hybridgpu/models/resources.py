"""The custom resources as whole objects (apiVersion, kind, metadata, spec, status)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from hybridgpu.models.base import ObjectMeta
from hybridgpu.models.capacityplan import CapacityPlanSpec, CapacityPlanStatus
from hybridgpu.models.policy import ScalingPolicySpec, ScalingPolicyStatus
from hybridgpu.models.pool import GPUPoolSpec, GPUPoolStatus

API_VERSION = "hybridgpu.io/v1alpha1"


class PrinterColumn(BaseModel):
    """A column of `kubectl get`."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0


class Resource(BaseModel):
    """Base of a custom resource: what the CRD generator needs to know besides the schema."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    plural: ClassVar[str]
    short_names: ClassVar[tuple[str, ...]]
    description: ClassVar[str]
    printer_columns: ClassVar[tuple[PrinterColumn, ...]] = ()

    api_version: Literal["hybridgpu.io/v1alpha1"] = Field(alias="apiVersion")
    metadata: ObjectMeta


class GPUPool(Resource):
    plural = "gpupools"
    short_names = ("gp",)
    description = (
        "GPUPool is one pool of identical GPU nodes in one capacity tier: core (owned), "
        "elastic (on-demand cloud) or spot."
    )
    printer_columns = (
        PrinterColumn(name="Tier", type="string", json_path=".spec.tier", description="Tier."),
        PrinterColumn(
            name="Status",
            type="string",
            json_path='.status.conditions[?(@.type=="Ready")].reason',
            description="Reason of the Ready condition: Reconciled, AboveMaxNodes, "
            "PolicyNotFound, InvalidSpec, Draining (kubectl describe says more).",
        ),
        PrinterColumn(
            name="Nodes", type="integer", json_path=".status.nodes.total", description="Nodes."
        ),
        PrinterColumn(
            name="Max",
            type="integer",
            json_path=".spec.maxNodes",
            description="maxNodes.",
            priority=1,
        ),
        PrinterColumn(
            name="GPUs", type="integer", json_path=".status.gpus.total", description="GPUs."
        ),
        PrinterColumn(
            name="Alloc",
            type="integer",
            json_path=".status.gpus.allocated",
            description="GPUs requested by running pods.",
        ),
        PrinterColumn(
            name="Util",
            type="number",
            json_path=".status.utilization",
            description="Average GPU utilization, percent.",
        ),
        PrinterColumn(
            name="$/H",
            type="number",
            json_path=".status.costPerHour",
            description="Cost per hour, dollars.",
        ),
    )

    kind: Literal["GPUPool"]
    spec: GPUPoolSpec
    status: GPUPoolStatus | None = None


class ScalingPolicy(Resource):
    plural = "scalingpolicies"
    short_names = ("sp",)
    description = (
        "ScalingPolicy says how the operator scales, preempts, consolidates and releases "
        "capacity; the one named 'default' applies unless a pool names another."
    )
    printer_columns = (
        PrinterColumn(
            name="DryRun", type="boolean", json_path=".spec.dryRun", description="Acts on nothing."
        ),
        PrinterColumn(
            name="Interval", type="string", json_path=".spec.interval", description="Tick interval."
        ),
        PrinterColumn(
            name="Spent",
            type="number",
            json_path=".status.budget.spentThisMonth",
            description="Cloud dollars spent this month.",
        ),
        PrinterColumn(
            name="Last-Tick",
            type="date",
            json_path=".status.lastTick",
            description="Time of the last tick.",
        ),
    )

    kind: Literal["ScalingPolicy"]
    spec: ScalingPolicySpec = Field(default_factory=ScalingPolicySpec)
    status: ScalingPolicyStatus | None = None


class CapacityPlan(Resource):
    plural = "capacityplans"
    short_names = ("cplan",)
    description = (
        "CapacityPlan computes, from measured demand, how many GPU nodes to own and how much to "
        "rent on demand and on spot at the lowest total cost of ownership."
    )
    printer_columns = (
        PrinterColumn(
            name="Owned",
            type="integer",
            json_path=".status.recommendedNodes",
            description="Recommended owned nodes.",
        ),
        PrinterColumn(
            name="Savings%",
            type="number",
            json_path=".status.savingsVsOnDemandPercent",
            description="Saving versus all on-demand.",
        ),
        PrinterColumn(
            name="$/Month",
            type="number",
            json_path=".status.monthlyCost.total",
            description="Projected monthly TCO.",
        ),
    )

    kind: Literal["CapacityPlan"]
    spec: CapacityPlanSpec
    status: CapacityPlanStatus | None = None


RESOURCES: tuple[type[Resource], ...] = (GPUPool, ScalingPolicy, CapacityPlan)
