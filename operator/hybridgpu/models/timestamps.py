"""RFC 3339 times as Kubernetes, AWS and users write them, to and from epoch seconds.

One parser for the whole operator, so that a time reads the same wherever it comes from: a
trailing ``Z`` is UTC, and a time without a zone is UTC too (never the machine's local zone,
which would make the same object mean different instants on differently configured hosts).
Where a zone is required (a user's ``hybridgpu.io/deadline``), ``naive="reject"`` refuses it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal


def parse_rfc3339(text: str, *, naive: Literal["utc", "reject"] = "utc") -> float:
    """Seconds since the epoch of an RFC 3339 date or date-time.

    Raises ValueError when ``text`` is not one, or has no zone and ``naive`` is ``"reject"``.
    """
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        if naive == "reject":
            raise ValueError(f"{text!r} has no time zone")
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_rfc3339(epoch_seconds: float, *, fraction: bool = False) -> str:
    """RFC 3339 UTC time of ``epoch_seconds`` with a ``Z``: to the second, or to the
    microsecond with ``fraction`` (the MicroTime of a Lease)."""
    pattern = "%Y-%m-%dT%H:%M:%S.%fZ" if fraction else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime(pattern)
