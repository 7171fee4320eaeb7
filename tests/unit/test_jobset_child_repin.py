"""A JobSet (or a TrainJob, whose JobSet has its name) moved between pools that select their
nodes by different label keys. The JobSet controller (v0.11.1, ``resumeJob``) merges the
resumed JobSet's template ``nodeSelector`` and tolerations into the suspended child Jobs it
kept, so a child repinned only through its JobSet keeps the old pool's keys and its pods ask
for both pools' labels. The move therefore repoints the child Jobs too, before it resumes."""

from __future__ import annotations

import copy
from typing import Any, cast

import jsonpatch
import pytest
from tests.support.builders import core_and_spot_pool_specs
from tests.support.fake_cluster import FakeCluster
from tests.support.workloads import jobset

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.moves import STEP_SUSPEND, Move, read_move
from hybridgpu.kube.workloads import KINDS, child_job_repin_patch, repin_patch, start_patch
from hybridgpu.kube.workloads.kinds import JOBSET_NAME_LABEL
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

OWNED = {"example.com/owned": "true"}
SPOT = {"example.com/capacity": "spot"}
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
NAMESPACED_JOB = "jobset.sigs.k8s.io/namespaced-job"


def pools() -> dict[str, GPUPoolSpec]:
    """Owned and spot pools whose nodeSelectors use different label keys."""
    return core_and_spot_pool_specs(core_selector=OWNED, spot_selector=SPOT)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def jobset_pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec


def child_job(parent: dict[str, Any], index: int, *, suspended: bool = True) -> dict[str, Any]:
    """A child Job as the JobSet controller made it from ``parent`` while it ran on core: the
    template's scheduling fields plus its own namespaced-job selector, started once."""
    name = f"{parent['metadata']['name']}-workers-{index}"
    spec = copy.deepcopy(parent["spec"]["replicatedJobs"][0]["template"]["spec"])
    spec["suspend"] = suspended
    spec["template"]["spec"]["nodeSelector"] = {**OWNED, NAMESPACED_JOB: f"team_{name}"}
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "labels": {JOBSET_NAME_LABEL: parent["metadata"]["name"]},
        },
        "spec": spec,
        "status": {"startTime": "2026-01-01T00:00:00Z"},
    }


def resume_child(child: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any]:
    """What JobSet v0.11.1's ``resumeJob`` makes of a suspended child: the parent's template
    selector and tolerations merged into the child's, never replacing them."""
    resumed = copy.deepcopy(child)
    mine, theirs = pod_spec(resumed), jobset_pod_spec(parent)
    mine["nodeSelector"] = {**(mine.get("nodeSelector") or {}), **theirs.get("nodeSelector", {})}
    tolerations = list(mine.get("tolerations") or [])
    tolerations += [t for t in theirs.get("tolerations") or [] if t not in tolerations]
    mine["tolerations"] = tolerations
    resumed["spec"]["suspend"] = False
    return resumed


def moving_jobset(cluster: FakeCluster, *, children_suspended: bool = True) -> dict[str, Any]:
    """A preemptible JobSet pinned to core by core's selector, its move to spot recorded and
    its pods gone, with the two child Jobs it kept."""
    obj = jobset("sweep", replicas=2, gpus=8, criticality="preemptible", suspend=True)
    jobset_pod_spec(obj)["nodeSelector"] = dict(OWNED)
    plan = Move("spot", None, STEP_SUSPEND, 1.0)
    obj["metadata"]["annotations"] = start_patch(KINDS["JobSet"], plan, obj)["metadata"][
        "annotations"
    ]
    cluster.workloads[("JobSet", "team", "sweep")] = obj
    for i in range(2):
        child = child_job(obj, i, suspended=children_suspended)
        cluster.jobs[("team", child["metadata"]["name"])] = child
    return copy.deepcopy(obj)


def executor(cluster: FakeCluster) -> PlanExecutor:
    return PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: 1.0)


def test_repinning_only_the_jobset_leaves_resumed_children_asking_for_both_pools() -> None:
    """The bug: the JobSet's template is repointed, but the controller's merge keeps core's key
    in each child, so no node (core's or spot's) matches."""
    cluster = FakeCluster()
    obj = moving_jobset(cluster)
    moved = jsonpatch.apply_patch(obj, repin_patch(KINDS["JobSet"], obj, read(obj), pools()))
    assert jobset_pod_spec(moved)["nodeSelector"] == SPOT
    child = resume_child(cluster.jobs[("team", "sweep-workers-0")], moved)
    assert OWNED.items() <= pod_spec(child)["nodeSelector"].items()
    assert SPOT.items() <= pod_spec(child)["nodeSelector"].items()


def read(obj: dict[str, Any]) -> Move:
    move = read_move(obj["metadata"]["annotations"])
    assert move is not None
    return move


def test_the_move_repoints_every_suspended_child_job_before_it_resumes_the_jobset() -> None:
    cluster = FakeCluster()
    obj = moving_jobset(cluster)
    assert executor(cluster).advance_move(obj, pools()) is True
    moved = cluster.workloads[("JobSet", "team", "sweep")]
    assert moved["spec"]["suspend"] is False
    assert jobset_pod_spec(moved)["nodeSelector"] == SPOT
    for i in range(2):
        child = cluster.jobs[("team", f"sweep-workers-{i}")]
        # Core's key gone, spot's in, the controller's own key kept; started again from zero.
        assert pod_spec(child)["nodeSelector"] == {
            **SPOT,
            NAMESPACED_JOB: f"team_sweep-workers-{i}",
        }
        assert pod_spec(child)["tolerations"] == [SPOT_TOLERATION]
        assert child["status"].get("startTime") is None
        resumed = resume_child(child, moved)
        assert pod_spec(resumed)["nodeSelector"] == pod_spec(child)["nodeSelector"]
        assert pod_spec(resumed)["tolerations"] == [SPOT_TOLERATION]


def test_a_child_job_not_suspended_yet_holds_the_move_until_it_is() -> None:
    cluster = FakeCluster()
    obj = moving_jobset(cluster, children_suspended=False)
    runner = executor(cluster)
    assert runner.advance_move(obj, pools()) is False
    held = cluster.workloads[("JobSet", "team", "sweep")]
    assert held["spec"]["suspend"] is True
    assert read(held).to_pool == "spot"
    assert (
        OWNED.items() <= pod_spec(cluster.jobs[("team", "sweep-workers-0")])["nodeSelector"].items()
    )
    for child in cluster.jobs.values():
        child["spec"]["suspend"] = True
    assert runner.advance_move(held, pools()) is True
    assert cluster.workloads[("JobSet", "team", "sweep")]["spec"]["suspend"] is False


def test_a_child_already_pointing_at_the_target_is_not_written() -> None:
    cluster = FakeCluster()
    obj = moving_jobset(cluster)
    for child in cluster.jobs.values():
        ops = child_job_repin_patch(child, read(obj), pools())
        assert ops is not None
        pod_spec(child)["nodeSelector"] = {
            k: v for k, v in pod_spec(child)["nodeSelector"].items() if k not in OWNED
        } | SPOT
        pod_spec(child)["tolerations"] = [SPOT_TOLERATION]
        assert child_job_repin_patch(child, read(obj), pools()) is None
    executor(cluster).advance_move(obj, pools())
    assert not [w for w in cluster.writes if w[0] == "patch_job"]


def test_jobs_of_other_jobsets_are_left_alone() -> None:
    cluster = FakeCluster()
    obj = moving_jobset(cluster)
    other = child_job(jobset("other", replicas=1), 0)
    other["metadata"]["labels"][JOBSET_NAME_LABEL] = "other"
    cluster.jobs[("team", "other-workers-0")] = other
    executor(cluster).advance_move(obj, pools())
    assert (
        OWNED.items() <= pod_spec(cluster.jobs[("team", "other-workers-0")])["nodeSelector"].items()
    )


@pytest.mark.parametrize(("kind", "expected"), [(k, k in ("JobSet", "TrainJob")) for k in KINDS])
def test_only_kinds_run_by_a_jobset_repoint_child_jobs(kind: str, expected: bool) -> None:
    assert (KINDS[kind].child_jobs_selector is not None) is expected
