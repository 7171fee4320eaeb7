"""Deadline-aware spot: core/deadline.py arithmetic and the decide() rule, table-driven.

The default policy ticks every 30 s (margin 60 s), restarts cost 5 min and pods get 2 min
to stop; a switch to on-demand is allowed 2 + 10 + 5 = 17 min (1020 s), 15 min for a Job
with no pod on a node (nothing to stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from tests.support.builders import NOW, node, pending, plan_summary, policy, pool, running, snapshot

from hybridgpu.core.deadline import (
    banked_seconds,
    may_be_moved,
    must_leave_spot,
    must_start_on_demand,
    slack_of,
)
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ActionKind, MoveJob
from hybridgpu.models.snapshot import Criticality, GPUPod, JobState

pytestmark = pytest.mark.unit

H = 3600.0
SWITCH = 120 + 600 + 300
MARGIN = 60.0
CLOUD = [pool("elastic", "elastic", per_node=1), pool("spot", "spot", per_node=1)]


def with_deadline(
    workload: tuple[GPUPod, JobState | None],
    *,
    left_h: float,
    work_h: float,
    checkpoint: float | None = 1800.0,
    progress: float = 0.0,
    job_pool: str | None = None,
) -> tuple[GPUPod, JobState | None]:
    """The workload's Job with a deadline ``left_h`` from now and ``work_h`` of work left."""
    pod, job = workload
    assert job is not None
    return pod, replace(
        job,
        created_at=NOW - H,
        deadline_at=NOW + left_h * H,
        expected_duration_seconds=work_h * H + progress,
        progress_seconds=progress,
        checkpoint_seconds=checkpoint,
        pool=job_pool,
    )


@dataclass
class Case:
    workloads: list
    pools: list = field(default_factory=lambda: list(CLOUD))
    nodes: list = field(default_factory=list)
    want: list = field(default_factory=list)
    want_note: str | None = None


SLACK_AT_ARRIVAL = 6.0


CASES = {
    "a waiting Job with hours of slack waits for spot": Case(
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=10, work_h=4)],
        want=[("scale_up", "spot", 1)],
    ),
    "a waiting Job whose spot run could not checkpoint before its slack runs out goes "
    "on-demand": Case(
        # slack 0.5 h - 1020 s = 780 s < 60 + 1020 + 1800
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=4.5, work_h=4)],
        want=[("deadline", "team/t", "elastic"), ("scale_up", "elastic", 1)],
    ),
    "a waiting Job has no pod to stop: its switch is a node and a restart (15 min), so it "
    "still waits for spot where a running Job's 17-min switch would not": Case(
        # 3800 s beyond the work: >= 60 + 2 x 900 + 1800 (waits); < 60 + 2 x 1020 + 1800
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=4 + 3800 / H, work_h=4)],
        want=[("scale_up", "spot", 1)],
    ),
    "the same Job 200 s later goes on-demand": Case(
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=4 + 3600 / H, work_h=4)],
        want=[("deadline", "team/t", "elastic"), ("scale_up", "elastic", 1)],
    ),
    "without checkpoints a spot run must finish within the slack, else on-demand now": Case(
        # slack 3 h - 1020 s is less than the whole 4 h run a spot attempt would need
        workloads=[
            with_deadline(pending("t", 1, "preemptible"), left_h=7, work_h=4, checkpoint=None)
        ],
        want=[("deadline", "team/t", "elastic"), ("scale_up", "elastic", 1)],
    ),
    "a Job already pinned to on-demand is not moved again, only given a node": Case(
        workloads=[
            with_deadline(
                pending("t", 1, "preemptible", pool_pin="elastic"),
                left_h=4.5,
                work_h=4,
                job_pool="elastic",
            )
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "spot unavailable with slack left: the Job waits and no on-demand is bought": Case(
        pools=[
            pool("elastic", "elastic", per_node=1),
            replace(pool("spot", "spot", per_node=1), launchable=False),
        ],
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=10, work_h=4)],
        want=[],
    ),
    "a Job on spot whose slack fell below two ticks moves to on-demand": Case(
        nodes=[node("s1", "spot", gpus=1)],
        workloads=[
            with_deadline(
                running("t", "s1", 1, "preemptible", started=NOW - 600),
                left_h=(2 * H + SWITCH + 30) / H,
                work_h=2,
            )
        ],
        want=[("deadline", "team/t", "elastic"), ("scale_up", "elastic", 1)],
    ),
    "a Job on spot that can no longer make it by moving stays where it is": Case(
        nodes=[node("s1", "spot", gpus=1)],
        workloads=[
            with_deadline(
                running("t", "s1", 1, "preemptible", started=NOW - 600),
                left_h=(2 * H + SWITCH - 300) / H,
                work_h=2,
            )
        ],
        want=[],
    ),
    "a Job on spot with slack to absorb an interruption stays on spot": Case(
        nodes=[node("s1", "spot", gpus=1)],
        workloads=[
            with_deadline(
                running("t", "s1", 1, "preemptible", started=NOW - 600), left_h=5, work_h=2
            )
        ],
        want=[],
    ),
    "checkpoints of the current run count: a Job 2 h into its run has less left": Case(
        # 2 h run, checkpoint every 30 min: 1.5 h banked after the 5-min start-up. Without
        # them it would have to move (slack 30 s); with them slack is 1.5 h.
        nodes=[node("s1", "spot", gpus=1)],
        workloads=[
            with_deadline(
                running("t", "s1", 1, "preemptible", started=NOW - 2 * H),
                left_h=(2 * H + SWITCH + 30) / H,
                work_h=2,
            )
        ],
        want=[],
    ),
    "critical work does not preempt a Job with a deadline it would then miss": Case(
        pools=[pool("core", "core", max_nodes=1), *CLOUD],
        nodes=[node("c1", "core")],
        workloads=[
            with_deadline(
                running("t", "c1", 8, "preemptible", started=NOW - 600), left_h=2.4, work_h=2
            ),
            pending("urgent", 1, "critical"),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "critical work preempts a Job with a deadline when its slack allows": Case(
        pools=[pool("core", "core", max_nodes=1), *CLOUD],
        nodes=[node("c1", "core")],
        workloads=[
            with_deadline(
                running("t", "c1", 8, "preemptible", started=NOW - 600), left_h=12, work_h=2
            ),
            pending("urgent", 1, "critical"),
        ],
        want=[("preempt", "team/t", None)],
    ),
    "without an on-demand pool the plan says the deadline may be missed": Case(
        pools=[pool("spot", "spot", per_node=1)],
        workloads=[with_deadline(pending("t", 1, "preemptible"), left_h=4.5, work_h=4)],
        want=[("scale_up", "spot", 1)],
        want_note="may miss its deadline",
    ),
    "a deadline on standard work changes nothing (it runs on-demand or core anyway)": Case(
        workloads=[with_deadline(pending("t", 1, "standard"), left_h=4.5, work_h=4)],
        want=[("scale_up", "elastic", 1)],
    ),
    "a Job without a deadline waits for spot as before": Case(
        workloads=[pending("t", 1, "preemptible")],
        want=[("scale_up", "spot", 1)],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_deadline_rule(case: Case) -> None:
    snap = snapshot(case.pools, case.nodes, case.workloads)
    plan = decide(snap, policy(preemption={"moveToSpot": False}), NOW)
    assert plan_summary(plan) == case.want, plan.explain()
    if case.want_note:
        assert any(case.want_note in n for n in plan.notes), plan.notes


def test_the_move_names_the_time_left_and_the_work_left() -> None:
    snap = snapshot(
        list(CLOUD), [], [with_deadline(pending("t", 1, "preemptible"), left_h=4.5, work_h=4)]
    )
    (move,) = [a for a in decide(snap, policy(), NOW).actions if isinstance(a, MoveJob)]
    assert move.kind == ActionKind.DEADLINE
    assert "4.5 h to its deadline" in move.reason and "4.0 h of work left" in move.reason
    assert "on-demand pool elastic" in move.reason


def test_a_running_deadline_jobs_saved_progress_is_in_the_plan() -> None:
    workload = with_deadline(
        running("t", "s1", 1, "preemptible", started=NOW - 2 * H),
        left_h=9,
        work_h=2,
        progress=600,
    )
    snap = snapshot(list(CLOUD), [node("s1", "spot", gpus=1)], [workload])
    plan = decide(snap, policy(), NOW)
    # 600 s recorded earlier plus three 30-min checkpoints of this 2 h run (after start-up).
    assert plan.progress_seconds_by_job == {"team/t": 600 + 3 * 1800}


def test_a_job_the_rule_pinned_to_on_demand_is_not_consolidated_back_to_spot() -> None:
    def plan_for(left_h: float) -> list[tuple[object, ...]]:
        workload = with_deadline(
            running("t", "e1", 1, "preemptible", started=NOW - 3 * H, pool_pin="elastic"),
            left_h=left_h,
            work_h=4.5,  # 2.5 h of it saved by this run's checkpoints: 2 h left
            job_pool="elastic",
        )
        pod, job = workload
        assert job is not None
        snap = snapshot(list(CLOUD), [node("e1", "elastic", gpus=1)], [(pod, job)])
        moved = replace(snap, jobs=(replace(job, pinned_by_operator=True),))
        return plan_summary(decide(moved, policy(), NOW))

    # Consolidation would move it to spot mid-interval, into any window: only the deadline
    # rule's return does, right after a checkpoint into a window that has lasted, in a pool
    # whose nodes last (tests/unit/test_deadline_return.py). With a day to go or with its
    # slack spent, and no spot node, it stays.
    assert plan_for(24) == []
    assert plan_for(2.6) == []


@pytest.mark.parametrize(
    ("ran", "restart", "every", "want"),
    [
        (3600, 300, 1800, 1800),  # 3300 s of progress: one checkpoint
        (2100, 300, 1800, 1800),
        (2099, 300, 1800, 0),
        (7200, 300, None, 0),  # interval unknown: nothing counted
        (7200, 300, 0, 0),  # never checkpoints
        (100, 300, 60, 0),  # still starting up
    ],
)
def test_banked_seconds_counts_only_whole_checkpoints_after_start_up(
    ran: float, restart: float, every: float | None, want: float
) -> None:
    assert banked_seconds(ran, restart, every) == want


def test_slack_is_time_left_minus_work_left_minus_the_switch() -> None:
    job = JobState(
        "ns",
        "j",
        Criticality.PREEMPTIBLE,
        1,
        deadline_at=NOW + 10 * H,
        expected_duration_seconds=4 * H,
        progress_seconds=H,
        checkpoint_seconds=1800,
    )
    slack = slack_of(job, NOW - H, NOW, restart_seconds=300, stop_seconds=120)
    assert slack is not None
    assert slack.saved == H + 1800  # recorded, plus one checkpoint of this run
    assert slack.work_left == 4 * H - H - 1800
    assert slack.seconds == 10 * H - slack.work_left - (120 + 600 + 300)
    assert (
        slack_of(replace(job, deadline_at=None), None, NOW, restart_seconds=0, stop_seconds=0)
        is None
    )


def test_the_rules_at_their_edges() -> None:
    job = JobState(
        "ns",
        "j",
        Criticality.PREEMPTIBLE,
        1,
        deadline_at=NOW + 2 * H + SWITCH,
        expected_duration_seconds=2 * H,
    )
    slack = slack_of(job, None, NOW, restart_seconds=300, stop_seconds=120)
    assert slack is not None and slack.seconds == 0
    assert must_leave_spot(slack, MARGIN)  # exactly enough left to move: move now
    assert not must_leave_spot(replace(slack, time_left=slack.time_left - 1), MARGIN)
    assert not must_leave_spot(replace(slack, time_left=slack.time_left + MARGIN), MARGIN)
    assert must_start_on_demand(slack, 1800, MARGIN)
    assert not may_be_moved(slack, 1800, MARGIN)
