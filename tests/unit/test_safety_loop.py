"""Whole ticks of the real Reconciler over an in-memory cluster and the fake provider.

Each test replays one control-loop bug of issue 11 the way it happened on a cluster: the
same sequence of ticks, the same lagging cloud, and asserts what a user would see.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.fake_cluster import FakeCluster, gpu_node, gpu_pod

from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.names import RELEASING_ANNOTATION
from hybridgpu.metrics.exported import ExportedMetrics
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit

START = 1_700_000_000.0


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def core_pool(policy: str = "default") -> dict[str, Any]:
    return {
        "tier": "core",
        "gpu": {"model": "A100", "perNode": 8},
        "minNodes": 1,
        "maxNodes": 2,
        "provider": {"type": "static"},
        "pricing": {"capexPerNode": 200000},
        "policy": policy,
    }


def elastic_pool(policy: str = "default", max_nodes: int = 6) -> dict[str, Any]:
    return {
        "tier": "elastic",
        "gpu": {"model": "A100", "perNode": 8},
        "minNodes": 0,
        "maxNodes": max_nodes,
        "provider": {"type": "fake"},
        "pricing": {"perNodeHour": 24},
        "scaleDown": {"idleFor": "10m"},
        "policy": policy,
    }


def operator(
    cluster: FakeCluster, clock: Clock, fake_provider: str = "hybridgpu.cloud.fake:FakeProvider"
) -> Reconciler:
    options = OperatorOptions(identity="test", fake_provider=fake_provider)
    return Reconciler(cluster, options, clock=clock, metrics=ExportedMetrics())  # type: ignore[arg-type]


def fake_of(reconciler: Reconciler, cluster: FakeCluster, pool: str) -> FakeProvider:
    spec = GPUPoolSpec.model_validate(cluster.pools[pool]["spec"])
    found = reconciler.providers.for_spec(spec)
    assert isinstance(found, FakeProvider)
    return found


def join(
    cluster: FakeCluster,
    fake: FakeProvider,
    pool: str,
    clock: Clock,
    *,
    age: float = 0.0,
    gpus: int = 8,
) -> list[str]:
    """Give every listed live instance of ``pool`` that has no Node yet a Ready Node with
    ``gpus``, created ``age`` seconds ago."""
    spec = GPUPoolSpec.model_validate(cluster.pools[pool]["spec"])
    have = {(n.get("spec") or {}).get("providerID") for n in cluster.nodes.values()}
    joined = []
    for instance in fake.instances(pool, spec):
        if instance.provider_id not in have and instance.state not in ("terminating", "terminated"):
            name = f"{pool}-{instance.instance_id}"
            cluster.add_node(
                gpu_node(
                    name,
                    pool,
                    gpus=gpus,
                    provider_id=instance.provider_id,
                    created=clock.now - age,
                )
            )
            joined.append(name)
    return joined


def condition(cluster: FakeCluster, pool: str, kind: str) -> dict[str, Any]:
    conditions = cluster.pools[pool]["status"].get("conditions") or []
    return next(c for c in conditions if c["type"] == kind)


# --- bug 1: an interruption notice with no provider ID ------------------------------------
def test_a_notice_without_provider_id_never_touches_owned_nodes() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("core", core_pool())
    cluster.add_pool("elastic", elastic_pool())
    cluster.add_node(gpu_node("core-1", "core", created=START - 86400))
    cluster.add_pod(gpu_pod("busy", node="core-1", job="busy"))
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])
    fake.set_target("elastic", spec, 1)
    (cloud_node,) = join(cluster, fake, "elastic", clock)
    instance = fake.instances("elastic", spec)[0]
    # The AWS adapter's zone lookup failed: the notice names the instance but no provider ID.
    fake.interrupt(instance.instance_id, provider_id="")

    for _ in range(3):
        reconciler.tick("default")
        clock.now += 30

    assert set(cluster.writes_to("core-1")) <= {"patch_metadata"}  # labels only
    assert "core-1" in cluster.nodes
    assert not cluster.nodes["core-1"]["spec"].get("unschedulable")
    assert [i.instance_id for i in fake.instances("elastic", spec)] == [instance.instance_id]
    assert cloud_node in cluster.nodes


# --- bug 2: a lagging instance list doubles a scale-up ------------------------------------
def test_a_scale_up_is_not_repeated_while_the_cloud_lists_no_instance_yet() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    for i in range(2):
        cluster.add_pod(gpu_pod(f"train-{i}", job=f"train-{i}", unschedulable_since=START - 120))
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    fake.list_lag_seconds = 60  # an ASG lists new instances once its activity starts
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])

    reconciler.tick("default")
    assert fake.target("elastic", spec) == 2
    clock.now += 5
    reconciler.tick("default")

    assert fake.target("elastic", spec) == 2
    status = cluster.pools["elastic"]["status"]
    assert status["nodes"]["provisioning"] == 2


# --- bug 4: two ScalingPolicies forget each other's idle clocks ---------------------------
def test_idle_nodes_are_released_when_two_policies_tick_in_turn() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_policy("other", {})
    cluster.add_pool("elastic", elastic_pool())
    cluster.add_pool("elastic-b", elastic_pool(policy="other"))
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    for pool in ("elastic", "elastic-b"):
        fake.set_target(pool, GPUPoolSpec.model_validate(cluster.pools[pool]["spec"]), 1)
    (idle_a,) = join(cluster, fake, "elastic", clock, age=3600)
    (idle_b,) = join(cluster, fake, "elastic-b", clock, age=3600)

    for _ in range(25):  # 12.5 minutes of ticks, alternating; idleFor is 10 minutes
        reconciler.tick("default")
        reconciler.tick("other")
        clock.now += 30

    assert "cordon" in cluster.writes_to(idle_a)
    assert "cordon" in cluster.writes_to(idle_b)


# --- bug 7: a bare pod keeps a node releasing forever --------------------------------------
def test_a_bare_pod_ends_the_release_of_its_node_instead_of_failing_every_tick() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    fake.set_target("elastic", GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"]), 1)
    (name,) = join(cluster, fake, "elastic", clock, age=3600)
    node = cluster.nodes.pop(name)
    node["metadata"]["name"] = "gpu-1"
    node["spec"]["unschedulable"] = True
    node["metadata"]["annotations"] = {
        RELEASING_ANNOTATION: str(START - 60),
        "hybridgpu.io/cordoned-by": "release",
    }
    cluster.add_node(node)
    # Bound just before the cordon: owned by nothing, so it is never evicted.
    cluster.add_pod(gpu_pod("notebook", node="gpu-1"))

    results = []
    for _ in range(3):
        results.append(reconciler.tick("default"))
        clock.now += 30

    annotations = cluster.nodes["gpu-1"]["metadata"]["annotations"]
    assert RELEASING_ANNOTATION not in annotations
    assert not cluster.nodes["gpu-1"]["spec"].get("unschedulable")
    assert ("notebook" in str(cluster.events)) and "gpu-1" in cluster.nodes
    assert results[-1].errors == []


# --- bug 8: an instance that never becomes a Node -----------------------------------------
def test_an_instance_that_never_registers_is_replaced_after_the_deadline() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=START - 120))
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])

    reconciler.tick("default")
    (first,) = fake.instances("elastic", spec)
    for _ in range(16 * 2):  # 16 minutes; the instance never joins
        clock.now += 30
        reconciler.tick("default")

    live = [i.instance_id for i in fake.instances("elastic", spec)]
    assert first.instance_id not in live
    assert len(live) == 1  # the replacement the pending pod still needs
    unhealthy = condition(cluster, "elastic", "NodesUnhealthy")
    assert unhealthy["status"] == "True" and unhealthy["reason"] == "RegistrationTimeout"
    assert first.instance_id in unhealthy["message"]


# --- an instance whose Node joins but never reports its GPUs ------------------------------
def test_a_node_whose_gpus_are_never_reported_is_replaced_and_said_so() -> None:
    """The device plugin never came up on it: paid for, serving nothing. Before, decide()
    stopped counting it after the joining grace and bought another, keeping both (until
    idleFor released it, here 2 h)."""
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", {**elastic_pool(), "scaleDown": {"idleFor": "2h"}})
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=START - 120))
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])

    reconciler.tick("default")
    (broken,) = join(cluster, fake, "elastic", clock, gpus=0)
    said: list[str] = []
    for _ in range(16 * 2):  # 16 minutes without GPUs
        clock.now += 30
        reconciler.tick("default")
        unhealthy = condition(cluster, "elastic", "NodesUnhealthy")
        if unhealthy["reason"] == "NoGPUs":
            said.append(unhealthy["message"])
        join(cluster, fake, "elastic", clock)  # a replacement joins with its GPUs

    live = [i.instance_id for i in fake.instances("elastic", spec)]
    assert len(live) == 1, live  # the broken node's instance is terminated
    assert f"elastic-{live[0]}" != broken
    assert said and broken in said[0]


# --- bug 9: a provider that cannot be built -----------------------------------------------
def test_a_provider_that_fails_to_load_is_a_pool_condition_not_a_broken_tick() -> None:
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("core", core_pool())
    cluster.add_pool("elastic", elastic_pool())
    cluster.add_node(gpu_node("core-1", "core", created=START - 86400))
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=START - 120))
    reconciler = operator(cluster, clock, fake_provider="no_such_module:Provider")

    result = reconciler.tick("default")

    assert result.plan is not None
    error = condition(cluster, "elastic", "ProviderError")
    assert error["status"] == "True" and "no_such_module" in error["message"]
    assert condition(cluster, "core", "ProviderError")["status"] == "False"
    assert cluster.policies["default"]["status"]["lastTick"]
    # ... and a Warning Event on the pool (`kubectl describe gpupool` shows it), not one per
    # tick while the same failure holds.
    clock.now += 5
    reconciler.tick("default")
    warned = [e for e in cluster.events if e["reason"] == "ProviderError"]
    assert [(e["kind"], e["name"], e["type"]) for e in warned] == [
        ("GPUPool", "elastic", "Warning")
    ]
    assert "no_such_module" in warned[0]["message"]


# --- spot without capacity: decide() grows another pool while the provider has none --------
def test_a_pool_whose_launch_failed_for_capacity_is_passed_over_until_the_back_off_ends() -> None:
    from hybridgpu.handlers.capacity import NO_CAPACITY_BACKOFF_SECONDS

    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cheap = {**elastic_pool(), "tier": "spot", "pricing": {"perNodeHour": 8}}
    dearer = {**elastic_pool(), "tier": "spot", "pricing": {"perNodeHour": 9}}
    cluster.add_pool("spot-a", cheap)
    cluster.add_pool("spot-b", dearer)
    cluster.add_pod(
        gpu_pod(
            "batch",
            job="batch",
            unschedulable_since=START - 120,
            labels={"hybridgpu.io/criticality": "preemptible"},
        )
    )
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "spot-a")
    spec_a = GPUPoolSpec.model_validate(cluster.pools["spot-a"]["spec"])
    spec_b = GPUPoolSpec.model_validate(cluster.pools["spot-b"]["spec"])
    fake.no_capacity.add("spot-a")

    reconciler.tick("default")  # the cheaper pool is tried and has no capacity
    assert fake.target("spot-a", spec_a) == 0
    clock.now += 30
    reconciler.tick("default")  # the dearer one is grown instead
    assert fake.target("spot-b", spec_b) == 1
    assert fake.target("spot-a", spec_a) == 0
    assert reconciler.providers.unlaunchable() == {"spot-a"}
    # Capacity is back; after the back-off the cheaper pool is tried again.
    fake.no_capacity.clear()
    clock.now += NO_CAPACITY_BACKOFF_SECONDS
    assert reconciler.providers.unlaunchable() == frozenset()


def test_ec2_capacity_errors_become_capacity_unavailable() -> None:
    from botocore.exceptions import ClientError

    from hybridgpu.cloud.aws import _provider_error
    from hybridgpu.cloud.base import CapacityUnavailable

    def client_error(code: str, status: int) -> ClientError:
        body = {
            "Error": {"Code": code, "Message": "m"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        return ClientError(body, "CreateFleet")

    short = _provider_error("launch", client_error("InsufficientInstanceCapacity", 500))
    assert isinstance(short, CapacityUnavailable) and short.retryable
    other = _provider_error("launch", client_error("UnauthorizedOperation", 403))
    assert not isinstance(other, CapacityUnavailable) and not other.retryable


# --- lists are stale: a terminated instance stays listed for a while -----------------------
# EC2 lists a terminated instance for about an hour (and, eventually consistent, may show it
# in its last state first); an Auto Scaling group keeps it in Terminating lifecycle states;
# a Karpenter NodeClaim and its Node linger with a deletionTimestamp while finalizers run.
def idle_node_released(
    cluster: FakeCluster, reconciler: Reconciler, clock: Clock, fake: FakeProvider
) -> tuple[str, str]:
    """An elastic instance launched two hours ago with an idle Node, ticked (every 30 s)
    until the operator has released it: its Node name and instance ID."""
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])
    launched = clock.now
    fake.set_target("elastic", spec, 1)
    clock.now += 7200
    (name,) = join(cluster, fake, "elastic", clock, age=3600)
    (instance,) = fake.instances("elastic", spec)
    assert instance.launched_at == launched
    for _ in range(30):  # idleFor is 10 minutes
        cluster.now = clock.now
        reconciler.tick("default")
        clock.now += 30
        if ("delete", name) in cluster.writes:
            return name, instance.instance_id
    raise AssertionError(f"{name} was not released: {cluster.writes_to(name)}")


def terminate_calls(fake: FakeProvider, instance_id: str) -> int:
    return sum(1 for c in fake.calls if c.method == "terminate" and c.args == (instance_id,))


def test_a_released_instance_still_listed_is_neither_terminated_again_nor_replaced() -> None:
    """After the release the list shows the instance running for a minute (stale), then
    terminated for an hour: it had no Node and was launched long ago, so the registration
    check took it for a machine that never joined, terminated it a second time and reported
    the pool unhealthy for an hour."""
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    fake.list_lag_seconds = 60
    fake.terminated_listed_seconds = 3600
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])
    _, instance_id = idle_node_released(cluster, reconciler, clock, fake)
    released_at_call = len(fake.calls)

    for _ in range(20):  # ten minutes: the stale minute, then listed as terminated
        reconciler.tick("default")
        clock.now += 30

    assert [i.state for i in fake.instances("elastic", spec)] == ["terminated"]
    assert terminate_calls(fake, instance_id) == 1
    assert condition(cluster, "elastic", "NodesUnhealthy")["status"] == "False"
    assert fake.target("elastic", spec) == 0
    assert not [c for c in fake.calls[released_at_call:] if c.method == "set_target"]
    status = cluster.pools["elastic"]["status"]
    assert status["nodes"]["provisioning"] == 0 and status["costPerHour"] == 0


def test_a_node_lingering_while_its_machine_terminates_is_no_capacity_nor_a_relaunch() -> None:
    """The released Node stays, deleting, while a finalizer runs (Karpenter's does while it
    terminates the machine). Work for one node comes back meanwhile: the operator launched
    one, then counted the lingering Node as joined (provisioning = target - joined = 0) and
    launched a second; and each tick it 'continued releasing' the Node, terminating again."""
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    fake.terminated_listed_seconds = 3600
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])

    def join_with_finalizer() -> str:
        (name,) = join(cluster, fake, "elastic", clock, age=3600)
        cluster.nodes[name]["metadata"]["finalizers"] = ["karpenter.sh/termination"]
        return name

    launched = clock.now
    fake.set_target("elastic", spec, 1)
    clock.now += 7200
    old = join_with_finalizer()
    (old_instance,) = fake.instances("elastic", spec)
    assert old_instance.launched_at == launched
    for _ in range(30):
        cluster.now = clock.now
        reconciler.tick("default")
        clock.now += 30
        if ("delete", old) in cluster.writes:
            break
    assert cluster.nodes[old]["metadata"].get("deletionTimestamp"), "the Node lingers"
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=clock.now - 60))

    for _ in range(6):  # three minutes; the new instance has not joined yet
        cluster.now = clock.now
        reconciler.tick("default")
        clock.now += 30

    assert fake.target("elastic", spec) == 1, "launched twice for one node of work"
    assert terminate_calls(fake, old_instance.instance_id) == 1
    status = cluster.pools["elastic"]["status"]
    assert status["nodes"]["provisioning"] == 1
    assert status["costPerHour"] == 24  # the new instance; the terminated one is not billed
    cluster.lift_finalizers(old)
    new = join_with_finalizer()
    cluster.pods[("team", "train")]["spec"]["nodeName"] = new
    cluster.now = clock.now
    reconciler.tick("default")
    assert fake.target("elastic", spec) == 1
    assert cluster.pools["elastic"]["status"]["nodes"]["provisioning"] == 0


def test_a_node_whose_instance_the_cloud_terminated_and_still_lists_is_not_capacity() -> None:
    """A spot instance the provider reclaimed stays listed as terminated while its Node is
    still there: the Node was kept (the instance was 'known'), counted as free capacity for
    pending work and billed; it is an orphan, deleted like one."""
    clock = Clock()
    cluster = FakeCluster()
    cluster.add_policy("default", {})
    cluster.add_pool("elastic", elastic_pool())
    reconciler = operator(cluster, clock)
    fake = fake_of(reconciler, cluster, "elastic")
    fake.terminated_listed_seconds = 3600
    spec = GPUPoolSpec.model_validate(cluster.pools["elastic"]["spec"])
    fake.set_target("elastic", spec, 1)
    (name,) = join(cluster, fake, "elastic", clock, age=3600)
    (instance,) = fake.instances("elastic", spec)
    fake.reclaim("elastic", instance.instance_id)
    cluster.add_pod(gpu_pod("train", job="train", unschedulable_since=clock.now - 60))

    result = reconciler.tick("default")

    assert result.plan is not None
    assert not [a for a in result.plan.actions if getattr(a, "node", None) == name]
    assert name not in cluster.nodes, "the Node of a terminated instance was kept"
    assert terminate_calls(fake, instance.instance_id) == 0
    status = cluster.pools["elastic"]["status"]
    # The group still wants one node: the replacement is on its way and billed, once.
    assert status["nodes"]["provisioning"] == 1 and status["costPerHour"] == 24
