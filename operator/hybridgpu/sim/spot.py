"""Measured spot behaviour beyond single interruptions: capacity that cannot be launched
(availability traces) and interruptions that take several nodes of a pool at once
(multi-node preemption traces). Both are count series in the spot-traces JSON format,
``{"metadata": {"gap_seconds": N}, "data": [count, ...]}``, replayed cyclically from an
offset drawn per pool."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hybridgpu.errors import UserError
from hybridgpu.inputs import read_text
from hybridgpu.sim.traces import check_gap_seconds

CountMeaning = Literal["unavailable", "available"]


def pool_offset(seed: int, pool: str) -> int:
    """Where a spot pool starts in the measured series of a simulation seeded ``seed``: per
    pool, so that adding a pool or a policy does not shift the others."""
    return random.Random(f"{seed}:{pool}").randrange(1 << 30)


def _load_counts(path: str | Path, what: str) -> tuple[float, list[int]]:
    path = Path(path)
    try:
        raw = json.loads(read_text(path, what))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise UserError(f"{path}: not a {what} (JSON nested too deeply)") from None
    expected = f'expected {{"metadata": {{"gap_seconds": N}}, "data": [count, ...]}} ({what})'
    try:
        gap = float(raw["metadata"]["gap_seconds"])
        values = raw["data"]
        if not isinstance(values, list):
            raise TypeError
        data = [int(x) for x in values]
    except (KeyError, TypeError, ValueError, OverflowError):
        raise UserError(f"{path}: {expected}") from None
    check_gap_seconds(gap, path)
    if not data or any(x < 0 for x in data) or any(v != int(v) for v in values):
        raise UserError(f"{path}: field 'data' must be a non-empty list of whole numbers >= 0")
    return gap, data


@dataclass(frozen=True, slots=True)
class AvailabilityTrace:
    """Whether a spot pool can launch at all, sample by sample."""

    gap_seconds: float
    launchable: tuple[bool, ...]

    def launchable_at(self, offset: int, seconds: float) -> bool:
        """At ``seconds`` into a replay that starts at sample ``offset``."""
        return self.launchable[(offset + int(seconds // self.gap_seconds)) % len(self.launchable)]

    def next_change_after(self, offset: int, seconds: float) -> float:
        """Seconds into the replay of the next sample boundary (a possible change)."""
        return (math.floor(seconds / self.gap_seconds) + 1) * self.gap_seconds

    @property
    def unavailable_share(self) -> float:
        return sum(1 for ok in self.launchable if not ok) / len(self.launchable)


def load_availability_trace(
    path: str | Path, *, counts: CountMeaning = "unavailable"
) -> AvailabilityTrace:
    """An availability series. Each value counts instances at that sample out of the most
    seen (the group size); ``counts`` says whether it counts instances that could not be
    had ("unavailable", as the 1-node preemption traces use 1 for "no instance") or that
    were running. The pool can launch while at least one instance of the group could."""
    gap, data = _load_counts(path, "spot availability trace")
    group = max(max(data), 1)
    if counts == "unavailable":
        launchable = tuple(x < group for x in data)
    else:
        launchable = tuple(x > 0 for x in data)
    return AvailabilityTrace(gap_seconds=gap, launchable=launchable)


@dataclass(frozen=True, slots=True)
class CorrelatedTrace:
    """Interruptions of a group of spot nodes: at sample ``index`` a share of the group's
    running nodes was preempted at once."""

    gap_seconds: float
    drops: tuple[tuple[int, float], ...]
    """(sample index, share of the group preempted at that sample), in index order."""
    length: int

    def next_drop(self, offset: int, seconds: float) -> tuple[float, float] | None:
        """(seconds into the replay, share) of the first drop after ``seconds``."""
        if not self.drops:
            return None
        cycles, position = divmod(offset + seconds / self.gap_seconds, self.length)
        for index, share in self.drops:
            if index > position:
                return (cycles * self.length + index - offset) * self.gap_seconds, share
        index, share = self.drops[0]
        return ((cycles + 1) * self.length + index - offset) * self.gap_seconds, share


def load_correlated_trace(path: str | Path) -> CorrelatedTrace:
    """A multi-node preemption series: the count of the group's preempted nodes per sample;
    a rise from c to c + d preempts d of the group at once."""
    gap, data = _load_counts(path, "multi-node spot preemption trace")
    group = max(max(data), 1)
    drops = tuple(
        (i, (data[i] - data[i - 1]) / group) for i in range(1, len(data)) if data[i] > data[i - 1]
    )
    return CorrelatedTrace(gap_seconds=gap, drops=drops, length=len(data))
