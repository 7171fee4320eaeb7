"""A node kept for a Job on the cluster (kube/reserve.py): the executor puts the taint and
annotation on and takes them off, the snapshot reads them back, the deadline rule's move gives
the Job's pods the toleration, and admission gives critical pods one."""

from __future__ import annotations

import json
from typing import Any, cast

import jsonpatch
import pytest
from tests.support.fake_cluster import FakeCluster, gpu_node

from hybridgpu.core.admission import AdmissionRules, mutation
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import node_state
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.moves import STEP_SUSPEND, Move
from hybridgpu.kube.names import POOL_LABEL, RESERVED_ANNOTATION, RESERVED_TAINT, TIER_LABEL
from hybridgpu.kube.reserve import job_toleration, reservation_taint
from hybridgpu.kube.workloads import JOB, repin_patch
from hybridgpu.models import GPUPoolSpec
from hybridgpu.models.actions import ActionKind, Plan, ReserveNode
from hybridgpu.models.snapshot import ClusterSnapshot, Criticality

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
POOLS = {
    "od": GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 1},
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 3},
        }
    ),
    "spot": GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "A100", "perNode": 1},
            "maxNodes": 4,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 1},
        }
    ),
}


def run(cluster: FakeCluster, *actions: ReserveNode) -> None:
    executor = PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), lambda: NOW)
    snap = ClusterSnapshot(taken_at=NOW, pools=())
    done = executor.execute(Plan(NOW, actions=actions), snap, POOLS, policy="p", dry_run=False)
    assert done.errors == []


def reserve(job: str | None) -> ReserveNode:
    kind = ActionKind.RESERVE_NODE if job else ActionKind.UNRESERVE_NODE
    return ReserveNode(pool="od", node="e1", job=job, reason="why", kind=kind)


def test_the_executor_keeps_a_node_for_a_job_and_lets_it_go_again() -> None:
    cluster = FakeCluster()
    raw = gpu_node("e1", "od", gpus=1, ready=False)
    raw["spec"]["taints"] = [NOT_READY, GPU_TAINT]
    cluster.add_node(raw)
    run(cluster, reserve("team/late"))
    node = cluster.nodes["e1"]
    assert node["spec"]["taints"] == [NOT_READY, GPU_TAINT, reservation_taint("team/late")]
    assert node["metadata"]["annotations"][RESERVED_ANNOTATION] == "team/late"
    assert node_state(node, "od", idle_since=None).reserved_for == "team/late"
    writes = len(cluster.writes)
    run(cluster, reserve("team/late"))  # the same plan again changes nothing
    assert len(cluster.writes) == writes
    run(cluster, reserve(None))
    node = cluster.nodes["e1"]
    assert node["spec"]["taints"] == [NOT_READY, GPU_TAINT]
    assert RESERVED_ANNOTATION not in node["metadata"]["annotations"]
    assert node_state(node, "od", idle_since=None).reserved_for is None


def test_an_annotation_without_the_taint_keeps_nothing() -> None:
    raw = gpu_node("e1", "od", gpus=1)
    raw["metadata"]["annotations"][RESERVED_ANNOTATION] = "team/late"
    assert node_state(raw, "od", idle_since=None).reserved_for is None


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' rule for one toleration and one taint."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration.get("key") != taint["key"]:
        return False
    return toleration.get("operator") == "Exists" or toleration.get("value") == taint.get("value")


def moved_template(name: str, to_pool: str) -> dict[str, Any]:
    job = {
        "metadata": {"namespace": "team", "name": name, "annotations": {}},
        "spec": {"template": {"spec": {"nodeSelector": {POOL_LABEL: "spot"}}}},
    }
    ops = repin_patch(JOB, job, Move(to_pool, "spot", STEP_SUSPEND, NOW), POOLS)
    return cast(dict[str, Any], jsonpatch.apply_patch(job, ops))["spec"]["template"]["spec"]


def test_a_job_moved_to_on_demand_tolerates_only_the_node_kept_for_it() -> None:
    spec = moved_template("late", "od")
    assert spec["nodeSelector"] == {POOL_LABEL: "od"}
    assert job_toleration("team/late") in spec["tolerations"]
    assert any(tolerates(t, reservation_taint("team/late")) for t in spec["tolerations"])
    assert not any(tolerates(t, reservation_taint("team/other")) for t in spec["tolerations"])
    # A move to spot keeps no node: no toleration is added there.
    assert moved_template("late", "spot").get("tolerations") in (None, [])


def test_the_taint_value_is_a_valid_label_value_for_the_longest_names() -> None:
    value = reservation_taint(f"{'n' * 63}/{'j' * 63}")["value"]
    assert len(value) <= 63 and value.isalnum()


RULES = AdmissionRules(tier_label=TIER_LABEL, pool_label=POOL_LABEL)


@pytest.mark.parametrize(
    ("criticality", "tolerations", "added"),
    [
        (Criticality.CRITICAL, None, True),
        (Criticality.CRITICAL, [GPU_TAINT | {"operator": "Equal"}], True),
        (Criticality.CRITICAL, [{"operator": "Exists"}], False),  # tolerates everything
        (Criticality.STANDARD, None, False),
        (Criticality.PREEMPTIBLE, None, False),
    ],
)
def test_critical_pods_tolerate_every_node_kept_for_a_job(
    criticality: Criticality, tolerations: list[dict[str, Any]] | None, added: bool
) -> None:
    rules = AdmissionRules(
        tier_label=TIER_LABEL, pool_label=POOL_LABEL, reservation_taint=RESERVED_TAINT
    )
    spec: dict[str, Any] = {"priorityClassName": "given"}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    ops = mutation(criticality, spec, rules)
    after = jsonpatch.apply_patch({"spec": spec}, json.loads(json.dumps(ops)))["spec"]
    kept = reservation_taint("team/late")
    assert any(tolerates(t, kept) for t in after.get("tolerations") or []) == (
        added or bool(tolerations and tolerations[0].get("operator") == "Exists")
    )
    assert any(op["path"].startswith("/spec/tolerations") for op in ops) == added
    assert mutation(criticality, after, rules) == []
    without = mutation(criticality, spec, RULES)  # not asked for: nothing added
    assert not any(op["path"].startswith("/spec/tolerations") for op in without)
