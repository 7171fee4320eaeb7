"""TrainJobs with the real Kubeflow Trainer v2.2 controller manager (built from
github.com/kubeflow/trainer/v2, hack/trainer.sh; its webhooks registered) and the JobSet
controller it creates a JobSet through, with the operator as a subprocess, on the real control
plane: a preempted TrainJob is moved to spot through ``spec.runtimePatches`` (hybridgpu's own
``hybridgpu.io/manager`` entry, beside another manager's), and once resumed the pods of the
JobSet the Trainer controller rebuilds carry the spot pool's nodeSelector and tolerations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import SPOT_TAINT, SPOT_TOLERATION, Cluster, Operators, wait_for
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.workloads import KINDS
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import ControlPlane, KubeTest, gpu_job
from support.customobjects import CreatedObjects, all_running_on, created_objects
from support.jobset import jobset_controller
from support.trainer import RUNTIME, trainer_controller
from support.workloads import NoCapacity

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
OTHER_MANAGER = "example.com/labels"
"""Another manager's runtime patch on the TrainJob (a pod label, and how long kwok runs the
pods), which a move must keep."""
RUN_DURATION = "hybridgpu.io/run-duration"
DEDICATED = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
"""A toleration the other manager's patch gives the trainer pods, which moves must keep."""


@pytest.fixture(scope="module")
def controllers_running(
    kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    with (
        jobset_controller(kube_cluster, tmp_path_factory.mktemp("jobset")),
        trainer_controller(kube_cluster, tmp_path_factory.mktemp("trainer")),
    ):
        yield


@pytest.fixture
def trainjobs(kube: KubeTest, controllers_running: None) -> Iterator[CreatedObjects]:
    """The TrainJobs the test created: deleted (with their JobSets and pods) after it."""
    with created_objects(kube, GROUP, VERSION, PLURAL, what="TrainJobs gone") as objects:
        yield objects


def trainjob_v22(name: str, *, nodes: int, gpus: int, criticality: str) -> dict[str, Any]:
    """A TrainJob on the torch-distributed runtime with another manager's runtime patch."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"hybridgpu.io/criticality": criticality}},
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {
                "image": "registry.example/train:latest",
                "numNodes": nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}},
            },
            "runtimePatches": [
                {
                    "manager": OTHER_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "metadata": {
                                                        "labels": {"team": "nlp"},
                                                        # kwok runs Job pods this long
                                                        "annotations": {RUN_DURATION: "600s"},
                                                    },
                                                    "spec": {"tolerations": [DEDICATED]},
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def trainjob_object(kube: KubeTest, name: str) -> dict[str, Any]:
    return CreatedObjects(kube, GROUP, VERSION, PLURAL).get(name)


def pods_of(kube: KubeTest, name: str) -> list[Any]:
    pods = kube.core.list_namespaced_pod(
        kube.namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}"
    ).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def running_on(kube: KubeTest, name: str, nodes: set[str], count: int) -> bool:
    return all_running_on(pods_of(kube, name), nodes, count)


def test_a_preempted_trainjob_moves_to_spot_through_its_runtime_patch(
    cluster: Cluster, operators: Operators, trainjobs: CreatedObjects
) -> None:
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=8, max_nodes=2)
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, per_node=8, max_nodes=2, taints=[SPOT_TAINT]
    )
    core_nodes = set(cluster.core_nodes(core, 2, gpus=8))
    # A preemptible TrainJob of two 8-GPU trainer nodes fills both core nodes, through the
    # JobSet the Trainer controller makes for it.
    trainjobs.create(trainjob_v22("llm", nodes=2, gpus=8, criticality="preemptible"))
    wait_for(lambda: running_on(cluster.kube, "llm", core_nodes, 2), 120, "llm running on core")
    first_pods = {p.metadata.uid for p in pods_of(cluster.kube, "llm")}

    operators.start()
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=8, run_duration="600s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )

    def whole_on_spot() -> bool:
        nodes = {n.metadata.name for n in cluster.pool_nodes(spot)}
        return bool(nodes) and running_on(cluster.kube, "llm", nodes, 2)

    wait_for(whole_on_spot, 240, "the TrainJob's 2 pods running on spot")
    pods = pods_of(cluster.kube, "llm")
    assert not first_pods & {p.metadata.uid for p in pods}
    for pod in pods:
        assert pod.spec.node_selector == {"hybridgpu.io/pool": spot}
        tolerations = [
            {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
            for t in pod.spec.tolerations or []
        ]
        assert SPOT_TOLERATION in tolerations
        assert {**DEDICATED, "value": None} in tolerations  # the other manager's, kept
        assert pod.metadata.labels.get("team") == "nlp"  # the other manager's patch applies
    body = trainjob_object(cluster.kube, "llm")
    assert body["spec"]["suspend"] is False
    notes = body["metadata"].get("annotations") or {}
    assert "hybridgpu.io/move" not in notes
    assert notes.get("hybridgpu.io/pinned-to") == spot
    patches = {p["manager"]: p for p in body["spec"]["runtimePatches"]}
    assert set(patches) == {OTHER_MANAGER, "hybridgpu.io/manager"}
    assert "time" in patches["hybridgpu.io/manager"]  # the Trainer webhook stamped it
    (node_job,) = patches["hybridgpu.io/manager"]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ]
    assert node_job["name"] == "node"
    pod_spec = node_job["template"]["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"hybridgpu.io/pool": spot}
    # Trainer applies the entries as strategic merge patches, in which tolerations replace:
    # the JobSet it rebuilt (which new child Jobs, after a JobSet restart, are made from)
    # keeps the other manager's toleration because hybridgpu's entry carries it too.
    jobset = cluster.kube.custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", cluster.kube.namespace, "jobsets", "llm"
    )
    (replicated,) = jobset["spec"]["replicatedJobs"]
    rebuilt = replicated["template"]["spec"]["template"]["spec"]["tolerations"]
    assert DEDICATED in rebuilt and SPOT_TOLERATION in rebuilt, rebuilt
    wait_for(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("urgent")),
        60,
        "the critical Job running",
    )
    moves = [e.message for e in cluster.events("Preempt")]
    assert any("llm" in m for m in moves), moves


def test_each_move_rewrites_hybridgpus_one_runtime_patch_through_the_trainer_webhooks(
    kube: KubeTest, trainjobs: CreatedObjects
) -> None:
    """The operator's move (in this process) run twice on a TrainJob, with Trainer's
    webhooks validating each write: the first appends hybridgpu's entry, the second rewrites
    it in place (the JSON patch's test and replace); there is one hybridgpu entry, the other
    manager's is unchanged, and the Trainer controller rebuilds the JobSet's pods with the
    second pool's nodeSelector. (No nodes: the pods stay pending, which is all a move needs.)"""
    spec = {
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 8},
    }
    pools = {
        "spot": GPUPoolSpec.model_validate({**spec, "tier": "spot", "taints": [SPOT_TAINT]}),
        "elastic": GPUPoolSpec.model_validate({**spec, "tier": "elastic"}),
    }
    cluster = KubeCluster(kube.plane.api)
    executor = PlanExecutor(cluster, NoCapacity(), time.time)
    kind = KINDS["TrainJob"]
    trainjobs.create(trainjob_v22("llm", nodes=2, gpus=8, criticality="preemptible"))
    wait_for(lambda: len(pods_of(kube, "llm")) == 2, 60, "the TrainJob's 2 pods")
    created = trainjob_object(kube, "llm")["spec"]["runtimePatches"]

    for pool in ("spot", "elastic"):
        executor.start_move(kube.namespace, "llm", pool, pools, kind)

        def moved() -> bool:
            job = cluster.get_workload(kind, kube.namespace, "llm")
            return executor.advance_moves([job], pools) == 0

        wait_for(moved, 120, f"the move to {pool} done")
        patches = trainjob_object(kube, "llm")["spec"]["runtimePatches"]
        assert [p["manager"] for p in patches] == [OTHER_MANAGER, "hybridgpu.io/manager"]
        assert patches[0] == created[0]
        (node_job,) = patches[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        assert node_job["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
            "hybridgpu.io/pool": pool
        }
        wait_for(
            lambda pool=pool: (
                len(pods := pods_of(kube, "llm")) == 2
                and all(p.spec.node_selector == {"hybridgpu.io/pool": pool} for p in pods)
            ),
            90,
            f"the JobSet's pods remade for {pool}",
        )
    # The JobSet the Trainer controller rebuilt, and the pods of its child Jobs (repointed by
    # the move before the resume, which JobSet v0.11.1 merges into them rather than replaces),
    # have no spot toleration any more, and keep the other manager's.
    jobset = kube.custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", kube.namespace, "jobsets", "llm"
    )
    (replicated,) = jobset["spec"]["replicatedJobs"]
    pod_spec = replicated["template"]["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"hybridgpu.io/pool": "elastic"}
    assert pod_spec["tolerations"] == [DEDICATED]
    for pod in pods_of(kube, "llm"):
        keys = [t.key for t in pod.spec.tolerations or []]
        assert SPOT_TAINT["key"] not in keys and DEDICATED["key"] in keys, keys
