"""Reading the deadline and idle-reclaim annotations of Jobs and Pods (kube/convert.py), and
the per-pod idle clock of the snapshot (kube/snapshot.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.unit.test_kube_convert import T0, elastic, make_job, make_node, make_pod

from hybridgpu.core.decide import decide
from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import IdleTracker, gpu_pod, job_deadline, job_state
from hybridgpu.kube.snapshot import Measurements, build_snapshot
from hybridgpu.models import ScalingPolicySpec

pytestmark = pytest.mark.unit

CREATED = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("annotations", "deadline", "expected", "error"),
    [
        ({}, None, None, None),
        # Without a deadline the expected duration is read too (decide() may wait for it).
        ({"hybridgpu.io/expected-duration": "2h"}, None, 7200, None),
        (
            {"hybridgpu.io/expected-duration": "soon"},
            None,
            None,
            "annotation hybridgpu.io/expected-duration: 'soon' is not a duration",
        ),
        (
            {
                "hybridgpu.io/deadline": "2026-01-02T06:00:00Z",
                "hybridgpu.io/expected-duration": "6h",
            },
            CREATED + 30 * 3600,
            6 * 3600,
            None,
        ),
        (
            {
                "hybridgpu.io/deadline": "2026-01-02T06:00:00+02:00",
                "hybridgpu.io/expected-duration": "90m",
            },
            CREATED + 28 * 3600,
            5400,
            None,
        ),
        (  # a duration counts from the Job's creation
            {"hybridgpu.io/deadline": "36h", "hybridgpu.io/expected-duration": "1h30m"},
            CREATED + 36 * 3600,
            5400,
            None,
        ),
        (
            {"hybridgpu.io/deadline": "tomorrow", "hybridgpu.io/expected-duration": "6h"},
            None,
            None,
            "'tomorrow' is neither an RFC 3339 time nor a duration",
        ),
        (  # a time without a zone is ambiguous
            {
                "hybridgpu.io/deadline": "2026-01-02T06:00:00",
                "hybridgpu.io/expected-duration": "6h",
            },
            None,
            None,
            "neither an RFC 3339 time",
        ),
        (
            {"hybridgpu.io/deadline": "36h"},
            None,
            None,
            "hybridgpu.io/deadline needs hybridgpu.io/expected-duration",
        ),
        (
            {"hybridgpu.io/deadline": "36h", "hybridgpu.io/expected-duration": "a while"},
            None,
            None,
            "annotation hybridgpu.io/expected-duration: 'a while' is not a duration",
        ),
        (
            {"hybridgpu.io/deadline": "36h", "hybridgpu.io/expected-duration": "0s"},
            None,
            None,
            "must be longer than 0",
        ),
    ],
)
def test_a_jobs_deadline_comes_from_its_annotations(
    annotations: dict[str, str], deadline: float | None, expected: float | None, error: str | None
) -> None:
    job = make_job(annotations=annotations)
    job["metadata"]["creationTimestamp"] = T0
    state = job_state(job)
    assert state is not None
    assert state.created_at == CREATED
    assert state.deadline_at == deadline
    assert state.expected_duration_seconds == expected
    if error is None:
        assert state.input_error is None
    else:
        assert state.input_error is not None and error in state.input_error


@pytest.mark.parametrize(
    ("value", "returns"),
    [(None, False), ("true", True), ("True ", True), ("false", False), ("yes", False)],
)
def test_return_to_core_is_an_opt_in(value: str | None, returns: bool) -> None:
    job = make_job(annotations={} if value is None else {"hybridgpu.io/return-to-core": value})
    state = job_state(job)
    assert state is not None and state.return_to_core is returns


def test_progress_is_read_and_a_bad_value_counts_as_none() -> None:
    assert job_deadline({"hybridgpu.io/progress": "5400"}, CREATED).progress_seconds == 5400
    bad = job_deadline({"hybridgpu.io/progress": "-3"}, CREATED)
    assert bad.progress_seconds == 0 and bad.error and "hybridgpu.io/progress" in bad.error


def test_a_bad_deadline_is_reported_in_the_plan_and_the_job_treated_as_without_one() -> None:
    job = make_job(annotations={"hybridgpu.io/deadline": "soon"})
    job["metadata"]["creationTimestamp"] = T0
    objects = ClusterObjects(nodes=[make_node("n1", "a")], pods=[], jobs=[job])
    snap = build_snapshot(objects, {"a": elastic()}, Measurements(), IdleTracker(), now=CREATED)
    plan = decide(snap, ScalingPolicySpec(), CREATED)
    assert any("ns/j: annotation hybridgpu.io/deadline" in n for n in plan.notes), plan.notes
    assert snap.jobs[0].deadline_at is None


@pytest.mark.parametrize(
    ("pod_notes", "job_notes", "timeout", "error"),
    [
        ({}, {}, None, None),
        ({"hybridgpu.io/idle-timeout": "1h"}, {}, 3600, None),
        ({}, {"hybridgpu.io/idle-timeout": "30m"}, 1800, None),  # from the Job
        ({"hybridgpu.io/idle-timeout": "2h"}, {"hybridgpu.io/idle-timeout": "30m"}, 7200, None),
        ({"hybridgpu.io/idle-timeout": "later"}, {}, None, "'later' is not a duration"),
        ({"hybridgpu.io/idle-timeout": "0s"}, {}, None, "must be longer than 0"),
    ],
)
def test_idle_timeout_is_read_from_the_pod_else_its_job(
    pod_notes: dict[str, str], job_notes: dict[str, str], timeout: float | None, error: str | None
) -> None:
    raw = make_pod(node="n1", job="j", phase="Running")
    raw["metadata"]["annotations"] = pod_notes
    pod = gpu_pod(raw, {}, {"ns/j": job_notes})
    assert pod is not None
    assert pod.idle_timeout_seconds == timeout
    assert (pod.input_error is None) if error is None else (error in (pod.input_error or ""))
    assert not pod.bare and not pod.reclaim_critical


def test_a_bare_pod_and_the_critical_opt_in_are_read() -> None:
    raw = make_pod(node="n1", phase="Running")
    raw["metadata"]["annotations"] = {
        "hybridgpu.io/idle-timeout": "1h",
        "hybridgpu.io/idle-reclaim-critical": "True",
    }
    raw["metadata"]["deletionTimestamp"] = T0
    pod = gpu_pod(raw, {})
    assert pod is not None and pod.bare and pod.reclaim_critical and pod.terminating


def _objects(util_notes: dict[str, str]) -> ClusterObjects:
    pod = make_pod("nb", node="n1", job="j", phase="Running")
    pod["metadata"]["annotations"] = util_notes
    return ClusterObjects(nodes=[make_node("n1", "a")], pods=[pod], jobs=[make_job("j")])


def test_a_pods_idle_clock_runs_while_its_fresh_utilization_stays_below_the_threshold() -> None:
    objects = _objects({"hybridgpu.io/idle-timeout": "1h"})
    tracker = IdleTracker()
    pools = {"a": elastic()}  # idleUtilizationPercent 10 (the default)

    def idle_since(now: float, utilization: dict[str, float]) -> float | None:
        measured = Measurements(utilization_by_pod=utilization)
        snap = build_snapshot(objects, pools, measured, tracker, now=now)
        (pod,) = snap.pods
        return pod.idle_since

    assert idle_since(100.0, {"ns/nb": 3.0}) == 100.0
    assert idle_since(200.0, {"ns/nb": 4.0}) == 100.0
    assert idle_since(300.0, {}) is None  # no fresh reading: the clock starts again
    assert idle_since(400.0, {"ns/nb": 2.0}) == 400.0
    assert idle_since(500.0, {"ns/nb": 55.0}) is None  # busy


def test_pods_that_did_not_opt_in_get_no_idle_clock() -> None:
    objects = _objects({})
    measured = Measurements(utilization_by_pod={"ns/nb": 1.0})
    snap = build_snapshot(objects, {"a": elastic()}, measured, IdleTracker(), now=100.0)
    (pod,) = snap.pods
    assert pod.idle_since is None and pod.utilization_percent is None
