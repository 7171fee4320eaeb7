"""Exported metrics: cost counters integrate the cost model exactly enough, splits add up,
decisions are counted once, and unknown utilization is absent rather than zero."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.core.cost import node_hour_dollars
from hybridgpu.core.decide import decide
from hybridgpu.metrics.exported import PREFIX, CostMeter, ExportedMetrics, serve
from hybridgpu.models.actions import (
    GangPlacement,
    GangState,
    MoveJob,
    Plan,
    ReleaseNode,
    ScaleUp,
)
from hybridgpu.models.policy import ScalingPolicySpec
from hybridgpu.models.pool import GPUPoolSpec
from hybridgpu.models.snapshot import (
    ClusterSnapshot,
    Criticality,
    GPUPod,
    JobState,
    MetricsHealth,
    NodeState,
    PoolState,
)

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
CORE = GPUPoolSpec.model_validate(
    {
        "tier": "core",
        "gpu": {"model": "A100", "perNode": 8, "powerWatts": 400},
        "minNodes": 2,
        "maxNodes": 2,
        "pricing": {"capexPerNode": 250000},
    }
)
ELASTIC = GPUPoolSpec.model_validate(
    {
        "tier": "elastic",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 32.0},
        "scaleDown": {"idleFor": "5m"},
    }
)
SPOT = GPUPoolSpec.model_validate(
    {
        "tier": "spot",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 12.0},
    }
)


def sample(metrics: ExportedMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(PREFIX + name, labels)
    return 0.0 if value is None else value


@dataclass
class Job:
    namespace: str
    name: str
    gpus: int
    criticality: Criticality
    start: float
    end: float
    node: str | None = None


@dataclass
class Loop:
    """The operator's tick against fakes: snapshot from the fake provider, decide, record
    metrics, act; a first-fit stand-in for the scheduler binds pending pods."""

    clock: list[float]
    fake: FakeProvider
    metrics: ExportedMetrics
    jobs: list[Job]
    policy: ScalingPolicySpec = field(default_factory=ScalingPolicySpec)
    idle_since: dict[str, float] = field(default_factory=dict)
    terminated_at: dict[str, float] = field(default_factory=dict)
    launched_at: dict[str, float] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)

    def nodes(self, now: float) -> list[NodeState]:
        out = [NodeState(name=f"core-{i}", pool="core", gpus=8) for i in range(2)]
        for pool, spec in (("elastic", ELASTIC), ("spot", SPOT)):
            for inst in self.fake.instances(pool, spec):
                self.launched_at[inst.instance_id] = inst.launched_at
                self.owner[inst.instance_id] = pool
                if inst.state == "running":
                    out.append(NodeState(name=inst.instance_id, pool=pool, gpus=8))
        busy = {j.node for j in self.jobs if j.node and j.start <= now < j.end}
        for node in out:
            if node.name in busy:
                self.idle_since.pop(node.name, None)
            else:
                self.idle_since.setdefault(node.name, now)
        return [
            NodeState(
                name=n.name,
                pool=n.pool,
                gpus=n.gpus,
                idle_since=self.idle_since.get(n.name),
                utilization_percent=90.0 if n.name in busy else 0.0,
            )
            for n in out
        ]

    def instance_ids(self, pool: str) -> list[str]:
        """Every instance the fake launched for the pool (terminated ones too)."""
        return [i for i, p in self.owner.items() if p == pool]

    def bind(self, nodes: list[NodeState], now: float) -> None:
        used = {n.name: 0 for n in nodes}
        live = [j for j in self.jobs if j.start <= now < j.end]
        for job in live:
            if job.node in used:
                used[job.node] += job.gpus
            else:
                job.node = None
        for job in live:
            if job.node is not None:
                continue
            for node in nodes:
                allowed = node.pool != "spot" or job.criticality == Criticality.PREEMPTIBLE
                if allowed and used[node.name] + job.gpus <= node.gpus:
                    job.node = node.name
                    used[node.name] += job.gpus
                    break

    def tick(self) -> Plan:
        now = self.clock[0]
        nodes = self.nodes(now)
        self.bind(nodes, now)
        pods = tuple(
            GPUPod(
                namespace=j.namespace,
                name=j.name,
                gpus=j.gpus,
                criticality=j.criticality,
                node=j.node,
                job=f"{j.namespace}/{j.name}",
                pending_since=j.start,
            )
            for j in self.jobs
            if j.start <= now < j.end
        )
        pending = {
            pool: sum(1 for i in self.fake.instances(pool, spec) if i.state == "pending")
            for pool, spec in (("elastic", ELASTIC), ("spot", SPOT))
        }
        snapshot = ClusterSnapshot(
            taken_at=now,
            pools=(
                PoolState("core", CORE),
                PoolState("elastic", ELASTIC, provisioning_nodes=pending["elastic"]),
                PoolState("spot", SPOT, provisioning_nodes=pending["spot"]),
            ),
            nodes=tuple(nodes),
            pods=pods,
        )
        plan = decide(snapshot, self.policy, now)
        self.metrics.record_plan(plan, snapshot, now, budget_limit_dollars=5000.0)
        specs = {"elastic": ELASTIC, "spot": SPOT}
        for action in plan.actions:
            if isinstance(action, ScaleUp):
                spec = specs[action.pool]
                target = self.fake.target(action.pool, spec)
                self.fake.set_target(action.pool, spec, target + action.nodes)
            elif isinstance(action, ReleaseNode) and action.pool in specs:
                self.fake.terminate(action.pool, specs[action.pool], action.node)
                self.terminated_at.setdefault(action.node, now)
        return plan


def run_hour(tick_seconds: float = 10.0) -> tuple[Loop, list[Plan]]:
    clock = [T0]
    hour = 3600.0
    jobs = [
        Job("team-a", "train", 8, Criticality.CRITICAL, T0, T0 + hour + 1),
        Job("team-a", "eval", 8, Criticality.STANDARD, T0, T0 + hour + 1),
        Job("team-b", "finetune", 8, Criticality.STANDARD, T0 + 300, T0 + 2400),
        Job("team-b", "sweep", 4, Criticality.STANDARD, T0 + 300, T0 + 2400),
        Job("team-c", "batch", 8, Criticality.PREEMPTIBLE, T0 + 600, T0 + 1800),
    ]
    loop = Loop(
        clock,
        FakeProvider(lambda: clock[0], provisioning_delay_seconds=120),
        ExportedMetrics(),
        jobs,
    )
    plans = []
    while clock[0] <= T0 + hour:
        plans.append(loop.tick())
        clock[0] += tick_seconds
    return loop, plans


def test_cost_counters_match_the_cost_models_integral_over_an_hour() -> None:
    loop, plans = run_hour()
    end = T0 + 3600.0
    prices = {"elastic": node_hour_dollars(ELASTIC), "spot": node_hour_dollars(SPOT)}
    expected = {"core": 2 * node_hour_dollars(CORE) * 1.0}
    for pool, price in prices.items():
        expected[pool] = sum(
            (min(loop.terminated_at.get(i, end), end) - loop.launched_at[i]) / 3600.0 * price
            for i in loop.instance_ids(pool)
        )
    kinds = {a.kind.value for p in plans for a in p.actions}
    assert {"scale_up", "release_node"} <= kinds  # the hour exercised both directions
    assert expected["elastic"] > 10 and expected["spot"] > 1

    m = loop.metrics
    for pool, tier in (("core", "core"), ("elastic", "elastic"), ("spot", "spot")):
        got = sample(m, "cost_dollars_total", pool=pool, tier=tier)
        assert got == pytest.approx(expected[pool], rel=0.01), pool

    total = sum(expected.values())
    namespaces = sum(
        sample(m, "namespace_cost_dollars_total", namespace=ns, tier=tier)
        for ns in ("team-a", "team-b", "team-c")
        for tier in ("core", "elastic", "spot")
    )
    idle = sum(
        sample(m, "idle_gpu_cost_dollars_total", pool=p, tier=p)
        for p in ("core", "elastic", "spot")
    )
    assert namespaces + idle == pytest.approx(total, rel=0.01)
    # team-a fills core all hour: it pays for all of core.
    assert sample(m, "namespace_cost_dollars_total", namespace="team-a", tier="core") == (
        pytest.approx(expected["core"], rel=0.01)
    )
    assert sample(m, "namespace_cost_dollars_total", namespace="team-b", tier="elastic") > 0
    assert sample(m, "effective_cost_per_gpu_hour_dollars") > node_hour_dollars(CORE) / 8
    assert sample(m, "scale_events_total", pool="elastic", direction="up") >= 1
    assert sample(m, "budget_limit_dollars") == 5000.0


def snapshot_with(*, stale: bool = False, available: bool = True) -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_at=T0,
        pools=(PoolState("elastic", ELASTIC, provisioning_nodes=1),),
        nodes=(
            NodeState("n1", "elastic", 8, utilization_percent=40.0, utilization_stale=stale),
            NodeState("n2", "elastic", 8, cordoned=True, utilization_percent=60.0),
        ),
        pods=(GPUPod("ml", "p", 6, Criticality.STANDARD, node="n1"),),
        metrics=MetricsHealth(available=available),
    )


def test_pool_gauges_describe_nodes_gpus_and_cost() -> None:
    m = ExportedMetrics()
    m.record_plan(Plan(decided_at=T0, pending_gpus={"critical": 8}), snapshot_with(), T0)

    labels = {"pool": "elastic", "tier": "elastic"}
    assert sample(m, "pool_nodes", state="ready", **labels) == 1
    assert sample(m, "pool_nodes", state="cordoned", **labels) == 1
    assert sample(m, "pool_nodes", state="provisioning", **labels) == 1
    assert sample(m, "pool_gpus", state="allocated", **labels) == 6
    assert sample(m, "pool_gpus", state="idle", **labels) == 10
    assert sample(m, "pool_cost_per_hour_dollars", **labels) == 3 * 32.0
    assert sample(m, "pool_gpu_utilization_ratio", **labels) == pytest.approx(0.5)
    assert sample(m, "pending_gpu_requests", criticality="critical") == 8
    assert sample(m, "pending_gpu_requests", criticality="preemptible") == 0


@pytest.mark.parametrize(
    ("name", "stale", "available", "want"),
    [
        ("one node stale", True, True, 0.6),
        ("metrics unavailable", False, False, None),
    ],
)
def test_unknown_utilization_is_absent_never_zero(
    name: str, stale: bool, available: bool, want: float | None
) -> None:
    m = ExportedMetrics()
    m.record_plan(Plan(decided_at=T0), snapshot_with(stale=stale, available=available), T0)
    got = m.registry.get_sample_value(
        PREFIX + "pool_gpu_utilization_ratio", {"pool": "elastic", "tier": "elastic"}
    )
    assert got == (pytest.approx(want) if want is not None else None), name


def test_a_decision_repeated_by_consecutive_ticks_counts_once() -> None:
    m = ExportedMetrics()
    snap = snapshot_with()
    release = ReleaseNode(pool="elastic", node="n1", reason="idle")
    move = MoveJob("ml", "p", "elastic", None, 6, "requeue")
    for tick in range(3):
        m.record_plan(Plan(decided_at=T0 + tick, actions=(release, move)), snap, T0 + tick)
    m.record_plan(Plan(decided_at=T0 + 3), snap, T0 + 3)
    m.record_plan(Plan(decided_at=T0 + 4, actions=(release,)), snap, T0 + 4)

    assert sample(m, "decisions_total", action="release_node") == 2
    assert sample(m, "scale_events_total", pool="elastic", direction="down") == 2
    assert (
        sample(m, "preemptions_total", from_tier="elastic", to_tier="requeue", reason="preempt")
        == 1
    )


def test_cost_per_million_tokens_is_the_pools_cost_over_its_tokens() -> None:
    m = ExportedMetrics()
    snap = snapshot_with()
    m.record_plan(Plan(decided_at=T0), snap, T0)
    labels = {"pool": "elastic", "tier": "elastic"}
    assert m.registry.get_sample_value(PREFIX + "cost_per_million_tokens_dollars", labels) is None

    m.record_plan(Plan(decided_at=T0 + 3600), snap, T0 + 3600)  # 3 nodes x $32 for an hour
    m.record_tokens("elastic", 2_000_000)

    assert sample(m, "cost_per_million_tokens_dollars", **labels) == pytest.approx(96.0 / 2)


def two_policies() -> tuple[ClusterSnapshot, ClusterSnapshot]:
    """Policy a's snapshot holds only the elastic pool, policy b's only the spot pool."""
    a = ClusterSnapshot(
        taken_at=T0,
        pools=(PoolState("elastic", ELASTIC),),
        nodes=(NodeState("e1", "elastic", 8),),
    )
    b = ClusterSnapshot(
        taken_at=T0, pools=(PoolState("spot", SPOT),), nodes=(NodeState("s1", "spot", 8),)
    )
    return a, b


def test_with_two_policies_each_pool_is_charged_for_all_the_time() -> None:
    """Ticks of two policies alternate every 10 s for an hour: each pool costs its rate for
    the whole hour, not only for the seconds after its own policy's ticks."""
    m = ExportedMetrics()
    a, b = two_policies()
    for step in range(361):
        m.record_plan(Plan(decided_at=T0 + 10 * step), a, T0 + 10 * step, policy="a")
        m.record_plan(Plan(decided_at=T0 + 10 * step + 5), b, T0 + 10 * step + 5, policy="b")

    assert sample(m, "cost_dollars_total", pool="elastic", tier="elastic") == pytest.approx(32.0)
    assert sample(m, "cost_dollars_total", pool="spot", tier="spot") == pytest.approx(12.0)


def test_with_two_policies_one_policys_tick_keeps_the_others_series_and_decisions() -> None:
    m = ExportedMetrics()
    a, b = two_policies()
    release = ReleaseNode(pool="elastic", node="e1", reason="idle")
    for tick in range(3):
        m.record_plan(Plan(decided_at=T0 + tick, actions=(release,)), a, T0 + tick, policy="a")
        m.record_plan(Plan(decided_at=T0 + tick), b, T0 + tick, policy="b")

    # The release policy a repeats while it drains is one decision.
    assert sample(m, "decisions_total", action="release_node") == 1
    # Policy b's tick did not wipe the elastic pool's gauges.
    assert sample(m, "pool_cost_per_hour_dollars", pool="elastic", tier="elastic") == 32.0
    assert sample(m, "pool_nodes", pool="elastic", tier="elastic", state="ready") == 1
    # A pool that leaves its policy loses its series.
    empty = ClusterSnapshot(taken_at=T0 + 3, pools=(), nodes=())
    m.record_plan(Plan(decided_at=T0 + 3), empty, T0 + 3, policy="a")
    got = m.registry.get_sample_value(
        PREFIX + "pool_cost_per_hour_dollars", {"pool": "elastic", "tier": "elastic"}
    )
    assert got is None
    assert sample(m, "pool_cost_per_hour_dollars", pool="spot", tier="spot") == 12.0


@pytest.mark.adapters
def test_serve_exposes_the_metrics_over_http() -> None:
    m = ExportedMetrics()
    m.record_plan(Plan(decided_at=T0), snapshot_with(), T0)
    server = serve(0, metrics=m)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'hybridgpu_pool_cost_per_hour_dollars{pool="elastic",tier="elastic"} 96.0' in text
    assert "hybridgpu_reconcile_duration_seconds_bucket" in text


@st.composite
def cluster(draw: st.DrawFn) -> ClusterSnapshot:
    nodes = []
    pods = []
    for pool in ("core", "elastic", "spot"):
        for i in range(draw(st.integers(0, 3))):
            name = f"{pool}-{i}"
            nodes.append(NodeState(name, pool, 8))
            free = 8
            for j in range(draw(st.integers(0, 3))):
                gpus = draw(st.integers(1, 8))
                if gpus > free:
                    break
                free -= gpus
                ns = draw(st.sampled_from(["a", "b", "c"]))
                pods.append(GPUPod(ns, f"{name}-{j}", gpus, Criticality.STANDARD, node=name))
    return ClusterSnapshot(
        taken_at=T0,
        pools=(
            PoolState("core", CORE),
            PoolState("elastic", ELASTIC, provisioning_nodes=draw(st.integers(0, 2))),
            PoolState("spot", SPOT),
        ),
        nodes=tuple(nodes),
        pods=tuple(pods),
    )


@given(snapshot=cluster(), cuts=st.lists(st.floats(1.0, 3599.0), max_size=5))
@settings(max_examples=60, deadline=None)
def test_cost_splits_add_up_and_do_not_depend_on_tick_spacing(
    snapshot: ClusterSnapshot, cuts: list[float]
) -> None:
    coarse, fine = CostMeter(), CostMeter()
    coarse.observe(snapshot, T0)
    coarse.observe(snapshot, T0 + 3600)
    for at in [T0, *sorted(T0 + c for c in cuts), T0 + 3600]:
        fine.observe(snapshot, at)

    for meter in (coarse, fine):
        totals = meter.totals
        assert sum(totals.by_namespace.values()) + sum(totals.idle_by_pool.values()) == (
            pytest.approx(totals.dollars)
        )
    assert fine.totals.dollars == pytest.approx(coarse.totals.dollars)
    hourly = sum(coarse.rates().values())
    assert coarse.totals.dollars == pytest.approx(hourly)


@pytest.mark.adapters
def test_readyz_answers_503_with_the_problems_until_there_are_none() -> None:
    problems = ["CRD gpupools.hybridgpu.io is not installed: apply this release's crds/"]
    server = serve(0, metrics=ExportedMetrics(), readiness=lambda: problems)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/readyz", timeout=5)
        assert refused.value.code == 503
        assert refused.value.read().decode() == f"not ready: {problems[0]}\n"
        problems.clear()
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            assert response.read() == b"ok\n"
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            assert b"hybridgpu_reconcile_duration_seconds" in response.read()
    finally:
        server.shutdown()
        server.server_close()


def test_pods_admitted_without_the_webhook_are_counted_until_they_finish() -> None:
    m = ExportedMetrics()
    gauge = PREFIX + "pods_admitted_without_webhook"
    assert m.record_unadmitted("a", "preemptible") is True  # new: the caller reports it once
    assert m.record_unadmitted("a", "preemptible") is False  # seen again: no second report
    assert m.record_unadmitted("b", "preemptible") is True
    assert m.record_unadmitted("c", "critical") is True
    assert m.registry.get_sample_value(gauge, {"criticality": "preemptible"}) == 2
    assert m.registry.get_sample_value(gauge, {"criticality": "critical"}) == 1
    assert m.record_unadmitted("a", None) is False  # finished or gone
    m.record_unadmitted("zz", None)  # never counted: nothing changes
    assert m.registry.get_sample_value(gauge, {"criticality": "preemptible"}) == 1
    assert m.registry.get_sample_value(gauge, {"criticality": "critical"}) == 1


def test_workload_moves_gangs_and_workload_states_by_kind() -> None:
    """A JobSet's move counts once under its kind; gangs are gauged by state each tick and a
    gang's decision counts when its state changes (blocked, blocked, coming: two)."""
    m = ExportedMetrics()
    sweep = JobState(
        "ml", "sweep", Criticality.PREEMPTIBLE, 8, parallelism=2, gang=True, kind="JobSet"
    )
    train = JobState(
        "ml",
        "train",
        Criticality.CRITICAL,
        8,
        parallelism=4,
        gang=True,
        kind="JobSet",
        suspended=True,
    )
    queued = JobState("ml", "tune", Criticality.STANDARD, 4, kind="RayJob", queued=True)
    snap = replace(snapshot_with(), jobs=(sweep, train, queued))
    move = MoveJob("ml", "sweep", "elastic", None, 16, "preempt")
    blocked = GangPlacement(GangState.BLOCKED, cause="max_nodes")
    request = "provisioningrequest:ml/req"
    plans = [
        Plan(T0, actions=(move,), gangs={"ml/train": blocked}),
        Plan(T0 + 1, actions=(move,), gangs={"ml/train": blocked, request: blocked}),
        Plan(
            T0 + 2,
            gangs={
                "ml/train": GangPlacement(GangState.COMING, pools=("elastic",)),
                "ml/llm#group-0": GangPlacement(GangState.WAITING, pools=("core",)),
            },
        ),
    ]
    for plan in plans:
        m.record_plan(plan, snap, plan.decided_at, policy="p")

    moves = {"kind": "JobSet", "from_tier": "elastic", "to_tier": "requeue", "reason": "preempt"}
    assert sample(m, "workload_moves_total", **moves) == 1
    assert sample(m, "workload_moves_total", **{**moves, "kind": "Job"}) == 0
    decisions = {"kind": "JobSet", "state": "blocked", "cause": "max_nodes"}
    assert sample(m, "gang_decisions_total", **decisions) == 1
    assert sample(m, "gang_decisions_total", kind="JobSet", state="coming", cause="none") == 1
    assert (
        sample(
            m,
            "gang_decisions_total",
            kind="ProvisioningRequest",
            state="blocked",
            cause="max_nodes",
        )
        == 1
    )
    assert sample(m, "gangs", policy="p", kind="JobSet", state="coming") == 1
    # A LeaderWorkerSet's group is a gang of that kind; it waits for owned GPUs.
    assert sample(m, "gangs", policy="p", kind="LeaderWorkerSet", state="waiting") == 1
    # No longer blocked: its series is 0, not gone (a panel shows the drop).
    assert (
        m.registry.get_sample_value(
            PREFIX + "gangs", {"policy": "p", "kind": "JobSet", "state": "blocked"}
        )
        == 0
    )
    assert sample(m, "workloads", policy="p", kind="JobSet", state="running") == 1
    assert sample(m, "workloads", policy="p", kind="JobSet", state="suspended") == 1
    assert sample(m, "workloads", policy="p", kind="RayJob", state="queued") == 1

    m.forget_policy("p")
    assert (
        m.registry.get_sample_value(
            PREFIX + "workloads", {"policy": "p", "kind": "JobSet", "state": "running"}
        )
        is None
    )
