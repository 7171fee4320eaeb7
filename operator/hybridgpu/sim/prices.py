"""Spot prices that move: a price series per spot pool (one pool per zone and instance type,
as a spot price is quoted), replayed by the simulator, billed per interval and shown to
decide() as the pool's current provider price.

File format (CSV with a header), one row per price change::

    seconds,pool,price_per_node_hour
    0,spot-8g,9.80
    21600,spot-8g,11.02

``seconds`` counts from the start of the simulated trace; a price holds from its row until
the pool's next row, the first row's price from time 0 and the last row's for ever. The rows
of AWS's spot price history (``aws ec2 describe-spot-price-history``: Timestamp,
AvailabilityZone, InstanceType, SpotPrice) map onto it one for one once the timestamps are
made relative and each zone/instance type is named after its pool. Lines starting with ``#``
are comments (say where the prices come from).
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hybridgpu.errors import UserError
from hybridgpu.inputs import read_text
from hybridgpu.models.limits import MAX_DOLLARS_PER_HOUR
from hybridgpu.sim.defaults import MAX_SPAN_DAYS

COLUMNS = ("seconds", "pool", "price_per_node_hour")


@dataclass(frozen=True, slots=True)
class PriceSteps:
    """One pool's node-hour price as a step function of simulated seconds."""

    starts: tuple[float, ...]
    """When each price starts, ascending; the first price also holds before its start."""
    prices: tuple[float, ...]
    """Dollars per node-hour from the matching start to the next."""
    cumulative: tuple[float, ...]
    """Dollars one node costs from ``starts[0]`` to ``starts[i]``."""

    @classmethod
    def of(cls, points: Iterable[tuple[float, float]]) -> PriceSteps:
        """From (seconds, dollars per node-hour) pairs; a later pair at the same second wins."""
        by_start: dict[float, float] = {}
        for at, price in points:
            by_start[at] = price
        starts = tuple(sorted(by_start))
        if not starts:
            raise ValueError("a price series needs at least one price")
        prices = tuple(by_start[s] for s in starts)
        cumulative = [0.0]
        for i in range(1, len(starts)):
            cumulative.append(cumulative[-1] + prices[i - 1] * (starts[i] - starts[i - 1]) / 3600)
        return cls(starts, prices, tuple(cumulative))

    def price_at(self, seconds: float) -> float:
        """Dollars per node-hour at ``seconds``."""
        return self.prices[max(bisect.bisect_right(self.starts, seconds) - 1, 0)]

    def next_change_after(self, seconds: float) -> float | None:
        """The first start strictly after ``seconds``; None when the price holds for ever."""
        i = bisect.bisect_right(self.starts, seconds)
        return self.starts[i] if i < len(self.starts) else None

    def _integral_to(self, seconds: float) -> float:
        """Dollars one node costs from ``starts[0]`` to ``seconds`` (negative before it)."""
        i = max(bisect.bisect_right(self.starts, seconds) - 1, 0)
        return self.cumulative[i] + self.prices[i] * (seconds - self.starts[i]) / 3600

    def node_dollars(self, start: float, stop: float) -> float:
        """What one node costs from ``start`` to ``stop`` (seconds), each interval at its price."""
        if stop <= start:
            return 0.0
        return self._integral_to(stop) - self._integral_to(start)

    def lowest(self, start: float, stop: float) -> float:
        """The lowest price in force at any moment of [start, stop]."""
        lo = max(bisect.bisect_right(self.starts, start) - 1, 0)
        hi = max(bisect.bisect_right(self.starts, stop) - 1, 0)
        return min(self.prices[lo : hi + 1])


@dataclass(frozen=True)
class SpotPrices:
    """Price series by pool name; pools without one keep their static price."""

    by_pool: Mapping[str, PriceSteps]

    def __contains__(self, pool: object) -> bool:
        return pool in self.by_pool

    def check_pools(self, spot_pools: Iterable[str], source: str) -> None:
        """UserError naming the first pool of the file that is no spot pool of the cluster."""
        known = sorted(spot_pools)
        for name in sorted(self.by_pool):
            if name not in known:
                have = ", ".join(known) or "none"
                raise UserError(
                    f"{source}: field 'pool' is {name!r}; expected a spot pool of the cluster "
                    f"({have})"
                )


def load_spot_prices(path: str | Path) -> SpotPrices:
    """A spot price series file (see the module doc); UserError naming the file, row and field."""
    path = Path(path)
    text = read_text(path, "spot price file")
    expected = "expected a CSV with the header seconds,pool,price_per_node_hour"
    rows = [
        (number, next(csv.reader([line])))
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")  # comments say where from
    ]
    if not rows or tuple(h.strip() for h in rows[0][1]) != COLUMNS:
        raise UserError(f"{path}: {expected}")
    points: dict[str, list[tuple[float, float]]] = {}
    for row_number, row in rows[1:]:
        if len(row) != len(COLUMNS):
            raise UserError(f"{path}: row {row_number} has {len(row)} fields; {expected}")
        seconds_text, pool, price_text = (cell.strip() for cell in row)
        seconds = _number(seconds_text)
        if seconds is None or not 0 <= seconds <= MAX_SPAN_DAYS * 86400:
            # A later price would never apply: the simulator covers at most MAX_SPAN_DAYS.
            raise UserError(
                f"{path}: row {row_number}: field 'seconds' is {seconds_text!r}; expected "
                f"seconds since the trace's start, a finite number >= 0 and <= "
                f"{MAX_SPAN_DAYS * 86400:,.0f} (the simulator's {MAX_SPAN_DAYS:g} days)"
            )
        price = _number(price_text)
        if price is None or not 0 <= price <= MAX_DOLLARS_PER_HOUR:
            raise UserError(
                f"{path}: row {row_number}: field 'price_per_node_hour' is {price_text!r}; "
                f"expected dollars per node-hour, a finite number >= 0 and <= "
                f"{MAX_DOLLARS_PER_HOUR:,.0f}"
            )
        if not pool:
            raise UserError(f"{path}: row {row_number}: field 'pool' is empty; expected a pool")
        points.setdefault(pool, []).append((seconds, price))
    if not points:
        raise UserError(f"{path}: no prices; {expected} and at least one row")
    return SpotPrices({pool: PriceSteps.of(pts) for pool, pts in points.items()})


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
