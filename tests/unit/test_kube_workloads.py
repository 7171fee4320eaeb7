"""The workload adapters (kube/workloads): each kind's demand, criticality, gang, pods, and the
move's patches, on objects as the apiserver holds them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.support.builders import core_and_spot_pool_specs, policy, pool
from tests.support.workloads import jobset, pod_of, pytorchjob, rayjob, trainjob

from hybridgpu.core.decide import decide
from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import IdleTracker, job_state
from hybridgpu.kube.moves import STEP_REPINNED, STEP_SUSPEND, Move
from hybridgpu.kube.snapshot import Measurements, build_snapshot
from hybridgpu.kube.workloads import (
    JOB,
    KINDS,
    finish_patch,
    from_pool,
    owner_workload,
    repin_patch,
    start_patch,
    workload_state,
)
from hybridgpu.models.actions import ScaleUp

pytestmark = pytest.mark.unit

NOW = 1_767_225_600.0 + 600  # ten minutes after the objects' 2026-01-01T00:00:00Z


def batch_job(name: str, *, parallelism: int, gpus: int, gang: str | None = None) -> dict:
    notes = {"hybridgpu.io/gang": gang} if gang is not None else {}
    return {
        "metadata": {"name": name, "namespace": "team", "annotations": notes},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                    ]
                }
            },
        },
    }


@pytest.mark.parametrize(
    ("case", "obj", "want"),
    [
        (
            "a JobSet of 4 Jobs of one 8-GPU pod is a gang of 4",
            jobset("train", replicas=4, gpus=8, criticality="critical"),
            ("JobSet", 8, 4, True, "critical", False),
        ),
        (
            "a JobSet of 2 Jobs of 3 pods runs 6 pods at once",
            jobset("sweep", replicas=2, parallelism=3, gpus=1, suspend=True),
            ("JobSet", 1, 6, True, "standard", True),
        ),
        (
            "a RayJob's GPU-less head is no GPU demand; its workers are a gang",
            rayjob("tune", workers=2, gpus=4, criticality="preemptible"),
            ("RayJob", 4, 2, True, "preemptible", False),
        ),
        (
            "a PyTorchJob's master and workers run together",
            pytorchjob("ddp", workers=3, gpus=8),
            ("PyTorchJob", 8, 4, True, "standard", False),
        ),
        (
            "a TrainJob of 4 trainer nodes of 8 GPUs is a gang of 4",
            trainjob("llm", nodes=4, gpus=8, criticality="critical"),
            ("TrainJob", 8, 4, True, "critical", False),
        ),
        (
            "a JobSet of one pod is no gang",
            jobset("single", replicas=1, gpus=8),
            ("JobSet", 8, 1, False, "standard", False),
        ),
    ],
)
def test_each_kind_reads_its_demand_criticality_and_gang(case: str, obj: dict, want: tuple) -> None:
    state = workload_state(KINDS[obj["kind"]], obj)
    assert state is not None, case
    got = (
        state.kind,
        state.gpus_per_pod,
        state.parallelism,
        state.gang,
        str(state.criticality),
        state.suspended,
    )
    assert got == want, case


def test_a_workload_opts_out_of_gang_and_a_batch_job_opts_in() -> None:
    loose = jobset("loose", replicas=4)
    loose["metadata"]["annotations"] = {"hybridgpu.io/gang": "false"}
    state = workload_state(KINDS["JobSet"], loose)
    assert state is not None and not state.gang
    job = job_state(batch_job("j", parallelism=4, gpus=8, gang="true"))
    assert job is not None and job.gang and job.parallelism == 4
    plain = job_state(batch_job("k", parallelism=4, gpus=8))
    assert plain is not None and not plain.gang


def test_finished_workloads_are_no_demand() -> None:
    done = jobset("done")
    done["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    assert workload_state(KINDS["JobSet"], done) is None
    ray = rayjob("ray")
    ray["status"] = {"jobDeploymentStatus": "Complete"}
    assert workload_state(KINDS["RayJob"], ray) is None
    torch = pytorchjob("torch")
    torch["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    assert workload_state(KINDS["PyTorchJob"], torch) is None


@pytest.mark.parametrize(
    ("labels", "owner", "want"),
    [
        # A JobSet's pod is owned by its child Job: it belongs to the JobSet.
        (
            {"jobset.sigs.k8s.io/jobset-name": "train", "batch.kubernetes.io/job-name": "x"},
            ("Job", "train-workers-0"),
            ("JobSet", "train"),
        ),
        (
            {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "tune"},
            ("RayCluster", "tune-raycluster-abc"),
            ("RayJob", "tune"),
        ),
        # KubeRay v1.5.0: the pod names only its RayCluster, <rayjob>-<5 random characters>.
        (
            {"ray.io/cluster": "tune-x7k2q", "ray.io/is-ray-node": "yes"},
            ("RayCluster", "tune-x7k2q"),
            ("RayJob", "tune"),
        ),
        (
            {"ray.io/cluster": "my-llm-tune-bcd42", "ray.io/is-ray-node": "yes"},
            ("RayCluster", "my-llm-tune-bcd42"),
            ("RayJob", "my-llm-tune"),
        ),
        # A RayCluster made by hand is not a RayJob's (nor one without KubeRay's suffix).
        ({"ray.io/originated-from-crd": "RayCluster"}, ("RayCluster", "c"), None),
        ({"ray.io/cluster": "serving"}, ("RayCluster", "serving"), None),
        ({"ray.io/cluster": "serving-aeiou"}, ("RayCluster", "serving-aeiou"), None),
        (
            {"training.kubeflow.org/job-name": "ddp"},
            ("PyTorchJob", "ddp"),
            ("PyTorchJob", "ddp"),
        ),
        ({}, ("Job", "plain"), ("Job", "plain")),
        ({}, None, None),
    ],
)
def test_each_pod_belongs_to_its_workload(labels: dict, owner: tuple | None, want: tuple) -> None:
    ref = owner_workload(pod_of("p", 8, labels=labels, owner=owner))
    assert (None if ref is None else (ref.kind, ref.name)) == want


pools = core_and_spot_pool_specs


def apply_json_patch(obj: dict, ops: list[dict[str, Any]]) -> dict:
    """``add`` operations of RFC 6902, as the apiserver applies them (parents must exist)."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = op["value"]
    return out


@pytest.mark.parametrize(
    "obj",
    [
        jobset("train", pool="core"),
        rayjob("tune", pool="core"),
        pytorchjob("ddp", pool="core"),
        trainjob("llm", pool="core"),
    ],
)
def test_a_move_repoints_every_pod_template_of_the_workload(obj: dict) -> None:
    kind = KINDS[obj["kind"]]
    move = Move("spot", from_pool(kind, obj), STEP_SUSPEND, 1.0)
    assert move.from_pool == "core"
    started = start_patch(kind, move, obj)
    assert kind.suspended(merge(obj, started))
    moved = apply_json_patch(
        merge(obj, started), repin_patch(kind, merge(obj, started), move, pools())
    )
    for template in kind.templates(moved):
        spec = template.pod_spec
        assert spec["nodeSelector"] == {"hybridgpu.io/pool": "spot"}, template.path
        assert {
            "key": "hybridgpu.io/spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        } in spec["tolerations"]
    notes = moved["metadata"]["annotations"]
    assert json.loads(notes["hybridgpu.io/move"])["step"] == STEP_REPINNED
    assert notes["hybridgpu.io/pinned-to"] == "spot"
    # The move is counted: decide() reads the next run as a restart.
    state = workload_state(kind, moved)
    assert state is not None and state.restarts == 1
    resumed = merge(moved, finish_patch(kind))
    assert not kind.suspended(resumed)
    assert resumed["metadata"]["annotations"]["hybridgpu.io/move"] is None


def merge(obj: dict, patch: dict) -> dict:
    """RFC 7386 merge patch (None values kept, as the test reads them)."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def test_the_job_adapter_suspends_spec_suspend_and_clears_the_start_time() -> None:
    assert JOB.suspend_patch(True) == {"spec": {"suspend": True}}
    assert JOB.clears_start_time
    assert KINDS["PyTorchJob"].suspend_patch(True) == {"spec": {"runPolicy": {"suspend": True}}}


def jobset_objects(bound: int, pending: int) -> ClusterObjects:
    """A 4-pod JobSet with ``bound`` pods running and ``pending`` Unschedulable, its child
    Jobs listed as batch/v1 Jobs (owned by the JobSet)."""
    js = jobset("train", replicas=4, gpus=8, criticality="critical")
    js["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    children = []
    pods = []
    for i in range(4):
        child = f"train-workers-{i}"
        job = batch_job(child, parallelism=1, gpus=8)
        job["metadata"]["ownerReferences"] = [
            {"kind": "JobSet", "name": "train", "apiVersion": "jobset.x-k8s.io/v1alpha2"}
        ]
        children.append(job)
        if i < bound + pending:
            labels = {
                "jobset.sigs.k8s.io/jobset-name": "train",
                "batch.kubernetes.io/job-name": child,
            }
            node = f"core-{i}" if i < bound else None
            pods.append(pod_of(f"{child}-x", 8, labels=labels, owner=("Job", child), node=node))
    nodes = [
        {
            "metadata": {"name": f"core-{i}", "labels": {"hybridgpu.io/pool": "core"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(bound)
    ]
    return ClusterObjects(nodes=nodes, pods=pods, jobs=children, workloads=[js])


def test_a_jobsets_pods_and_child_jobs_are_one_gang_workload_in_the_snapshot() -> None:
    snap = build_snapshot(jobset_objects(1, 2), pools(), Measurements(), IdleTracker(), now=NOW)
    assert [(j.kind, j.key, j.parallelism, j.gang) for j in snap.jobs] == [
        ("JobSet", "team/train", 4, True)
    ]
    assert {p.job for p in snap.pods} == {"team/train"}
    assert {(p.gang, p.gang_size, str(p.criticality)) for p in snap.pods} == {
        ("team/train", 4, "critical")
    }
    # It started when its first pod did (its status says no start time).
    assert snap.jobs[0].started_at is not None


def test_a_half_created_jobset_asks_for_all_its_nodes_at_once() -> None:
    """Two of four pods exist and wait: the scale-up covers all four (one per node)."""
    snap = build_snapshot(jobset_objects(0, 2), pools(), Measurements(), IdleTracker(), now=NOW)
    the_pools = [pool("core", "core", max_nodes=0), pool("elastic", "elastic")]
    snap = type(snap)(taken_at=NOW, pools=tuple(the_pools), pods=snap.pods, jobs=snap.jobs)
    plan = decide(snap, policy(), NOW)
    assert [(a.pool, a.nodes) for a in plan.actions if isinstance(a, ScaleUp)] == [("elastic", 4)]


def test_a_jobset_kueue_manages_is_queued_with_its_pods_and_a_move_on_it_is_dropped() -> None:
    """Kueue owns a queued JobSet's suspend flag (kueue.x-k8s.io/queue-name): the snapshot
    says so for it and its pods (decide never moves them), and ignores a move recorded on it."""
    objects = jobset_objects(2, 0)
    js = objects.workloads[0]
    js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-queue"
    move = Move("spot", "core", STEP_SUSPEND, NOW - 60)
    js["metadata"].setdefault("annotations", {})["hybridgpu.io/move"] = move.annotation()
    snap = build_snapshot(objects, pools(), Measurements(), IdleTracker(), now=NOW)
    assert [(j.key, j.queued, j.move) for j in snap.jobs] == [("team/train", True, None)]
    assert {(p.job, p.queued) for p in snap.pods} == {("team/train", True)}


def test_a_trainjob_is_repointed_through_its_trainers_pod_spec_override() -> None:
    """A TrainJob has no pod template of its own: a move adds (or rewrites) the override of
    its trainer job (``node``), keeping the other overrides and the override's other fields."""
    kind = KINDS["TrainJob"]
    bare = trainjob("llm")
    bare["spec"]["podSpecOverrides"] = [
        {"targetJobs": [{"name": "dataset-initializer"}], "serviceAccountName": "data"}
    ]
    move = Move("spot", from_pool(kind, bare), STEP_SUSPEND, 1.0)
    assert move.from_pool is None
    bare = merge(bare, start_patch(kind, move, bare))
    moved = apply_json_patch(bare, repin_patch(kind, bare, move, pools()))
    initializer, trainer = moved["spec"]["podSpecOverrides"]
    assert initializer == bare["spec"]["podSpecOverrides"][0]
    assert trainer["targetJobs"] == [{"name": "node"}]
    assert trainer["nodeSelector"] == {"hybridgpu.io/pool": "spot"}
    assert from_pool(kind, moved) == "spot"

    pinned = trainjob("llm", pool="core")
    pinned["spec"]["podSpecOverrides"][0]["serviceAccountName"] = "train"
    move = Move("spot", from_pool(kind, pinned), STEP_SUSPEND, 1.0)
    assert move.from_pool == "core"
    pinned = merge(pinned, start_patch(kind, move, pinned))
    moved = apply_json_patch(pinned, repin_patch(kind, pinned, move, pools()))
    (trainer,) = moved["spec"]["podSpecOverrides"]
    assert trainer["serviceAccountName"] == "train"
    assert trainer["nodeSelector"] == {"hybridgpu.io/pool": "spot"}

    done = trainjob("llm")
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert workload_state(kind, done) is None


def test_a_trainjobs_jobset_and_pods_are_the_trainjobs_gang_in_the_snapshot() -> None:
    """The TrainJob's JobSet (same name, owned by it) is never a workload of its own: its
    pods are the TrainJob's, with its criticality and gang size."""
    objects = jobset_objects(1, 2)
    js = objects.workloads[0]
    js["metadata"]["ownerReferences"] = [
        {"kind": "TrainJob", "name": "train", "apiVersion": "trainer.kubeflow.org/v1alpha1"}
    ]
    train = trainjob("train", nodes=4, gpus=8, criticality="preemptible")
    train["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    objects.workloads.append(train)
    snap = build_snapshot(objects, pools(), Measurements(), IdleTracker(), now=NOW)
    assert [(j.kind, j.key, j.parallelism, j.gang) for j in snap.jobs] == [
        ("TrainJob", "team/train", 4, True)
    ]
    assert {(p.job, p.gang, p.gang_size, str(p.criticality)) for p in snap.pods} == {
        ("team/train", "team/train", 4, "preemptible")
    }
