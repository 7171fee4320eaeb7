"""The replay finds the node to make room on and the nodes idle long enough without looking
at every owned node on every arrival (issue 14: the plan on 200,000 jobs). The answers must be
the ones a scan of every node gives: a replay with the plain scans is the reference, on random
traces and fleets with and without committed nodes, waiting and shared GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridgpu.planner.model import CloudRates, JobDemand, Usage
from hybridgpu.planner.replay import _Replay, replay_committed, replay_jobs
from support.planner import CLOUD, random_jobs

pytestmark = pytest.mark.unit


class _ScanEveryNode(_Replay):
    """The replay with the scans over every owned node it had before."""

    def make_room(self, job: JobDemand) -> tuple[int, list[int]] | None:
        best: tuple[int, int, list[int]] | None = None
        need = job.units(self.replicas)
        for node, free in enumerate(self.owned.free):
            victims: list[int] = []
            room = free
            for key in reversed(self.owned.preemptible[node]):
                if room >= need:
                    break
                victims.append(key)
                room += self.runs[key].job.units(self.replicas)
            if room >= need:
                evicted = room - free
                if best is None or evicted < best[0]:
                    best = (evicted, node, victims)
        return None if best is None else (best[1], best[2])

    def return_to_core(self, now: float) -> None:
        settled = [
            n
            for n, since in enumerate(self.owned.idle_since)
            if since is not None and since + self.settle_seconds <= now
        ]
        fast = self.owned.idle_for(self.settle_seconds, now)
        assert fast == settled
        super().return_to_core(now)


def _reference(
    jobs: list[JobDemand],
    owned: list[int],
    cloud: CloudRates,
    committed: tuple[int, ...] = (),
    replicas: int = 1,
) -> Usage:
    return _ScanEveryNode(owned, cloud, None, committed, replicas).run(jobs)


@settings(max_examples=200, deadline=None)
@given(
    jobs=random_jobs(60),
    owned=st.lists(st.sampled_from([2, 4, 8]), max_size=6),
    committed=st.lists(st.sampled_from([4, 8]), max_size=2).map(lambda c: tuple(sorted(c))),
    wait=st.sampled_from([0.0, 0.5, 2.0]),
)
def test_the_replay_places_as_a_scan_of_every_node(
    jobs: list[JobDemand], owned: list[int], committed: tuple[int, ...], wait: float
) -> None:
    cloud = replace(CLOUD, preemptible_wait_hours=wait)
    expected = _reference(jobs, owned, cloud, committed)
    assert replay_committed(jobs, owned, cloud, committed)[0] == expected
    if not committed:
        assert replay_jobs(jobs, owned, cloud) == expected


@settings(max_examples=100, deadline=None)
@given(
    jobs=st.lists(
        st.builds(
            JobDemand,
            arrival_seconds=st.integers(0, 10 * 3600).map(float),
            duration_seconds=st.integers(60, 6 * 3600).map(float),
            gpus=st.sampled_from([1, 2, 4]),
            preemptible=st.booleans(),
            shares=st.sampled_from([0, 1, 2, 3]),
            share_replicas=st.just(4),
        ),
        min_size=1,
        max_size=50,
    ),
    owned=st.lists(st.sampled_from([1, 2, 4]), max_size=5),
)
def test_the_replay_on_shared_gpus_places_as_a_scan_of_every_node(
    jobs: list[JobDemand], owned: list[int]
) -> None:
    expected = _reference(jobs, owned, CLOUD, (), 4)
    assert replay_jobs(jobs, owned, CLOUD, share_replicas=4) == expected


def test_a_firm_job_evicts_where_the_fewest_gpus_go_lowest_node_first() -> None:
    """Two owned 4-GPU nodes, each full of preemptible work (node 0: one 4-GPU job; node 1:
    2 + 2); a firm 2-GPU job evicts the last 2-GPU job of node 1 (2 GPUs, not 4); a later
    firm 4-GPU job then evicts node 0's job, the only node still freeing 4."""
    jobs = [
        JobDemand(0.0, 36000.0, 4, True),
        JobDemand(1.0, 36000.0, 2, True),
        JobDemand(2.0, 36000.0, 2, True),
        JobDemand(3.0, 3600.0, 2, False),
        JobDemand(4.0, 3600.0, 4, False),
    ]
    cloud = replace(CLOUD, preemptible_wait_hours=0.0)
    assert replay_jobs(jobs, [4, 4], cloud) == _reference(jobs, [4, 4], cloud)
    replay = _Replay([4, 4], cloud, None)
    for job in jobs[:3]:
        replay.place(job, job.arrival_seconds)
    assert replay.make_room(jobs[3]) == (1, [2])
    assert replay.make_room(jobs[4]) == (0, [0])
