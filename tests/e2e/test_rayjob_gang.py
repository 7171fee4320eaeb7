"""RayJobs with the real KubeRay operator (built from github.com/ray-project/kuberay/ray-operator,
hack/kuberay.sh) and the hybridgpu operator as a subprocess, on the real control plane: a RayJob
gang gets all its nodes in one scale-up or none, and a preempted RayJob is moved whole
(suspended, its RayCluster and pods gone, every template repointed, resumed).

KubeRay creates the RayCluster and its head and worker pods itself. There is no Ray in kwok, so
the RayJobs are in InteractiveMode with ``spec.jobId`` given (tests/support/kuberay.py): KubeRay
takes them to Running once the cluster is Ready and never completes them; one is in K8sJobMode,
with a submitter pod kwok keeps running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import SPOT_TAINT, Cluster, Operators, wait_for
from support.controlplane import ControlPlane, KubeTest, gpu_job
from support.customobjects import CreatedObjects, created_objects
from support.kuberay import kuberay_operator
from support.workloads import rayjob

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ray.io", "v1"


@pytest.fixture(scope="module")
def kuberay_running(
    kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    with kuberay_operator(kube_cluster, tmp_path_factory.mktemp("kuberay")):
        yield


@pytest.fixture
def rayjobs(kube: KubeTest, kuberay_running: None) -> Iterator[CreatedObjects]:
    """The RayJobs the test created: deleted after it (while KubeRay runs, so it lifts its
    finalizer), with their RayClusters and pods."""
    with created_objects(
        kube,
        GROUP,
        VERSION,
        "rayjobs",
        gone=lambda o: not o.left() and not o.left("rayclusters"),
        timeout_seconds=90,
        what="rayjobs and rayclusters gone",
    ) as objects:
        yield objects


def rayjob_object(kube: KubeTest, name: str) -> dict[str, Any]:
    return CreatedObjects(kube, GROUP, VERSION, "rayjobs").get(name)


def deployment_status(kube: KubeTest, name: str) -> str | None:
    status = rayjob_object(kube, name).get("status") or {}
    if status.get("jobDeploymentStatus") == "ValidationFailed":
        raise AssertionError(f"KubeRay refused RayJob {name}: {status.get('message')}")
    return status.get("jobDeploymentStatus")


def rayclusters(kube: KubeTest) -> list[str]:
    items = kube.custom.list_namespaced_custom_object(
        GROUP, VERSION, kube.namespace, "rayclusters"
    )["items"]
    return sorted(c["metadata"]["name"] for c in items)


def ray_pods(kube: KubeTest, name: str, *, workers_only: bool = False) -> list[Any]:
    """The pods of RayJob ``name``'s RayCluster (KubeRay names it ``<name>-<5 characters>``
    and labels its pods ray.io/cluster with it)."""
    selector = "ray.io/is-ray-node=yes"
    if workers_only:
        selector += ",ray.io/node-type=worker"
    pods = kube.core.list_namespaced_pod(kube.namespace, label_selector=selector).items
    return [p for p in pods if p.metadata.labels["ray.io/cluster"].rsplit("-", 1)[0] == name]


def scale_up_messages(cluster: Cluster, pool: str) -> list[str]:
    return [e.message for e in cluster.events("ScaleUp") if e.involved_object.name == pool]


def test_a_rayjob_of_four_8_gpu_workers_gets_four_nodes_in_one_scale_up_or_none(
    cluster: Cluster, operators: Operators, rayjobs: CreatedObjects
) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, per_node=8, max_nodes=3)
    operators.start()
    cluster.wait_ticking(policy)

    rayjobs.create(rayjob("tune", workers=4, gpus=8, job_id="tune-1"))
    # KubeRay made the RayCluster: a GPU-less head and four 8-GPU workers, all pending.
    wait_for(lambda: len(ray_pods(cluster.kube, "tune")) == 5, 90, "the RayCluster's 5 pods")
    assert len(ray_pods(cluster.kube, "tune", workers_only=True)) == 4
    # maxNodes=3 cannot hold the gang: no node is bought for part of it.
    wait_for(
        lambda: cluster.events("ScalingBlocked") or cluster.events("BudgetExceeded"),
        60,
        "the gang reported blocked",
    )
    cluster.wait_ticks(policy, 2)
    assert cluster.pool_nodes(elastic) == []
    assert scale_up_messages(cluster, elastic) == []
    assert all(p.spec.node_name is None for p in ray_pods(cluster.kube, "tune"))
    assert deployment_status(cluster.kube, "tune") == "Initializing"

    # Room for all four: four nodes in one scale-up; the cluster gets Ready and KubeRay runs
    # the job.
    cluster.kube.custom.patch_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", "gpupools", elastic, {"spec": {"maxNodes": 4}}
    )
    wait_for(lambda: deployment_status(cluster.kube, "tune") == "Running", 120, "RayJob Running")
    messages = scale_up_messages(cluster, elastic)
    assert messages and all("add 4 " in m for m in messages), messages
    nodes = {n.metadata.name for n in cluster.pool_nodes(elastic)}
    assert len(nodes) == 4
    workers = ray_pods(cluster.kube, "tune", workers_only=True)
    assert len(workers) == 4 and {p.spec.node_name for p in workers} == nodes


def test_a_preempted_rayjob_moves_whole_to_spot(
    cluster: Cluster, operators: Operators, rayjobs: CreatedObjects
) -> None:
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=8, max_nodes=2)
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, per_node=8, max_nodes=2, taints=[SPOT_TAINT]
    )
    core_nodes = set(cluster.core_nodes(core, 2, gpus=8))
    # A preemptible RayJob whose two 8-GPU workers fill both core nodes.
    rayjobs.create(
        rayjob("sweep", workers=2, gpus=8, criticality="preemptible", job_id="sweep-1"),
    )
    wait_for(lambda: deployment_status(cluster.kube, "sweep") == "Running", 90, "RayJob Running")
    first_cluster = rayjob_object(cluster.kube, "sweep")["status"]["rayClusterName"]
    workers = ray_pods(cluster.kube, "sweep", workers_only=True)
    assert len(workers) == 2 and {p.spec.node_name for p in workers} == core_nodes

    operators.start()
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "urgent",
            gpus=8,
            run_duration="600s",
            labels={"hybridgpu.io/criticality": "critical"},
        )
    )

    def whole_rayjob_on_spot() -> bool:
        nodes = {n.metadata.name for n in cluster.pool_nodes(spot)}
        pods = [p for p in ray_pods(cluster.kube, "sweep") if p.status.phase == "Running"]
        return len(pods) == 3 and all(p.spec.node_name in nodes for p in pods)

    wait_for(whole_rayjob_on_spot, 180, "the RayJob's head and both workers running on spot")
    # KubeRay tore the first RayCluster down (suspend) and made a new one (resume).
    assert first_cluster not in rayclusters(cluster.kube)
    wait_for(
        lambda: deployment_status(cluster.kube, "sweep") == "Running", 90, "RayJob Running again"
    )
    body = rayjob_object(cluster.kube, "sweep")
    assert body["status"]["rayClusterName"] != first_cluster
    assert body["spec"]["suspend"] is False
    notes = body["metadata"].get("annotations") or {}
    assert "hybridgpu.io/move" not in notes
    assert notes.get("hybridgpu.io/pinned-to") == spot
    ray_cluster = body["spec"]["rayClusterSpec"]
    for template in (
        ray_cluster["headGroupSpec"]["template"],
        ray_cluster["workerGroupSpecs"][0]["template"],
    ):
        assert template["spec"]["nodeSelector"] == {"hybridgpu.io/pool": spot}
    # The critical Job got an owned node.
    wait_for(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("urgent")),
        60,
        "the critical Job running",
    )
    moves = [e.message for e in cluster.events("Preempt")]
    assert any("sweep" in m for m in moves), moves


def submitter_jobs(kube: KubeTest, name: str) -> list[Any]:
    """The submitter Jobs KubeRay made for RayJob ``name`` (K8sJobMode)."""
    return list(
        kube.batch.list_namespaced_job(
            kube.namespace, label_selector=f"ray.io/originated-from-cr-name={name}"
        ).items
    )


def test_a_preempted_rayjob_in_k8s_job_mode_moves_and_gets_a_new_submitter(
    cluster: Cluster, operators: Operators, rayjobs: CreatedObjects
) -> None:
    """K8sJobMode (KubeRay's default): KubeRay runs ``ray job submit`` in a submitter Job it
    owns. hybridgpu moves the RayJob, never the submitter Job by itself (a GPU-less Job of
    another kind's): on suspend KubeRay deletes the Job with the RayCluster, and on resume
    makes both again, the workers on spot. (No Ray in kwok: the submitter pod only runs for
    ``hybridgpu.io/run-duration``, and KubeRay's queries of the dashboard fail and are
    retried, so the RayJob stays Running.)"""
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=8, max_nodes=2)
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, per_node=8, max_nodes=2, taints=[SPOT_TAINT]
    )
    core_nodes = set(cluster.core_nodes(core, 2, gpus=8))
    body = rayjob("submit", workers=2, gpus=8, criticality="preemptible")
    body["spec"]["submissionMode"] = "K8sJobMode"
    body["spec"]["submitterPodTemplate"] = {
        "metadata": {"annotations": {"hybridgpu.io/run-duration": "600s"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "ray-job-submitter", "image": "rayproject/ray:2.46.0"}],
        },
    }
    rayjobs.create(body)
    wait_for(lambda: deployment_status(cluster.kube, "submit") == "Running", 120, "RayJob Running")
    workers = ray_pods(cluster.kube, "submit", workers_only=True)
    assert len(workers) == 2 and {p.spec.node_name for p in workers} == core_nodes
    wait_for(lambda: submitter_jobs(cluster.kube, "submit"), 60, "KubeRay's submitter Job")
    (first_submitter,) = submitter_jobs(cluster.kube, "submit")
    assert [r.kind for r in first_submitter.metadata.owner_references] == ["RayJob"]

    operators.start()
    cluster.wait_ticking(policy)
    cluster.kube.create_job(
        gpu_job(
            "urgent", gpus=8, run_duration="600s", labels={"hybridgpu.io/criticality": "critical"}
        )
    )

    def workers_on_spot() -> bool:
        nodes = {n.metadata.name for n in cluster.pool_nodes(spot)}
        pods = [
            p
            for p in ray_pods(cluster.kube, "submit", workers_only=True)
            if p.status.phase == "Running"
        ]
        return len(pods) == 2 and all(p.spec.node_name in nodes for p in pods)

    wait_for(workers_on_spot, 240, "the RayJob's workers running on spot")
    wait_for(
        lambda: deployment_status(cluster.kube, "submit") == "Running",
        90,
        "RayJob Running again",
    )

    def new_submitter() -> list[Any]:
        return [
            j
            for j in submitter_jobs(cluster.kube, "submit")
            if j.metadata.uid != first_submitter.metadata.uid
            and j.metadata.deletion_timestamp is None
        ]

    wait_for(new_submitter, 90, "KubeRay's new submitter Job")
    (submitter,) = new_submitter()
    # hybridgpu never suspended, annotated or repointed the submitter Job itself.
    notes = submitter.metadata.annotations or {}
    assert not [k for k in notes if k.startswith("hybridgpu.io/")], notes
    assert not submitter.spec.suspend
    assert not (submitter.spec.template.spec.node_selector or {})
    body = rayjob_object(cluster.kube, "submit")
    assert body["spec"]["suspend"] is False
    assert "hybridgpu.io/move" not in (body["metadata"].get("annotations") or {})
    moves = [e.message for e in cluster.events("Preempt")]
    assert any("submit" in m for m in moves), moves
