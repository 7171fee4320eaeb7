"""Why hybridgpu's cloud work runs while owned GPUs sit free (issue 10), on the bundled scenario.

    .venv/bin/python bench/cloud_causes.py [--seeds 7] [--json]

Runs hybridgpu alone on the bundled scenario (hazard 0.05, simulation seed 7, as
``bench/simulate_seeds.py``) with a hook on the engine's cost accounting. Over every stretch
of time in which the cluster did not change, each running cloud job's dollars (its GPUs at
its node's price per GPU) are split by its tier and class and by the room the owned nodes had
for it at that moment:

- ``free``: one owned node had as many GPUs free (only a move of the running job back to owned
  GPUs would use them: return to core);
- ``preempt``: one owned node had them free or held by preemptible work (a return to core
  that preempts, as pending firm work may);
- ``split``: the owned GPUs free added up to the job's, split over nodes;
- ``short``: fewer owned GPUs were free.

``overlap`` is the part of those dollars that ``simulate --explain`` counts as "work while as
many owned GPUs sat free" (the dearest cloud GPUs first, as the engine counts them; within one
price, larger jobs first, then by trace order); ``all`` is every cloud job's dollars. Node
boots, idle nodes and empty GPUs on busy nodes are not in either (--explain has them).

Then, per critical or standard job that ran on an on-demand node: its GPUs, duration, and the
minutes from its becoming pending until one owned node first had room for it, free or held by
preemptible work (None: never while it ran there). A few minutes means the owned GPUs came
right after the job's node was bought; what decide() knows then (no job states its duration
here) cannot tell.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from hybridgpu.core.cost import is_cloud  # noqa: E402
from hybridgpu.models.snapshot import Criticality  # noqa: E402
from hybridgpu.sim.compare import policy_runs  # noqa: E402
from hybridgpu.sim.config import load_cluster  # noqa: E402
from hybridgpu.sim.engine import SimSettings, Simulation  # noqa: E402
from hybridgpu.sim.traces import synthetic  # noqa: E402

CLUSTER = ROOT / "operator" / "hybridgpu" / "sim" / "scenarios" / "default-cluster.yaml"
ROOMS = ("free", "preempt", "split", "short")


class CausesSimulation(Simulation):
    """The simulation with its cloud dollars split as the module docstring says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.overlap: Counter[tuple[str, str, str]] = Counter()
        self.every: Counter[tuple[str, str, str]] = Counter()
        self.room_after: dict[int, float] = {}
        """Firm jobs: seconds from pending until one owned node had room for them."""
        self.on_demand: set[int] = set()
        """Jobs that started on an on-demand node at least once."""

    def _start(self, job: Any, node: Any) -> None:
        if node.tier == "elastic":
            self.on_demand.add(job.index)
        super()._start(job, node)

    def _account(self, until: float) -> None:
        hours = (until - self._accounted_to) / 3600
        if hours > 0:
            self._split(hours)
        super()._account(until)

    def _split(self, hours: float) -> None:
        owned = [
            n
            for n in self.nodes.values()
            if not is_cloud(n.tier) and not n.cordoned and not n.booting
        ]
        most_free = max((n.free for n in owned), default=0)
        most_freeable = max(
            (
                n.free
                + sum(
                    self.jobs[i].trace.gpus
                    for i in n.jobs
                    if self.jobs[i].trace.criticality == Criticality.PREEMPTIBLE
                )
                for n in owned
            ),
            default=0,
        )
        free_total = sum(n.free for n in owned)
        running = []
        for index in self.running:
            job = self.jobs[index]
            node = self.nodes[job.node or ""]
            if is_cloud(node.tier) and not node.booting:
                gpu_price = self._node_price[node.pool] / node.gpus
                running.append((-gpu_price, -job.trace.gpus, index, node.tier, gpu_price))
        left = free_total
        for _, _, index, tier, gpu_price in sorted(running):
            job = self.jobs[index]
            gpus = job.trace.gpus
            if most_free >= gpus:
                room = "free"
            elif most_freeable >= gpus:
                room = "preempt"
            elif free_total >= gpus:
                room = "split"
            else:
                room = "short"
            key = (tier, job.trace.criticality.value, room)
            self.every[key] += gpus * gpu_price * hours
            overlap = min(left, gpus)
            left -= overlap
            if overlap:
                self.overlap[key] += overlap * gpu_price * hours
            firm = job.trace.criticality != Criticality.PREEMPTIBLE
            if firm and most_freeable >= gpus and index not in self.room_after:
                self.room_after[index] = self.now - job.pending_since


def run_seed(seed: int) -> dict[str, object]:
    config = load_cluster(CLUSTER)
    pools, policy = policy_runs(config.pools, config.policy.spec)["hybridgpu"]
    settings = SimSettings(spot_hazard_per_hour=0.05, seed=7)
    sim = CausesSimulation("hybridgpu", pools, policy, synthetic(seed=seed), settings)
    result = sim.run()
    # The split must add up to the engine's own term, or the hook no longer reads it right.
    engine_term = result.cost_terms_dollars["work_while_owned_gpus_free"]
    if abs(sum(sim.overlap.values()) - engine_term) > 0.01:
        raise SystemExit(
            f"cloud_causes: seed {seed}: the split adds up to {sum(sim.overlap.values()):.2f}, "
            f"the engine's term is {engine_term:.2f}: the hook no longer matches sim/engine.py"
        )
    firm_jobs = [
        {
            "job": sim.jobs[i].trace.name,
            "gpus": sim.jobs[i].trace.gpus,
            "duration_hours": round(sim.jobs[i].trace.duration_seconds / 3600, 2),
            "owned_room_after_minutes": (
                round(sim.room_after[i] / 60) if i in sim.room_after else None
            ),
        }
        for i in sorted(sim.on_demand)
        if sim.jobs[i].trace.criticality != Criticality.PREEMPTIBLE
    ]
    return {
        "cloud_dollars": round(result.cloud_cost_dollars, 2),
        "overlap_dollars": round(sum(sim.overlap.values()), 2),
        "overlap": {"/".join(k): round(v, 2) for k, v in sorted(sim.overlap.items())},
        "all": {"/".join(k): round(v, 2) for k, v in sorted(sim.every.items())},
        "firm_jobs_on_demand": firm_jobs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="7", help="scenario seeds: 7, 7-26 or 7,1,2 (7)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = parser.parse_args()
    if "-" in args.seeds:
        low, high = (int(x) for x in args.seeds.split("-", 1))
        seeds = list(range(low, high + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    began = time.process_time()
    rows = {str(seed): run_seed(seed) for seed in seeds}
    sums: dict[str, Counter[str]] = {"overlap": Counter(), "all": Counter()}
    for row in rows.values():
        for part in sums:
            sums[part].update(row[part])  # type: ignore[arg-type]
    out = {
        "seeds": rows,
        "sum": {part: {k: round(v, 2) for k, v in sorted(c.items())} for part, c in sums.items()},
        "cpu_seconds": round(time.process_time() - began, 1),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for part in ("overlap", "all"):
        print(f"{part} (sum over seeds {args.seeds}):")
        cells = sums[part]
        for tier_class in sorted({k.rsplit("/", 1)[0] for k in cells}):
            split = "  ".join(
                f"{room} {cells.get(f'{tier_class}/{room}', 0.0):8,.2f}" for room in ROOMS
            )
            print(f"  {tier_class:<22} {split}")
    if len(rows) == 1:
        print(
            "critical and standard jobs on on-demand nodes (minutes until an owned node had room):"
        )
        for job in next(iter(rows.values()))["firm_jobs_on_demand"]:  # type: ignore[attr-defined]
            print(f"  {job}")
    print(f"({out['cpu_seconds']} CPU s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
