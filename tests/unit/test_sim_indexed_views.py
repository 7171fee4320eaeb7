"""``IndexedViews``: the live jobs' views in index order, as a sorted map would give them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridgpu.sim.engine import IndexedViews

pytestmark = pytest.mark.unit

operations = st.lists(
    st.tuples(st.booleans(), st.integers(0, 40), st.integers()),  # put?, index, value
    max_size=200,
)


@given(operations)
def test_values_are_those_of_a_map_read_in_index_order(ops: list[tuple[bool, int, int]]) -> None:
    views: IndexedViews[int] = IndexedViews()
    model: dict[int, int] = {}
    for put, index, value in ops:
        if put:
            views.put(index, value)
            model[index] = value
        else:
            views.discard(index)
            model.pop(index, None)
        assert views.values() == tuple(model[i] for i in sorted(model))


def test_a_put_replaces_the_value_in_place() -> None:
    views: IndexedViews[str] = IndexedViews()
    for index, value in ((5, "e"), (1, "a"), (3, "c"), (3, "C"), (9, "i")):
        views.put(index, value)
    views.discard(5)
    views.discard(4)  # not there: nothing happens
    assert views.values() == ("a", "C", "i")
