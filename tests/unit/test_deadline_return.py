"""The deadline rule's way back from on-demand to spot (core/deadline.py, decide() step 2b):
a waiting Job keeps RETURN_ROOM_SECONDS more slack when it moves to on-demand while its spot
pool's nodes last (``spot_lasts``), and a Job the rule put on on-demand goes back to spot
right after a checkpoint once a spot node has run WINDOW_AGE_SECONDS.

The default policy ticks every 30 s (margin 60 s), restarts cost 5 min, pods get 2 min to
stop: a switch is 2 + 10 + 5 = 17 min (1020 s) for a Job with a pod on a node, 15 min (900 s)
for one without.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.builders import NOW, node, pending, plan_summary, policy, pool, running, snapshot
from tests.support.sim import sim_pool

from hybridgpu.core.deadline import (
    LASTING_MIN_SEEN,
    RETURN_ROOM_SECONDS,
    WINDOW_AGE_SECONDS,
    may_return_to_spot,
    slack_of,
    spot_lasts,
)
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ActionKind, MoveJob
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.snapshot import (
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    NodeState,
    PoolState,
)
from hybridgpu.sim.engine import PolicyResult, SimSettings, Simulation
from hybridgpu.sim.spot import AvailabilityTrace
from hybridgpu.sim.traces import TraceJob

pytestmark = pytest.mark.unit

H = 3600.0
MARGIN = 60.0
EVERY = 1800.0
RESTART = 300.0
WORK = 4 * H


def cloud(lasted: int, cut_short: int, *, launchable: bool = True) -> list[PoolState]:
    spot = pool("spot", "spot", per_node=1)
    return [
        pool("elastic", "elastic", per_node=1),
        replace(spot, nodes_lasted=lasted, nodes_cut_short=cut_short, launchable=launchable),
    ]


LASTS = (8, 1)
DOES_NOT_LAST = (4, 4)


def test_spot_lasts_needs_enough_seen_and_two_of_three_lasting() -> None:
    assert spot_lasts(8, 1)
    assert spot_lasts(4, 2)
    assert not spot_lasts(3, 2)
    assert not spot_lasts(LASTING_MIN_SEEN - 1, 0)
    assert not spot_lasts(0, 0)


def waiting(
    slack: float, counts: tuple[int, int], *, launchable: bool = False
) -> list[tuple[object, ...]]:
    """A Job with no pod on a node and ``slack`` seconds of slack (a 900 s switch), while
    spot cannot launch (unless ``launchable``)."""
    pod, job = pending("t", 1, "preemptible")
    assert job is not None
    job = replace(
        job,
        created_at=NOW - H,
        deadline_at=NOW + WORK + 900 + slack,
        expected_duration_seconds=WORK,
        checkpoint_seconds=EVERY,
    )
    pools = cloud(*counts, launchable=launchable)
    return plan_summary(decide(snapshot(pools, [], [(pod, job)]), policy(), NOW))


def test_a_waiting_job_keeps_room_to_come_back_only_while_spot_lasts() -> None:
    # Without the room a waiting Job leaves at slack < 60 + 900 + 1800 = 2760 s; with it,
    # 900 s earlier (< 3660 s).
    # Only while spot cannot launch: when it can, the Job gets its spot run without a detour.
    slack = 3200.0
    to_on_demand = [("deadline", "team/t", "elastic"), ("scale_up", "elastic", 1)]
    assert waiting(slack, LASTS) == to_on_demand
    assert waiting(slack, DOES_NOT_LAST) == []  # it waits for spot
    assert waiting(slack, (0, 0)) == []  # nothing seen yet
    assert waiting(slack, LASTS, launchable=True) == [("scale_up", "spot", 1)]
    assert waiting(2700.0, DOES_NOT_LAST) == to_on_demand
    assert waiting(3700.0, LASTS) == []


def on_demand(
    *,
    slack: float,
    since_checkpoint: float = 30.0,
    spot_age: float = 2 * H,
    counts: tuple[int, int] = LASTS,
    by_operator: bool = True,
    pod_waited: float = 0.0,
) -> ClusterSnapshot:
    """A Job the deadline rule put on on-demand node e1, ``since_checkpoint`` after its
    pod's first checkpoint there, with ``slack`` seconds of slack (a 1020 s switch); spot
    node s1 (running another Job) has run ``spot_age``. The Job started (its
    status.startTime) ``pod_waited`` before its pod did (the on-demand node booting)."""
    started = NOW - RESTART - EVERY - since_checkpoint
    pod, job = running("t", "e1", 1, "preemptible", started=started, pool_pin="elastic")
    assert job is not None
    saved = EVERY  # this run's one checkpoint
    job = replace(
        job,
        started_at=started - pod_waited,
        created_at=NOW - 10 * H,
        deadline_at=NOW + (WORK - saved) + 1020 + slack,
        expected_duration_seconds=WORK,
        checkpoint_seconds=EVERY,
        pool="elastic",
        pinned_by_operator=by_operator,
    )
    other = running("o", "s1", 1, "preemptible", started=NOW - spot_age)
    nodes = [
        node("e1", "elastic", gpus=1),
        replace(node("s1", "spot", gpus=1), created_at=NOW - spot_age),
    ]
    return snapshot(cloud(*counts), nodes, [(pod, job), other])


RETURN = [("deadline", "team/t", "spot"), ("scale_up", "spot", 1)]


def test_a_job_on_on_demand_returns_to_spot_after_a_checkpoint_once_a_window_has_lasted() -> None:
    # 60 + 1020 + 1800 = 2880 s of slack lets a spot run save a checkpoint and still come back.
    assert plan_summary(decide(on_demand(slack=2900), policy(), NOW)) == RETURN
    assert plan_summary(decide(on_demand(slack=2850), policy(), NOW)) == []
    # Not between checkpoints (it would throw work away), not into a young window, not into
    # a pool whose windows have not lasted, not a Job its owner pinned there.
    assert plan_summary(decide(on_demand(slack=2900, since_checkpoint=600), policy(), NOW)) == []
    assert (
        plan_summary(decide(on_demand(slack=2900, spot_age=WINDOW_AGE_SECONDS - 60), policy(), NOW))
        == []
    )
    assert plan_summary(decide(on_demand(slack=2900, counts=DOES_NOT_LAST), policy(), NOW)) == []
    assert plan_summary(decide(on_demand(slack=2900, by_operator=False), policy(), NOW)) == []
    # Without checkpoints a return would throw away all it did on on-demand.
    never = on_demand(slack=2 * WORK)
    never = replace(never, jobs=tuple(replace(j, checkpoint_seconds=0.0) for j in never.jobs))
    assert plan_summary(decide(never, policy(), NOW)) == []


def test_the_return_counts_checkpoints_from_the_pods_start_not_the_jobs() -> None:
    # A Kubernetes Job's status.startTime is set when it is resumed, before its pod has a
    # node: here the on-demand node took 5 min to boot (over two ticks). The checkpoints are
    # the pod's: right after the pod's first one the Job returns; right after the time the
    # Job's startTime would put it (270 s before the pod's), it would throw that work away.
    booted = 300.0
    after_pods = on_demand(slack=2900, pod_waited=booted)
    assert plan_summary(decide(after_pods, policy(), NOW)) == RETURN
    before_pods = on_demand(slack=24 * H, since_checkpoint=30 - booted, pod_waited=booted)
    assert plan_summary(decide(before_pods, policy(), NOW)) == []


def test_no_return_before_the_pod_on_on_demand_has_started() -> None:
    # Bound to its node but not started yet (the kubelet has not acknowledged it): its run
    # has saved nothing and reached no checkpoint to return after, whatever its slack.
    snap = on_demand(slack=24 * H, pod_waited=600.0)
    snap = replace(
        snap, pods=tuple(replace(p, started_at=None) if p.job == "team/t" else p for p in snap.pods)
    )
    assert plan_summary(decide(snap, policy(), NOW)) == []


def test_the_return_names_the_slack_and_the_window() -> None:
    plan = decide(on_demand(slack=2900), policy(), NOW)
    (move,) = [a for a in plan.actions if isinstance(a, MoveJob)]
    assert move.kind == ActionKind.DEADLINE
    assert "has run for 2.0 h (8 of the 9 seen to run an hour ran another)" in move.reason


def test_consolidation_leaves_a_job_the_rule_pinned_to_on_demand_to_the_return() -> None:
    # A day of slack, mid-interval: consolidation's move to spot would lose the work since
    # the checkpoint, into any window; only the return moves it, at a checkpoint.
    for counts in (LASTS, DOES_NOT_LAST):
        snap = on_demand(slack=24 * H, since_checkpoint=600, counts=counts)
        assert plan_summary(decide(snap, policy(), NOW)) == []


def applied(snap: ClusterSnapshot, now: float) -> ClusterSnapshot:
    """``snap`` after its Job went back to spot: its pod pending, pinned to the spot pool,
    its checkpoints recorded as progress."""
    job = next(j for j in snap.jobs if j.name == "t")
    pod = next(p for p in snap.pods if p.job == job.key)
    slack = slack_of(job, pod.started_at, now, restart_seconds=RESTART, stop_seconds=120.0)
    assert slack is not None
    moved = replace(
        job, pool="spot", started_at=None, progress_seconds=slack.saved, pinned_by_operator=True
    )
    waiting_pod = replace(pod, node=None, started_at=None, pool="spot", pending_since=now)
    nodes: tuple[NodeState, ...] = tuple(n for n in snap.nodes if n.name != "e1")
    return replace(
        snap,
        nodes=nodes,
        pods=tuple(waiting_pod if p is pod else p for p in snap.pods),
        jobs=tuple(moved if j is job else j for j in snap.jobs),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slack=st.one_of(st.floats(2700, 3200), st.floats(0, 3 * H)),
    since_checkpoint=st.one_of(st.floats(0, 60), st.floats(0, EVERY - 1)),
    spot_age=st.floats(0, 4 * H),
    lasted=st.integers(0, 12),
    cut_short=st.integers(0, 6),
)
def test_a_return_keeps_the_deadline_safe_and_does_not_flap(
    slack: float, since_checkpoint: float, spot_age: float, lasted: int, cut_short: int
) -> None:
    snap = on_demand(
        slack=slack,
        since_checkpoint=since_checkpoint,
        spot_age=spot_age,
        counts=(lasted, cut_short),
    )
    plan = decide(snap, policy(), NOW)
    if plan_summary(plan) != RETURN:
        event("stays on on-demand")
        return
    event("returns to spot")
    job = next(j for j in snap.jobs if j.name == "t")
    pod = next(p for p in snap.pods if p.job == job.key)
    now_slack = slack_of(job, pod.started_at, NOW, restart_seconds=RESTART, stop_seconds=120.0)
    assert now_slack is not None
    # A spot run could save its first checkpoint and still leave the margin: if it is cut
    # short the Job still reaches its deadline on on-demand.
    assert may_return_to_spot(now_slack, EVERY, MARGIN)
    assert spot_lasts(lasted, cut_short) and spot_age >= WINDOW_AGE_SECONDS
    # Applied, the next tick waits for spot: no move back to on-demand, no new room.
    again = plan_summary(decide(applied(snap, NOW), policy(), NOW))
    assert all(kind != "deadline" for kind, *_ in again), again
    assert RETURN_ROOM_SECONDS > 0


SWITCH_AND_MARGIN = 120 + 600 + 300 + 60


@st.composite
def lasting_spot_worlds(draw: st.DrawFn) -> tuple[list[TraceJob], SimSettings]:
    """Enough long preemptible Jobs with deadlines that their spot nodes are seen to last
    (few interruptions) while spot comes and goes in stretches of hours: the return from
    on-demand fires; deadlines that on-demand from arrival can meet."""
    jobs = []
    for i in range(draw(st.integers(8, 16))):
        duration = draw(st.floats(3 * H, 10 * H))
        jobs.append(
            TraceJob(
                f"j{i}",
                draw(st.floats(0, 4 * H)),
                duration,
                1,
                Criticality.PREEMPTIBLE,
                draw(st.sampled_from([300.0, 1800.0])),
                # Some with barely the slack for a switch (several move close together).
                deadline_seconds=duration
                + SWITCH_AND_MARGIN
                + draw(st.one_of(st.floats(0, 300), st.floats(0, duration))),
            )
        )
    availability = AvailabilityTrace(
        gap_seconds=draw(st.sampled_from([2 * H, 3 * H])),
        # Spot first (nodes are seen to last), then it comes and goes.
        launchable=(True, *draw(st.lists(st.booleans(), min_size=1, max_size=8))),
    )
    world = SimSettings(
        provisioning_delay_seconds=draw(st.floats(0, 600)),
        restart_overhead_seconds=draw(st.floats(0, 300)),
        spot_hazard_per_hour=draw(st.floats(0, 0.2)),
        spot_availability=availability,
        seed=draw(st.integers(0, 1000)),
        moved_jobs_keep_queue_place=draw(st.booleans()),
    )
    return jobs, world


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lasting_spot_worlds())
def test_returns_from_on_demand_never_miss_a_deadline(
    world: tuple[list[TraceJob], SimSettings],
) -> None:
    jobs, physics = world
    pools = [
        sim_pool("od", "elastic", 1, 200, 3.0),
        sim_pool("spot", "spot", 1, 200, 0.9),
    ]
    result = Simulation("h", pools, ScalingPolicySpec(), jobs, physics).run()
    event("returns to spot" if result.deadlines.returns_to_spot else "no return")
    assert result.deadlines.jobs == len(jobs)
    assert result.deadlines.missed == 0, result.to_json()


@pytest.mark.parametrize("keep_place", [False, True], ids=["kube-scheduler order", "oldest first"])
def test_two_jobs_moved_to_on_demand_a_boot_apart_both_make_their_deadlines(
    keep_place: bool,
) -> None:
    # Found by hypothesis (main at 8cb75ad). "late" arrives with 180 s of slack and moves to
    # on-demand at once; "patient" reaches its move threshold a boot later, the moment late's
    # node is Ready. When the scheduler gave that node to patient (it has waited longer),
    # late waited for patient's node and finished 95 s late. Under kube-scheduler's order
    # (recreated pods queue from the move) late gets its node; under either order the rule
    # holds patient back a tick, until late is on its node.
    late = TraceJob(
        "late", 8246.0, 2 * H, 1, Criticality.PREEMPTIBLE, 300.0, deadline_seconds=8280.0
    )
    early = [
        TraceJob(f"e{i}", 0.0, 2 * H, 1, Criticality.PREEMPTIBLE, 300.0, deadline_seconds=8280.0)
        for i in range(7)
    ]
    patient = TraceJob(
        "patient", 0.0, 9900.0, 1, Criticality.PREEMPTIBLE, 300.0, deadline_seconds=20880.0
    )
    world = SimSettings(
        provisioning_delay_seconds=571.0,
        restart_overhead_seconds=0.0,
        spot_availability=AvailabilityTrace(gap_seconds=1800.0, launchable=(False,)),
        moved_jobs_keep_queue_place=keep_place,
    )
    pools = [sim_pool("od", "elastic", 1, 200, 3.0), sim_pool("spot", "spot", 1, 200, 0.9)]
    result = Simulation("h", pools, ScalingPolicySpec(), [late, *early, patient], world).run()
    assert result.deadlines.jobs == 9
    assert result.deadlines.missed == 0, result.to_json()


HOLD = 120 + 30 + MARGIN


def close_moves(
    *, first: float, second: float, pools: list[PoolState] | None = None
) -> tuple[list[tuple[object, ...]], list[str]]:
    """Job "first" moved to on-demand pool elastic and waits there for its node (none of its
    pods on a node) with ``first`` seconds of slack; Job "second" waits for spot (which cannot
    launch) with ``second`` seconds of slack (a 900 s switch each). The plan's summary and
    notes."""

    def job_with(name: str, slack: float, pin: str | None) -> tuple[GPUPod, JobState]:
        pod, job = pending(name, 1, "preemptible", pool_pin=pin)
        assert job is not None
        job = replace(
            job,
            created_at=NOW - H,
            deadline_at=NOW + WORK + 900 + slack,
            expected_duration_seconds=WORK,
            checkpoint_seconds=EVERY,
            pinned_by_operator=pin is not None,
        )
        return pod, job

    snap = snapshot(
        pools if pools is not None else cloud(*DOES_NOT_LAST, launchable=False),
        [],
        [job_with("first", first, "elastic"), job_with("second", second, None)],
    )
    plan = decide(snap, policy(), NOW)
    return plan_summary(plan), list(plan.notes)


def test_a_job_does_not_move_beside_one_that_needs_the_node_on_its_way() -> None:
    # "first" could not make its deadline on a node launched now (slack < 0 counts a boot):
    # it needs the one launched for it, which any pod pending in the pool may take.
    summary, notes = close_moves(first=-100, second=1000)
    assert summary == [("scale_up", "elastic", 1)]  # first's node: no move of second yet
    assert any("Job team/second waits a tick" in n and "team/first" in n for n in notes), notes
    # It waits while, were it to start on a spot node meanwhile, the rule could still take
    # it off in time: 120 s to stop, an interval and the margin (210 s of slack)...
    assert close_moves(first=-100, second=HOLD)[0] == [("scale_up", "elastic", 1)]
    # ... below that it has to go: to another on-demand pool when there is one,
    moved = [("deadline", "team/second", "elastic"), ("scale_up", "elastic", 2)]
    assert close_moves(first=-100, second=HOLD - 1)[0] == moved
    dearer = replace(pool("elastic2", "elastic", per_node=1, price=30.0))
    elsewhere = close_moves(
        first=-100, second=HOLD - 1, pools=[*cloud(*DOES_NOT_LAST, launchable=False), dearer]
    )[0]
    assert elsewhere == [
        ("deadline", "team/second", "elastic2"),
        ("scale_up", "elastic", 1),
        ("scale_up", "elastic2", 1),
    ]
    # A Job that can still make it on a node launched now does not hold others back.
    assert close_moves(first=MARGIN, second=1000)[0] == moved


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.floats(-2 * H, 2 * H), second=st.floats(-2 * H, 4 * H))
def test_a_move_never_competes_with_a_job_that_needs_its_node(first: float, second: float) -> None:
    summary, _ = close_moves(first=first, second=second)
    moves = [a for a in summary if a[0] == "deadline"]
    if moves and first < MARGIN:
        event("moves beside a Job that needs its node")
        assert second < HOLD  # only when it could not wait a tick itself
    elif moves:
        event("moves")
    else:
        event("waits")


@st.composite
def close_move_worlds(draw: st.DrawFn) -> tuple[list[TraceJob], SimSettings]:
    """Jobs that reach the deadline rule's move about a boot apart while spot cannot
    launch: some arrive with barely the slack for a switch and move at once, some have
    waited for spot since earlier and reach their threshold a little less than a boot later
    (with the default policy a waiting Job moves at 60 + 900 s + its first checkpoint's work
    of slack), when the node launched for the first is nearly Ready. Boots and restarts are
    near what the operator allows for, so a Job that loses its node to another is late. The
    scheduler's queue takes a moved Job from its move or from when it first waited."""
    boot = draw(st.floats(400, 600))
    at = draw(st.floats(H, 4 * H))
    jobs = []
    for i in range(draw(st.integers(2, 6))):
        duration = draw(st.floats(600, 4 * H))
        every = draw(st.sampled_from([None, 300.0, 1800.0]))
        if draw(st.booleans()):
            arrival = at + draw(st.floats(0, 120))
            deadline = duration + SWITCH_AND_MARGIN + draw(st.floats(0, 120))
        else:
            arrival = draw(st.floats(0, at))
            moves_at = at + boot - draw(st.floats(0, 240))
            first = min(every or duration, duration)
            deadline = moves_at + duration + 1860 + first - arrival
        jobs.append(
            TraceJob(
                f"j{i}",
                arrival,
                duration,
                1,
                Criticality.PREEMPTIBLE,
                every,
                deadline_seconds=deadline,
            )
        )
    world = SimSettings(
        provisioning_delay_seconds=boot,
        restart_overhead_seconds=draw(st.floats(0, 60)),
        spot_availability=AvailabilityTrace(gap_seconds=10 * H, launchable=(False,)),
        moved_jobs_keep_queue_place=draw(st.booleans()),
    )
    return jobs, world


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(close_move_worlds())
def test_jobs_moving_to_on_demand_close_together_make_their_deadlines(
    world: tuple[list[TraceJob], SimSettings],
) -> None:
    jobs, physics = world
    pools = [sim_pool("od", "elastic", 1, 200, 3.0), sim_pool("spot", "spot", 1, 200, 0.9)]
    result = Simulation("h", pools, ScalingPolicySpec(), jobs, physics).run()
    event(f"{result.deadlines.on_demand_moves} moves")
    assert result.deadlines.jobs == len(jobs)
    assert result.deadlines.missed == 0, result.to_json()


def with_last_moment_job(other: TraceJob, per_node: int = 1) -> PolicyResult:
    """hybridgpu on "late", a Job that must move to on-demand at once (180 s of slack; the
    on-demand pool's nodes take 571 s to boot, spot has no capacity), and ``other``."""
    late = TraceJob(
        "late", 8246.0, 2 * H, 1, Criticality.PREEMPTIBLE, 300.0, deadline_seconds=8280.0
    )
    world = SimSettings(
        provisioning_delay_seconds=571.0,
        restart_overhead_seconds=0.0,
        spot_availability=AvailabilityTrace(gap_seconds=10 * H, launchable=(False,)),
    )
    pools = [
        sim_pool("od", "elastic", per_node, 200, 3.0),
        sim_pool("spot", "spot", 1, 200, 0.9),
    ]
    return Simulation("h", pools, ScalingPolicySpec(), [late, other], world).run()


def test_a_standard_pod_waiting_just_before_a_last_moment_node_is_ready_cannot_take_it() -> None:
    # "svc" (standard, it outranks preemptible work in the scheduler's queue) starts to wait
    # in the pool 27 s before the node launched for late is Ready. Before the node was kept
    # for late (core/reserve.py), svc took it and late, on the node bought next, finished a
    # boot late.
    result = with_last_moment_job(TraceJob("svc", 8790.0, H, 1, Criticality.STANDARD))
    assert result.deadlines.missed == 0


def test_a_critical_pod_waiting_there_takes_the_node_kept_for_a_job() -> None:
    # Critical work comes first: a critical pod tolerates the reservation and outranks the
    # Job, so it gets the node at once; decide() buys the Job another, a boot later, and the
    # Job that moved at the last moment is late (docs/concepts.md, "Deadlines").
    result = with_last_moment_job(TraceJob("urgent", 8790.0, H, 1, Criticality.CRITICAL))
    # It got the node on its way (Ready 61 s after it arrived), not one bought for it.
    assert result.wait_seconds["critical"]["p95"] < 571.0 / 2, result.to_json()
    assert result.deadlines.missed == 1


def test_no_other_job_lands_on_the_node_kept_for_a_job_while_it_runs_there() -> None:
    # The node kept for "late" (2 GPUs, late uses 1) stays kept while late runs there: on the
    # cluster kube-scheduler would otherwise preempt late's pod for a standard pod waiting in
    # the pool. So "svc", arriving while late runs, waits for a node of its own (a boot)
    # instead of taking the kept node's free GPU.
    svc = TraceJob("svc", 8246.0 + 1800.0, H, 1, Criticality.STANDARD)
    result = with_last_moment_job(svc, per_node=2)
    assert result.deadlines.missed == 0 and result.deadlines.on_demand_moves == 1
    assert result.wait_seconds["standard"]["p95"] >= 571.0, result.to_json()
    assert result.unfinished_jobs == 0
