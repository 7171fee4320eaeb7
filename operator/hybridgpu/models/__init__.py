"""Pydantic models of the custom resources, and the snapshot and plan types of the core.

The names below are imported on first use (PEP 562): building the pydantic models costs a
quarter of a CPU second, and ``hybridgpu.models.snapshot`` (plain dataclasses) is imported by
paths that need none of them, such as reading a trace that turns out to be malformed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybridgpu.models.base import Condition, Rule, SpecModel, parse_duration_seconds
    from hybridgpu.models.capacityplan import CapacityPlanSpec, CapacityPlanStatus
    from hybridgpu.models.policy import ScalingPolicySpec, ScalingPolicyStatus
    from hybridgpu.models.pool import GPUPoolSpec, GPUPoolStatus, Tier
    from hybridgpu.models.resources import RESOURCES, CapacityPlan, GPUPool, ScalingPolicy

_WHERE = {
    "Condition": "base",
    "Rule": "base",
    "SpecModel": "base",
    "parse_duration_seconds": "base",
    "CapacityPlanSpec": "capacityplan",
    "CapacityPlanStatus": "capacityplan",
    "ScalingPolicySpec": "policy",
    "ScalingPolicyStatus": "policy",
    "GPUPoolSpec": "pool",
    "GPUPoolStatus": "pool",
    "Tier": "pool",
    "RESOURCES": "resources",
    "CapacityPlan": "resources",
    "GPUPool": "resources",
    "ScalingPolicy": "resources",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
