"""Kubernetes objects (as the apiserver sends them) -> snapshot types, with builders."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import (
    IdleTracker,
    epoch_of,
    gpu_pod,
    is_idle,
    job_state,
    node_state,
    pool_of_node,
    pool_selector,
)
from hybridgpu.kube.snapshot import Measurements, build_snapshot
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import Criticality

pytestmark = pytest.mark.unit

T0 = "2026-01-01T00:00:00Z"


def make_pod(
    name: str = "p",
    *,
    gpus: int = 1,
    node: str | None = None,
    job: str | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    phase: str = "Pending",
    pool: str | None = None,
) -> dict[str, Any]:
    res = {"requests": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels or {},
            "creationTimestamp": T0,
        },
        "spec": {"containers": [{"name": "c", "resources": res}]},
        "status": {"phase": phase, "conditions": []},
    }
    if node:
        pod["spec"]["nodeName"] = node
    if pool:
        pod["spec"]["nodeSelector"] = {"hybridgpu.io/pool": pool}
    if job:
        pod["metadata"]["ownerReferences"] = [
            {"kind": "Job", "apiVersion": "batch/v1", "name": job}
        ]
    if unschedulable:
        pod["status"]["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": "2026-01-01T00:00:10Z",
            }
        )
    return pod


def make_job(
    name: str = "j",
    *,
    gpus: int = 2,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    done: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": 2,
            "suspend": False,
            "template": {
                "spec": {
                    "nodeSelector": {"hybridgpu.io/pool": "core"},
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                    ],
                }
            },
        },
        "status": {
            "startTime": T0,
            "conditions": [{"type": "Complete", "status": "True"}] if done else [],
        },
    }


def make_node(name: str, pool: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"hybridgpu.io/pool": pool},
            "creationTimestamp": T0,
            "annotations": {},
        },
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def elastic() -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 8},
            "minNodes": 0,
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 30},
        }
    )


@pytest.mark.parametrize(
    ("pod", "jobs", "want"),
    [
        pytest.param(make_pod(gpus=0), {}, None, id="no-gpu"),
        pytest.param(make_pod(phase="Succeeded", node="n"), {}, None, id="finished"),
        pytest.param(make_pod(), {}, None, id="pending-not-yet-tried-by-scheduler"),
        pytest.param(make_pod(unschedulable=True), {}, ("standard", None), id="unschedulable"),
        pytest.param(
            make_pod(node="n", labels={"hybridgpu.io/criticality": "critical"}),
            {},
            ("critical", "n"),
            id="pod-label",
        ),
        pytest.param(
            make_pod(node="n", job="j"),
            {"ns/j": Criticality.PREEMPTIBLE},
            ("preemptible", "n"),
            id="from-its-job",
        ),
        pytest.param(
            make_pod(node="n", labels={"hybridgpu.io/criticality": "bogus"}),
            {},
            ("standard", "n"),
            id="unknown-label-is-standard",
        ),
    ],
)
def test_gpu_pod(pod: dict[str, Any], jobs: dict[str, Criticality], want: Any) -> None:
    got = gpu_pod(pod, jobs)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert (got.criticality.value, got.node) == want


def test_unschedulable_pod_is_pending_since_the_scheduler_said_so() -> None:
    got = gpu_pod(make_pod(unschedulable=True, job="j", pool="spot", gpus=4), {})
    assert got is not None
    assert got.pending_since == epoch_of("2026-01-01T00:00:10Z")
    assert (got.job, got.pool, got.gpus) == ("ns/j", "spot", 4)


def test_job_state_reads_move_intent_and_skips_finished_jobs() -> None:
    intent = json.dumps({"to": "spot", "from": "core", "step": "suspend", "since": 5})
    job = job_state(
        make_job(
            labels={"hybridgpu.io/criticality": "preemptible"},
            annotations={"hybridgpu.io/move": intent},
        )
    )
    assert job is not None
    assert job.criticality == Criticality.PREEMPTIBLE
    assert (job.gpus_per_pod, job.parallelism, job.pool) == (2, 2, "core")
    assert job.move is not None and (job.move.to_pool, job.move.step) == ("spot", "suspend")
    assert job_state(make_job(done=True)) is None
    assert not job.pinned_by_operator


def test_a_pin_is_the_operators_only_while_the_template_still_has_it() -> None:
    ours = job_state(make_job(annotations={"hybridgpu.io/pinned-to": "core"}))
    changed_by_owner = job_state(make_job(annotations={"hybridgpu.io/pinned-to": "spot"}))
    assert ours is not None and ours.pinned_by_operator
    assert changed_by_owner is not None and not changed_by_owner.pinned_by_operator


def test_node_belongs_to_pool_by_label_or_selector() -> None:
    spec = elastic()
    selectors = {"a": pool_selector("a", spec), "b": {"cloud": "yes"}}
    assert pool_of_node(make_node("n1", "a"), selectors) == "a"
    other = make_node("n2", "x")
    other["metadata"]["labels"]["cloud"] = "yes"
    assert pool_of_node(other, selectors) == "b"
    assert pool_of_node(make_node("n3", "x"), selectors) is None


def test_node_state_reads_cordon_release_and_interruption() -> None:
    raw = make_node("n", "a", unschedulable=True, providerID="kwok://a/n")
    raw["metadata"]["annotations"] = {
        "hybridgpu.io/releasing": "1",
        "hybridgpu.io/interruption-deadline": "99.5",
    }
    state = node_state(raw, "a", idle_since=3.0)
    assert (state.cordoned, state.releasing, state.interruption_deadline) == (True, True, 99.5)
    assert (state.gpus, state.ready, state.provider_id) == (8, True, "kwok://a/n")


def test_idle_tracker_keeps_the_start_of_an_idle_stretch() -> None:
    idle = IdleTracker()
    assert idle.observe("n", True, 10.0) == 10.0
    assert idle.observe("n", True, 20.0) == 10.0
    assert idle.observe("n", False, 30.0) is None
    assert idle.observe("n", True, 40.0) == 40.0
    assert is_idle(0, None, 10) and is_idle(1, 5.0, 10)
    assert not is_idle(1, None, 10) and not is_idle(1, 50.0, 10)


def test_snapshot_leaves_out_pods_of_moving_jobs() -> None:
    intent = json.dumps({"to": "a", "step": "suspend", "since": 1})
    objects = ClusterObjects(
        nodes=[make_node("n1", "a")],
        pods=[make_pod("moving", node="n1", job="j"), make_pod("other", node="n1", job="k")],
        jobs=[make_job("j", annotations={"hybridgpu.io/move": intent}), make_job("k")],
    )
    snap = build_snapshot(objects, {"a": elastic()}, Measurements(), IdleTracker(), now=100.0)
    assert [p.name for p in snap.pods] == ["other"]
    assert [n.name for n in snap.nodes] == ["n1"]
    assert snap.nodes[0].idle_since is None
    assert {j.name for j in snap.jobs} == {"j", "k"}
    elsewhere = json.dumps({"to": "other-policys-pool", "step": "suspend", "since": 1})
    objects.jobs[0]["metadata"]["annotations"]["hybridgpu.io/move"] = elsewhere
    snap = build_snapshot(objects, {"a": elastic()}, Measurements(), IdleTracker(), now=100.0)
    assert [p.name for p in snap.pods] == ["other"]
    assert [j.name for j in snap.jobs] == ["k"]


def test_pending_pods_of_another_policys_pool_are_not_this_policys_demand() -> None:
    objects = ClusterObjects(
        nodes=[],
        pods=[
            make_pod("mine", unschedulable=True, pool="a"),
            make_pod("theirs", unschedulable=True, pool="b"),
            make_pod("anyone", unschedulable=True),
        ],
        jobs=[],
    )
    pools = {"a": elastic()}
    everyone = build_snapshot(objects, pools, Measurements(), IdleTracker(), now=100.0)
    assert sorted(p.name for p in everyone.pods) == ["anyone", "mine"]
    default_owns_unpinned = build_snapshot(
        objects, pools, Measurements(), IdleTracker(), now=100.0, unpinned_demand=False
    )
    assert [p.name for p in default_owns_unpinned.pods] == ["mine"]


@pytest.mark.parametrize(
    ("value", "seconds", "error"),
    [
        (None, None, None),
        ("30m", 1800.0, None),
        ("0", 0.0, None),
        ("soon", None, "annotation hybridgpu.io/checkpoint-interval: 'soon' is not a duration"),
    ],
)
def test_a_jobs_checkpoint_interval_comes_from_its_annotation(value, seconds, error) -> None:
    annotations = {} if value is None else {"hybridgpu.io/checkpoint-interval": value}
    state = job_state(make_job(annotations=annotations))
    assert state is not None
    assert state.checkpoint_seconds == seconds
    assert (state.input_error is None) == (error is None)
    if error:
        assert error in str(state.input_error)


def test_a_bad_checkpoint_annotation_is_reported_in_the_plan() -> None:
    from dataclasses import replace

    from tests.support.builders import snapshot

    from hybridgpu.core.decide import decide
    from hybridgpu.models.policy import ScalingPolicySpec

    state = job_state(make_job(annotations={"hybridgpu.io/checkpoint-interval": "soon"}))
    assert state is not None
    snap = replace(snapshot([], [], []), jobs=(state,))
    plan = decide(snap, ScalingPolicySpec(), snap.taken_at)
    assert any("ns/j: annotation hybridgpu.io/checkpoint-interval" in n for n in plan.notes)


def test_a_replica_of_a_statefulset_or_leaderworkerset_names_its_workload() -> None:
    sts = make_pod(node="n")
    sts["metadata"]["ownerReferences"] = [
        {"kind": "StatefulSet", "apiVersion": "apps/v1", "name": "db", "controller": True}
    ]
    lws = make_pod(node="n", labels={"leaderworkerset.sigs.k8s.io/name": "llm"})
    lws["metadata"]["ownerReferences"] = [
        {"kind": "StatefulSet", "apiVersion": "apps/v1", "name": "llm-0", "controller": True}
    ]
    got = [gpu_pod(p, {}) for p in (sts, lws, make_pod(node="n", job="j"))]
    assert [g.stateful if g else "-" for g in got] == [
        "StatefulSet ns/db",
        "LeaderWorkerSet ns/llm",
        None,
    ]


def lws_pod(name: str, group: int, worker: int, gpus: int, size: int = 3) -> dict[str, Any]:
    """A pending pod of LeaderWorkerSet ``llm``'s group ``group`` as its controller labels it."""
    pod = make_pod(
        name,
        gpus=gpus,
        unschedulable=True,
        labels={
            "leaderworkerset.sigs.k8s.io/name": "llm",
            "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        },
    )
    pod["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    return pod


def test_a_leaderworkerset_group_is_one_gang_of_its_gpu_pods() -> None:
    """Each group (a leader and its workers) is a gang of its own; a leader without GPUs is
    not counted in it."""
    pods = [lws_pod("llm-0", 0, 0, 8), lws_pod("llm-0-1", 0, 1, 8), lws_pod("llm-0-2", 0, 2, 8)]
    pods += [lws_pod("llm-1", 1, 0, 0), lws_pod("llm-1-1", 1, 1, 8), lws_pod("llm-1-2", 1, 2, 8)]
    objects = ClusterObjects(nodes=[], pods=pods, jobs=[])
    snap = build_snapshot(objects, {"a": elastic()}, Measurements(), IdleTracker(), now=100.0)
    got = sorted((p.name, p.gang, p.gang_size) for p in snap.pods)
    assert got == [
        ("llm-0", "ns/llm#group-0", 3),
        ("llm-0-1", "ns/llm#group-0", 3),
        ("llm-0-2", "ns/llm#group-0", 3),
        ("llm-1-1", "ns/llm#group-1", 2),
        ("llm-1-2", "ns/llm#group-1", 2),
    ]
    # A pod with no group label (another controller's) is no gang.
    assert gpu_pod(make_pod(node="n", labels={"leaderworkerset.sigs.k8s.io/name": "x"}), {})
    other = gpu_pod(make_pod(node="n", labels={"leaderworkerset.sigs.k8s.io/name": "x"}), {})
    assert other is not None and other.gang is None


def test_the_moves_counted_on_a_job_tell_decide_its_run_is_a_restart() -> None:
    first = job_state(make_job())
    moved = job_state(make_job(annotations={"hybridgpu.io/restarts": "2"}))
    garbled = job_state(make_job(annotations={"hybridgpu.io/restarts": "-1"}))
    assert first is not None and first.restarts == 0
    assert moved is not None and moved.restarts == 2
    assert garbled is not None and garbled.restarts == 0
