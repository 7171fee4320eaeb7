"""One RFC 3339 parser for the operator: zone-less times are UTC, whatever the host's zone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridgpu.kube.convert import epoch_of
from hybridgpu.models.timestamps import format_rfc3339, parse_rfc3339
from hybridgpu.planner.held import parse_time_seconds


@pytest.fixture
def far_zone() -> Iterator[None]:
    """The process runs in UTC-10, so a parser that used local time would be 10 h off."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Honolulu"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_zone_less_times_are_utc_on_any_host(far_zone: None) -> None:
    assert parse_rfc3339("2026-01-02T03:04:05") == 1767323045.0
    assert epoch_of("2026-01-02T03:04:05") == 1767323045.0
    assert parse_time_seconds("2026-01-02") == 1767312000.0


def test_zones_and_fractions() -> None:
    assert parse_rfc3339("2026-01-02T03:04:05Z") == 1767323045.0
    assert parse_rfc3339("2026-01-02T04:04:05+01:00") == 1767323045.0
    assert parse_rfc3339(" 2026-01-02t03:04:05.250000z ") == 1767323045.25


def test_a_zone_can_be_required() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        parse_rfc3339("2026-01-02T03:04:05", naive="reject")
    assert parse_rfc3339("2026-01-02T03:04:05Z", naive="reject") == 1767323045.0


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-13-01T00:00:00Z", "12:00"])
def test_malformed_times_raise_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(bad)


@given(st.integers(min_value=0, max_value=4_102_444_800))
def test_format_then_parse_is_the_identity(seconds: int) -> None:
    assert parse_rfc3339(format_rfc3339(seconds)) == seconds
    micro = seconds + 0.5
    assert parse_rfc3339(format_rfc3339(micro, fraction=True)) == micro
