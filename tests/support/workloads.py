"""Raw objects of the suspendable batch kinds (JobSet, RayJob, PyTorchJob), as the apiserver
holds them: for unit tests of the adapters and for creating them in the real control plane."""

from __future__ import annotations

from typing import Any

POOL_LABEL = "hybridgpu.io/pool"


def pod_template(
    gpus: int,
    *,
    pool: str | None = None,
    labels: dict[str, str] | None = None,
    run_duration: str | None = None,
    container: str = "main",
) -> dict[str, Any]:
    """A pod template asking for ``gpus`` nvidia.com/gpu (none: no GPU), pinned to ``pool``."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m"}}
    if gpus:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "100m"}}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": container, "image": "busybox", "resources": resources}],
    }
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    annotations = {}
    if run_duration:
        annotations["hybridgpu.io/run-duration"] = run_duration
    return {"metadata": {"labels": labels or {}, "annotations": annotations}, "spec": spec}


def jobset(
    name: str,
    *,
    replicas: int = 4,
    gpus: int = 8,
    parallelism: int = 1,
    pool: str | None = None,
    criticality: str | None = None,
    suspend: bool = False,
    run_duration: str | None = None,
    namespace: str = "team",
) -> dict[str, Any]:
    """A JobSet of one replicated Job: ``replicas`` Jobs of ``parallelism`` pods each.

    It carries the defaults the JobSet webhook sets (success, startup and network policies,
    Indexed completion), so the adapter tests, which run no webhook, see a JobSet as the
    controller does."""
    labels = {"hybridgpu.io/criticality": criticality} if criticality else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": suspend,
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": pod_template(gpus, pool=pool, run_duration=run_duration),
                        }
                    },
                }
            ],
        },
    }


def rayjob(
    name: str,
    *,
    workers: int = 2,
    gpus: int = 4,
    pool: str | None = None,
    criticality: str | None = None,
    namespace: str = "team",
    job_id: str | None = None,
) -> dict[str, Any]:
    """A RayJob whose cluster has a GPU-less head and ``workers`` GPU workers.

    With ``job_id`` it is in KubeRay's InteractiveMode with that Ray job id given (no
    submitter Job: the job is submitted by hand), which the KubeRay operator runs without a
    Ray dashboard answering (tests/support/kuberay.py)."""
    labels = {"hybridgpu.io/criticality": criticality} if criticality else {}
    submission: dict[str, Any] = {}
    if job_id:
        submission = {"submissionMode": "InteractiveMode", "jobId": job_id}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            **submission,
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": pod_template(0, pool=pool, container="ray-head"),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        "rayStartParams": {},
                        "template": pod_template(gpus, pool=pool, container="ray-worker"),
                    }
                ],
            },
        },
    }


def pytorchjob(
    name: str,
    *,
    workers: int = 3,
    gpus: int = 8,
    pool: str | None = None,
    criticality: str | None = None,
    namespace: str = "team",
) -> dict[str, Any]:
    """A PyTorchJob of one master and ``workers`` workers, ``gpus`` each."""
    labels = {"hybridgpu.io/criticality": criticality} if criticality else {}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "runPolicy": {"suspend": False},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": pod_template(gpus, pool=pool, container="pytorch"),
                },
                "Worker": {
                    "replicas": workers,
                    "template": pod_template(gpus, pool=pool, container="pytorch"),
                },
            },
        },
    }


def trainjob(
    name: str,
    *,
    nodes: int = 4,
    gpus: int = 8,
    pool: str | None = None,
    criticality: str | None = None,
    namespace: str = "team",
) -> dict[str, Any]:
    """A Kubeflow trainer v2 TrainJob of ``nodes`` trainer nodes of ``gpus`` each, on the
    torch-distributed runtime; pinned to ``pool`` through its trainer's podSpecOverride."""
    labels = {"hybridgpu.io/criticality": criticality} if criticality else {}
    spec: dict[str, Any] = {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {
            "image": "registry.example/train:latest",
            "numNodes": nodes,
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}},
        },
    }
    if pool:
        spec["podSpecOverrides"] = [
            {"targetJobs": [{"name": "node"}], "nodeSelector": {POOL_LABEL: pool}}
        ]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def pod_of(
    name: str,
    gpus: int,
    *,
    labels: dict[str, str],
    owner: tuple[str, str] | None = None,
    node: str | None = None,
    namespace: str = "team",
    started: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """A pod (bound to ``node``, or Unschedulable) with these labels and owner (kind, name)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "apiVersion": "batch/v1", "controller": True}
        ]
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if node:
        status["startTime"] = started
    else:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": status,
    }


class NoCapacity:
    """The capacity of a PlanExecutor that only moves workloads: a move never adds or removes
    machines, so any call to scale or terminate fails the test."""

    def scale_up(self, pool: str, nodes: int) -> None:
        raise AssertionError("a move does not scale")

    def terminate(self, pool: str, node: str, provider_id: str | None) -> bool:
        raise AssertionError("a move does not terminate")

    def known_provider_ids(self, pool: str) -> set[str] | None:
        return None
