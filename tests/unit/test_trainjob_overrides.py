"""A TrainJob's move through each Kubeflow Trainer API: v2.2's ``spec.runtimePatches`` (its own
``hybridgpu.io/manager`` entry), v2.1's ``spec.podTemplateOverrides`` and v2.0's
``spec.podSpecOverrides``; which one a cluster serves, read from its TrainJob CRD. The JSON
patches are applied with RFC 6902 semantics (jsonpatch), as the apiserver applies them."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import jsonpatch
import pytest
from tests.support.builders import core_and_spot_pool_specs
from tests.support.fake_cluster import FakeCluster
from tests.support.workloads import trainjob

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.moves import STEP_SUSPEND, Move
from hybridgpu.kube.workloads import (
    KINDS,
    WorkloadKind,
    from_pool,
    repin_patch,
    start_patch,
    workload_state,
)
from hybridgpu.kube.workloads.kinds import (
    POD_SPEC_OVERRIDES,
    POD_TEMPLATE_OVERRIDES,
    RUNTIME_PATCH_MANAGER,
    RUNTIME_PATCHES,
    TRAINJOB_CRD,
    TrainJob,
    trainjob_override_field,
)

pytestmark = pytest.mark.unit

SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
KUEUE_PATCH = {
    "manager": "kueue.x-k8s.io/manager",
    "time": "2026-01-01T00:00:00Z",
    "trainingRuntimeSpec": {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}
                        },
                    }
                ]
            },
        }
    },
}


pools = core_and_spot_pool_specs


def move(obj: dict[str, Any], kind: TrainJob, to_pool: str) -> dict[str, Any]:
    """``obj`` after a whole move to ``to_pool``: the start patch, then the repin patch."""
    plan = Move(to_pool, from_pool(kind, obj), STEP_SUSPEND, 1.0)
    started = copy.deepcopy(obj)
    started["spec"]["suspend"] = True
    started["metadata"]["annotations"] = start_patch(kind, plan, obj)["metadata"]["annotations"]
    ops = repin_patch(kind, started, plan, pools())
    return dict(jsonpatch.apply_patch(started, ops))


def trainer_pod_spec(patch: dict[str, Any]) -> dict[str, Any]:
    """The trainer job's pod spec in a runtime patch, by the Go types' path
    (RuntimePatch.trainingRuntimeSpec.template.spec.replicatedJobs[name=node]
    .template.spec.template.spec)."""
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (node,) = [j for j in jobs if j["name"] == "node"]
    spec: dict[str, Any] = node["template"]["spec"]["template"]["spec"]
    return spec


def crd(fields: list[str], version: str = "v1alpha1") -> dict[str, Any]:
    """A TrainJob CRD whose ``version`` schema has ``fields`` in its spec."""
    props = {f: {"type": "array"} for f in ["runtimeRef", "suspend", *fields]}
    return {
        "spec": {
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "properties": {"spec": {"type": "object", "properties": props}}
                        }
                    },
                }
            ]
        }
    }


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ([POD_SPEC_OVERRIDES], POD_SPEC_OVERRIDES),  # Trainer v2.0
        ([POD_TEMPLATE_OVERRIDES], POD_TEMPLATE_OVERRIDES),  # v2.1
        ([RUNTIME_PATCHES], RUNTIME_PATCHES),  # v2.2
        ([POD_SPEC_OVERRIDES, RUNTIME_PATCHES], RUNTIME_PATCHES),  # newest first
        ([], None),
    ],
)
def test_the_served_field_is_read_from_the_trainjob_crd(fields: list[str], want: str) -> None:
    assert trainjob_override_field(crd(fields)) == want


def test_no_crd_or_another_version_serves_no_field() -> None:
    assert trainjob_override_field(None) is None
    assert trainjob_override_field(crd([RUNTIME_PATCHES], version="v1")) is None


def test_trainer_v2_2_gets_hybridgpus_own_runtime_patch_beside_other_managers() -> None:
    """A move appends an entry with manager hybridgpu.io/manager whose trainer job's pod spec
    has the pool's nodeSelector and tolerations; Kueue's entry stays as it was."""
    kind = TrainJob(RUNTIME_PATCHES)
    job = trainjob("llm", nodes=2, gpus=8)
    job["spec"][RUNTIME_PATCHES] = [copy.deepcopy(KUEUE_PATCH)]
    moved = move(job, kind, "spot")
    kueue, ours = moved["spec"][RUNTIME_PATCHES]
    assert kueue == KUEUE_PATCH
    assert ours["manager"] == RUNTIME_PATCH_MANAGER
    assert set(ours) == {"manager", "trainingRuntimeSpec"}  # "time" is the webhook's
    assert trainer_pod_spec(ours) == {
        "nodeSelector": {"hybridgpu.io/pool": "spot"},
        "tolerations": [SPOT_TOLERATION],
    }
    assert from_pool(KINDS["TrainJob"], moved) == "spot"  # read back without the CRD
    assert moved["spec"]["trainer"] == job["spec"]["trainer"]  # immutable: never written
    assert POD_SPEC_OVERRIDES not in moved["spec"]

    # Applying the same move's patch again changes nothing.
    plan = Move("spot", "spot", STEP_SUSPEND, 1.0)
    again = jsonpatch.apply_patch(moved, repin_patch(kind, moved, plan, pools()))
    assert again["spec"] == moved["spec"]

    # A later move replaces hybridgpu's entry: spot's selector and toleration go.
    back = move(moved, kind, "core")
    kueue, ours = back["spec"][RUNTIME_PATCHES]
    assert kueue == KUEUE_PATCH
    assert trainer_pod_spec(ours) == {
        "nodeSelector": {"hybridgpu.io/pool": "core"},
        "tolerations": [],
    }
    assert from_pool(KINDS["TrainJob"], back) == "core"


def test_a_trainjob_without_runtime_patches_gets_a_list_of_one() -> None:
    kind = TrainJob(RUNTIME_PATCHES)
    moved = move(trainjob("llm"), kind, "spot")
    (ours,) = moved["spec"][RUNTIME_PATCHES]
    assert ours["manager"] == RUNTIME_PATCH_MANAGER
    assert trainer_pod_spec(ours)["nodeSelector"] == {"hybridgpu.io/pool": "spot"}


def test_hybridgpus_entry_is_found_wherever_it_is_and_rewritten_whole() -> None:
    """Its entry after another manager's (Kueue added one since): rewritten in place, guarded
    by a test that it is still hybridgpu's; fields a person added to it are not kept."""
    kind = TrainJob(RUNTIME_PATCHES)
    job = move(trainjob("llm"), kind, "spot")
    ours = job["spec"][RUNTIME_PATCHES][0]
    ours["time"] = "2026-01-01T00:00:00Z"
    trainer_pod_spec(ours)["schedulingGates"] = [{"name": "someone"}]
    job["spec"][RUNTIME_PATCHES].insert(0, copy.deepcopy(KUEUE_PATCH))
    plan = Move("core", "spot", STEP_SUSPEND, 1.0)
    ops = repin_patch(kind, job, plan, pools())
    assert ops[0] == {
        "op": "test",
        "path": f"/spec/{RUNTIME_PATCHES}/1/manager",
        "value": RUNTIME_PATCH_MANAGER,
    }
    moved = jsonpatch.apply_patch(job, ops)
    kueue, ours = moved["spec"][RUNTIME_PATCHES]
    assert kueue == KUEUE_PATCH
    assert trainer_pod_spec(ours) == {
        "nodeSelector": {"hybridgpu.io/pool": "core"},
        "tolerations": [],
    }
    # Had the entries moved between the read and the patch, the test fails the whole patch.
    job["spec"][RUNTIME_PATCHES].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(job, ops)


def test_trainer_v2_1_gets_a_pod_template_override_for_its_trainer() -> None:
    kind = TrainJob(POD_TEMPLATE_OVERRIDES)
    job = trainjob("llm")
    initializer = {
        "targetJobs": [{"name": "dataset-initializer"}],
        "spec": {"serviceAccountName": "d"},
    }
    job["spec"][POD_TEMPLATE_OVERRIDES] = [initializer]
    moved = move(job, kind, "spot")
    kept, ours = moved["spec"][POD_TEMPLATE_OVERRIDES]
    assert kept == initializer
    assert ours == {
        "targetJobs": [{"name": "node"}],
        "spec": {"nodeSelector": {"hybridgpu.io/pool": "spot"}, "tolerations": [SPOT_TOLERATION]},
    }
    assert from_pool(KINDS["TrainJob"], moved) == "spot"
    back = move(moved, kind, "core")
    assert back["spec"][POD_TEMPLATE_OVERRIDES][1]["spec"] == {
        "nodeSelector": {"hybridgpu.io/pool": "core"},
        "tolerations": [],
    }
    # A trainer override without a spec yet gets one.
    job["spec"][POD_TEMPLATE_OVERRIDES] = [{"targetJobs": [{"name": "node"}]}]
    assert move(job, kind, "spot")["spec"][POD_TEMPLATE_OVERRIDES] == [ours]


def test_trainer_v2_0_keeps_its_pod_spec_override() -> None:
    kind = TrainJob(POD_SPEC_OVERRIDES)
    moved = move(trainjob("llm", pool="core"), kind, "spot")
    assert moved["spec"][POD_SPEC_OVERRIDES] == [
        {
            "targetJobs": [{"name": "node"}],
            "nodeSelector": {"hybridgpu.io/pool": "spot"},
            "tolerations": [SPOT_TOLERATION],
        }
    ]
    assert RUNTIME_PATCHES not in moved["spec"]


def test_demand_is_read_the_same_through_every_field() -> None:
    for field in (RUNTIME_PATCHES, POD_TEMPLATE_OVERRIDES, POD_SPEC_OVERRIDES):
        moved = move(trainjob("llm", nodes=4, gpus=8), TrainJob(field), "spot")
        state = workload_state(KINDS["TrainJob"], moved)
        assert state is not None
        assert (state.gpus_per_pod, state.parallelism, state.gang, state.pool) == (
            8,
            4,
            True,
            "spot",
        )


# --- the executor: which field it writes, read from the cluster's TrainJob CRD -------------


def suspended_trainjob(cluster: FakeCluster, to_pool: str) -> dict[str, Any]:
    """A TrainJob whose move to ``to_pool`` is recorded and which is suspended, its pods
    gone: the next step repins it."""
    job = trainjob("llm", nodes=2, gpus=8)
    job["spec"][RUNTIME_PATCHES] = [copy.deepcopy(KUEUE_PATCH)]
    job["spec"]["suspend"] = True
    plan = Move(to_pool, None, STEP_SUSPEND, 1.0)
    job["metadata"]["annotations"] = start_patch(KINDS["TrainJob"], plan, job)["metadata"][
        "annotations"
    ]
    cluster.workloads[("TrainJob", "team", "llm")] = job
    return copy.deepcopy(job)


def executor(cluster: FakeCluster) -> PlanExecutor:
    return PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: 1.0)


def test_the_executor_writes_the_runtime_patch_a_v2_2_crd_serves_and_resumes() -> None:
    cluster = FakeCluster()
    cluster.crds[TRAINJOB_CRD] = crd([RUNTIME_PATCHES])
    job = suspended_trainjob(cluster, "spot")
    assert executor(cluster).advance_move(job, pools()) is True
    moved = cluster.workloads[("TrainJob", "team", "llm")]
    assert moved["spec"]["suspend"] is False
    assert "hybridgpu.io/move" not in moved["metadata"]["annotations"]
    kueue, ours = moved["spec"][RUNTIME_PATCHES]
    assert kueue == KUEUE_PATCH
    assert trainer_pod_spec(ours)["nodeSelector"] == {"hybridgpu.io/pool": "spot"}


def test_the_executor_writes_pod_spec_overrides_where_the_crd_is_v2_0() -> None:
    cluster = FakeCluster()
    cluster.crds[TRAINJOB_CRD] = crd([POD_SPEC_OVERRIDES])
    job = suspended_trainjob(cluster, "spot")
    del cluster.workloads[("TrainJob", "team", "llm")]["spec"][RUNTIME_PATCHES]
    del job["spec"][RUNTIME_PATCHES]
    assert executor(cluster).advance_move(job, pools()) is True
    moved = cluster.workloads[("TrainJob", "team", "llm")]
    assert moved["spec"][POD_SPEC_OVERRIDES][0]["nodeSelector"] == {"hybridgpu.io/pool": "spot"}


def test_a_crd_serving_no_override_field_keeps_the_trainjob_suspended_and_says_why() -> None:
    """No field to repoint it through (a Trainer that renamed it again, or no CRD to read):
    the TrainJob stays suspended with its move recorded, a Warning Event says why, and the
    move goes on once the CRD serves one."""
    cluster = FakeCluster()
    cluster.crds[TRAINJOB_CRD] = crd([])
    job = suspended_trainjob(cluster, "spot")
    run = executor(cluster)
    assert run.advance_move(job, pools()) is False
    held = cluster.workloads[("TrainJob", "team", "llm")]
    assert held["spec"]["suspend"] is True
    assert json.loads(held["metadata"]["annotations"]["hybridgpu.io/move"])["step"] == "suspend"
    assert held["spec"][RUNTIME_PATCHES] == [KUEUE_PATCH]
    (event,) = [e for e in cluster.events if e["reason"] == "MoveBlocked"]
    assert event["type"] == "Warning"
    assert event["name"] == "llm"
    assert "serves none of spec.runtimePatches" in event["message"]

    cluster.crds[TRAINJOB_CRD] = crd([RUNTIME_PATCHES])  # Trainer upgraded
    assert run.advance_move(copy.deepcopy(held), pools()) is True
    assert cluster.workloads[("TrainJob", "team", "llm")]["spec"]["suspend"] is False


class PruningCluster(FakeCluster):
    """An apiserver whose TrainJob schema has no ``spec.runtimePatches`` any more (its CRD
    changed after the operator read it): it drops that field from what it stores."""

    def patch_workload(
        self, kind: WorkloadKind, namespace: str, name: str, patch: dict[str, Any] | list[Any]
    ) -> dict[str, Any]:
        super().patch_workload(kind, namespace, name, patch)
        self.workloads[(kind.kind, namespace, name)]["spec"].pop(RUNTIME_PATCHES, None)
        return copy.deepcopy(self.workloads[(kind.kind, namespace, name)])


def test_a_pin_the_apiserver_drops_is_written_again_through_the_field_it_serves_now() -> None:
    cluster = PruningCluster()
    cluster.crds[TRAINJOB_CRD] = crd([RUNTIME_PATCHES])
    job = suspended_trainjob(cluster, "spot")
    run = executor(cluster)
    assert run.advance_move(job, pools()) is False
    held = cluster.workloads[("TrainJob", "team", "llm")]
    assert held["spec"]["suspend"] is True
    assert json.loads(held["metadata"]["annotations"]["hybridgpu.io/move"])["step"] == "suspend"
    (event,) = [e for e in cluster.events if e["reason"] == "MoveBlocked"]
    assert "dropped the spec.runtimePatches entry" in event["message"]

    cluster.crds[TRAINJOB_CRD] = crd([POD_SPEC_OVERRIDES])  # read again at once
    assert run.advance_move(copy.deepcopy(held), pools()) is True
    moved = cluster.workloads[("TrainJob", "team", "llm")]
    assert moved["spec"][POD_SPEC_OVERRIDES][0]["nodeSelector"] == {"hybridgpu.io/pool": "spot"}
    assert moved["spec"]["suspend"] is False


DEDICATED = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}


def trainjobs_jobset(tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    """The JobSet Trainer made for the TrainJob ``llm``, its trainer pods with ``tolerations``
    (the runtime's and every runtime patch's)."""
    pod_spec = {"containers": [{"name": "node"}], "tolerations": tolerations}
    return {
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "team"},
        "spec": {
            "replicatedJobs": [
                {"name": "dataset-initializer", "template": {"spec": {"template": {"spec": {}}}}},
                {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}},
            ]
        },
    }


@pytest.mark.parametrize(
    ("now", "to_pool", "want"),
    [
        ([DEDICATED], "spot", [DEDICATED, SPOT_TOLERATION]),
        ([DEDICATED, SPOT_TOLERATION], "core", [DEDICATED]),
        ([], "spot", [SPOT_TOLERATION]),
    ],
)
def test_a_v2_2_move_keeps_the_tolerations_the_trainer_pods_have_from_their_runtime(
    now: list[dict[str, Any]], to_pool: str, want: list[dict[str, Any]]
) -> None:
    """v2.2 applies the entry as a strategic merge patch, whose tolerations list replaces the
    runtime's: the entry carries the JobSet's trainer tolerations, other pools' dropped."""
    cluster = FakeCluster()
    cluster.crds[TRAINJOB_CRD] = crd([RUNTIME_PATCHES])
    cluster.workloads[("JobSet", "team", "llm")] = trainjobs_jobset(copy.deepcopy(now))
    job = suspended_trainjob(cluster, to_pool)
    assert executor(cluster).advance_move(job, pools()) is True
    _, ours = cluster.workloads[("TrainJob", "team", "llm")]["spec"][RUNTIME_PATCHES]
    assert trainer_pod_spec(ours)["tolerations"] == want
