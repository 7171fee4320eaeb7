"""support.shared: a test that needs ../shared fails in CI when it is missing, skips elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.shared import shared_file

pytestmark = pytest.mark.unit


def test_a_present_file_is_returned(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.json").write_text("{}")
    assert shared_file("traces/t.json", shared_dir=tmp_path) == tmp_path / "traces" / "t.json"


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [("true", pytest.fail.Exception), ("", pytest.skip.Exception)],
    ids=["CI=true fails", "elsewhere skips"],
)
def test_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"traces/missing\.json is absent"):
        shared_file("traces/missing.json", shared_dir=tmp_path)
