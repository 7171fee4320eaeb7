"""The AWS adapter against a moto whose lists are late (tests/support/faultproxy.py,
``lag_seconds``), as EC2's are: a launch must count toward its pool before DescribeInstances
shows it, or the next tick launches it again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hybridgpu.cloud.aws import AWSProvider
from hybridgpu.handlers.capacity import Providers
from hybridgpu.models.pool import GPUPoolSpec
from support.controlplane import wait_until
from support.faultproxy import DROP_AFTER, UNAVAILABLE, FaultProxy
from support.moto import REGION, aws, moto_server
from support.moto_nodes import (
    aws_client,
    desired_capacity,
    make_auto_scaling_group,
    make_launch_template,
    make_queue,
    queue_depth,
    spot_warning,
)

__all__ = ["aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.adapters

TEMPLATE = "gpu-spot-lag"


@pytest.fixture
def lists_a_little_late(aws: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream=aws, lag_seconds=3)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def late_lists(aws: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream=aws, lag_seconds=600)  # nothing new is listed in this test
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def spot_spec(max_nodes: int = 4) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "V100", "perNode": 4},
            "maxNodes": max_nodes,
            "provider": {
                "type": "aws",
                "aws": {
                    "region": REGION,
                    "launchTemplateName": TEMPLATE,
                    "instanceTypes": ["p3.8xlarge"],
                },
            },
            "pricing": {"perNodeHour": 3.0},
        }
    )


def launched(endpoint: str) -> list[str]:
    reservations = aws_client(endpoint, "ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    return sorted(i["InstanceId"] for r in reservations for i in r["Instances"])


def test_a_fleet_launch_counts_before_it_is_listed(late_lists: FaultProxy) -> None:
    make_launch_template(late_lists.upstream, TEMPLATE)
    cloud = AWSProvider(REGION, endpoint_url=late_lists.endpoint_url, sleep=lambda _: None)
    spec = spot_spec()

    cloud.set_target("spot", spec, 1)
    assert cloud.instances("spot", spec) == []  # the list does not show it yet
    assert cloud.target("spot", spec) == 1
    cloud.set_target("spot", spec, 1)  # the next tick asks for the same capacity
    cloud.set_target("spot", spec, 2)  # and then for one more

    assert len(launched(late_lists.upstream)) == 2
    assert late_lists.reached_moto["CreateFleet"] == 2
    assert cloud.target("spot", spec) == 2


def test_a_lost_fleet_response_under_late_lists_launches_once(late_lists: FaultProxy) -> None:
    make_launch_template(late_lists.upstream, TEMPLATE)
    cloud = AWSProvider(REGION, endpoint_url=late_lists.endpoint_url, sleep=lambda _: None)
    spec = spot_spec()
    late_lists.fail("CreateFleet", DROP_AFTER, times=1)

    cloud.set_target("spot", spec, 2)  # the retry resends the token; EC2 answers it again
    cloud.set_target("spot", spec, 2)

    assert len(launched(late_lists.upstream)) == 2
    assert cloud.target("spot", spec) == 2


def test_a_warning_for_an_instance_not_listed_yet_waits_for_the_list(
    lists_a_little_late: FaultProxy,
) -> None:
    # A spot warning right after launch: DescribeInstances does not show the instance yet.
    # It was dropped as "no such instance any more", and the node was never drained.
    proxy = lists_a_little_late
    make_launch_template(proxy.upstream, TEMPLATE)
    queue = make_queue(proxy.upstream, "notices")
    cloud = AWSProvider(
        REGION,
        endpoint_url=proxy.endpoint_url,
        sleep=lambda _: None,
        interruption_queue_urls=(queue,),
    )
    cloud.set_target("spot", spot_spec(), 1)
    (instance_id,) = launched(proxy.upstream)
    aws_client(proxy.upstream, "sqs").send_message(
        QueueUrl=queue, MessageBody=spot_warning(instance_id)
    )

    assert cloud.interruptions() == []
    assert queue_depth(proxy.upstream, queue) == 1, "the warning was dropped"
    (notice,) = wait_until(cloud.interruptions, timeout_seconds=30, what="the warning placed")
    assert notice.instance_id == instance_id
    assert notice.provider_id.endswith(f"/{instance_id}") and notice.provider_id.count("/") == 4


def test_a_notice_whose_zone_lookup_failed_is_read_again_within_seconds(
    late_lists: FaultProxy,
) -> None:
    # It came back only after the queue's visibility timeout (5 minutes by default): a spot
    # warning gives two.
    queue = make_queue(late_lists.upstream, "notices")
    cloud = AWSProvider(
        REGION,
        endpoint_url=late_lists.endpoint_url,
        sleep=lambda _: None,
        interruption_queue_urls=(queue,),
        max_attempts=1,
    )
    aws_client(late_lists.upstream, "sqs").send_message(
        QueueUrl=queue, MessageBody=spot_warning("i-0123456789abcdef0")
    )
    late_lists.fail("DescribeInstances", UNAVAILABLE, times=1)

    assert cloud.interruptions() == []
    assert queue_depth(late_lists.upstream, queue) == 1
    # EC2 answers now: the instance does not exist, the notice is dropped.
    wait_until(
        lambda: cloud.interruptions() == [] and queue_depth(late_lists.upstream, queue) == 0,
        timeout_seconds=30,
        what="the notice read again and dropped",
    )


# --- terminated instances stay listed ----------------------------------------------------
@pytest.fixture
def lingering_lists(aws: str) -> Iterator[FaultProxy]:
    """Instances that left their group stay listed as Terminating for 10 minutes (moto keeps
    terminated EC2 instances listed by itself)."""
    proxy = FaultProxy(upstream=aws, terminated_listed_seconds=600)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def elastic_asg_spec(group: str) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "provider": {
                "type": "aws",
                "aws": {"region": REGION, "autoScalingGroupName": group},
            },
            "pricing": {"perNodeHour": 32.0},
        }
    )


def operator_providers(endpoint: str, pool: str, spec: GPUPoolSpec) -> Providers:
    """The operator's Providers for one AWS pool, its AWS provider pointed at ``endpoint``."""
    providers = Providers("hybridgpu.cloud.fake:FakeProvider")
    providers.set_pools({pool: spec})
    cloud = AWSProvider(REGION, endpoint_url=endpoint, sleep=lambda _: None)
    providers._by_key[f"aws:{REGION}"] = cloud
    return providers


@pytest.mark.parametrize("kind", ["asg", "fleet"])
def test_a_released_instance_still_listed_is_not_capacity_not_terminated_again_nor_relaunched(
    lingering_lists: FaultProxy, kind: str
) -> None:
    """The operator's own Providers over the AWS adapter, as a tick uses them, while the
    released instance is still listed (Auto Scaling: Terminating; EC2: terminated)."""
    upstream, endpoint = lingering_lists.upstream, lingering_lists.endpoint_url
    if kind == "asg":
        make_auto_scaling_group(upstream, "gpu-linger")
        pool, spec = "elastic", elastic_asg_spec("gpu-linger")
        terminate_action = "TerminateInstanceInAutoScalingGroup"
    else:
        make_launch_template(upstream, TEMPLATE)
        pool, spec = "spot", spot_spec()
        terminate_action = "TerminateInstances"
    providers = operator_providers(endpoint, pool, spec)
    cloud = providers.for_spec(spec)
    providers.scale_up(pool, 2)
    first, second = sorted(cloud.instances(pool, spec), key=lambda i: i.instance_id)

    # Released: drained, terminated, its Node deleted; a retried release terminates again.
    assert providers.terminate(pool, "node-1", first.provider_id)
    assert providers.terminate(pool, "node-1", first.provider_id)

    listed = {i.instance_id: i.state for i in cloud.instances(pool, spec)}
    assert listed[first.instance_id] in ("terminating", "terminated"), listed
    assert lingering_lists.reached_moto[terminate_action] == 1
    assert cloud.target(pool, spec) == 1
    if kind == "asg":
        assert desired_capacity(upstream, "gpu-linger") == 1  # not lowered twice
    # Long after launch, with only the second instance's Node: the released one is not
    # taken for a machine that never registered, nor for a Node's live instance.
    later = time.time() + 3600
    assert providers.replace_unregistered(pool, {second.provider_id}, later) == []
    assert lingering_lists.reached_moto[terminate_action] == 1
    assert providers.known_provider_ids(pool) == {second.provider_id}
    assert providers.provisioning(pool, 1) == 0  # nothing on its way: nothing billed
    # Its work comes back: one instance is launched, not two.
    providers.scale_up(pool, 1)
    assert cloud.target(pool, spec) == 2
    live = [i for i in cloud.instances(pool, spec) if i.state in ("pending", "running")]
    assert len(live) == 2 and first.instance_id not in {i.instance_id for i in live}
