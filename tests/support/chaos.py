"""The chaos scenario: the operator SIGKILLed at random moments while a mixed workload runs.

Shared by tests/e2e/test_chaos.py (a few kills) and bench/chaos.py (20 kills, figures in
docs/benchmarks.md). It takes the e2e ``Cluster`` and ``Operators`` builders (tests/e2e/
conftest.py) and drives one run:

- a core node (4 GPUs) busy with a preemptible Job, an elastic pool and a tainted spot pool
  (4 GPUs per node, ``idleFor`` long enough that nothing is released during the run);
- then at once: a critical Job pinned to core (it preempts the preemptible Job, which moves
  to spot), two standard and one critical Job for elastic, two preemptible Jobs for spot;
- the first kill lands as soon as that move is recorded, the others at random moments
  (seeded): during start-up, mid-tick, between ticks. Each restart is a container restart
  (same identity) or a new pod (new identity, it waits for the lease) at random;
- a spot interruption (the kwok provider's notice annotation) on a busy spot node;
- after the last kill an operator keeps running until every Job is done.

What it measures, from a watch on the pools' Nodes and the Jobs at the end: Jobs lost
(failed, or neither complete nor running) and left suspended, Node launches per pool against
the demand of the workload (one node per 4-GPU Job, plus one spot replacement for the
interrupted node), and every cordon or deletion of the core node.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from support.controlplane import POOL_LABEL, gpu_job, wait_until
from support.kwok_provider import INTERRUPT_ANNOTATION

MOVE_ANNOTATION = "hybridgpu.io/move"
SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
CRITICALITY = "hybridgpu.io/criticality"


@dataclass
class ChaosResult:
    """What one run did and what it left behind."""

    seed: int
    kills: int
    """SIGKILLs of a live operator process."""
    kill_offsets_seconds: list[float]
    """When each kill came, seconds after the operator it killed was started."""
    kill_while_moving: bool
    """Whether a killed operator left a Job's move recorded and not finished."""
    interrupted_node: str | None
    jobs: dict[str, str]
    """Job -> complete | running | failed | suspended | pending."""
    launches: dict[str, int]
    """Pool role (elastic, spot) -> Nodes that appeared during the run."""
    demand: dict[str, int]
    """Pool role -> Nodes the workload needs (spot: plus one replacement if interrupted)."""
    core_touches: list[str]
    seconds: float
    restarts_with_new_identity: int = 0

    @property
    def jobs_lost(self) -> list[str]:
        return sorted(j for j, s in self.jobs.items() if s not in ("complete", "running"))

    @property
    def jobs_suspended(self) -> list[str]:
        return sorted(j for j, s in self.jobs.items() if s == "suspended")

    @property
    def duplicate_launches(self) -> int:
        return sum(max(0, n - self.demand.get(pool, 0)) for pool, n in self.launches.items())

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "kills": self.kills,
            "kill_while_moving": self.kill_while_moving,
            "restarts_with_new_identity": self.restarts_with_new_identity,
            "spot_interruption": self.interrupted_node is not None,
            "jobs": len(self.jobs),
            "jobs_lost": len(self.jobs_lost),
            "jobs_left_suspended": len(self.jobs_suspended),
            "launches": self.launches,
            "demand": self.demand,
            "duplicate_launches": self.duplicate_launches,
            "core_touches": len(self.core_touches),
            "seconds": round(self.seconds, 1),
        }


@dataclass
class NodeRecorder:
    """Watches the Nodes of the run's pools: which appeared, and what happened to core."""

    core_api: Any
    pools: dict[str, str]
    """Pool name -> role (core, elastic, spot)."""
    seen: dict[str, set[str]] = field(default_factory=dict)
    core_touches: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("the node watch did not start")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _selector(self) -> str:
        return f"{POOL_LABEL} in ({','.join(sorted(self.pools))})"

    def _note(self, kind: str, node: Any) -> None:
        pool = (node.metadata.labels or {}).get(POOL_LABEL)
        role = self.pools.get(pool or "")
        if role is None:
            return
        name = node.metadata.name
        if kind in ("ADDED", "MODIFIED"):
            self.seen.setdefault(role, set()).add(name)
        if role != "core":
            return
        if kind == "DELETED":
            self.core_touches.append(f"{name} deleted")
        elif node.spec.unschedulable:
            self.core_touches.append(f"{name} cordoned")
        elif node.metadata.deletion_timestamp:
            self.core_touches.append(f"{name} being deleted")

    def _run(self) -> None:
        listed = self.core_api.list_node(label_selector=self._selector())
        for node in listed.items:
            self._note("ADDED", node)
        version = listed.metadata.resource_version
        self._ready.set()
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.core_api.list_node,
                    label_selector=self._selector(),
                    resource_version=version,
                    timeout_seconds=5,
                ):
                    node = event["object"]
                    version = node.metadata.resource_version
                    self._note(event["type"], node)
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                if exc.status != 410:
                    raise
                listed = self.core_api.list_node(label_selector=self._selector())
                for node in listed.items:
                    self._note("ADDED", node)
                version = listed.metadata.resource_version
            finally:
                stream.stop()


def job_state(cluster: Any, name: str) -> str:
    job = cluster.kube.batch.read_namespaced_job(name, cluster.kube.namespace)
    conditions = {c.type: c.status for c in (job.status.conditions or [])}
    if conditions.get("Complete") == "True":
        return "complete"
    if conditions.get("Failed") == "True":
        return "failed"
    if job.spec.suspend:
        return "suspended"
    pods = cluster.job_pods(name)
    if any(p.status.phase == "Running" for p in pods):
        return "running"
    return "pending"


def run_chaos(
    cluster: Any,
    operators: Any,
    *,
    kills: int,
    seed: int,
    run_seconds: int = 30,
    settle_seconds: float = 180.0,
    log: Callable[[str], None] = lambda _: None,
) -> ChaosResult:
    """One chaos run on ``cluster`` (the e2e builders); ``run_seconds`` is how long each Job
    runs once placed (make it cover the kills)."""
    rng = random.Random(seed)
    started_at = time.monotonic()
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=4, max_nodes=1)
    elastic = cluster.pool(
        "elastic", tier="elastic", policy=policy, per_node=4, max_nodes=4, idle_for="30m"
    )
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=4,
        max_nodes=5,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="30m",
    )
    cluster.core_nodes(core, 1, gpus=4)
    recorder = NodeRecorder(cluster.kube.core, {core: "core", elastic: "elastic", spot: "spot"})
    recorder.start()
    duration = f"{run_seconds}s"

    def job(name: str, criticality: str, pool: str) -> None:
        tolerations = [SPOT_TOLERATION] if pool == spot else []
        cluster.kube.create_job(
            gpu_job(
                name,
                gpus=4,
                pool=pool,
                run_duration=duration,
                labels={CRITICALITY: criticality},
                tolerations=tolerations,
            )
        )

    job("batch", "preemptible", core)
    wait_until(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("batch")),
        timeout_seconds=60,
        interval_seconds=0.1,
        what="the preemptible Job running on core",
    )
    identity = "chaos-0"
    operator = operators.start(identity)
    cluster.wait_ticking(policy)
    job("urgent", "critical", core)
    for name, criticality in (("std-1", "standard"), ("std-2", "standard"), ("crit-2", "critical")):
        job(name, criticality, elastic)
    for name in ("pre-1", "pre-2"):
        job(name, "preemptible", spot)

    def moving() -> bool:
        return bool((cluster.job("batch").metadata.annotations or {}).get(MOVE_ANNOTATION))

    interrupted: list[str] = []

    def interrupt_a_busy_spot_node() -> bool:
        busy = {
            p.spec.node_name
            for name in ("pre-1", "pre-2")
            for p in cluster.job_pods(name)
            if p.status.phase == "Running" and p.spec.node_name
        }
        if not busy:
            return False
        node = sorted(busy)[0]
        deadline = f"{time.time() + 120:.0f}"
        cluster.kube.core.patch_node(
            node, {"metadata": {"annotations": {INTERRUPT_ANNOTATION: deadline}}}
        )
        interrupted.append(node)
        log(f"spot interruption announced on {node}")
        return True

    offsets: list[float] = []
    kill_while_moving = False
    new_identities = 0
    operator_started = time.monotonic()
    for index in range(kills):
        if index == 0:  # as soon as the move is recorded: it can be done within a second
            wait_until(
                moving,
                timeout_seconds=60,
                interval_seconds=0.02,
                what="the preemptible Job's move recorded",
            )
        else:
            time.sleep(rng.uniform(0.3, 6.0))
            if not interrupted and index >= 1:
                interrupt_a_busy_spot_node()
        if operator.alive():
            offsets.append(round(time.monotonic() - operator_started, 2))
            operator.kill()
            left_open = moving()  # the dead operator left a move for the next one to finish
            kill_while_moving = kill_while_moving or left_open
            log(f"kill {len(offsets)} at {offsets[-1]:.2f}s after start (move open: {left_open})")
        time.sleep(rng.uniform(0.0, 1.5))
        if rng.random() < 0.5:
            new_identities += 1
            identity = f"chaos-{index + 1}"
        operator = operators.start(identity)
        operator_started = time.monotonic()
    if not interrupted:
        wait_until(
            interrupt_a_busy_spot_node,
            timeout_seconds=120,
            interval_seconds=0.1,
            what="a busy spot node to interrupt",
        )

    names = ["batch", "urgent", "std-1", "std-2", "crit-2", "pre-1", "pre-2"]
    try:
        wait_until(
            lambda: all(job_state(cluster, n) in ("complete", "failed") for n in names),
            timeout_seconds=settle_seconds,
            interval_seconds=0.1,
            what="every Job done",
        )
    except TimeoutError as err:
        log(str(err))
    recorder.stop()
    states = {n: job_state(cluster, n) for n in names}
    for name in names:
        if MOVE_ANNOTATION in (cluster.job(name).metadata.annotations or {}):
            states[name] = "suspended"  # a move left open is a Job the operator still holds
    return ChaosResult(
        seed=seed,
        kills=len(offsets),
        kill_offsets_seconds=offsets,
        kill_while_moving=kill_while_moving,
        interrupted_node=interrupted[0] if interrupted else None,
        jobs=states,
        launches={role: len(recorder.seen.get(role, set())) for role in ("elastic", "spot")},
        demand={"elastic": 3, "spot": 3 + (1 if interrupted else 0)},
        core_touches=list(recorder.core_touches),
        seconds=time.monotonic() - started_at,
        restarts_with_new_identity=new_identities,
    )


def describe(result: ChaosResult) -> str:
    """One JSON line of the figures."""
    return json.dumps(result.summary(), sort_keys=True)
