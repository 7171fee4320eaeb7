"""RayJob, PyTorchJob and TrainJob against the real apiserver with their CRDs alone (built from
the served Go modules, hack/jobset.sh; no KubeRay, training-operator or trainer controller
runs): the operator lists them and its watch cache streams them, and its move (suspend, wait
for the pods, repoint every pod template, resume) is accepted by their schemas."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import config

from hybridgpu.kube.cache import WatchCache
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.workloads import KINDS
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import ControlPlane, KubeTest, wait_until
from support.jobset import install_workload_crds
from support.workloads import NoCapacity, pod_of, pytorchjob, rayjob, trainjob

pytestmark = pytest.mark.adapters

SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}


def pools() -> dict[str, GPUPoolSpec]:
    def spec(tier: str, **extra: Any) -> GPUPoolSpec:
        body = {
            "tier": tier,
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "provider": {"type": "static" if tier == "core" else "fake"},
            "pricing": {"capexPerNode": 1} if tier == "core" else {"perNodeHour": 8},
            **extra,
        }
        return GPUPoolSpec.model_validate(body)

    return {"core": spec("core"), "spot": spec("spot", taints=[SPOT_TAINT])}


@pytest.fixture(scope="module")
def workload_crds(kube_cluster: ControlPlane) -> None:
    install_workload_crds(kube_cluster, "WORKLOAD_CRDS")


@pytest.fixture
def operator_side(kube: KubeTest, workload_crds: None) -> tuple[KubeCluster, PlanExecutor]:
    cluster = KubeCluster(kube.plane.api)
    return cluster, PlanExecutor(cluster, NoCapacity(), time.time)


@pytest.mark.parametrize(
    ("body", "group", "version", "plural", "templates"),
    [
        (rayjob("tune", workers=2, gpus=4, pool="core"), "ray.io", "v1", "rayjobs", 2),
        (
            pytorchjob("ddp", workers=3, gpus=8, pool="core"),
            "kubeflow.org",
            "v1",
            "pytorchjobs",
            2,
        ),
        # Its one "template" is its trainer's override in spec.podSpecOverrides.
        (trainjob("llm", nodes=2, gpus=8), "trainer.kubeflow.org", "v1alpha1", "trainjobs", 1),
    ],
    ids=["RayJob", "PyTorchJob", "TrainJob"],
)
def test_a_move_suspends_waits_for_the_pods_repoints_every_template_and_resumes(
    kube: KubeTest,
    operator_side: tuple[KubeCluster, PlanExecutor],
    body: dict[str, Any],
    group: str,
    version: str,
    plural: str,
    templates: int,
) -> None:
    cluster, executor = operator_side
    kind = KINDS[body["kind"]]
    name = body["metadata"]["name"]
    body["metadata"]["namespace"] = kube.namespace
    kube.custom.create_namespaced_custom_object(group, version, kube.namespace, plural, body)
    listed = [w for w in cluster.read_objects().workloads if w["metadata"]["name"] == name]
    assert [w["kind"] for w in listed] == [body["kind"]]
    # The operator's tick reads it from its watch cache, as it reads Jobs.
    api = config.new_client_from_config(config_file=str(kube.plane.kubeconfig))
    cache = WatchCache.for_api(api, sync_timeout=60)
    cache.start()
    try:
        wait_until(
            lambda: (
                [
                    w["kind"]
                    for w in cache.read_objects().workloads
                    if w["metadata"]["namespace"] == kube.namespace
                ]
                == [body["kind"]]
            ),
            timeout_seconds=30,
            what=f"the {body['kind']} in the watch cache",
        )
        assert plural not in cache.absent_kinds()
    finally:
        cache.stop()
        api.close()

    # A running pod of the workload, as its controller would have made it, holds the move.
    labels = {
        # KubeRay v1.5.0's pods name only their RayCluster, <rayjob>-<5 random characters>.
        "RayJob": {"ray.io/is-ray-node": "yes", "ray.io/cluster": f"{name}-x7k2q"},
        "PyTorchJob": {"training.kubeflow.org/job-name": name},
        "TrainJob": {"jobset.sigs.k8s.io/jobset-name": name},  # its JobSet's pods
    }[body["kind"]]
    (node,) = kube.create_gpu_nodes("core", 1, tier="core", gpus=8)
    pod = pod_of(f"{name}-worker-0", 4, labels=labels, node=node, namespace=kube.namespace)
    pod["spec"]["containers"][0]["image"] = "busybox"
    kube.core.create_namespaced_pod(kube.namespace, pod)

    executor.start_move(kube.namespace, name, "spot", pools(), kind)
    held = cluster.get_workload(kind, kube.namespace, name)
    assert kind.suspended(held)
    assert json.loads(held["metadata"]["annotations"]["hybridgpu.io/move"])["step"] == "suspend"
    assert executor.advance_moves([held], pools()) == 1  # its pod is still there

    kube.core.delete_namespaced_pod(pod["metadata"]["name"], kube.namespace, grace_period_seconds=0)
    wait_until(
        lambda: not cluster.pods_of_workload(kind, kube.namespace, name),
        timeout_seconds=30,
        what=f"the pod of {kind.kind} {name} gone",
    )
    if kind.suspension_condition is not None:
        # The move waits for the controller to record the suspension; play its status write.
        assert (
            executor.advance_moves([cluster.get_workload(kind, kube.namespace, name)], pools()) == 1
        )
        condition = {"type": kind.suspension_condition, "status": "True", "reason": "Suspended"}
        kube.custom.patch_namespaced_custom_object_status(
            group, version, kube.namespace, plural, name, {"status": {"conditions": [condition]}}
        )
    assert executor.advance_moves([cluster.get_workload(kind, kube.namespace, name)], pools()) == 0

    moved = cluster.get_workload(kind, kube.namespace, name)
    assert not kind.suspended(moved)
    notes = moved["metadata"]["annotations"]
    assert "hybridgpu.io/move" not in notes
    assert notes["hybridgpu.io/pinned-to"] == "spot"
    assert len(kind.templates(moved)) == templates
    for template in kind.templates(moved):
        assert template.pod_spec["nodeSelector"] == {"hybridgpu.io/pool": "spot"}, template.path
        assert {**SPOT_TAINT, "operator": "Equal"} in template.pod_spec["tolerations"]
