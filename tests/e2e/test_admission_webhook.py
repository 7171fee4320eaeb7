"""Admission makes the scheduler follow the plan (issue 17): the operator's webhook gives pods
labelled hybridgpu.io/criticality their PriorityClass, holds preemptible pods to core and spot
nodes, so capacity scaled for critical pods goes to them; with the webhook down, pods are
still admitted (failurePolicy Ignore).

The operator serves the webhook on 127.0.0.1 with a self-signed CA (``--webhook-port 0``
through HYBRIDGPU_WEBHOOK_PORT) and kopf creates the webhook configurations; they are deleted
after each test, as are the PriorityClasses the test creates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from conftest import SPOT_TAINT, SPOT_TOLERATION, Cluster, Operators, wait_for
from support.controlplane import KubeTest, gpu_job

pytestmark = pytest.mark.e2e

CRITICALITY = "hybridgpu.io/criticality"
TIER = "hybridgpu.io/tier"
MANAGED_CONFIGURATION = "admission.hybridgpu.io"  # hybridgpu.handlers.admission
WEBHOOK_ENV = {"HYBRIDGPU_WEBHOOK_PORT": "0"}
PRIORITIES = {
    "critical": (100000, "PreemptLowerPriority"),
    "standard": (0, "PreemptLowerPriority"),
    "preemptible": (-100000, "Never"),
}
TO_CORE_OR_SPOT = {"key": TIER, "operator": "In", "values": ["core", "spot"]}


@pytest.fixture
def priority_classes(cluster: Cluster, operators: Operators) -> Iterator[dict[str, str]]:
    """One PriorityClass per criticality, as the chart ships them (found by label); criticality
    -> class name. Deleted after the test's operators stopped, with the webhook
    configurations kopf created."""
    api = cluster.kube.plane.api
    from kubernetes import client

    scheduling = client.SchedulingV1Api(api)
    names = {c: cluster.name(c) for c in PRIORITIES}
    try:
        for criticality, (value, preemption) in PRIORITIES.items():
            scheduling.create_priority_class(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": names[criticality], "labels": {CRITICALITY: criticality}},
                    "value": value,
                    "preemptionPolicy": preemption,
                }
            )
        yield names
    finally:
        for name in names.values():
            try:
                scheduling.delete_priority_class(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            cluster.kube.kubectl("delete", kind, MANAGED_CONFIGURATION, "--ignore-not-found")


def webhook_urls(kube: KubeTest) -> list[str]:
    """URLs of the mutating webhooks kopf registered for the operator (empty: none yet)."""
    result = kube.kubectl(
        "get", "mutatingwebhookconfiguration", MANAGED_CONFIGURATION, "-o", "json", check=False
    )
    if result.returncode != 0:
        return []
    import json

    hooks = json.loads(result.stdout).get("webhooks") or []
    return [str(h["clientConfig"].get("url")) for h in hooks]


def start_with_webhook(cluster: Cluster, operators: Operators, policy: str) -> Any:
    op = operators.start(extra_env=WEBHOOK_ENV)
    cluster.wait_ticking(policy)
    urls = wait_for(lambda: webhook_urls(cluster.kube), 30, "the webhook registered")
    assert all(u.startswith("https://127.0.0.1:") for u in urls), urls
    return op


def wait_ticks(cluster: Cluster, policy: str, ticks: int = 2, timeout: float = 30) -> None:
    """Wait until the policy's lastTick has advanced ``ticks`` times: the operator has looked
    at the cluster and acted (or not) at least that often."""
    seen = [cluster.policy_status(policy).get("lastTick")]

    def advanced() -> bool:
        tick = cluster.policy_status(policy).get("lastTick")
        if tick != seen[-1]:
            seen.append(tick)
        return len(seen) > ticks

    wait_for(advanced, timeout, f"{ticks} more ticks of {policy}")


def nodes_of(cluster: Cluster, pool: str) -> set[str]:
    return {n.metadata.name for n in cluster.pool_nodes(pool)}


def placed(cluster: Cluster, job: str) -> list[str]:
    return [p.spec.node_name for p in cluster.job_pods(job) if p.spec.node_name]


def never_on(
    cluster: Cluster, jobs: list[str], nodes: Callable[[], set[str]]
) -> Callable[[], None]:
    def check() -> None:
        for job in jobs:
            wrong = set(placed(cluster, job)) & nodes()
            assert not wrong, f"{job} pods on {sorted(wrong)}"

    return check


def test_preemptible_pods_get_their_class_and_never_land_on_free_elastic_nodes(
    cluster: Cluster, operators: Operators, priority_classes: dict[str, str]
) -> None:
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, idle_for="10m")
    spot = cluster.pool(
        "spot", tier="spot", policy=policy, price=3.0, taints=[SPOT_TAINT], max_nodes=2
    )
    elastic_nodes = set(cluster.cloud_nodes(elastic, 2))
    start_with_webhook(cluster, operators, policy)

    job = gpu_job(
        "sweep",
        gpus=4,
        parallelism=2,
        completions=2,
        run_duration="600s",
        labels={CRITICALITY: "preemptible"},
        tolerations=[SPOT_TOLERATION],
    )
    cluster.kube.create_job(job)
    pods = wait_for(
        lambda: len(cluster.job_pods("sweep")) == 2 and cluster.job_pods("sweep"), 30, "pods"
    )
    for pod in pods:
        assert pod.spec.priority_class_name == priority_classes["preemptible"]
        assert (pod.spec.priority, pod.spec.preemption_policy) == (-100000, "Never")
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        expressions = [e.to_dict() for t in terms.node_selector_terms for e in t.match_expressions]
        assert {k: v for k, v in expressions[0].items() if v is not None} == TO_CORE_OR_SPOT

    # A pod without a criticality is not touched and may use the free elastic nodes: they
    # are usable, so only admission keeps the preemptible pods off them.
    cluster.kube.create_job(gpu_job("plain", gpus=1, run_duration="600s"))
    wait_for(lambda: set(placed(cluster, "plain")) & elastic_nodes, 30, "plain pod on elastic")
    assert not cluster.job_pods("plain")[0].spec.priority_class_name

    wait_for(
        lambda: len([n for n in placed(cluster, "sweep") if n in nodes_of(cluster, spot)]) == 2,
        60,
        "both preemptible pods running on spot",
    )
    wait_ticks(cluster, policy)
    never_on(cluster, ["sweep"], lambda: nodes_of(cluster, elastic))()
    assert nodes_of(cluster, elastic) == elastic_nodes, "the operator added elastic nodes"


def test_critical_pods_arriving_later_get_the_elastic_capacity_scaled_for_them(
    cluster: Cluster, operators: Operators, priority_classes: dict[str, str]
) -> None:
    """Issue 17's scenario at small scale: preemptible pods are pending (spot is full) when
    critical pods arrive; the elastic nodes scaled for the critical pods run them."""
    policy = cluster.policy()
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, price=10.0, max_nodes=4)
    cluster.pool("spot", tier="spot", policy=policy, price=3.0, taints=[SPOT_TAINT], max_nodes=1)
    start_with_webhook(cluster, operators, policy)

    cluster.kube.create_job(
        gpu_job(
            "backlog",
            gpus=4,
            parallelism=4,
            completions=4,
            run_duration="600s",
            labels={CRITICALITY: "preemptible"},
            tolerations=[SPOT_TOLERATION],
        )
    )
    # Spot (one node) runs one; three stay pending, older than any critical pod.
    wait_for(lambda: len(placed(cluster, "backlog")) == 1, 60, "one preemptible pod on spot")
    wait_ticks(cluster, policy)
    assert len(placed(cluster, "backlog")) == 1
    assert not nodes_of(cluster, elastic), "elastic scaled for preemptible work"

    arrived = time.monotonic()
    cluster.kube.create_job(
        gpu_job(
            "urgent",
            gpus=4,
            parallelism=2,
            completions=2,
            run_duration="600s",
            labels={CRITICALITY: "critical"},
        )
    )
    check = never_on(cluster, ["backlog"], lambda: nodes_of(cluster, elastic))

    def critical_running() -> bool:
        check()
        pods = cluster.job_pods("urgent")
        return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

    wait_for(critical_running, 60, "both critical pods running")
    elapsed = time.monotonic() - arrived
    urgent = cluster.job_pods("urgent")
    assert {p.spec.priority_class_name for p in urgent} == {priority_classes["critical"]}
    assert {p.spec.node_name for p in urgent} <= nodes_of(cluster, elastic)
    wait_ticks(cluster, policy)
    check()
    assert len(placed(cluster, "backlog")) == 1, "a preemptible pod took a new node"
    print(f"critical pods running {elapsed:.1f}s after they were created")


def test_pods_are_admitted_while_the_webhook_is_down(
    cluster: Cluster, operators: Operators, priority_classes: dict[str, str]
) -> None:
    policy = cluster.policy()
    op = start_with_webhook(cluster, operators, policy)

    def bare_pod(name: str) -> dict[str, Any]:
        body = gpu_job(name, gpus=1, labels={CRITICALITY: "preemptible"})
        template = body["spec"]["template"]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **template["metadata"]},
            "spec": template["spec"],
        }

    ns = cluster.kube.namespace
    served = cluster.kube.core.create_namespaced_pod(ns, bare_pod("while-up"))
    assert served.spec.priority_class_name == priority_classes["preemptible"]

    op.kill()  # a crash: kopf does not get to remove its webhooks
    urls = webhook_urls(cluster.kube)
    assert urls, "the webhook configuration is gone: this would not test failing open"
    started = time.monotonic()
    admitted = cluster.kube.core.create_namespaced_pod(ns, bare_pod("while-down"))
    seconds = time.monotonic() - started
    assert admitted.metadata.uid
    assert not admitted.spec.priority_class_name, "the webhook answered while down?"
    assert admitted.spec.affinity is None
    print(f"pod admitted in {seconds:.2f}s with the webhook down")

    # The operator comes back and reports the pod that went round its webhook, not the other.
    back = start_with_webhook(cluster, operators, policy)
    reported = wait_for(
        lambda: (
            [e for e in cluster.events("AdmittedWithoutWebhook") if e.involved_object.uid] or None
        ),
        60,
        "an AdmittedWithoutWebhook Event",
    )
    assert {e.involved_object.name for e in reported} == {"while-down"}, reported
    assert "PriorityClass" in reported[0].message and "node affinity" in reported[0].message
    gauge = 'hybridgpu_pods_admitted_without_webhook{criticality="preemptible"} 1.0'
    wait_for(lambda: gauge in back.metrics(), 30, "the gauge at 1")

    cluster.kube.core.delete_namespaced_pod("while-down", ns, grace_period_seconds=0)
    gone = 'hybridgpu_pods_admitted_without_webhook{criticality="preemptible"} 0.0'
    wait_for(lambda: gone in back.metrics(), 30, "the gauge back at 0")


def with_cpus(job: dict[str, Any], cpus: int) -> dict[str, Any]:
    """``job`` with its pods requesting ``cpus`` CPUs, as GPU pods do: the scheduler's
    resource scores then tell nodes apart (with nothing requested, its 100m default on a
    96-CPU node rounds to the same score on every node, and a tie is drawn at random)."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["cpu"] = str(cpus)
    return job


def test_labelled_pods_take_free_owned_gpus_before_a_cloud_node_the_scheduler_prefers(
    cluster: Cluster, operators: Operators, priority_classes: dict[str, str]
) -> None:
    """kube-scheduler knows no prices: its default score puts a pod on the node with the
    fewest requests, here an empty on-demand node beside an owned node with GPUs free. The
    webhook's preferred node affinity to core outweighs that score, so a labelled pod takes
    the owned GPUs; a pod without the label, placed right after in the same state, does not
    (the control: without the preference the scheduler would have chosen the cloud)."""
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy)
    elastic = cluster.pool("elastic", tier="elastic", policy=policy, idle_for="10m")
    (owned,) = cluster.core_nodes(core, 1, gpus=4)
    (cloud,) = cluster.cloud_nodes(elastic, 1)
    start_with_webhook(cluster, operators, policy)

    # Two pods pinned to the owned node: it has 2 of 4 GPUs free and 32 of its 96 CPUs
    # requested, the cloud node none, which kube-scheduler's default scoring (LeastAllocated
    # on CPU and memory) prefers.
    filler = gpu_job("filler", gpus=1, pool=core, parallelism=2, completions=2, run_duration="600s")
    cluster.kube.create_job(with_cpus(filler, 16))
    wait_for(lambda: placed(cluster, "filler") == [owned, owned], 60, "the filler on core")

    work = gpu_job("work", gpus=1, run_duration="600s", labels={CRITICALITY: "standard"})
    cluster.kube.create_job(with_cpus(work, 16))
    wait_for(lambda: placed(cluster, "work"), 60, "the labelled pod placed")
    (pod,) = cluster.job_pods("work")
    terms = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert [(t.weight, t.preference.match_expressions[0].values) for t in terms] == [
        (100, ["core"])
    ]
    assert placed(cluster, "work") == [owned], "a labelled pod went to the cloud node"

    cluster.kube.create_job(with_cpus(gpu_job("plain", gpus=1, run_duration="600s"), 16))
    wait_for(lambda: placed(cluster, "plain"), 60, "the unlabelled pod placed")
    assert placed(cluster, "plain") == [cloud], "the control: the default score chose core"
