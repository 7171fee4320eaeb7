"""core/forecast.py: when an owned node has k GPUs free, from its free GPUs and the times its
held GPUs come back (one time per GPU: a pod of 2 GPUs that ends at t gives t twice)."""

from __future__ import annotations

import random

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


def _soonest(views: dict[str, NodeView], pools: list[str], gpus: int) -> tuple[float, str] | None:
    """What ``earliest`` must answer, found by looking at every node."""
    found = []
    for name, (pool, capacity, free, releases) in views.items():
        if pool not in pools or not 0 < gpus <= capacity:
            continue
        if gpus <= free:
            found.append((NOW, name))
        elif gpus - free - 1 < len(releases):
            found.append((max(NOW, releases[gpus - free - 1]), name))
    return min(found, default=None)


@pytest.mark.parametrize("seed", range(20))
def test_every_answer_is_the_soonest_node_while_nodes_lose_and_gain_gpus(seed: int) -> None:
    """Heaps are built per size when first asked and nodes entered again lazily: whatever
    the order of promises, gains and questions, the answer is that of looking at all nodes."""
    rng = random.Random(seed)
    views: dict[str, NodeView] = {}
    for i in range(8):
        capacity = rng.choice((4, 8))
        held = sorted(NOW + rng.choice((-50.0, 0.0, 100.0, 200.0)) for _ in range(capacity))
        free = rng.randint(0, capacity)
        views[f"n{i}"] = (rng.choice(("a", "b")), capacity, free, tuple(held[free:]))
    owned = forecast(views)
    for _ in range(300):
        name = rng.choice(sorted(views))
        pool, capacity, free, releases = views[name]
        step = rng.random()
        if step < 0.35:  # GPUs promised to a waiting pod, or taken: only ever later
            views[name] = (pool, capacity, free - rng.randint(1, 2), releases)
            owned.touch(name, gained=False)
        elif step < 0.5:  # a Job moved off it
            views[name] = (pool, capacity, min(free + rng.randint(1, 3), capacity), releases)
            owned.touch(name, gained=True)
        else:
            pools = rng.choice((["a"], ["b"], ["a", "b"]))
            gpus = rng.randint(1, 9)
            assert owned.earliest(pools, gpus) == _soonest(views, pools, gpus)
