"""What the operator has seen of its spot pools' nodes' lives, for the deadline rule's
return from on-demand (core/deadline.py ``spot_lasts``; docs/concepts.md, "Deadlines")."""

from __future__ import annotations

from dataclasses import replace

from hybridgpu.core.deadline import WINDOW_AGE_SECONDS
from hybridgpu.models.pool import Tier
from hybridgpu.models.snapshot import ClusterSnapshot


class SpotSurvival:
    """Per spot pool, of its nodes seen to run WINDOW_AGE_SECONDS without an interruption
    notice, how many were seen to run as long again (lasted) and how many got their notice
    before (cut short). A node released or gone without a notice before then counts for
    neither. Kept in memory: after a restart the counts start again from nothing, so Jobs on
    on-demand stay there until enough is seen again (the rule as it was before)."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}
        self._settled: set[str] = set()
        """Nodes already counted (or never to be): looked at no more."""

    def observe(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """Count what ``snapshot`` shows and return it with each spot pool's counts."""
        spot = {p.name for p in snapshot.pools if p.tier == Tier.SPOT}
        if not spot:
            return snapshot
        now = snapshot.taken_at
        present: set[str] = set()
        for node in snapshot.nodes:
            if node.pool not in spot:
                continue
            present.add(node.name)
            if node.name in self._settled:
                continue
            age = now - node.created_at
            counts = self._counts.setdefault(node.pool, [0, 0])
            if node.interruption_deadline is not None:
                if WINDOW_AGE_SECONDS <= age < 2 * WINDOW_AGE_SECONDS:
                    counts[1] += 1
                self._settled.add(node.name)
            elif age >= 2 * WINDOW_AGE_SECONDS:
                counts[0] += 1
                self._settled.add(node.name)
            elif node.releasing or node.deleting or node.instance_terminated:
                self._settled.add(node.name)
        self._settled &= present
        return replace(
            snapshot,
            pools=tuple(
                replace(
                    p,
                    nodes_lasted=self._counts.get(p.name, [0, 0])[0],
                    nodes_cut_short=self._counts.get(p.name, [0, 0])[1],
                )
                if p.name in spot
                else p
                for p in snapshot.pools
            ),
        )
