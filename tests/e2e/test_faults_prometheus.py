"""Prometheus down under a running operator: nothing is released while it is blind, and
once Prometheus answers again the idle node it kept is released (tests/support/outage.py).

The outage here lasts as long as the operator needs to tick past the node's idleFor while
blind; bench/prometheus_outage.py runs the same for 10 minutes (docs/benchmarks.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Cluster, Operators
from support.outage import run_prometheus_outage
from support.prometheus import FakeDCGM, Prometheus, dcgm, start_prometheus, stop_prometheus

__all__ = ["dcgm"]  # fixture used by name

pytestmark = pytest.mark.e2e


@pytest.fixture
def own_prometheus(dcgm: FakeDCGM, tmp_path: Path) -> Iterator[Prometheus]:
    """A Prometheus of this test alone: it is stopped and started again."""
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    server = start_prometheus(workdir, dcgm.target)
    try:
        yield server
    finally:
        stop_prometheus(server)


def test_nothing_is_released_while_prometheus_is_down_and_the_idle_node_goes_after(
    cluster: Cluster, operators: Operators, own_prometheus: Prometheus, dcgm: FakeDCGM
) -> None:
    result = run_prometheus_outage(
        cluster,
        operators,
        own_prometheus,
        dcgm,
        outage_seconds=0,
        idle_for_seconds=6,
        log=lambda line: sys.stderr.write(f"outage: {line}\n"),
    )
    sys.stderr.write(f"outage figures: {result.summary()}\n")

    assert result.blind_condition_seen
    assert result.ticks_while_blind >= 2
    assert result.released_while_blind == []
    assert result.operator_alive
    # Caught up: run_prometheus_outage waited for the release after Prometheus came back.
    assert result.released_after_seconds > 0
