"""The largest money and power figures any input may give, one per unit, used by every model
(as the CRDs' OpenAPI ``maximum``, so the apiserver refuses the same values) and every file
parser that reads dollars (the spot price series).

Why these values: each is thousands of times any real price, so no real input is refused, and
small enough that no total the simulator or the planner adds up can overflow to ``inf`` or
print as a 300-digit figure. The largest sums allowed are a pool of ``MAX_NODES`` nodes (the
cap of ``maxNodes``) at ``MAX_DOLLARS_PER_HOUR`` over the longest plan horizon (120 months,
87,600 hours): 1e5 x 1e9 x 8.8e4 = 8.8e18 dollars per pool; a demand history of at most 1e7
GPUs at that price per GPU-hour, grown 1000 % a year for 10 years (x 2.6e10), stays under
1e32. A float overflows above 1.8e308.
"""

from __future__ import annotations

import math

MAX_DOLLARS_PER_HOUR = 1e9
"""Any hourly price or spend, $/hour: a node-hour or GPU-hour (on demand, spot, committed,
operations, power) or a budget's hourly cost. Ten million times the dearest GPU instance's
on-demand price (about $100 an hour for 8 H100s), a thousand times the hourly spend of the
largest GPU clusters."""


def usable_price_per_hour(dollars: float) -> bool:
    """Whether an hourly price read from elsewhere (a provider's spot price, OpenCost) can be
    used: finite, above zero and within MAX_DOLLARS_PER_HOUR; else the pool's own price is."""
    return math.isfinite(dollars) and 0 < dollars <= MAX_DOLLARS_PER_HOUR


MAX_DOLLARS = 1e12
"""Any one-off sum, $: a node's purchase price, an upfront payment, a monthly budget. A
trillion dollars: a million times an 8-GPU server, about a thousand times the largest
monthly cloud bills."""

MAX_DOLLARS_PER_KWH = 1e3
"""An electricity price, $/kWh: ten thousand times today's tariffs (about $0.05 to $0.40)."""

MAX_WATTS = 1e7
"""Electrical power of one GPU or one node, watts: 10 MW, about eighty GB200 NVL72 racks
(each about 120 kW) in one node."""

MAX_NODES = 100_000
"""Nodes of one pool, candidate node type or committed offer (GPUPool maxNodes is capped the
same)."""

LIMITS_TEXT = (
    f"Money and power fields are capped, one limit per unit: $/hour (a node-hour, a "
    f"GPU-hour, a budget's hourly cost) at {MAX_DOLLARS_PER_HOUR:,.0f}, $ (a purchase price, "
    f"an upfront payment, a monthly budget) at {MAX_DOLLARS:,.0f}, $/kWh at "
    f"{MAX_DOLLARS_PER_KWH:,.0f}, watts at {MAX_WATTS:,.0f}, and node counts at {MAX_NODES:,}. "
    "Each is thousands of times any real value, and small enough that no total a simulation or "
    "a plan adds up (100,000 nodes over 120 months) can overflow to inf or print as a "
    "300-digit figure."
)
"""The limits and their reason in one paragraph, for docs/crd-reference.md."""
