"""The plan reuses a replay with committed nodes for every longer list of committed nodes once
those were enough (every job committed capacity may serve found room on them): a property of
the replay over random traces and fleets, so that the reuse never changes a plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridgpu.planner.model import JobDemand
from hybridgpu.planner.replay import replay_committed
from support.planner import CLOUD, random_jobs

pytestmark = pytest.mark.unit

jobs_strategy = random_jobs(40)


@settings(max_examples=150, deadline=None)
@given(
    jobs=jobs_strategy,
    owned=st.lists(st.sampled_from([4, 8]), max_size=3),
    committed=st.lists(st.sampled_from([4, 8]), max_size=5).map(lambda c: tuple(sorted(c))),
    more=st.lists(st.sampled_from([4, 8]), min_size=1, max_size=3),
)
def test_more_committed_nodes_after_enough_change_nothing(
    jobs: list[JobDemand], owned: list[int], committed: tuple[int, ...], more: list[int]
) -> None:
    usage, enough = replay_committed(jobs, owned, CLOUD, committed)
    longer = tuple(sorted((*committed, *more)))
    longer_usage, longer_enough = replay_committed(jobs, owned, CLOUD, longer)
    if enough and longer[: len(committed)] == committed:
        assert longer_usage == usage
        assert longer_enough
    if not enough:
        # "enough" is not claimed where it is false: some firm job found no room.
        firm = [j for j in jobs if not j.preemptible]
        assert firm


def test_committed_nodes_that_are_short_are_said_to_be() -> None:
    """Two 8-GPU firm jobs at once on one committed 8-GPU node: the second finds no room,
    and one more node takes it (so that replay's usage differs)."""
    jobs = [JobDemand(0.0, 3600.0, 8, False), JobDemand(0.0, 3600.0, 8, False)]
    one, enough_one = replay_committed(jobs, [], CLOUD, (8,))
    two, enough_two = replay_committed(jobs, [], CLOUD, (8, 8))
    assert not enough_one and enough_two
    assert one.elastic > 0 and two.elastic == 0
    assert two.committed == pytest.approx(16.0)  # GPU-hours: 2 jobs x 8 GPUs x 1 h
