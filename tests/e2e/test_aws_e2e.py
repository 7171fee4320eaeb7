"""The AWS adapter end to end: the operator (``hybridgpu run``) against moto_server through a
proxy that lists new instances late (tests/support/faultproxy.py, ``lag_seconds``), on the
real control plane. tests/support/moto_nodes.py plays the kubelet and the cloud node
controller: each booted moto instance becomes a kwok Node with its providerID, a terminated
one loses its Node.

- an elastic pool on an Auto Scaling group scales up once for a pending Job and, once idle,
  gives its instance back (the desired capacity goes down with it);
- a spot pool on EC2 Fleet gets a spot interruption warning through SQS: the node is
  drained, its Job completes on a replacement, the instance is terminated and the message
  deleted, and the owned core node is never touched;
- a notice whose instance has no zone (EC2 cannot be asked, then the instance does not
  exist) touches no node at all.
"""

from __future__ import annotations

import pytest

from conftest import SPOT_TAINT, SPOT_TOLERATION, Cluster, Operators, wait_for
from support.controlplane import gpu_job
from support.faultproxy import UNAVAILABLE, FaultProxy
from support.moto import aws, moto_server
from support.moto_nodes import (
    CloudNodes,
    aws_client,
    cloud_nodes,
    desired_capacity,
    fleet_provider,
    instance_state,
    lagging_aws,
    make_launch_template,
    make_queue,
    operator_env,
    queue_depth,
    spot_warning,
)

__all__ = ["aws", "cloud_nodes", "lagging_aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.e2e

CRITICALITY = "hybridgpu.io/criticality"


def test_asg_pool_scales_up_once_under_lag_and_gives_the_idle_instance_back(
    cluster: Cluster,
    operators: Operators,
    lagging_aws: FaultProxy,
    cloud_nodes: CloudNodes,
) -> None:
    moto = lagging_aws.upstream
    asg = cloud_nodes.asg_pool_with_operator(lagging_aws, operators, idle_for="4s")
    elastic, group, nodes = asg.pool, asg.group, asg.nodes

    cluster.kube.create_job(
        gpu_job("train", gpus=4, pool=elastic, run_duration="8s", labels={CRITICALITY: "standard"})
    )
    wait_for(lambda: cluster.job_done("train"), 120, "the Job complete on an AWS node")
    (instance,) = nodes.launched[elastic]
    ran_on = {p.spec.node_name for p in cluster.job_pods("train")}
    assert ran_on == {nodes.node_of(instance)}

    wait_for(lambda: desired_capacity(moto, group) == 0, 120, "the idle instance given back")
    wait_for(lambda: not cluster.pool_nodes(elastic), 60, "its Node gone")
    assert instance_state(moto, instance) in ("shutting-down", "terminated")
    assert nodes.launched[elastic] == {instance}, "a second instance was launched"
    assert lagging_aws.reached_moto["TerminateInstanceInAutoScalingGroup"] == 1
    assert nodes.errors == []


def test_spot_interruption_through_sqs_drains_replaces_and_acknowledges(
    cluster: Cluster,
    operators: Operators,
    lagging_aws: FaultProxy,
    cloud_nodes: CloudNodes,
) -> None:
    moto = lagging_aws.upstream
    template = cluster.name("spot-lt")
    make_launch_template(moto, template)
    queue = make_queue(moto, cluster.name("notices"))
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=4, max_nodes=1)
    (core_node,) = cluster.core_nodes(core, 1, gpus=4)
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
    nodes = cloud_nodes.start(spot)
    operators.start(extra_env=operator_env(lagging_aws.endpoint_url))
    cluster.wait_ticking(policy, timeout_seconds=180)

    cluster.kube.create_job(
        gpu_job(
            "render",
            gpus=4,
            pool=spot,
            run_duration="20s",
            tolerations=[SPOT_TOLERATION],
            labels={CRITICALITY: "preemptible"},
        )
    )

    def running_on() -> str | None:
        for pod in cluster.job_pods("render"):
            if pod.status.phase == "Running" and pod.spec.node_name:
                return str(pod.spec.node_name)
        return None

    first_node = wait_for(running_on, 120, "the Job running on a spot instance")
    (first,) = nodes.launched[spot]
    assert first_node == nodes.node_of(first)

    aws_client(moto, "sqs").send_message(QueueUrl=queue, MessageBody=spot_warning(first))
    wait_for(
        lambda: (
            first_node not in {n.metadata.name for n in cluster.pool_nodes(spot)}
            or cluster.kube.core.read_node(first_node).spec.unschedulable
        ),
        60,
        "the interrupted node cordoned",
    )
    wait_for(lambda: cluster.job_done("render"), 180, "the Job complete on a replacement")
    finished = {
        p.spec.node_name for p in cluster.job_pods("render") if p.status.phase == "Succeeded"
    }
    assert first_node not in finished
    wait_for(
        lambda: instance_state(moto, first) in ("shutting-down", "terminated"),
        60,
        "the interrupted instance terminated",
    )
    wait_for(lambda: queue_depth(moto, queue) == 0, 60, "the notice acknowledged")
    assert len(nodes.launched[spot]) == 2, f"one replacement expected: {nodes.launched[spot]}"
    assert not cluster.job("render").spec.suspend
    core_now = cluster.kube.core.read_node(core_node)
    assert not core_now.spec.unschedulable and core_now.metadata.deletion_timestamp is None
    assert cluster.events("SpotInterruption"), "no SpotInterruption Event"
    assert nodes.errors == []


def test_a_notice_without_a_zone_touches_no_node(
    cluster: Cluster,
    operators: Operators,
    lagging_aws: FaultProxy,
    cloud_nodes: CloudNodes,
) -> None:
    moto = lagging_aws.upstream
    template = cluster.name("spot-lt")
    make_launch_template(moto, template)
    queue = make_queue(moto, cluster.name("notices"))
    policy = cluster.policy()
    core = cluster.pool("core", tier="core", policy=policy, per_node=4, max_nodes=2)
    core_nodes = cluster.core_nodes(core, 2, gpus=4)
    cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=4,
        max_nodes=2,
        price=3.0,
        taints=[SPOT_TAINT],
        provider=fleet_provider(template, queue),
    )
    cluster.kube.create_job(
        gpu_job("steady", gpus=4, pool=core, run_duration="10m", labels={CRITICALITY: "standard"})
    )
    wait_for(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("steady")),
        60,
        "a Job running on core",
    )
    operators.start(extra_env=operator_env(lagging_aws.endpoint_url))
    cluster.wait_ticking(policy, timeout_seconds=180)

    # EC2 cannot say where the instance is: the notice must not match Nodes without a
    # providerID (the owned ones); it waits in the queue.
    lagging_aws.fail("DescribeInstances", UNAVAILABLE, times=1000)
    gone = "i-0123456789abcdef0"
    aws_client(moto, "sqs").send_message(QueueUrl=queue, MessageBody=spot_warning(gone))
    wait_for(
        lambda: lagging_aws.injected["DescribeInstances"] >= 8, 60, "EC2 failing for the operator"
    )
    cluster.wait_ticks(policy, 2)
    assert queue_depth(moto, queue) == 1, "a notice with no zone was acknowledged"
    untouched(cluster, core_nodes, "steady")

    # EC2 answers again: the instance does not exist, nothing to drain; the notice goes.
    lagging_aws.clear_faults()
    wait_for(lambda: queue_depth(moto, queue) == 0, 120, "the notice dropped")
    cluster.wait_ticks(policy, 2)
    untouched(cluster, core_nodes, "steady")
    assert not cluster.events("SpotInterruption")


def untouched(cluster: Cluster, nodes: list[str], job: str) -> None:
    for name in nodes:
        node = cluster.kube.core.read_node(name)
        assert not node.spec.unschedulable, f"{name} cordoned"
        assert node.metadata.deletion_timestamp is None, f"{name} being deleted"
    job_now = cluster.job(job)
    assert not job_now.spec.suspend
    assert "hybridgpu.io/move" not in (job_now.metadata.annotations or {})
    assert any(p.status.phase == "Running" for p in cluster.job_pods(job))
