"""Owned nodes powered off and on (GPUPool spec.power, issue 13): decide() powers off an
owned node with no pods once it has been idle for power.idleFor, never below
power.minPoweredOn, and powers owned machines on before it buys cloud capacity when the pod
may wait for their boot. The cost model counts the electricity of the nodes that are on."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import ValidationError
from tests.support.builders import NOW, node, pending, policy, pool, running, snapshot
from tests.support.fake_cluster import FakeCluster, gpu_node, gpu_pod

from hybridgpu.core.cost import (
    core_node_cost,
    held_nodes,
    marginal_gpu_hour_dollars,
    pool_hour_dollars,
    power_node_hour_dollars,
)
from hybridgpu.core.decide import decide
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.executor import PlanExecutor
from hybridgpu.kube.status import pool_status
from hybridgpu.models import GPUPoolSpec
from hybridgpu.models.actions import ActionKind, Plan, ReleaseNode, ScaleUp
from hybridgpu.models.snapshot import MetricsHealth, NodeState, PoolState

pytestmark = pytest.mark.unit

CAPI = {"type": "clusterapi", "clusterapi": {"machineDeployment": "metal/gpu"}}


def owned(max_nodes: int = 4, provisioning: int = 0, **power: Any) -> PoolState:
    return pool(
        "core",
        "core",
        max_nodes=max_nodes,
        provisioning=provisioning,
        provider=CAPI,
        power={"idleFor": "30m", "bootTime": "5m", **power},
    )


def idle(name: str, minutes: float = 60, **kw: Any) -> NodeState:
    return node(name, "core", idle_since=NOW - minutes * 60, utilization_percent=0.0, **kw)


def power_offs(plan) -> list[str]:
    return [
        a.node
        for a in plan.actions
        if isinstance(a, ReleaseNode) and a.kind == ActionKind.POWER_OFF
    ]


def power_ons(plan) -> dict[str, int]:
    return {
        a.pool: a.nodes
        for a in plan.actions
        if isinstance(a, ScaleUp) and a.kind == ActionKind.POWER_ON
    }


def cloud_scale_ups(plan) -> dict[str, int]:
    return {
        a.pool: a.nodes
        for a in plan.actions
        if isinstance(a, ScaleUp) and a.kind == ActionKind.SCALE_UP
    }


def test_an_owned_node_idle_past_idle_for_is_powered_off_saving_its_electricity():
    spec = owned().spec
    plan = decide(snapshot([owned()], [idle("a", 45), idle("b", 10)]), policy(), NOW)
    assert power_offs(plan) == ["a"]  # b has been idle 10 min of the 30
    action = next(a for a in plan.actions if isinstance(a, ReleaseNode))
    assert f"saving ${power_node_hour_dollars(spec):.2f}/h of electricity" in action.reason


def test_never_below_min_powered_on():
    nodes = [idle("a"), idle("b"), idle("c")]
    plan = decide(snapshot([owned(minPoweredOn=2)], nodes), policy(), NOW)
    assert len(power_offs(plan)) == 1
    plan = decide(snapshot([owned(minPoweredOn=3)], nodes), policy(), NOW)
    assert power_offs(plan) == []
    # minNodes holds too.
    floor = pool("core", "core", max_nodes=4, min_nodes=3, provider=CAPI, power={})
    assert power_offs(decide(snapshot([floor], nodes), policy(), NOW)) == []


def test_a_node_with_pods_is_never_powered_off_even_with_idle_gpus():
    busy = idle("a", 120)  # utilization 0 for two hours, but a pod is on it
    workloads = [running("quiet", "a", 1, "preemptible")]
    plan = decide(snapshot([owned()], [busy, idle("b")], workloads), policy(), NOW)
    assert power_offs(plan) == ["b"]
    plan = decide(snapshot([owned()], [busy], workloads), policy(), NOW)
    assert power_offs(plan) == []


def test_a_node_pending_work_lands_on_is_not_powered_off():
    plan = decide(snapshot([owned()], [idle("a")], [pending("job", 8)]), policy(), NOW)
    assert power_offs(plan) == []
    assert power_ons(plan) == {}


def test_nothing_is_powered_off_when_blind_or_for_pools_without_power():
    blind = MetricsHealth(available=False, reason="prometheus down")
    plan = decide(snapshot([owned()], [idle("a")], metrics=blind), policy(), NOW)
    assert power_offs(plan) == []
    static = pool("core", "core", max_nodes=4)
    plan = decide(snapshot([static], [idle("a", 10_000)]), policy(), NOW)
    assert plan.actions == ()


def test_pending_work_powers_owned_machines_on_before_buying_cloud():
    pools = [owned(max_nodes=4), pool("elastic", "elastic")]
    nodes = [node("a", "core")]
    work = [running("busy", "a", 8), pending("one", 8), pending("two", 4), pending("three", 4)]
    plan = decide(snapshot(pools, nodes, work), policy(), NOW)
    assert power_ons(plan) == {"core": 2}
    assert cloud_scale_ups(plan) == {}
    action = next(a for a in plan.actions if isinstance(a, ScaleUp))
    assert "power on 2 of 3 powered-off owned core node(s)" in action.reason
    assert "of electricity each, before buying cloud capacity" in action.reason


def test_only_the_machines_owned_are_powered_on_the_rest_goes_to_the_cloud():
    pools = [owned(max_nodes=2, provisioning=0), pool("elastic", "elastic")]
    nodes = [node("a", "core")]
    work = [running("busy", "a", 8), pending("one", 8), pending("two", 8)]
    plan = decide(snapshot(pools, nodes, work), policy(), NOW)
    assert power_ons(plan) == {"core": 1}
    assert cloud_scale_ups(plan) == {"elastic": 1}


def test_a_machine_already_booting_is_counted_not_powered_on_again():
    pools = [owned(max_nodes=4, provisioning=1), pool("elastic", "elastic")]
    work = [running("busy", "a", 8), pending("one", 8)]
    plan = decide(snapshot(pools, [node("a", "core")], work), policy(), NOW)
    assert power_ons(plan) == {}
    assert cloud_scale_ups(plan) == {}


def test_a_boot_slower_than_the_cloud_is_taken_only_within_the_wait_budget():
    # bootTime 30m: 20 min more than a cloud node's boot allowance (10 min).
    pools = [owned(max_nodes=2, bootTime="30m"), pool("elastic", "elastic"), pool("spot", "spot")]
    nodes = [node("a", "core")]
    busy = running("busy", "a", 8)
    # A standard pod may wait 5 min (waitBudget.standard): the cloud serves it.
    plan = decide(snapshot(pools, nodes, [busy, pending("std", 8)]), policy(), NOW)
    assert power_ons(plan) == {}
    assert cloud_scale_ups(plan) == {"elastic": 1}
    # A preemptible pod may wait hours: an owned machine is powered on for it.
    plan = decide(snapshot(pools, nodes, [busy, pending("pre", 8, "preemptible")]), policy(), NOW)
    assert power_ons(plan) == {"core": 1}
    assert cloud_scale_ups(plan) == {}
    # A boot no slower than the cloud's costs no wait: even critical work gets it.
    fast = [owned(max_nodes=2, bootTime="8m"), pool("elastic", "elastic")]
    plan = decide(snapshot(fast, nodes, [busy, pending("crit", 8, "critical")]), policy(), NOW)
    assert power_ons(plan) == {"core": 1}


def test_powering_on_spends_no_cloud_budget():
    pools = [owned(max_nodes=2), pool("elastic", "elastic")]
    work = [running("busy", "a", 8), pending("one", 8)]
    tight = policy(budget={"maxHourlyCost": 1.0})
    plan = decide(snapshot(pools, [node("a", "core")], work), tight, NOW)
    assert power_ons(plan) == {"core": 1}
    assert plan.blocked == ()


def test_min_powered_on_is_restored_and_not_exceeded_by_power_on():
    plan = decide(snapshot([owned(minPoweredOn=3)], [node("a", "core")]), policy(), NOW)
    assert power_ons(plan) == {"core": 2}
    assert "power.minPoweredOn=3 not met" in plan.actions[0].reason
    # Nodes booting count as on.
    plan = decide(
        snapshot([owned(minPoweredOn=3, provisioning=2)], [node("a", "core")]), policy(), NOW
    )
    assert power_ons(plan) == {}


def test_a_power_off_in_progress_continues():
    going = idle("a", releasing=True, cordoned=True, cordoned_by="power-off")
    plan = decide(snapshot([owned()], [going, node("b", "core")]), policy(), NOW)
    assert power_offs(plan) == ["a"]
    assert plan.actions[0].reason == "continue powering off a"


def test_the_cost_model_counts_capex_always_and_power_only_for_nodes_on():
    spec = owned(max_nodes=4).spec
    parts = core_node_cost(spec)
    sunk = 4 * (parts.capex_per_hour + parts.ops_per_hour)
    assert pool_hour_dollars(spec, billed_nodes=4) == pytest.approx(4 * parts.total_per_hour)
    assert pool_hour_dollars(spec, billed_nodes=1) == pytest.approx(sunk + parts.power_per_hour)
    priced = owned(powerPerNodeHour=2.5).spec
    assert power_node_hour_dollars(priced) == 2.5
    assert marginal_gpu_hour_dollars(priced) == 2.5 / 8
    assert held_nodes(owned(minPoweredOn=2).spec) == 2


def test_status_counts_powered_off_machines_and_their_saving():
    state = owned(max_nodes=4, provisioning=1)
    snap = snapshot([state], [node("a", "core")])
    status = pool_status("core", snap, decide(snap, policy(), NOW), generation=1)
    assert status["nodes"]["poweredOff"] == 2
    parts = core_node_cost(state.spec)
    expected = 4 * (parts.capex_per_hour + parts.ops_per_hour) + 2 * parts.power_per_hour
    assert status["costPerHour"] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tier": "elastic", "pricing": {"perNodeHour": 5.0}}, "power is for owned"),
        ({"provider": {"type": "static"}}, "power needs a provider"),
        ({"power": {"minPoweredOn": 9}}, "minPoweredOn must not exceed maxNodes"),
    ],
)
def test_bad_power_specs_are_refused(body, message):
    base = {
        "tier": "core",
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": CAPI,
        "pricing": {"capexPerNode": 200000.0},
        "power": {"minPoweredOn": 1},
    }
    with pytest.raises(ValidationError, match=message):
        GPUPoolSpec.model_validate({**base, **body})


class _Machines:
    """The PoolCapacity the executor powers machines off through: records what it was asked."""

    def __init__(self) -> None:
        self.terminated: list[tuple[str, str, str | None]] = []

    def scale_up(self, pool: str, nodes: int) -> None:
        raise AssertionError("no scale-up expected")

    def terminate(self, pool: str, node: str, provider_id: str | None) -> bool:
        self.terminated.append((pool, node, provider_id))
        return True

    def known_provider_ids(self, pool: str) -> set[str] | None:
        return None


def _power_off(cluster: FakeCluster, pools: dict[str, GPUPoolSpec]) -> _Machines:
    machines = _Machines()
    action = ReleaseNode(pool="core", node="a", reason="power off", kind=ActionKind.POWER_OFF)
    run = PlanExecutor(cast(KubeCluster, cluster), machines, lambda: NOW).execute(
        Plan(NOW, actions=(action,)), snapshot([]), pools, policy="default", dry_run=False
    )
    assert run.errors == [] or not machines.terminated, run.errors
    return machines


def test_the_executor_powers_off_an_empty_owned_node_through_its_machine():
    cluster = FakeCluster()
    cluster.add_node(gpu_node("a", "core", provider_id="capi:///metal/gpu-a"))
    machines = _power_off(cluster, {"core": owned().spec})
    assert machines.terminated == [("core", "a", "capi:///metal/gpu-a")]
    assert "a" not in cluster.nodes
    assert [e["reason"] for e in cluster.events] == ["PowerOff"]


def test_a_pod_on_the_owned_node_cancels_the_power_off_and_nothing_is_drained():
    cluster = FakeCluster()
    cluster.add_node(gpu_node("a", "core", provider_id="capi:///metal/gpu-a"))
    cluster.add_pod(gpu_pod("late", gpus=1, node="a", job="late"))
    machines = _power_off(cluster, {"core": owned().spec})
    assert machines.terminated == []
    assert ("team", "late") in cluster.pods
    assert not [w for w in cluster.writes if w[0] in ("evict", "patch_job")]
    node = cluster.nodes["a"]
    assert not (node.get("spec") or {}).get("unschedulable")
    assert "PowerOffCancelled" in [e["reason"] for e in cluster.events]


def test_an_owned_pool_without_power_is_never_powered_off():
    cluster = FakeCluster()
    cluster.add_node(gpu_node("a", "core", provider_id="capi:///metal/gpu-a"))
    static = GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "provider": CAPI,
            "pricing": {"capexPerNode": 200000.0},
        }
    )
    machines = _power_off(cluster, {"core": static})
    assert machines.terminated == []
    assert "a" in cluster.nodes
