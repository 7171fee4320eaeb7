"""Rule 3 of ``decide`` for gangs: a gang that fits on no free GPUs that exist, and for which
no preemption makes room, waits for owned GPUs that free up within its wait budget instead of
getting cloud nodes, when every one of its pods has such GPUs; else none of it waits.

A single pod waits through ``_Decider._wait_for_owned``: the owned node that has its GPUs free
soonest (``core/forecast.py``: Jobs past or near their ``hybridgpu.io/expected-duration``, and
for firm work preemptible Jobs once past ``preemption.minRuntime``), if by the end of its
criticality's ``waitBudget``, is promised to it. A gang asks the same forecast for each of its
pods in turn, largest first, each promise counted against the next, and keeps the promises
only when every pod got one: a gang whose last pod would find no owned GPUs in time promises
nothing and goes on to nodes on their way or new nodes for all of it. The gang starts when
the last of its GPUs is free (the latest promise); decide looks again then, or when its
budget runs out, whichever is first.

Unlike preemption, a ProvisioningRequest (Kueue's booking for pods not created yet) may wait:
waiting moves nothing, and its request reads "waiting for owned capacity" until the GPUs are
free and booked. A check-capacity request never waits (it asks about now).
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import TYPE_CHECKING

from hybridgpu.models.actions import GangPlacement, GangState

if TYPE_CHECKING:
    from hybridgpu.core.decide import _Decider, _Demand


def wait_for_gang(d: _Decider, gang: list[_Demand]) -> bool:
    """Promise owned GPUs that free up within the wait budget to every pod of ``gang``, or to
    none (nothing changed); True when the gang waits for them."""
    ordered = sorted(gang, key=attrgetter("order"))
    promised: list[tuple[str, int, float]] = []
    latest_by = math.inf
    for demand in ordered:
        by = d._wait_until(demand)
        found = d._owned_in_time(demand, by)
        if found is None:
            _take_back(d, promised)
            return False
        at, node = found
        d.claimed[node] = d.claimed.get(node, 0) + demand.gpus
        d._touch_forecast(node, gained=False)
        promised.append((node, demand.gpus, at))
        latest_by = min(latest_by, by)
    ready_at = max(at for _, _, at in promised)
    d.waits.extend(at for _, _, at in promised)
    # Look again when the last of its GPUs should be free, or when its budget runs out.
    d._recheck(min(ready_at if ready_at > d.now else math.inf, latest_by))
    name = ordered[0].gang or ""
    pools = tuple(sorted({d.node_pool[node] for node, _, _ in promised}))
    d.gangs[name] = GangPlacement(GangState.WAITING, pools=pools)
    gpus = sum(g for _, g, _ in promised)
    d.notes.append(
        f"gang {name}: {len(ordered)} pod(s) needing {gpus} GPU(s) wait for owned GPUs of "
        f"{', '.join(pools)} that free up within their waitBudget (all of them in "
        f"{max(ready_at - d.now, 0.0):.0f}s), not for new cloud nodes"
    )
    return True


def _take_back(d: _Decider, promised: list[tuple[str, int, float]]) -> None:
    """Undo the promises made to a gang that does not wait after all."""
    for node, gpus, _ in promised:
        left = d.claimed[node] - gpus
        if left:
            d.claimed[node] = left
        else:
            del d.claimed[node]
        d._touch_forecast(node, gained=True)
