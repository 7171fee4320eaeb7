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
DEADLINE_ANNOTATION = "hybridgpu.io/deadline"
"""On a preemptible Job: when it must have finished (RFC 3339, or a duration from creation)."""
EXPECTED_DURATION_ANNOTATION = "hybridgpu.io/expected-duration"
"""On a Job: the run time it needs from scratch (a duration); required with a deadline."""
RETURN_TO_CORE_ANNOTATION = "hybridgpu.io/return-to-core"
"""On a standard Job: "true" lets the operator move it from cloud nodes back to owned GPUs."""
PROGRESS_ANNOTATION = "hybridgpu.io/progress"
"""On a Job: seconds of work its checkpoints saved so far (the operator writes it when it
stops the Job; a workload that knows its progress may write it too)."""
RESTARTS_ANNOTATION = "hybridgpu.io/restarts"
"""How many moves the operator started for the workload (it counts each move it starts): a
run after one first loads its checkpoint."""
GANG_ANNOTATION = "hybridgpu.io/gang"
"""On a workload: "true" (a batch/v1 Job) or "false" (a JobSet, RayJob, PyTorchJob) says
whether its GPU pods must all run at once; capacity is then found for all or none."""
IDLE_TIMEOUT_ANNOTATION = "hybridgpu.io/idle-timeout"
"""On a Job or bare Pod: opt in to idle reclaim after this long below the idle threshold."""
IDLE_RECLAIM_CRITICAL_ANNOTATION = "hybridgpu.io/idle-reclaim-critical"
"""On a critical Job or Pod: "true" lets idle reclaim take it too."""
RECLAIMED_ANNOTATION = "hybridgpu.io/reclaimed"
"""On a Job: JSON {at, idleSeconds, gpus, heldDollars} of the idle reclaim that suspended it."""
RELEASING_ANNOTATION = "hybridgpu.io/releasing"
"""On a Node: RFC 3339 time the operator started to cordon, drain and terminate it."""
INTERRUPTION_ANNOTATION = "hybridgpu.io/interruption-deadline"
"""On a Node: epoch seconds the provider takes it away (written when a notice arrives)."""
REBALANCE_ANNOTATION = "hybridgpu.io/rebalance"
"""On a Deployment: JSON {node, pod, fromPool, toPool, replicas, step, since, stepSince,
timeout} while the operator moves one of its replicas to owned GPUs by surge."""
REBALANCE_GIVEN_UP_ANNOTATION = "hybridgpu.io/rebalance-given-up"
"""On a Deployment: epoch seconds its last rebalance was rolled back or aborted (the next
one waits an hour)."""
RESERVED_TAINT = "hybridgpu.io/reserved-for"
"""On a Node: a NoSchedule taint that keeps the node for one Job (core/reserve.py); its
value is a digest of the Job's ``namespace/name`` (kube/reserve.py). The Job's pods tolerate
it by value (its move adds the toleration), critical pods by key (admission)."""
RESERVED_ANNOTATION = "hybridgpu.io/reserved-for"
"""On a Node: the Job (``namespace/name``) the node is kept for, beside RESERVED_TAINT."""
CORDONED_BY_ANNOTATION = "hybridgpu.io/cordoned-by"
"""On a Node: why the operator cordoned it (release, interruption, xid)."""

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""On a Job, Pod or other workload: the Kueue LocalQueue that admits it. Kueue owns its
``spec.suspend`` (admission) and its pods' placement: the operator never suspends, resumes,
moves, reclaims or evicts it for a move; it provisions for it through ProvisioningRequests."""
PROVREQ_GROUP = "autoscaling.x-k8s.io"
PROVREQ_VERSION = "v1"
PROVREQ_PLURAL = "provisioningrequests"
"""ProvisioningRequests (cluster-autoscaler's API, which Kueue's admission check uses)."""
LEASE_NAME = "hybridgpu-operator"
EVENT_SOURCE = "hybridgpu-operator"
