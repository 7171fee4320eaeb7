"""The cloud API failing under a running operator (``hybridgpu run`` against moto_server
through tests/support/faultproxy.py, lists lagging): throttling bursts (AWS's own throttling
answers, 429s, bare 503s) on the calls that launch, reads and the interruption queue, and
launches that time out *after* AWS acted. No capacity is launched twice, every Job
completes, and a pool whose API keeps throttling is backed off instead of retried each tick.
"""

from __future__ import annotations

import pytest

from conftest import SPOT_TAINT, SPOT_TOLERATION, Cluster, Operators, wait_for
from support.controlplane import gpu_job
from support.faultproxy import DELAY_AFTER, THROTTLE, TOO_MANY, UNAVAILABLE, FaultProxy
from support.moto import aws, moto_server
from support.moto_nodes import (
    CloudNodes,
    asg_provider,
    cloud_nodes,
    desired_capacity,
    fleet_provider,
    lagging_aws,
    make_auto_scaling_group,
    make_launch_template,
    make_queue,
    operator_env,
)

__all__ = ["aws", "cloud_nodes", "lagging_aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.e2e

CRITICALITY = "hybridgpu.io/criticality"
READ_TIMEOUT_SECONDS = 20.0
"""The AWS adapter's read timeout (AWSProvider.read_timeout_seconds' default)."""


def test_throttling_bursts_and_timeouts_after_acting_launch_nothing_twice(
    cluster: Cluster,
    operators: Operators,
    lagging_aws: FaultProxy,
    cloud_nodes: CloudNodes,
) -> None:
    moto = lagging_aws.upstream
    group = cluster.name("asg")
    make_auto_scaling_group(moto, group)
    template = cluster.name("spot-lt")
    make_launch_template(moto, template)
    queue = make_queue(moto, cluster.name("notices"))
    policy = cluster.policy()
    elastic = cluster.pool(
        "elastic",
        tier="elastic",
        policy=policy,
        per_node=4,
        max_nodes=4,
        idle_for="10m",
        provider=asg_provider(group),
    )
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=4,
        max_nodes=3,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="10m",
        provider=fleet_provider(template, queue),
    )
    nodes = cloud_nodes.start(elastic, spot, boot_delay_seconds=3.0)
    operators.start(extra_env=operator_env(lagging_aws.endpoint_url))
    cluster.wait_ticking(policy, timeout_seconds=180)

    # The launches: a burst of throttling, then the call that gets through answers only
    # after the client gave up (AWS acted; the operator cannot know).
    lagging_aws.delay_seconds = READ_TIMEOUT_SECONDS + 5
    for action in ("SetDesiredCapacity", "CreateFleet"):
        lagging_aws.burst([action], [THROTTLE, TOO_MANY, UNAVAILABLE], times=3)
        lagging_aws.fail(action, DELAY_AFTER)
    # The reads and the queue: bursts that outlast botocore's own retries now and then.
    lagging_aws.burst(
        ["DescribeAutoScalingGroups", "DescribeInstances", "ReceiveMessage"],
        [THROTTLE, TOO_MANY, UNAVAILABLE],
        times=6,
    )
    # 60 s each: both need a node at once. With 5 s, std-2's pod came late on a loaded
    # machine and ran on std-1's node once std-1 finished, so one launch was right and the
    # count below failed.
    for name in ("std-1", "std-2"):
        cluster.kube.create_job(
            gpu_job(
                name, gpus=4, pool=elastic, run_duration="60s", labels={CRITICALITY: "standard"}
            )
        )
    cluster.kube.create_job(
        gpu_job(
            "pre-1",
            gpus=4,
            pool=spot,
            run_duration="5s",
            tolerations=[SPOT_TOLERATION],
            labels={CRITICALITY: "preemptible"},
        )
    )
    for name in ("std-1", "std-2", "pre-1"):
        wait_for(lambda name=name: cluster.job_done(name), 300, f"Job {name} complete")

    assert len(nodes.launched.get(elastic, ())) == 2, nodes.launched
    assert len(nodes.launched.get(spot, ())) == 1, nodes.launched
    assert desired_capacity(moto, group) == 2
    for action in ("SetDesiredCapacity", "CreateFleet"):
        assert lagging_aws.pending_faults(action) == 0, f"{action}: faults left"
        timed_out = [c for c in lagging_aws.calls_of(action) if c.fault == DELAY_AFTER]
        assert len(timed_out) == 1, f"{action} never timed out after acting"
    # The fleet launch that timed out was answered again by its ClientToken, never resent
    # with a new one: every CreateFleet that reached moto launched the one instance.
    assert lagging_aws.reached_moto["CreateFleet"] >= 1
    assert nodes.errors == []
    for name in ("std-1", "std-2", "pre-1"):
        assert not cluster.job(name).spec.suspend


def test_a_pool_whose_api_keeps_throttling_is_backed_off_then_scales_once(
    cluster: Cluster,
    operators: Operators,
    lagging_aws: FaultProxy,
    cloud_nodes: CloudNodes,
) -> None:
    moto = lagging_aws.upstream
    asg = cloud_nodes.asg_pool_with_operator(lagging_aws, operators, idle_for="10m")
    policy, elastic, group, nodes = asg.policy, asg.pool, asg.group, asg.nodes

    lagging_aws.fail("SetDesiredCapacity", THROTTLE, times=10_000)
    cluster.kube.create_job(
        gpu_job("train", gpus=4, pool=elastic, run_duration="5s", labels={CRITICALITY: "standard"})
    )

    def provider_error() -> str | None:
        status = cluster.pool_object(elastic).get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") == "ProviderError" and cond.get("status") == "True":
                return str(cond.get("message") or "")
        return None

    message = wait_for(provider_error, 120, "the throttled scale-up reported on the pool")
    assert "Throttling" in message, message
    attempts = len(lagging_aws.calls_of("SetDesiredCapacity"))
    assert attempts >= 1
    # Two ticks that still see the pending pod and plan the scale-up: the pool is backed
    # off, so the throttled API is not called again.
    cluster.wait_ticks(policy, 2)
    assert len(lagging_aws.calls_of("SetDesiredCapacity")) == attempts
    assert "backing off" in (provider_error() or ""), provider_error()
    assert desired_capacity(moto, group) == 0

    lagging_aws.clear_faults()
    wait_for(lambda: cluster.job_done("train"), 180, "the Job complete once AWS answers")
    assert len(nodes.launched.get(elastic, ())) == 1, nodes.launched
    assert desired_capacity(moto, group) == 1
    wait_for(lambda: provider_error() is None, 60, "ProviderError cleared")
