"""`hybridgpu plan`: the buy-vs-rent TCO planner (issue 6)."""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    """Register `plan` (not written yet)."""
