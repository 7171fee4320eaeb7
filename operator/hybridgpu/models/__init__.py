"""Pydantic models of the custom resources, and the snapshot and plan types of the core."""

from hybridgpu.models.base import Condition, Rule, SpecModel, parse_duration_seconds
from hybridgpu.models.capacityplan import CapacityPlanSpec, CapacityPlanStatus
from hybridgpu.models.policy import ScalingPolicySpec, ScalingPolicyStatus
from hybridgpu.models.pool import GPUPoolSpec, GPUPoolStatus, Tier
from hybridgpu.models.resources import RESOURCES, CapacityPlan, GPUPool, ScalingPolicy

__all__ = [
    "RESOURCES",
    "CapacityPlan",
    "CapacityPlanSpec",
    "CapacityPlanStatus",
    "Condition",
    "GPUPool",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "Rule",
    "ScalingPolicy",
    "ScalingPolicySpec",
    "ScalingPolicyStatus",
    "SpecModel",
    "Tier",
    "parse_duration_seconds",
]
