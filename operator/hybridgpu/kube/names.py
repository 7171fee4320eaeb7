"""Label, annotation, taint and resource names the operator reads and writes (one place)."""

from __future__ import annotations

GROUP = "hybridgpu.io"
VERSION = "v1alpha1"
GPUPOOLS = "gpupools"
SCALINGPOLICIES = "scalingpolicies"

GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "hybridgpu.io/pool"
TIER_LABEL = "hybridgpu.io/tier"
"""On a Node: its pool's tier (core, elastic, spot); admission holds preemptible pods by it."""
CRITICALITY_LABEL = "hybridgpu.io/criticality"
FINALIZER = "hybridgpu.io/finalizer"

MOVE_ANNOTATION = "hybridgpu.io/move"
"""On a Job: JSON {to, from, step, since} while the operator moves it between pools."""
PINNED_ANNOTATION = "hybridgpu.io/pinned-to"
# On a Job: how much progress it makes between checkpoints (a duration; 0 = never).
CHECKPOINT_ANNOTATION = "hybridgpu.io/checkpoint-interval"
"""On a Job: the pool the operator (not the Job's owner) pinned its pod template to."""
RELEASING_ANNOTATION = "hybridgpu.io/releasing"
"""On a Node: RFC 3339 time the operator started to cordon, drain and terminate it."""
INTERRUPTION_ANNOTATION = "hybridgpu.io/interruption-deadline"
"""On a Node: epoch seconds the provider takes it away (written when a notice arrives)."""
CORDONED_BY_ANNOTATION = "hybridgpu.io/cordoned-by"
"""On a Node: why the operator cordoned it (release, interruption, xid)."""

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEASE_NAME = "hybridgpu-operator"
EVENT_SOURCE = "hybridgpu-operator"
