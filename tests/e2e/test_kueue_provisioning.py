"""Kueue coexistence on the real control plane (issue 12).

1. The ProvisioningRequest API alone (its CRD from the cluster-autoscaler apis module): a
   request made by hand gets all its nodes in one scale-up and is Provisioned; a
   check-capacity request that does not fit buys nothing.
2. Kueue itself (built from its Go module by hack/kueue.sh): a Job in a ClusterQueue whose
   admission check is a ProvisioningRequest is never unsuspended by hybridgpu, and is
   admitted by Kueue once hybridgpu provisioned its capacity through the request.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from conftest import Cluster, Operators, wait_for
from support.controlplane import KubeTest, gpu_job
from support.kueue import KueueProcess, fetch_crds, install_crds, kueue_paths, start_kueue

pytestmark = pytest.mark.e2e

PROVREQ = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK = "check-capacity.autoscaling.x-k8s.io"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture
def provreq_crd(kube: KubeTest) -> Path:
    crds = fetch_crds()
    install_crds(kube, crds, ["autoscaling.x-k8s.io_provisioningrequests.yaml"])
    return crds


def pod_template(kube: KubeTest, name: str, gpus: int, pool: str) -> None:
    kube.core.create_namespaced_pod_template(
        kube.namespace,
        {
            "metadata": {"name": name},
            "template": {
                "spec": {
                    "nodeSelector": {"hybridgpu.io/pool": pool},
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.example/train:latest",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    )


def provisioning_request(kube: KubeTest, name: str, cls: str, template: str, count: int) -> None:
    group, version, plural = PROVREQ
    kube.custom.create_namespaced_custom_object(
        group,
        version,
        kube.namespace,
        plural,
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": cls,
                "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
            },
        },
    )


def request_conditions(kube: KubeTest, name: str) -> dict[str, dict[str, Any]]:
    group, version, plural = PROVREQ
    body = kube.custom.get_namespaced_custom_object(group, version, kube.namespace, plural, name)
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}


def scale_up_events(cluster: Cluster, pool: str) -> list[str]:
    return [e.message for e in cluster.events("ScaleUp") if pool in (e.message or "")]


def test_a_provisioning_request_made_by_hand_is_provisioned_all_at_once(
    cluster: Cluster, operators: Operators, provreq_crd: Path
) -> None:
    kube = cluster.kube
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, per_node=4, max_nodes=4)
    pod_template(kube, "trainer", 4, elastic)
    provisioning_request(kube, "gang", ATOMIC, "trainer", 3)
    pod_template(kube, "checker", 4, elastic)
    provisioning_request(kube, "check", CHECK, "checker", 8)  # more than maxNodes allows
    operators.start()

    def provisioned() -> dict[str, Any] | None:
        cond = request_conditions(kube, "gang").get("Provisioned")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(provisioned, 60, "ProvisioningRequest gang Provisioned")
    assert cond["reason"] == "CapacityIsProvisioned"
    assert request_conditions(kube, "gang")["Accepted"]["status"] == "True"
    assert len(cluster.pool_nodes(elastic)) == 3
    # All three nodes in one scale-up: the gang is capacity for all its pods or for none.
    events = scale_up_events(cluster, elastic)
    assert events and all(f"add 3 {elastic} node(s)" in m for m in events), events
    group, version, plural = PROVREQ
    body = kube.custom.get_namespaced_custom_object(group, version, kube.namespace, plural, "gang")
    assert body["status"]["provisioningClassDetails"] == {"hybridgpu.io/pool": elastic}
    # check-capacity never buys: 8 nodes' worth does not fit in the 3 that exist.
    checked = request_conditions(kube, "check")["Provisioned"]
    assert (checked["status"], checked["reason"]) == ("False", "CapacityIsNotFound")
    # The booked nodes stay, idle as they are, over the operator's next ticks.
    cluster.wait_ticks(policy, 3)
    assert len(cluster.pool_nodes(elastic)) == 3


# ----------------------------------------------------------------------------- with Kueue
def kueue_binary() -> Path:
    binary = Path(kueue_paths()["KUEUE_BIN"])
    if not binary.is_file():
        message = f"Kueue is not built ({binary}): run `make kueue`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


@pytest.fixture
def kueue(kube: KubeTest, tmp_path: Path, provreq_crd: Path) -> Iterator[KueueProcess]:
    binary = kueue_binary()
    install_crds(kube, provreq_crd)
    process = start_kueue(kube, binary, tmp_path / "kueue")
    try:
        yield process
    finally:
        process.stop()


def create_cluster_scoped(kube: KubeTest, plural: str, body: dict[str, Any]) -> None:
    group, version = KUEUE
    kube.custom.create_cluster_custom_object(
        group, version, plural, {"apiVersion": f"{group}/{version}", **body}
    )


def delete_cluster_scoped(kube: KubeTest, plural: str, name: str) -> None:
    group, version = KUEUE
    with contextlib.suppress(ApiException):  # gone already
        kube.custom.delete_cluster_custom_object(group, version, plural, name)


def test_a_kueue_job_is_admitted_after_hybridgpu_provisions_its_request(
    cluster: Cluster, operators: Operators, kueue: KueueProcess
) -> None:
    kube = cluster.kube
    policy = cluster.policy()
    # maxNodes 1 first: the Job's two 4-GPU pods need two nodes, all at once or none.
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, per_node=4, max_nodes=1)
    names = {k: cluster.name(k) for k in ("flavor", "check", "config", "cq")}
    created = [
        ("resourceflavors", names["flavor"]),
        ("provisioningrequestconfigs", names["config"]),
        ("admissionchecks", names["check"]),
        ("clusterqueues", names["cq"]),
    ]
    try:
        create_cluster_scoped(
            kube,
            "resourceflavors",
            {
                "kind": "ResourceFlavor",
                "metadata": {"name": names["flavor"]},
                "spec": {"nodeLabels": {"hybridgpu.io/pool": elastic}},
            },
        )
        create_cluster_scoped(
            kube,
            "provisioningrequestconfigs",
            {
                "kind": "ProvisioningRequestConfig",
                "metadata": {"name": names["config"]},
                "spec": {"provisioningClassName": ATOMIC, "managedResources": ["nvidia.com/gpu"]},
            },
        )
        create_cluster_scoped(
            kube,
            "admissionchecks",
            {
                "kind": "AdmissionCheck",
                "metadata": {"name": names["check"]},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/provisioning-request",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "ProvisioningRequestConfig",
                        "name": names["config"],
                    },
                },
            },
        )
        create_cluster_scoped(
            kube,
            "clusterqueues",
            {
                "kind": "ClusterQueue",
                "metadata": {"name": names["cq"]},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": names["flavor"],
                                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}],
                                }
                            ],
                        }
                    ],
                    "admissionChecksStrategy": {"admissionChecks": [{"name": names["check"]}]},
                },
            },
        )
        group, version = KUEUE
        kube.custom.create_namespaced_custom_object(
            group,
            version,
            kube.namespace,
            "localqueues",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "LocalQueue",
                "metadata": {"name": "team"},
                "spec": {"clusterQueue": names["cq"]},
            },
        )
        run_kueue_scenario(cluster, operators, policy, elastic)
    finally:
        for plural, name in reversed(created):
            delete_cluster_scoped(kube, plural, name)


def run_kueue_scenario(cluster: Cluster, operators: Operators, policy: str, elastic: str) -> None:
    kube = cluster.kube
    # Suspended at creation, as Kueue's Job webhook makes it (the webhook is not registered).
    kube.create_job(
        gpu_job(
            "train",
            gpus=4,
            parallelism=2,
            completions=2,
            suspend=True,
            run_duration="300s",
            labels={"kueue.x-k8s.io/queue-name": "team"},
        )
    )
    group, version, plural = PROVREQ

    def request_name() -> str | None:
        items = kube.custom.list_namespaced_custom_object(group, version, kube.namespace, plural)[
            "items"
        ]
        return items[0]["metadata"]["name"] if items else None

    name = wait_for(request_name, 60, "Kueue's ProvisioningRequest for the Job")
    operators.start()

    # Capacity for both pods at once is not there (maxNodes 1): no node, the Job waits
    # suspended over several ticks of the operator.
    def not_found() -> bool:
        cond = request_conditions(kube, name).get("Provisioned") or {}
        return cond.get("reason") == "CapacityIsNotFound"

    wait_for(not_found, 60, "Provisioned=False CapacityIsNotFound")
    cluster.wait_ticks(policy, 3)
    assert cluster.job("train").spec.suspend is True
    assert cluster.pool_nodes(elastic) == []
    # Room for the whole gang: both nodes in one scale-up, the request is provisioned, Kueue
    # admits the Job and resumes it; its pods run on the new nodes.
    kube.custom.patch_cluster_custom_object(
        "hybridgpu.io", "v1alpha1", "gpupools", elastic, {"spec": {"maxNodes": 4}}
    )

    def running_on_elastic() -> list[Any] | None:
        pods = [p for p in cluster.job_pods("train") if p.status.phase == "Running"]
        nodes = {n.metadata.name for n in cluster.pool_nodes(elastic)}
        return pods if len(pods) == 2 and all(p.spec.node_name in nodes for p in pods) else None

    pods = wait_for(running_on_elastic, 120, "the Job's 2 pods Running on elastic nodes")
    assert request_conditions(kube, name)["Provisioned"]["status"] == "True"
    assert len(cluster.pool_nodes(elastic)) == 2
    assert all(
        (p.metadata.annotations or {}).get("autoscaling.x-k8s.io/consume-provisioning-request")
        == name
        for p in pods
    )
    # Kueue, not hybridgpu, resumed it: the field manager that last set spec.suspend is Kueue.
    job = cluster.job("train")
    owners = [
        f.manager
        for f in job.metadata.managed_fields or []
        if "f:suspend" in ((f.fields_v1 or {}).get("f:spec") or {})
    ]
    assert job.spec.suspend is False
    assert owners and all("kueue" in o.lower() for o in owners), owners
