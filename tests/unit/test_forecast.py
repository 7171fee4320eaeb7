"""core/forecast.py: when an owned node has k GPUs free, from its free GPUs and the times its
held GPUs come back (one time per GPU: a pod of 2 GPUs that ends at t gives t twice)."""

from __future__ import annotations

import pytest

from hybridgpu.core.forecast import NodeView, OwnedForecast

pytestmark = pytest.mark.unit

NOW = 1_000.0


def forecast(views: dict[str, NodeView]) -> OwnedForecast:
    made = OwnedForecast(NOW, lambda name: views[name])
    for name in views:
        made.add(name)
    return made


@pytest.mark.parametrize(
    ("free", "releases", "want"),
    [
        # 1 free now, a 2-GPU pod ends at 1100, a 1-GPU pod at 1200, nothing else ends.
        (1, (1100.0, 1100.0, 1200.0), {1: NOW, 2: 1100.0, 3: 1100.0, 4: 1200.0, 5: None}),
        # More GPUs promised than free: the first comes back only to pay the promise.
        (-1, (1050.0, 1060.0, 1070.0), {1: 1060.0, 2: 1070.0, 3: None}),
        # A run past its expected end gives its GPUs back now, not in the past.
        (0, (900.0, 1300.0), {1: NOW, 2: 1300.0, 3: None}),
        # Never more than the node has.
        (7, (1100.0, 1100.0), {7: NOW, 8: 1100.0, 9: None}),
        (0, (), {1: None}),
    ],
)
def test_earliest_time_for_each_size(
    free: int, releases: tuple[float, ...], want: dict[int, float | None]
) -> None:
    owned = forecast({"n1": ("core", 8, free, releases)})
    for gpus, at in want.items():
        found = owned.earliest(["core"], gpus)
        assert (None if found is None else found[0]) == at, gpus


def test_soonest_node_wins_and_the_lower_name_among_equals() -> None:
    owned = forecast(
        {
            "n2": ("core", 8, 0, (1100.0, 1100.0)),
            "n1": ("core", 8, 0, (1100.0, 1100.0)),
            "n3": ("core", 8, 0, (1050.0, 1500.0)),
        }
    )
    assert owned.earliest(["core"], 1) == (1050.0, "n3")
    assert owned.earliest(["core"], 2) == (1100.0, "n1")
    assert owned.earliest(["other"], 1) is None


def test_a_node_that_lost_gpus_is_described_again_when_it_comes_up() -> None:
    views: dict[str, NodeView] = {
        "n1": ("core", 8, 2, (1100.0,)),
        "n2": ("core", 8, 0, (1200.0, 1200.0)),
    }
    owned = forecast(views)
    assert owned.earliest(["core"], 2) == (NOW, "n1")
    views["n1"] = ("core", 8, 0, (1100.0,))  # its 2 free GPUs were promised
    owned.touch("n1", gained=False)
    assert owned.earliest(["core"], 2) == (1200.0, "n2")
    views["n1"] = ("core", 8, 2, (1100.0,))  # the promise is given back
    owned.touch("n1", gained=True)
    assert owned.earliest(["core"], 2) == (NOW, "n1")
