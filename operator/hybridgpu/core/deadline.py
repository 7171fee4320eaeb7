"""Deadlines of preemptible Jobs: how much slack a Job has, and when it must leave spot (or
the queue) for on-demand capacity to finish in time. Pure arithmetic on seconds; the rule is
explained in docs/concepts.md ("Deadlines").

A Job's slack is the time it could still lose and finish by its deadline if it were moved
to an on-demand node now: time left, minus the work a restart now would have to redo (the
expected duration minus what its checkpoints saved), minus the time a switch takes (stop,
an on-demand node boots, the Job starts again; decide() counts no stop for a Job none of
whose pods is on a node). Slack only shrinks while the Job waits or
runs between checkpoints, and grows by a checkpoint interval at each checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridgpu.models.snapshot import JobState

BOOT_ALLOWANCE_SECONDS = 600.0
"""Time an on-demand node takes from launch to running the pod, allowed for in every
switch (decide() waits as long for a joining node before it counts it as missing)."""


def banked_seconds(
    ran_seconds: float, restart_seconds: float, checkpoint_seconds: float | None
) -> float:
    """Work a run of ``ran_seconds`` has saved in checkpoints, counted conservatively: its
    first ``restart_seconds`` are start-up, then one checkpoint every ``checkpoint_seconds``
    of progress. Nothing when the interval is unknown (None) or the Job never checkpoints
    (0): a restart would then redo all of it."""
    if not checkpoint_seconds or checkpoint_seconds <= 0:
        return 0.0
    progress = max(ran_seconds - restart_seconds, 0.0)
    return math.floor(progress / checkpoint_seconds) * checkpoint_seconds


@dataclass(frozen=True, slots=True)
class Slack:
    """Where a Job with a deadline stands at one instant, in seconds."""

    time_left: float
    """Until the deadline."""
    work_left: float
    """Run time a restart now would need: expected duration minus saved progress."""
    switch: float
    """Stopping the Job, getting an on-demand node and starting again."""
    saved: float
    """Progress that survives a restart now (earlier runs' plus this run's checkpoints)."""

    @property
    def seconds(self) -> float:
        """Time the Job can still lose and finish on on-demand: negative when it cannot."""
        return self.time_left - self.work_left - self.switch


def slack_of(
    job: JobState,
    run_started_at: float | None,
    now: float,
    *,
    restart_seconds: float,
    stop_seconds: float,
) -> Slack | None:
    """The slack of ``job`` at ``now``; None when it has no deadline or no expected duration.

    ``run_started_at`` is when its current run started (None: not running);
    ``restart_seconds`` the start-up a run spends before progress (the policy's
    restartOverhead); ``stop_seconds`` the time its pods get to exit (checkpointGracePeriod).
    """
    if job.deadline_at is None or job.expected_duration_seconds is None:
        return None
    saved = job.progress_seconds
    if run_started_at is not None:
        ran = max(now - run_started_at, 0.0)
        saved += banked_seconds(ran, restart_seconds, job.checkpoint_seconds)
    expected = job.expected_duration_seconds
    saved = min(saved, expected)
    return Slack(
        time_left=job.deadline_at - now,
        work_left=max(expected - saved, 0.0),
        switch=stop_seconds + BOOT_ALLOWANCE_SECONDS + restart_seconds,
        saved=saved,
    )


def first_checkpoint_seconds(slack: Slack, checkpoint_seconds: float | None) -> float:
    """How long a fresh run on spot takes before its first checkpoint saves anything (a node
    boots, the Job starts, one interval of progress); the whole remaining work when it does
    not checkpoint."""
    every = checkpoint_seconds if checkpoint_seconds and checkpoint_seconds > 0 else math.inf
    return slack.switch + min(every, slack.work_left)


def must_start_on_demand(slack: Slack, checkpoint_seconds: float | None, margin: float) -> bool:
    """A waiting Job goes to on-demand now when a spot run could not save any progress before
    its slack falls below ``margin`` (then the spot run would be thrown away)."""
    return slack.seconds < margin + first_checkpoint_seconds(slack, checkpoint_seconds)


def must_leave_spot(slack: Slack, margin: float) -> bool:
    """A Job running on spot moves to on-demand when one more interruption could no longer be
    absorbed (slack below ``margin``), as long as the move still makes the deadline (slack
    >= 0); past that, moving would only throw away the work it has done."""
    return 0.0 <= slack.seconds < margin


def may_be_moved(slack: Slack, checkpoint_seconds: float | None, margin: float) -> bool:
    """Whether the operator may stop the Job for another reason (preemption off core, a move
    off on-demand, a node drain) and still leave it time to try spot again."""
    return not must_start_on_demand(slack, checkpoint_seconds, 2 * margin)


RETURN_ROOM_SECONDS = 900.0
"""Slack a waiting Job keeps when it moves to on-demand while its spot pool's nodes last
(``spot_lasts``) and no spot pool can launch: enough for it, after its on-demand boot and
restart, to pass ``may_return_to_spot`` at a checkpoint and go back to spot."""
WINDOW_AGE_SECONDS = 3600.0
"""How long a node of the spot pool must have run without an interruption notice before a
Job on on-demand goes back there: a spot window that has lasted tends to last."""
LASTING_SHARE = 2 / 3
"""``spot_lasts``: the share of a pool's nodes seen to reach WINDOW_AGE_SECONDS that must
also have run as long again without a notice."""
LASTING_MIN_SEEN = 5
"""``spot_lasts``: nodes seen past WINDOW_AGE_SECONDS before the pool's share counts."""


def spot_lasts(lasted: int, cut_short: int) -> bool:
    """Whether a spot pool's windows have been worth returning to, from what was seen of its
    nodes so far: of those that ran WINDOW_AGE_SECONDS without a notice, ``lasted`` ran as
    long again and ``cut_short`` got their notice before. At least LASTING_MIN_SEEN seen and
    at least LASTING_SHARE of them lasted: a return from on-demand then pays its switch (the
    on-demand node's idle tail, a spot boot and restart) more often than a window cut short
    throws it away with the work since the checkpoint."""
    seen = lasted + cut_short
    return seen >= LASTING_MIN_SEEN and lasted >= LASTING_SHARE * seen


def may_return_to_spot(slack: Slack, checkpoint_seconds: float | None, margin: float) -> bool:
    """Whether a Job on on-demand may go back to spot: a fresh spot run could save a
    checkpoint before its slack falls below the margin (else it could not come back)."""
    return not must_start_on_demand(slack, checkpoint_seconds, margin)
