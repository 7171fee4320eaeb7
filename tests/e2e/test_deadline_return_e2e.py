"""The deadline rule's way back from on-demand to spot on the real control plane (etcd,
kube-apiserver, scheduler, controller-manager's Job controller, kwok nodes): a Job with a
deadline is moved to on-demand while spot cannot launch, keeping room to come back because
its spot pool's nodes last; after its first checkpoint there it goes back to spot; a Job
without checkpoints never does (docs/concepts.md, "Deadlines").

The operator is an in-process Reconciler ticked by the test, on a clock the test moves
(``Reconciler(clock=...)``: every time the operator reads is the wall clock plus an offset).
The hours the rule counts are those of real objects: Nodes' ``creationTimestamp`` and pods'
and Jobs' ``startTime`` are the apiserver's, kwok's and the Job controller's, so an offset
ages everything that exists when it moves, as hours passing would. What it cannot do is make
an object made *after* a jump look fresh: a pod that starts after the clock moved 2 h ahead
looks 2 h old. So the first phase plays the pool's history: five spot nodes are made, the
clock is put 2 h 1 min ahead, one tick sees them run two hours without an interruption
notice (the operator counts them, in memory: the pool lasts), they are deleted, and the clock
goes back to the wall clock. From there on it only moves forward, and only past objects that
exist: the Job with checkpoints is created, moved, started on on-demand and returned at the
wall clock's time and after the jump to its checkpoint, so every age it is judged by is
true. The Job without checkpoints starts on on-demand after the jumps (its pod looks older
than it is); its arithmetic never reads its run's start (nothing is banked without
checkpoints, and it has no checkpoint to wait for), so it is judged by true figures too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from conftest import KUBE_SECONDS, SPOT_TAINT, SPOT_TOLERATION, Cluster, node_ready, wait_for
from hybridgpu.cloud.kwok import kwok_node
from hybridgpu.core.deadline import (
    BOOT_ALLOWANCE_SECONDS,
    LASTING_MIN_SEEN,
    RETURN_ROOM_SECONDS,
    WINDOW_AGE_SECONDS,
)
from hybridgpu.handlers.loop import Reconciler, TickResult
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.names import (
    CHECKPOINT_ANNOTATION,
    DEADLINE_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    PROGRESS_ANNOTATION,
)
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models.actions import ActionKind, MoveJob
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.timestamps import format_rfc3339, parse_rfc3339
from support.controlplane import gpu_job
from support.short_of_capacity import FACTORY, ShortOfCapacity

pytestmark = pytest.mark.e2e

H = 3600.0
INTERVAL_SECONDS = 2.0
"""The policy's interval: a margin of two ticks (4 s), and a checkpoint is 'just past' for
4 s. The on-demand nodes boot in 6 s, longer than that, as a cloud node's minutes are
longer than two 30 s ticks: the Job's status.startTime (set when it is resumed) is then more
than the window before its pod's."""
MARGIN = 2 * INTERVAL_SECONDS
RESTART = 300.0
"""restartOverhead: 5 min (the default)."""
SWITCH_WAITING = BOOT_ALLOWANCE_SECONDS + RESTART
"""A switch of a Job none of whose pods is on a node: an on-demand boot and a restart."""
EVERY = H
"""The checkpoint interval of the Job that returns."""
WORK = 4 * H
"""Its expected duration."""
WORK_NO_CHECKPOINTS = H
ROOM_THRESHOLD = MARGIN + RETURN_ROOM_SECONDS + SWITCH_WAITING + H
"""Slack below which a waiting Job (whose first checkpoint, or its whole work, is 1 h away)
moves to on-demand while its spot pool lasts and cannot launch (5404 s); without the room it
waits until 4504 s."""
SLACK_AT_ARRIVAL = ROOM_THRESHOLD - 60
"""Both Jobs arrive 60 s below it: they move only with the room, at the first tick at which
spot cannot launch (at a tick at which it can, the Job waits for spot)."""
ON_DEMAND_TAINT = {"key": "hybridgpu.io/on-demand", "value": "true", "effect": "NoSchedule"}
PREEMPTIBLE = {"hybridgpu.io/criticality": "preemptible"}
RETURN_EVENT = "DeadlineOnDemand"


class Clock:
    """The operator's clock: the wall clock plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def set(self, at: float) -> None:
        """Read ``at`` now."""
        self.offset = at - time.time()


class Operator:
    """A Reconciler of one policy, ticked by the test."""

    def __init__(self, cluster: Cluster, policy: str, clock: Clock) -> None:
        self.cluster = cluster
        self.policy = policy
        self.clock = clock
        self.api = config.new_client_from_config(config_file=str(cluster.kube.plane.kubeconfig))
        self.reconciler = Reconciler(
            KubeCluster(self.api),
            OperatorOptions(
                identity="deadline-return",
                lease_namespace=cluster.kube.namespace,
                fake_provider=FACTORY,  # the spot pool: kwok nodes, short of capacity at will
            ),
            clock=clock,
            metrics=ExportedMetrics(),
        )

    def tick(self) -> TickResult:
        """One tick, which wrote its ``lastTick`` (the operator's progress) on the policy."""
        started = math.floor(self.clock())
        result = self.reconciler.tick(self.policy)
        assert result.leader and result.plan is not None, result
        written = self.cluster.policy_status(self.policy).get("lastTick")
        assert written is not None and parse_rfc3339(written) >= started, (written, started)
        return result

    def tick_until(self, probe: Callable[[], Any], what: str) -> Any:
        """Tick until ``probe`` holds (what the cluster does in between takes real time;
        KUBE_SECONDS is a hang guard)."""
        deadline = time.monotonic() + KUBE_SECONDS
        while True:
            self.tick()
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {KUBE_SECONDS:.0f} s of ticks")
            time.sleep(0.3)

    def spot_provider(self, pool: str) -> ShortOfCapacity:
        spec = GPUPoolSpec.model_validate(self.cluster.pool_object(pool)["spec"])
        provider = self.reconciler.providers.for_spec(spec)
        assert isinstance(provider, ShortOfCapacity)
        return provider

    def close(self) -> None:
        for provider in self.reconciler.providers.all_providers():
            close = getattr(provider, "close", None)
            if close is not None:
                close()
        self.api.close()


@pytest.fixture
def operator_clock(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Operator, Clock, str]]:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kube.plane.kubeconfig))  # the kwok providers'
    policy = cluster.policy(
        interval=f"{INTERVAL_SECONDS:.0f}s",
        preemption={"minRuntime": "0s", "checkpointGracePeriod": "5s", "restartOverhead": "5m"},
    )
    clock = Clock()
    operator = Operator(cluster, policy, clock)
    try:
        yield operator, clock, policy
    finally:
        operator.close()


def make_spot_nodes(cluster: Cluster, pool: str, names: list[str]) -> None:
    """Nodes of the spot pool's provider (providerID kwok://pool/name), as if launched."""
    spec = GPUPoolSpec.model_validate(cluster.pool_object(pool)["spec"])
    for name in names:
        cluster.kube.core.create_node(kwok_node(name, pool, spec))
    wait_for(lambda: all(node_ready(cluster.kube, n) for n in names), KUBE_SECONDS, "spot nodes")


def deadline_job(name: str, *, work: float, deadline_at: float, every: float | None) -> Any:
    body = gpu_job(
        name, gpus=1, run_duration="10h", labels=PREEMPTIBLE, tolerations=[SPOT_TOLERATION]
    )
    notes = {
        DEADLINE_ANNOTATION: format_rfc3339(deadline_at),
        EXPECTED_DURATION_ANNOTATION: f"{work:.0f}s",
    }
    if every is not None:
        notes[CHECKPOINT_ANNOTATION] = f"{every:.0f}s"
    body["metadata"]["annotations"] = notes
    return body


def submit_deadline_job(
    cluster: Cluster, clock: Clock, name: str, *, work: float, every: float | None
) -> float:
    """Create a deadline Job with SLACK_AT_ARRIVAL of slack beyond its work and a switch,
    wait until the scheduler finds no node for it, and return when it was created."""
    created = clock()
    deadline_at = created + work + SWITCH_WAITING + SLACK_AT_ARRIVAL
    cluster.kube.create_job(deadline_job(name, work=work, deadline_at=deadline_at, every=every))
    wait_for(lambda: pending_unschedulable(cluster, name), KUBE_SECONDS, f"{name} pending")
    return created


def pinned_pool(cluster: Cluster, job: str) -> str | None:
    selector = cluster.job(job).spec.template.spec.node_selector or {}
    return selector.get("hybridgpu.io/pool")


def running_in(cluster: Cluster, job: str, pool: str) -> client.V1Pod | None:
    """The Job's pod running on a node of ``pool``, if there is one."""
    for pod in cluster.job_pods(job):
        if pod.status.phase != "Running" or not pod.spec.node_name:
            continue
        node = cluster.kube.core.read_node(pod.spec.node_name)
        if (node.metadata.labels or {}).get("hybridgpu.io/pool") == pool:
            return pod
    return None


def pending_unschedulable(cluster: Cluster, job: str) -> bool:
    pods = cluster.job_pods(job)
    return bool(pods) and all(
        any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in p.status.conditions or []
        )
        for p in pods
    )


def deadline_moves(result: TickResult, job: str) -> list[MoveJob]:
    assert result.plan is not None
    return [
        a
        for a in result.plan.actions
        if isinstance(a, MoveJob) and a.kind == ActionKind.DEADLINE and a.job == job
    ]


def events_of(cluster: Cluster, job: str) -> list[str]:
    return [
        e.message
        for e in cluster.events(RETURN_EVENT)
        if e.involved_object.name == job and e.involved_object.kind == "Job"
    ]


def gone(cluster: Cluster, nodes: list[str]) -> bool:
    for name in nodes:
        try:
            cluster.kube.core.read_node(name)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        return False
    return True


def test_a_deadline_job_returns_from_on_demand_to_spot_after_a_checkpoint_and_one_without_never(
    cluster: Cluster, operator_clock: tuple[Operator, Clock, str]
) -> None:
    operator, clock, policy = operator_clock
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=1,
        max_nodes=8,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="24h",
        provider={"type": "fake"},
    )
    elastic = cluster.pool(
        "od",
        tier="elastic",
        policy=policy,
        per_node=1,
        max_nodes=4,
        idle_for="24h",
        # Keeps preemptible pods off its nodes until the operator pins a Job there (the
        # admission webhook's tier affinity does so where it runs; this test runs none).
        taints=[ON_DEMAND_TAINT],
        provider={"type": "kwok", "kwok": {"bootDelay": "6s"}},
    )

    # The pool's history: five spot nodes run 2 h without a notice.
    lasting = [f"{spot}-l{i}" for i in range(LASTING_MIN_SEEN)]
    make_spot_nodes(cluster, spot, lasting)
    operator.tick()  # the start-up checks, the Lease; the nodes are new
    clock.offset = 2 * WINDOW_AGE_SECONDS + 60
    operator.tick()  # they have run 2 h: they count as lasted
    for name in lasting:
        cluster.kube.core.delete_node(name)
    wait_for(lambda: gone(cluster, lasting), KUBE_SECONDS, "the history's spot nodes gone")
    operator.tick()
    clock.offset = 0.0  # back to the wall clock, which the rest only moves forward

    # A spot node busy with other preemptible work, and no spot capacity to launch more.
    busy = f"{spot}-busy"
    make_spot_nodes(cluster, spot, [busy])
    cluster.kube.create_job(
        gpu_job(
            "filler", gpus=1, run_duration="10h", labels=PREEMPTIBLE, tolerations=[SPOT_TOLERATION]
        )
    )
    wait_for(lambda: running_in(cluster, "filler", spot), KUBE_SECONDS, "filler on spot")
    cloud = operator.spot_provider(spot)
    cloud.short.add(spot)

    # A Job with hourly checkpoints and 1.5 h of slack: it waits for spot...
    created = submit_deadline_job(cluster, clock, "ckpt", work=WORK, every=EVERY)
    first = operator.tick()
    assert deadline_moves(first, "ckpt") == []  # spot could launch as far as it knew
    assert spot in operator.reconciler.providers.unlaunchable()  # the launch found none
    # ... and once spot cannot launch, moves to on-demand with room to come back (without
    # the room, 900 s more slack than it would move at).
    (to_on_demand,) = deadline_moves(operator.tick(), "ckpt")
    assert to_on_demand.to_pool == elastic and "waits" in to_on_demand.reason
    pod = operator.tick_until(lambda: running_in(cluster, "ckpt", elastic), "ckpt on on-demand")
    assert pinned_pool(cluster, "ckpt") == elastic
    cloud.short.discard(spot)  # spot capacity is back; the Job stays until a checkpoint

    pod_started = pod.status.start_time.timestamp()
    job_started = cluster.job("ckpt").status.start_time.timestamp()
    assert pod_started - job_started > 2 * INTERVAL_SECONDS, "the boot must outlast two ticks"

    # Its run reaches its first checkpoint 5 min + 1 h after its pod started (the spot node
    # has run over an hour by then). Not before it: that would throw the hour away.
    clock.set(pod_started + RESTART + EVERY - 60)
    assert deadline_moves(operator.tick(), "ckpt") == []
    assert pinned_pool(cluster, "ckpt") == elastic
    clock.set(pod_started + RESTART + EVERY + 1)
    (back,) = deadline_moves(operator.tick(), "ckpt")
    assert back.to_pool == spot and back.from_pool == elastic
    operator.tick_until(lambda: running_in(cluster, "ckpt", spot), "ckpt back on spot")
    assert pinned_pool(cluster, "ckpt") == spot
    job = cluster.job("ckpt")
    assert float(job.metadata.annotations[PROGRESS_ANNOTATION]) == EVERY  # its checkpoint kept
    messages = events_of(cluster, "ckpt")
    assert any(f"moves to on-demand pool {elastic}" in m for m in messages), messages
    (returned,) = [m for m in messages if "returns there from on-demand" in m]
    assert f"a node of spot pool {spot} has run for" in returned, returned
    assert f"({LASTING_MIN_SEEN} of the {LASTING_MIN_SEEN} seen to run an hour ran another)" in (
        returned
    )
    ns = cluster.kube.namespace
    cluster.kube.batch.delete_namespaced_job("ckpt", ns, propagation_policy="Background")
    cluster.kube.core.delete_collection_namespaced_pod(
        ns, label_selector="batch.kubernetes.io/job-name=ckpt", grace_period_seconds=0
    )
    wait_for(lambda: not cluster.job_pods("ckpt"), KUBE_SECONDS, "ckpt gone")
    cluster.kube.create_job(  # other preemptible work takes the spot node it leaves
        gpu_job(
            "filler2", gpus=1, run_duration="10h", labels=PREEMPTIBLE, tolerations=[SPOT_TOLERATION]
        )
    )
    wait_for(lambda: running_in(cluster, "filler2", spot), KUBE_SECONDS, "filler2 on spot")

    # A Job without checkpoints, moved to on-demand the same way, never returns: not while a
    # fresh spot run could still finish before its slack fell below the margin (until 830 s
    # after its creation, which the checks below span), when spot can launch, lasts and has
    # a node over an hour old: only its lack of checkpoints keeps it there.
    cloud.short.add(spot)
    created = submit_deadline_job(cluster, clock, "nockpt", work=WORK_NO_CHECKPOINTS, every=None)
    assert deadline_moves(operator.tick(), "nockpt") == []
    retry_at = operator.reconciler.providers.no_capacity_until[spot]
    assert retry_at <= created + 450, "the failed launch came too late for the checks below"
    (to_on_demand,) = deadline_moves(operator.tick(), "nockpt")
    assert to_on_demand.to_pool == elastic
    node = operator.tick_until(
        lambda: running_in(cluster, "nockpt", elastic), "nockpt on on-demand"
    ).spec.node_name
    cloud.short.discard(spot)
    for ahead in (450.0, 600.0, 780.0):
        clock.set(created + ahead)
        result = operator.tick()
        assert spot not in operator.reconciler.providers.unlaunchable()
        assert deadline_moves(result, "nockpt") == []
        assert pinned_pool(cluster, "nockpt") == elastic
        still = running_in(cluster, "nockpt", elastic)
        assert still is not None and still.spec.node_name == node
    assert not [m for m in events_of(cluster, "nockpt") if "returns there" in m]
