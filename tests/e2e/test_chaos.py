"""Chaos: the operator SIGKILLed at random moments (seeded) while a mixed workload runs: a
preemption whose move is in progress, elastic scale-up, spot work and a spot interruption
(tests/support/chaos.py). Afterwards no Job is lost or left suspended, no pool got more
Nodes than its demand, and the owned core node was never cordoned or deleted.

bench/chaos.py runs the same with 20 kills (docs/benchmarks.md)."""

from __future__ import annotations

import os
import sys

import pytest

from conftest import Cluster, Operators
from support.chaos import describe, run_chaos

pytestmark = pytest.mark.e2e

KILLS = 4
SEED = int(os.environ.get("HYBRIDGPU_CHAOS_SEED", "11"))


def test_sigkilled_operator_loses_no_job_launches_nothing_twice_touches_no_core_node(
    cluster: Cluster, operators: Operators
) -> None:
    result = run_chaos(
        cluster,
        operators,
        kills=KILLS,
        seed=SEED,
        run_seconds=20,
        log=lambda line: sys.stderr.write(f"chaos: {line}\n"),
    )
    sys.stderr.write(f"\nchaos figures: {describe(result)}\n")

    assert result.kills == KILLS, result.kill_offsets_seconds
    assert result.kill_while_moving, "no kill landed while a move was in progress"
    assert result.interrupted_node is not None
    assert result.jobs_lost == [], result.jobs
    assert result.jobs_suspended == [], result.jobs
    assert result.duplicate_launches == 0, (result.launches, result.demand)
    assert result.core_touches == []
