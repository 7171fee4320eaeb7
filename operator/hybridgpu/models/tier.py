"""The capacity tier of a pool, apart from the pydantic models so that plain-dataclass modules
(the snapshot, the simulator's traces) can use it without building them."""

from __future__ import annotations

from enum import StrEnum


class Tier(StrEnum):
    """Capacity tier of a pool."""

    CORE = "core"
    ELASTIC = "elastic"
    SPOT = "spot"
