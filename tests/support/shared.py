"""Files a test reads from ../shared (next to the repository: measured traces, the design).

CI provides them, so there a missing file is a failure; on a machine without them the test
is skipped and says which file it wanted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DIR = Path(__file__).resolve().parents[2].parent / "shared"


def in_ci() -> bool:
    """True when CI=true (what GitHub Actions, GitLab and .ci/run's callers set)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def shared_file(relative: str, *, shared_dir: Path = SHARED_DIR) -> Path:
    """The path of ``relative`` under ../shared; fails the calling test when it is missing
    and CI=true, skips it (with the path) otherwise."""
    path = shared_dir / relative
    if not path.exists():
        reason = f"{path} is absent"
        if in_ci():
            pytest.fail(f"{reason}, and CI=true: CI must provide ../shared")
        pytest.skip(f"{reason} (../shared is not next to this checkout)")
    return path
