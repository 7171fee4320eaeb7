"""`hybridgpu run` and `hybridgpu explain` (issue 4)."""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    """Register `run` and `explain` (not written yet)."""
