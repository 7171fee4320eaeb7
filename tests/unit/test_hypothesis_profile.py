"""CI runs the property tests derandomized: the same commit gives the same examples.

Hypothesis loads its own ``ci`` profile (derandomize, no example database) when it sees a CI
variable such as ``CI``; this guards against the suite's conftest overriding it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
PROBE = (
    "import runpy, sys; runpy.run_path(sys.argv[1]); from hypothesis import settings; "
    "print(settings.default.derandomize, settings.default.database is None)"
)


def profile_under(ci: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "HYPOTHESIS_PROFILE"}}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(CONFTEST)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


@pytest.mark.parametrize("ci", ["true", "1"])
def test_ci_derandomizes_and_keeps_no_database(ci: str) -> None:
    assert profile_under(ci) == "True True"


def test_developer_runs_stay_random() -> None:
    assert profile_under(None).startswith("False")
