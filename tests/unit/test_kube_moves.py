"""The move protocol's pure steps and the leader lease rule."""

from __future__ import annotations

import json

import pytest

from hybridgpu.kube.errors import Conflict, Invalid, NotFound, from_api_exception
from hybridgpu.kube.lease import holder_may_take
from hybridgpu.kube.moves import (
    STEP_REPINNED,
    STEP_SUSPEND,
    Move,
    next_step,
    read_move,
    repin_template,
)
from hybridgpu.kube.workloads import JOB, finish_patch, repin_patch, start_patch
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


def pools() -> dict[str, GPUPoolSpec]:
    core = GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8},
            "minNodes": 0,
            "maxNodes": 2,
            "pricing": {"capexPerNode": 200000},
        }
    )
    spot = GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "A100", "perNode": 8},
            "minNodes": 0,
            "maxNodes": 2,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 9},
            "taints": [SPOT_TAINT],
        }
    )
    return {"core": core, "spot": spot}


@pytest.mark.parametrize(
    ("step", "suspended", "pods", "start_time", "want"),
    [
        (STEP_SUSPEND, False, 1, True, "suspend"),
        (STEP_SUSPEND, True, 1, True, "wait"),
        (STEP_SUSPEND, True, 0, True, "clear_start_time"),
        (STEP_SUSPEND, True, 0, False, "repin"),
        (STEP_REPINNED, True, 0, False, "resume"),
        (STEP_REPINNED, False, 0, False, "resume"),
    ],
)
def test_next_step(step: str, suspended: bool, pods: int, start_time: bool, want: str) -> None:
    move = Move("spot", "core", step, 1.0)
    assert next_step(move, suspended=suspended, pods_left=pods, has_start_time=start_time) == want


def test_intent_round_trips_through_the_annotation_and_suspends_in_one_patch() -> None:
    move = Move("spot", None, STEP_SUSPEND, 12.5)
    patch = start_patch(JOB, move, {"metadata": {}})
    assert patch["spec"] == {"suspend": True}
    assert read_move(patch["metadata"]["annotations"]) == move
    # Each move is counted on the workload: the run after it starts by loading its checkpoint.
    assert patch["metadata"]["annotations"]["hybridgpu.io/restarts"] == "1"
    again = start_patch(JOB, move, {"metadata": {"annotations": {"hybridgpu.io/restarts": "2"}}})
    assert again["metadata"]["annotations"]["hybridgpu.io/restarts"] == "3"
    garbled = {"metadata": {"annotations": {"hybridgpu.io/restarts": "x"}}}
    assert (
        start_patch(JOB, move, garbled)["metadata"]["annotations"]["hybridgpu.io/restarts"] == "1"
    )
    assert read_move({"hybridgpu.io/move": "not json"}) is None
    assert finish_patch(JOB) == {
        "metadata": {"annotations": {"hybridgpu.io/move": None}},
        "spec": {"suspend": False},
    }


def test_repin_to_spot_adds_selector_and_toleration_and_back_to_core_drops_them() -> None:
    on_core = {"nodeSelector": {"hybridgpu.io/pool": "core", "zone": "a"}, "tolerations": []}
    selector, tolerations = repin_template(on_core, "spot", pools())
    assert selector == {"hybridgpu.io/pool": "spot", "zone": "a"}
    assert tolerations == [SPOT_TOLERATION]
    back = repin_template({"nodeSelector": selector, "tolerations": tolerations}, "core", pools())
    assert back == ({"hybridgpu.io/pool": "core", "zone": "a"}, [])
    assert repin_template(on_core, None, pools()) == (on_core["nodeSelector"], [])


def job_with(pod_spec: dict) -> dict:
    return {"spec": {"template": {"spec": pod_spec}}}


def test_repin_into_a_pool_that_is_gone_rolls_back_to_where_it_came_from() -> None:
    move = Move("deleted-pool", "core", STEP_SUSPEND, 1.0)
    ops = repin_patch(JOB, job_with({"nodeSelector": {"hybridgpu.io/pool": "core"}}), move, pools())
    assert ops[0]["value"] == {"hybridgpu.io/pool": "core"}
    assert json.loads(ops[2]["value"])["step"] == STEP_REPINNED
    assert len(ops) == 3, "a rollback is not a pin by the operator"


def test_a_move_to_spot_records_that_the_operator_pinned_the_job() -> None:
    ops = repin_patch(JOB, job_with({}), Move("spot", "core", STEP_SUSPEND, 1.0), pools())
    assert ops[-1] == {
        "op": "add",
        "path": "/metadata/annotations/hybridgpu.io~1pinned-to",
        "value": "spot",
    }


@pytest.mark.parametrize(
    ("holder", "seen_since", "now", "want"),
    [
        (None, 100.0, 100.0, True),
        ("me", 99.0, 100.0, True),
        ("other", 95.0, 100.0, False),
        ("other", 85.0, 100.0, False),
        ("other", 80.0, 100.0, True),
    ],
)
def test_lease_is_taken_only_from_an_expired_holder(
    holder: str | None, seen_since: float, now: float, want: bool
) -> None:
    assert holder_may_take(holder, seen_since, 15.0, "me", now) is want


class FakeApiException(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = json.dumps({"message": message})
        self.reason = "x"


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [(404, NotFound, False), (409, Conflict, True), (422, Invalid, False)],
)
def test_api_errors_become_project_errors(status: int, kind: type, retryable: bool) -> None:
    err = from_api_exception(FakeApiException(status, "nope"), "patch Job ns/j")
    assert isinstance(err, kind)
    assert err.retryable is retryable
    assert str(err) == "patch Job ns/j: nope"
