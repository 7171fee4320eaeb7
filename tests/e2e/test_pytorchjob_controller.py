"""PyTorchJobs with the real Kubeflow training operator's PyTorchJob controller (built from
github.com/kubeflow/training-operator, hack/training-operator.sh) and the operator as a
subprocess, on the real control plane: a preempted PyTorchJob is moved whole through the
controller's own suspend and resume (``spec.runPolicy.suspend``: it deletes the pods, and on
resume creates them again from the repointed templates), and a PyTorchJob gang gets all its
nodes in one scale-up or none."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import SPOT_TAINT, Cluster, Operators, wait_for
from support.controlplane import ControlPlane, KubeTest, gpu_job
from support.customobjects import CreatedObjects, all_running_on, created_objects
from support.trainingoperator import pytorchjob_controller
from support.workloads import pytorchjob

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture(scope="module")
def controller_running(
    kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    with pytorchjob_controller(kube_cluster, tmp_path_factory.mktemp("training-operator")):
        yield


@pytest.fixture
def pytorchjobs(kube: KubeTest, controller_running: None) -> Iterator[CreatedObjects]:
    """The PyTorchJobs the test created: deleted (with their pods) after it."""
    with created_objects(kube, GROUP, VERSION, PLURAL, what="PyTorchJobs gone") as objects:
        yield objects


def pytorchjob_object(kube: KubeTest, name: str) -> dict[str, Any]:
    return CreatedObjects(kube, GROUP, VERSION, PLURAL).get(name)


def conditions(kube: KubeTest, name: str) -> dict[str, str]:
    status = pytorchjob_object(kube, name).get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def pods_of(kube: KubeTest, name: str) -> list[Any]:
    return list(
        kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
        ).items
    )


def running_on(kube: KubeTest, name: str, nodes: set[str], count: int) -> bool:
    return all_running_on(pods_of(kube, name), nodes, count)


def test_a_preempted_pytorchjob_moves_whole_to_spot_through_the_controllers_suspend(
    cluster: Cluster, operators: Operators, pytorchjobs: CreatedObjects
) -> None:
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=8, max_nodes=2)
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, per_node=8, max_nodes=2, taints=[SPOT_TAINT]
    )
    core_nodes = set(cluster.core_nodes(core, 2, gpus=8))
    # A preemptible PyTorchJob whose master and worker (8 GPUs each) fill both core nodes.
    pytorchjobs.create(pytorchjob("ddp", workers=1, criticality="preemptible"))
    wait_for(lambda: running_on(cluster.kube, "ddp", core_nodes, 2), 90, "ddp running on core")
    wait_for(lambda: conditions(cluster.kube, "ddp").get("Running") == "True", 60, "Running")
    first_pods = {p.metadata.uid for p in pods_of(cluster.kube, "ddp")}

    operators.start()
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=8, run_duration="600s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )

    def whole_on_spot() -> bool:
        nodes = {n.metadata.name for n in cluster.pool_nodes(spot)}
        return bool(nodes) and running_on(cluster.kube, "ddp", nodes, 2)

    wait_for(whole_on_spot, 180, "the PyTorchJob's master and worker running on spot")
    # The controller deleted the pods on suspend and made new ones on resume.
    assert not first_pods & {p.metadata.uid for p in pods_of(cluster.kube, "ddp")}
    body = pytorchjob_object(cluster.kube, "ddp")
    assert body["spec"]["runPolicy"]["suspend"] is False
    notes = body["metadata"].get("annotations") or {}
    assert "hybridgpu.io/move" not in notes
    assert notes.get("hybridgpu.io/pinned-to") == spot
    for role in ("Master", "Worker"):
        template = body["spec"]["pytorchReplicaSpecs"][role]["template"]
        assert template["spec"]["nodeSelector"] == {"hybridgpu.io/pool": spot}
    # The controller itself suspended it (deleting its pods) and resumed it.
    for reason in ("PyTorchJobSuspended", "PyTorchJobResumed"):
        wait_for(
            lambda reason=reason: [
                e for e in cluster.events(reason) if e.involved_object.name == "ddp"
            ],
            60,
            f"the controller's {reason} Event ({conditions(cluster.kube, 'ddp')})",
        )
    wait_for(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("urgent")),
        60,
        "the critical Job running",
    )
    moves = [e.message for e in cluster.events("Preempt")]
    assert any("ddp" in m for m in moves), moves


def test_a_pytorchjob_of_four_8_gpu_pods_gets_four_nodes_in_one_scale_up_or_none(
    cluster: Cluster, operators: Operators, pytorchjobs: CreatedObjects
) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, per_node=8, max_nodes=3)
    operators.start()
    cluster.wait_ticking(policy)

    pytorchjobs.create(pytorchjob("llm", workers=3))
    wait_for(lambda: len(pods_of(cluster.kube, "llm")) == 4, 90, "the controller's 4 pods")
    # maxNodes=3 cannot hold the gang: no node is bought for part of it.
    wait_for(lambda: cluster.events("ScalingBlocked"), 60, "the gang reported blocked")
    cluster.wait_ticks(policy, 2)
    assert cluster.pool_nodes(elastic) == []
    assert all(p.spec.node_name is None for p in pods_of(cluster.kube, "llm"))

    cluster.kube.custom.patch_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", "gpupools", elastic, {"spec": {"maxNodes": 4}}
    )

    def all_on_elastic() -> bool:
        nodes = {n.metadata.name for n in cluster.pool_nodes(elastic)}
        return len(nodes) == 4 and running_on(cluster.kube, "llm", nodes, 4)

    wait_for(all_on_elastic, 150, "the PyTorchJob's 4 pods running on 4 new nodes")
    messages = [e.message for e in cluster.events("ScaleUp") if e.involved_object.name == elastic]
    assert messages and all("add 4 " in m for m in messages), messages
