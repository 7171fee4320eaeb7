"""DurationCurve's running sums are the additions a plain loop makes, in the same order, so
every plan figure built on them is the same to the last bit (the plan's JSON is compared
byte for byte across speed-ups)."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridgpu.planner.model import DurationCurve

pytestmark = pytest.mark.unit


def reference(points: list[tuple[float, float]]) -> tuple[list[float], list[float], list[float]]:
    """Levels, prefix GPU-hours and suffix hours as the loop before itertools.accumulate."""
    merged: dict[float, float] = {}
    for level, hours in points:
        if hours > 0:
            merged[level] = merged.get(level, 0.0) + hours
    levels = sorted(merged)
    weights = [merged[v] for v in levels]
    prefix = [0.0]
    for level, hours in zip(levels, weights, strict=True):
        prefix.append(prefix[-1] + level * hours)
    suffix = [0.0] * (len(weights) + 1)
    for i in range(len(weights) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + weights[i]
    return levels, prefix, suffix


floats = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(points=st.lists(st.tuples(floats, st.floats(-1.0, 1e4, allow_nan=False)), max_size=60))
def test_sums_are_the_loops_to_the_bit(points: list[tuple[float, float]]) -> None:
    curve = DurationCurve(points)
    levels, prefix, suffix = reference(points)
    assert curve.levels == levels
    assert curve.total_gpu_hours == prefix[-1]
    assert curve.hours == suffix[0]
    for gpus in [0.0, *levels, *(v + 0.5 for v in levels)]:
        i = bisect.bisect_left(levels, gpus)
        assert curve.gpu_hours_below(gpus) == prefix[i] + gpus * suffix[i]
        assert curve.hours_above(gpus) == suffix[bisect.bisect_right(levels, gpus)]


def test_empty_curve() -> None:
    curve = DurationCurve([])
    assert (curve.peak, curve.hours, curve.total_gpu_hours) == (0.0, 0.0, 0.0)
    assert curve.gpu_hours_below(5.0) == 0.0
