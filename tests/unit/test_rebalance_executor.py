"""The surge rebalance's steps (kube/serving.py) on an in-memory apiserver: each outcome of a
step, and what a restarted operator finds. The whole move against the real control plane is
tests/e2e/test_serving_rebalance.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.support.fake_cluster import FakeCluster, gpu_node, gpu_pod

from hybridgpu.kube.serving import (
    DELETION_COST_ANNOTATION,
    LOWEST_DELETION_COST,
    STEP_SCALE_DOWN,
    Intent,
    ServingMover,
    read_intent,
    serving_state,
)
from hybridgpu.models.actions import RebalanceReplica

pytestmark = pytest.mark.unit

REBALANCE = "hybridgpu.io/rebalance"
GIVEN_UP = "hybridgpu.io/rebalance-given-up"
T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _ready(pod: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return pod


def world(replicas: int = 2) -> tuple[FakeCluster, Clock, ServingMover]:
    """web: web-a on core-1, web-b on the cloud node e1."""
    cluster = FakeCluster()
    cluster.add_node(gpu_node("core-1", "core"))
    cluster.add_node(gpu_node("core-2", "core"))
    cluster.add_node(gpu_node("e1", "elastic", provider_id="kwok://elastic/e1"))
    for name, node in (("web-a", "core-1"), ("web-b", "e1")):
        cluster.add_pod(_ready(gpu_pod(name, gpus=4, node=node, labels={"app": "web"})))
    cluster.deployments[("team", "web")] = {
        "metadata": {"name": "web", "namespace": "team", "generation": 1, "annotations": {}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }
    clock = Clock()
    return cluster, clock, ServingMover(cluster, clock)  # type: ignore[arg-type]


ACTION = RebalanceReplica(
    namespace="team",
    workload="web",
    pods=("web-b",),
    node="e1",
    from_pool="elastic",
    to_pool="core",
    gpus=4,
    replicas=2,
    reason="test",
    timeout_seconds=600.0,
)


def dep(cluster: FakeCluster) -> dict[str, Any]:
    return cluster.deployments[("team", "web")]


def test_start_cordons_the_node_then_records_the_intent_and_surges() -> None:
    cluster, _, mover = world()
    assert mover.start(ACTION)
    assert cluster.nodes["e1"]["spec"]["unschedulable"] is True
    assert dep(cluster)["spec"]["replicas"] == 3
    intent = read_intent(dep(cluster)["metadata"]["annotations"])
    assert intent is not None and intent.pods == ("web-b",) and intent.replicas == 2
    assert not mover.start(ACTION)  # a rebalance in flight is not started twice
    changed = ACTION.__class__(**{**_fields(ACTION), "replicas": 5})
    cluster.deployments[("team", "web")]["metadata"]["annotations"] = {}
    assert not mover.start(changed)  # replicas moved on since the plan


def _fields(action: RebalanceReplica) -> dict[str, Any]:
    return {f: getattr(action, f) for f in action.__dataclass_fields__}


def test_once_the_surge_replica_is_ready_the_cloud_pod_is_marked_and_replicas_go_back() -> None:
    cluster, clock, mover = world()
    mover.start(ACTION)
    assert mover.advance(mover.list_with_intent()[0]) is None  # no new replica yet
    assert dep(cluster)["spec"]["replicas"] == 3
    cluster.add_pod(_ready(gpu_pod("web-c", gpus=4, node="core-2", labels={"app": "web"}), False))
    assert mover.advance(mover.list_with_intent()[0]) is None  # not Ready yet
    assert dep(cluster)["spec"]["replicas"] == 3
    _ready(cluster.pods[("team", "web-c")])
    clock.now += 30
    assert mover.advance(mover.list_with_intent()[0]) is None
    assert dep(cluster)["spec"]["replicas"] == 2
    notes = cluster.pods[("team", "web-b")]["metadata"]["annotations"]
    assert notes[DELETION_COST_ANNOTATION] == LOWEST_DELETION_COST
    intent = read_intent(dep(cluster)["metadata"]["annotations"])
    assert intent is not None and intent.step == STEP_SCALE_DOWN
    # the ReplicaSet removes web-b: done, and the node is empty
    del cluster.pods[("team", "web-b")]
    outcome = mover.advance(mover.list_with_intent()[0])
    assert outcome is not None and outcome.result == "completed" and outcome.release
    assert REBALANCE not in dep(cluster)["metadata"]["annotations"]
    assert GIVEN_UP not in dep(cluster)["metadata"]["annotations"]
    assert mover.node_is_empty("e1")


def test_a_surge_not_ready_in_time_is_scaled_back() -> None:
    cluster, clock, mover = world()
    mover.start(ACTION)
    cluster.add_pod(_ready(gpu_pod("web-c", gpus=4, node="core-2", labels={"app": "web"}), False))
    clock.now += 600
    outcome = mover.advance(mover.list_with_intent()[0])
    assert outcome is not None and outcome.result == "rolled_back" and not outcome.release
    assert dep(cluster)["spec"]["replicas"] == 2
    assert REBALANCE not in dep(cluster)["metadata"]["annotations"]
    # decide() waits an hour before it tries this workload again
    assert dep(cluster)["metadata"]["annotations"][GIVEN_UP] == f"{clock.now:.0f}"
    assert serving_state(dep(cluster), autoscaled=False).given_up_at == clock.now
    assert DELETION_COST_ANNOTATION not in (
        cluster.pods[("team", "web-b")]["metadata"].get("annotations") or {}
    )


def test_replicas_changed_by_someone_else_win() -> None:
    cluster, _, mover = world()
    mover.start(ACTION)
    dep(cluster)["spec"]["replicas"] = 6  # a person scaled it meanwhile
    outcome = mover.advance(mover.list_with_intent()[0])
    assert outcome is not None and outcome.result == "aborted"
    assert dep(cluster)["spec"]["replicas"] == 6
    assert REBALANCE not in dep(cluster)["metadata"]["annotations"]
    assert GIVEN_UP in dep(cluster)["metadata"]["annotations"]


def test_an_unreadable_intent_is_dropped_and_replicas_left_alone() -> None:
    cluster, _, mover = world()
    dep(cluster)["metadata"]["annotations"][REBALANCE] = "{not json"
    dep(cluster)["spec"]["replicas"] = 3
    assert mover.advance(mover.list_with_intent()[0]) is None
    assert REBALANCE not in dep(cluster)["metadata"]["annotations"]
    assert dep(cluster)["spec"]["replicas"] == 3


def test_a_node_cordoned_for_a_rebalance_no_intent_names_is_uncordoned() -> None:
    cluster, _, mover = world()
    cluster.cordon("e1", "rebalance")
    cluster.cordon("core-2", "xid-errors")
    assert mover.uncordon_orphans(cluster.read_objects().nodes, busy=set()) == ["e1"]
    assert not cluster.nodes["e1"]["spec"].get("unschedulable")
    assert cluster.nodes["core-2"]["spec"]["unschedulable"] is True
    cluster.cordon("e1", "rebalance")
    assert mover.uncordon_orphans(cluster.read_objects().nodes, busy={"e1"}) == []


def test_the_intent_round_trips_through_its_annotation() -> None:
    intent = Intent("e1", ("a", "b"), "elastic", "core", 3, "surge", T0, T0 + 1, 600.0)
    assert read_intent({REBALANCE: intent.annotation()}) == intent
    assert json.loads(intent.annotation())["pods"] == ["a", "b"]
    assert read_intent({REBALANCE: json.dumps({"step": "dance"})}) is None
