"""A move of a PyTorchJob waits, once the pods are gone, until the training operator has
recorded the suspension (condition ``Suspended`` True) before it changes the templates and
resumes, at most SUSPENSION_WAIT_SECONDS after the move began.

Found on the real controller (CI, tests/e2e/test_pytorchjob_controller.py): the training
operator (v1.9.3) deletes the pods, then writes the ``Suspended`` condition with an update
that conflicts when the move patched the PyTorchJob meanwhile; once resumed, the controller
never saw it suspended, so it recorded no ``PyTorchJobResumed``, left ``Running`` True and
did not reset its start time."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from tests.support.builders import core_and_spot_pool_specs
from tests.support.fake_cluster import FakeCluster
from tests.support.workloads import pytorchjob

from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.moves import STEP_SUSPEND, SUSPENSION_WAIT_SECONDS, Move, next_step
from hybridgpu.kube.workloads import KINDS, start_patch

pytestmark = pytest.mark.unit

BEGAN = 1000.0


class Clock:
    def __init__(self) -> None:
        self.now = BEGAN

    def __call__(self) -> float:
        return self.now


def moving(cluster: FakeCluster, *conditions: dict[str, str]) -> dict[str, Any]:
    """A PyTorchJob suspended for a move to spot that began at BEGAN, its pods gone."""
    obj = pytorchjob("ddp", workers=1, criticality="preemptible")
    obj["spec"]["runPolicy"]["suspend"] = True
    move = Move("spot", "core", STEP_SUSPEND, BEGAN)
    obj["metadata"]["annotations"] = start_patch(KINDS["PyTorchJob"], move, obj)["metadata"][
        "annotations"
    ]
    obj["status"] = {"conditions": [dict(c) for c in conditions]}
    cluster.workloads[("PyTorchJob", "team", "ddp")] = obj
    return copy.deepcopy(obj)


RUNNING = {"type": "Running", "status": "True"}
SUSPENDED = {"type": "Suspended", "status": "True"}


def advance(cluster: FakeCluster, clock: Clock, obj: dict[str, Any]) -> bool:
    executor = PlanExecutor(cast(KubeCluster, cluster), cast(Any, None), clock)
    return executor.advance_move(obj, core_and_spot_pool_specs())


def test_the_move_resumes_only_once_the_controller_recorded_the_suspension() -> None:
    cluster, clock = FakeCluster(), Clock()
    obj = moving(cluster, RUNNING)
    clock.now = BEGAN + 5
    assert advance(cluster, clock, obj) is False
    stored = cluster.workloads[("PyTorchJob", "team", "ddp")]
    assert stored["spec"]["runPolicy"]["suspend"] is True  # not resumed, not repinned
    assert "nodeSelector" not in stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    # The controller's write landed: the move goes on and resumes.
    obj = moving(cluster, {**RUNNING, "status": "False"}, SUSPENDED)
    assert advance(cluster, clock, obj) is True
    stored = cluster.workloads[("PyTorchJob", "team", "ddp")]
    assert stored["spec"]["runPolicy"]["suspend"] is False
    master = stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["nodeSelector"] == {"hybridgpu.io/pool": "spot"}


def test_a_controller_that_never_records_it_holds_the_move_a_minute_at_most() -> None:
    cluster, clock = FakeCluster(), Clock()
    clock.now = BEGAN + SUSPENSION_WAIT_SECONDS - 1
    assert advance(cluster, clock, moving(cluster, RUNNING)) is False
    clock.now = BEGAN + SUSPENSION_WAIT_SECONDS
    assert advance(cluster, clock, moving(cluster, RUNNING)) is True
    assert cluster.workloads[("PyTorchJob", "team", "ddp")]["spec"]["runPolicy"]["suspend"] is False


def test_kinds_without_the_condition_do_not_wait() -> None:
    for name, kind in KINDS.items():
        assert (kind.suspension_condition is not None) == (name == "PyTorchJob"), name
    move = Move("spot", "core", STEP_SUSPEND, BEGAN)
    assert next_step(move, suspended=True, pods_left=0, has_start_time=False) == "repin"
    assert (
        next_step(
            move, suspended=True, pods_left=0, has_start_time=False, suspension_recorded=False
        )
        == "wait"
    )
