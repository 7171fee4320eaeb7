"""Progress of a long plan, one line at a time on a stream the CLI names (stderr): a plan on
a trace of 100,000s of jobs replays it for minutes. Silent unless enabled, and for the first
``quiet_seconds``; then at most one line every ``every_seconds``."""

from __future__ import annotations

import time
from typing import TextIO

_stream: TextIO | None = None
_started = 0.0
_last = 0.0
_QUIET_SECONDS = 10.0
_EVERY_SECONDS = 10.0


def enable(stream: TextIO | None) -> None:
    """Report to ``stream`` from now on (None: stop)."""
    global _stream, _started, _last
    _stream = stream
    _started = _last = time.monotonic()


def step(stage: str, done: int, total: int | None = None) -> None:
    """``done`` of ``total`` (None: not known) items of ``stage`` are through."""
    global _last
    if _stream is None:
        return
    now = time.monotonic()
    if now - _started < _QUIET_SECONDS or now - _last < _EVERY_SECONDS:
        return
    _last = now
    of = "" if total is None else f"/{total}"
    _stream.write(f"hybridgpu plan: {stage}: {done}{of} ({now - _started:.0f} s)\n")
    _stream.flush()
