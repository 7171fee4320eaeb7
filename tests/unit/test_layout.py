"""The test tree can be collected in one run: pytest's default import mode imports each test
module by its basename, so two tiers holding test_x.py break `make test` at collection
(tests/e2e/test_idle_reclaim.py and tests/unit/test_idle_reclaim.py once did)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes
