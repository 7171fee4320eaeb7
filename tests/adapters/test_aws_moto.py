"""The AWS provider against a real moto_server: ASG scaling, EC2 Fleet, spot prices, SQS
notices, and faults (throttling, 503, dropped connections) that never double capacity."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from tests.support.controlplane import wait_until

from hybridgpu.cloud.aws import AWSProvider, instance_id_of, parse_event
from hybridgpu.cloud.base import CapacityProvider, ProviderError
from hybridgpu.cloud.fake import FakeProvider
from hybridgpu.models.pool import GPUPoolSpec
from support.moto import (
    DROP_AFTER,
    DROP_BEFORE,
    REGION,
    THROTTLE,
    UNAVAILABLE,
    FaultProxy,
    aws,
    faulty_aws,
    moto_server,
)
from support.provider_contract import NOT_LIVE

__all__ = ["aws", "faulty_aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.adapters

AMI = "ami-12c6146b"  # one of moto's built-in images
GROUP = "gpu-elastic"
TEMPLATE = "gpu-spot"
NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def client(endpoint: str, service: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint)


def make_group(endpoint: str, max_size: int = 10, min_size: int = 0) -> None:
    client(endpoint, "ec2").create_launch_template(
        LaunchTemplateName="gpu-elastic-lt",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": "p4d.24xlarge"},
    )
    client(endpoint, "autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateName": "gpu-elastic-lt", "Version": "$Latest"},
        MinSize=min_size,
        MaxSize=max_size,
        DesiredCapacity=0,
        AvailabilityZones=["us-east-1a"],
    )


def make_template(endpoint: str) -> None:
    client(endpoint, "ec2").create_launch_template(
        LaunchTemplateName=TEMPLATE, LaunchTemplateData={"ImageId": AMI}
    )


def elastic_spec(max_nodes: int = 4, queue_url: str | None = None) -> GPUPoolSpec:
    aws_settings: dict[str, Any] = {"region": REGION, "autoScalingGroupName": GROUP}
    if queue_url:
        aws_settings["interruptionQueueURL"] = queue_url
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": max_nodes,
            "provider": {"type": "aws", "aws": aws_settings},
            "pricing": {"perNodeHour": 32.77},
        }
    )


def spot_spec(max_nodes: int = 5) -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "spot",
            "gpu": {"model": "V100", "perNode": 1},
            "maxNodes": max_nodes,
            "provider": {
                "type": "aws",
                "aws": {
                    "region": REGION,
                    "launchTemplateName": TEMPLATE,
                    "instanceTypes": ["p3.2xlarge", "g5.xlarge"],
                },
            },
            "pricing": {"fromProvider": True, "perNodeHour": 1.0},
        }
    )


def provider(endpoint: str, **kwargs: Any) -> AWSProvider:
    kwargs.setdefault("sleep", lambda seconds: None)
    return AWSProvider(REGION, endpoint_url=endpoint, **kwargs)


def desired(endpoint: str) -> int:
    groups = client(endpoint, "autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[GROUP]
    )["AutoScalingGroups"]
    return int(groups[0]["DesiredCapacity"])


def live_instances(endpoint: str) -> list[str]:
    pages = client(endpoint, "ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    return sorted(i["InstanceId"] for r in pages for i in r["Instances"])


# --- elastic: Auto Scaling group ------------------------------------------------------


def test_scale_up_is_capped_at_max_nodes_and_instances_carry_provider_ids(aws: str) -> None:
    make_group(aws)
    cloud = provider(aws)
    spec = elastic_spec(max_nodes=4)

    cloud.set_target("gpu", spec, 6)

    assert desired(aws) == 4
    found = cloud.instances("gpu", spec)
    assert len(found) == 4
    assert {i.state for i in found} <= {"pending", "running"}
    for inst in found:
        assert inst.provider_id == f"aws:///us-east-1a/{inst.instance_id}"
        assert instance_id_of(inst.provider_id) == inst.instance_id
        assert inst.launched_at > 0
    assert sorted(i.instance_id for i in found) == live_instances(aws)


def test_terminate_removes_the_named_instance_and_lowers_desired_capacity(aws: str) -> None:
    make_group(aws)
    cloud = provider(aws)
    spec = elastic_spec()
    cloud.set_target("gpu", spec, 3)
    victim = cloud.instances("gpu", spec)[1].instance_id

    cloud.terminate("gpu", spec, victim)
    cloud.terminate("gpu", spec, victim)  # repeated after an unclear failure: a no-op

    assert desired(aws) == 2
    assert victim not in live_instances(aws)
    assert victim not in {i.instance_id for i in cloud.instances("gpu", spec)}
    assert len(live_instances(aws)) == 2


def test_a_lower_target_never_terminates_a_random_instance(aws: str) -> None:
    make_group(aws)
    cloud = provider(aws)
    spec = elastic_spec()
    cloud.set_target("gpu", spec, 3)

    cloud.set_target("gpu", spec, 1)

    assert desired(aws) == 3 and len(live_instances(aws)) == 3


def test_missing_group_is_a_permanent_error(aws: str) -> None:
    with pytest.raises(ProviderError, match="does not exist") as raised:
        provider(aws).set_target("gpu", elastic_spec(), 1)
    assert raised.value.retryable is False


# --- spot: EC2 Fleet ------------------------------------------------------------------


def test_spot_fleet_launches_tagged_instances_and_terminates_the_named_one(aws: str) -> None:
    make_template(aws)
    cloud = provider(aws, cluster="prod")
    spec = spot_spec(max_nodes=5)

    cloud.set_target("spot", spec, 3)
    cloud.set_target("spot", spec, 3)
    cloud.set_target("spot", spec, 9)

    found = cloud.instances("spot", spec)
    assert len(found) == 5 and cloud.target("spot", spec) == 5
    described = client(aws, "ec2").describe_instances(InstanceIds=[i.instance_id for i in found])
    for reservation in described["Reservations"]:
        for inst in reservation["Instances"]:
            tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
            assert tags["hybridgpu.io/pool"] == "spot" and tags["hybridgpu.io/cluster"] == "prod"
            assert inst["InstanceType"] in ("p3.2xlarge", "g5.xlarge")
    fleets = client(aws, "ec2").describe_fleets()["Fleets"]
    assert {f["Type"] for f in fleets} == {"instant"}
    assert all(f["SpotOptions"]["AllocationStrategy"] == "price-capacity-optimized" for f in fleets)

    victim = found[2].instance_id
    cloud.terminate("spot", spec, victim)
    cloud.terminate("spot", spec, victim)

    assert cloud.target("spot", spec) == 4
    # EC2 still lists it (terminated, for about an hour), never as capacity.
    assert victim not in {
        i.instance_id for i in cloud.instances("spot", spec) if i.state not in NOT_LIVE
    }
    assert {i.state for i in cloud.instances("spot", spec) if i.instance_id == victim} <= NOT_LIVE


def test_a_fleet_pool_scaled_up_again_after_scaling_to_zero_launches_again(
    faulty_aws: FaultProxy,
) -> None:
    # Issue 11 bug 3: the ClientToken was derived from (cluster, pool, target, live
    # instances), so 0->2, back to 0, then 0->2 sent the same token and EC2 answered with
    # the first launch's response: nothing launched.
    make_template(faulty_aws.endpoint_url)
    cloud = provider(faulty_aws.endpoint_url)
    spec = spot_spec(max_nodes=5)

    cloud.set_target("spot", spec, 2)
    first = [i.instance_id for i in cloud.instances("spot", spec)]
    for instance_id in first:
        cloud.terminate("spot", spec, instance_id)
    assert cloud.target("spot", spec) == 0
    cloud.set_target("spot", spec, 2)

    again = [i.instance_id for i in cloud.instances("spot", spec) if i.state not in NOT_LIVE]
    assert len(again) == 2 and not set(again) & set(first)
    assert len(faulty_aws.fleet_tokens) == 2


def test_spot_price_is_read_from_aws_and_cached(faulty_aws: FaultProxy) -> None:
    make_template(faulty_aws.upstream)
    clock = Clock()
    cloud = provider(faulty_aws.endpoint_url, clock=clock, spot_price_ttl_seconds=300)
    spec = spot_spec()

    first = cloud.spot_price_per_node_hour("spot", spec)
    second = cloud.spot_price_per_node_hour("spot", spec)
    assert faulty_aws.reached_moto["DescribeSpotPriceHistory"] == 1
    clock.now += 301
    third = cloud.spot_price_per_node_hour("spot", spec)

    assert first == second == third == pytest.approx(0.00001)  # moto's fixed spot price
    assert faulty_aws.reached_moto["DescribeSpotPriceHistory"] == 2


def test_spot_price_outage_keeps_the_last_price(faulty_aws: FaultProxy) -> None:
    make_template(faulty_aws.upstream)
    clock = Clock()
    cloud = provider(faulty_aws.endpoint_url, clock=clock, max_attempts=2)
    spec = spot_spec()
    price = cloud.spot_price_per_node_hour("spot", spec)
    clock.now += 1000
    faulty_aws.fail("DescribeSpotPriceHistory", UNAVAILABLE, times=5)

    assert cloud.spot_price_per_node_hour("spot", spec) == price
    assert faulty_aws.injected["DescribeSpotPriceHistory"] == 2  # bounded botocore retries


# --- SQS interruption notices ---------------------------------------------------------


def event(detail_type: str, detail: dict[str, Any], source: str = "aws.ec2") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7e5f7a4b-0000-0000-0000-000000000000",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": "2027-01-15T10:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": detail,
        }
    )


T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
EVENT_TIME = T0 + 2 * 3600


def queue_depth(endpoint: str, url: str) -> int:
    attrs = client(endpoint, "sqs").get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_interruption_messages_become_notices_deleted_only_when_acknowledged(aws: str) -> None:
    make_group(aws)
    sqs = client(aws, "sqs")
    url = sqs.create_queue(QueueName="gpu-interruptions")["QueueUrl"]
    spec = elastic_spec(queue_url=url)
    cloud = provider(aws)
    cloud.set_target("gpu", spec, 3)
    a, b, c = sorted(i.instance_id for i in cloud.instances("gpu", spec))
    bodies = [
        event(
            "EC2 Spot Instance Interruption Warning",
            {"instance-id": a, "instance-action": "terminate"},
        ),
        event("EC2 Instance Rebalance Recommendation", {"instance-id": b}),
        event("EC2 Instance State-change Notification", {"instance-id": c, "state": "running"}),
        event(
            "AWS Health Event",
            {
                "service": "EC2",
                "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": "Fri, 15 Jan 2027 12:00:00 GMT",
                "affectedEntities": [{"entityValue": b}, {"entityValue": c}],
            },
            source="aws.health",
        ),
        "not json at all",
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)

    notices = cloud.interruptions()
    again = cloud.interruptions()

    assert sorted(notices, key=lambda n: n.receipt) == sorted(again, key=lambda n: n.receipt)
    by_kind = sorted((n.kind, n.instance_id, n.deadline) for n in notices)
    assert by_kind == sorted(
        [
            ("spot_interruption", a, EVENT_TIME + 120),
            ("rebalance", b, EVENT_TIME + 120),
            ("scheduled_change", b, EVENT_TIME + 7200),
            ("scheduled_change", c, EVENT_TIME + 7200),
        ]
    )
    assert all(n.provider_id == f"aws:///us-east-1a/{n.instance_id}" for n in notices)
    assert queue_depth(aws, url) == 3  # the running state change and the junk were dropped

    health = [n for n in notices if n.kind == "scheduled_change"]
    cloud.acknowledge(health[0])
    assert queue_depth(aws, url) == 3  # one entity of the health event is still unhandled
    for notice in notices:
        cloud.acknowledge(notice)
    assert queue_depth(aws, url) == 0
    assert cloud.interruptions() == []


def real_instance(endpoint: str) -> tuple[str, str]:
    """A running moto instance: its ID and zone."""
    made = client(endpoint, "ec2").run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)
    inst = made["Instances"][0]
    return inst["InstanceId"], inst["Placement"]["AvailabilityZone"]


def test_a_restarted_operator_sees_unacknowledged_notices_again(aws: str) -> None:
    sqs = client(aws, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    instance_id, zone = real_instance(aws)
    body = event("EC2 Spot Instance Interruption Warning", {"instance-id": instance_id})
    sqs.send_message(QueueUrl=url, MessageBody=body)

    first = provider(aws, interruption_queue_urls=(url,), visibility_timeout_seconds=1)
    assert [n.instance_id for n in first.interruptions()] == [instance_id]
    assert first.interruptions()[0].provider_id == f"aws:///{zone}/{instance_id}"

    time.sleep(1.5)
    restarted = provider(aws, interruption_queue_urls=(url,))
    assert [n.instance_id for n in restarted.interruptions()] == [instance_id]


def test_a_notice_whose_zone_cannot_be_read_names_no_node_and_comes_back(
    faulty_aws: FaultProxy,
) -> None:
    # Issue 11 bug 1: the notice got provider ID "" and matched every owned node.
    sqs = client(faulty_aws.upstream, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    instance_id, zone = real_instance(faulty_aws.upstream)
    body = event("EC2 Spot Instance Interruption Warning", {"instance-id": instance_id})
    sqs.send_message(QueueUrl=url, MessageBody=body)
    # Long enough that one interruptions() call, however slow the machine, does not read
    # the message a second time within itself.
    visibility = 5
    cloud = provider(
        faulty_aws.endpoint_url,
        interruption_queue_urls=(url,),
        visibility_timeout_seconds=visibility,
        max_attempts=1,
    )
    faulty_aws.fail("DescribeInstances", UNAVAILABLE, times=1)

    assert cloud.interruptions() == []  # not placed: not handed out with an empty ID
    # The message comes back once its visibility runs out, and the zone is read this time.
    notices = wait_until(
        cloud.interruptions, timeout_seconds=visibility + 30, what="the notice read again"
    )
    (notice,) = notices
    assert notice.provider_id == f"aws:///{zone}/{instance_id}"


def test_a_notice_for_an_instance_that_is_gone_is_dropped(aws: str) -> None:
    sqs = client(aws, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    body = event("EC2 Spot Instance Interruption Warning", {"instance-id": "i-0abc"})
    sqs.send_message(QueueUrl=url, MessageBody=body)

    cloud = provider(aws, interruption_queue_urls=(url,))
    assert cloud.interruptions() == []
    assert queue_depth(aws, url) == 0


def test_a_failed_delete_is_retried_when_the_message_comes_back(faulty_aws: FaultProxy) -> None:
    sqs = client(faulty_aws.upstream, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    instance_id, _ = real_instance(faulty_aws.upstream)
    sqs.send_message(
        QueueUrl=url,
        MessageBody=event("EC2 Spot Instance Interruption Warning", {"instance-id": instance_id}),
    )
    cloud = provider(
        faulty_aws.endpoint_url,
        interruption_queue_urls=(url,),
        visibility_timeout_seconds=1,
        max_attempts=2,
    )
    (notice,) = cloud.interruptions()
    faulty_aws.fail("DeleteMessage", UNAVAILABLE, times=2)

    with pytest.raises(ProviderError) as raised:
        cloud.acknowledge(notice)
    assert raised.value.retryable is True
    assert queue_depth(faulty_aws.upstream, url) == 1

    time.sleep(1.5)
    assert cloud.interruptions() == []  # handled already: not handed out again
    assert queue_depth(faulty_aws.upstream, url) == 0


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ('{"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}}', []),
        ('{"detail-type": "Something Else", "time": "2027-01-15T10:00:00Z"}', []),
        ("[1, 2]", []),
    ],
)
def test_events_that_announce_nothing_parse_to_nothing(body: str, want: list[object]) -> None:
    assert parse_event(body) == want


# --- faults: throttling, 5xx, dropped connections -------------------------------------


@pytest.mark.parametrize("retry_mode", ["standard", "adaptive"])
def test_throttled_scale_up_is_retried_with_backoff(
    faulty_aws: FaultProxy, retry_mode: str
) -> None:
    make_group(faulty_aws.upstream)
    naps: list[float] = []
    cloud = provider(faulty_aws.endpoint_url, sleep=naps.append, retry_mode=retry_mode)
    faulty_aws.fail("SetDesiredCapacity", THROTTLE, times=2)

    cloud.set_target("gpu", elastic_spec(), 3)

    assert desired(faulty_aws.upstream) == 3
    assert faulty_aws.injected["SetDesiredCapacity"] == 2 and len(naps) == 2
    assert all(0 <= nap <= 5 for nap in naps)


def test_persistent_throttling_gives_up_after_bounded_attempts(faulty_aws: FaultProxy) -> None:
    make_group(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url, max_attempts=3)
    faulty_aws.fail("SetDesiredCapacity", THROTTLE, times=100)

    with pytest.raises(ProviderError, match="Throttling") as raised:
        cloud.set_target("gpu", elastic_spec(), 3)

    assert raised.value.retryable is True
    assert faulty_aws.injected["SetDesiredCapacity"] == 3
    assert desired(faulty_aws.upstream) == 0


def test_reads_ride_out_503s(faulty_aws: FaultProxy) -> None:
    make_group(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    faulty_aws.fail("DescribeAutoScalingGroups", UNAVAILABLE, times=2)

    assert cloud.target("gpu", elastic_spec()) == 0


def test_a_fleet_launch_whose_response_was_lost_is_not_repeated(faulty_aws: FaultProxy) -> None:
    make_template(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    faulty_aws.fail("CreateFleet", DROP_AFTER, times=1)

    cloud.set_target("spot", spot_spec(), 3)

    assert faulty_aws.reached_moto["CreateFleet"] == 1
    assert len(live_instances(faulty_aws.upstream)) == 3


def test_a_fleet_launch_that_never_arrived_is_sent_again(faulty_aws: FaultProxy) -> None:
    make_template(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    faulty_aws.fail("CreateFleet", DROP_BEFORE, times=1)
    faulty_aws.fail("CreateFleet", THROTTLE, times=1)

    cloud.set_target("spot", spot_spec(), 2)

    assert faulty_aws.reached_moto["CreateFleet"] == 1
    assert len(live_instances(faulty_aws.upstream)) == 2


def test_a_scale_down_whose_response_was_lost_decrements_once(faulty_aws: FaultProxy) -> None:
    make_group(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    spec = elastic_spec()
    cloud.set_target("gpu", spec, 3)
    victim = cloud.instances("gpu", spec)[0].instance_id
    faulty_aws.fail("TerminateInstanceInAutoScalingGroup", DROP_AFTER, times=1)

    cloud.terminate("gpu", spec, victim)

    assert faulty_aws.reached_moto["TerminateInstanceInAutoScalingGroup"] == 1
    assert desired(faulty_aws.upstream) == 2
    assert len(live_instances(faulty_aws.upstream)) == 2


def test_a_scale_up_whose_response_was_lost_lands_exactly(faulty_aws: FaultProxy) -> None:
    make_group(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    faulty_aws.fail("SetDesiredCapacity", DROP_AFTER, times=1)

    cloud.set_target("gpu", elastic_spec(), 2)

    assert faulty_aws.reached_moto["SetDesiredCapacity"] == 1
    assert desired(faulty_aws.upstream) == 2 and len(live_instances(faulty_aws.upstream)) == 2


def test_a_fleet_termination_whose_response_was_lost_is_not_repeated(
    faulty_aws: FaultProxy,
) -> None:
    make_template(faulty_aws.upstream)
    cloud = provider(faulty_aws.endpoint_url)
    spec = spot_spec()
    cloud.set_target("spot", spec, 2)
    victim, survivor = (i.instance_id for i in cloud.instances("spot", spec))
    faulty_aws.fail("TerminateInstances", DROP_AFTER, times=1)

    cloud.terminate("spot", spec, victim)

    assert faulty_aws.reached_moto["TerminateInstances"] == 1
    assert live_instances(faulty_aws.upstream) == [survivor]


def test_terminating_another_pools_instance_is_refused(aws: str) -> None:
    make_group(aws)
    make_template(aws)
    cloud = provider(aws)
    cloud.set_target("gpu", elastic_spec(), 1)
    elastic_instance = cloud.instances("gpu", elastic_spec())[0].instance_id

    with pytest.raises(ProviderError, match="not tagged") as raised:
        cloud.terminate("spot", spot_spec(), elastic_instance)

    assert raised.value.retryable is False
    assert elastic_instance in live_instances(aws)


# --- the fake agrees with the real adapter --------------------------------------------


def scenario(cloud: CapacityProvider, spec: GPUPoolSpec) -> dict[str, object]:
    """Scale up past maxNodes, lower the target, terminate one node twice, scale up again."""
    cloud.set_target("gpu", spec, 6)
    cloud.set_target("gpu", spec, 1)
    before = sorted(i.instance_id for i in cloud.instances("gpu", spec))
    victim = before[1]
    cloud.terminate("gpu", spec, victim)
    cloud.terminate("gpu", spec, victim)
    after_terminate = cloud.target("gpu", spec)
    cloud.set_target("gpu", spec, cloud.target("gpu", spec) + 1)
    after = cloud.instances("gpu", spec)
    return {
        "nodes_at_max": len(before),
        "target_after_terminate": after_terminate,
        "target": cloud.target("gpu", spec),
        "victim_gone": victim not in {i.instance_id for i in after},
        "survivors_kept": set(before) - {victim} <= {i.instance_id for i in after},
        "nodes": len(after),
        "states": sorted({i.state for i in after}),
    }


def test_fake_and_aws_providers_agree(aws: str) -> None:
    make_group(aws)
    spec = elastic_spec(max_nodes=4)
    real: Callable[[], CapacityProvider] = lambda: provider(aws)  # noqa: E731

    got_aws = scenario(real(), spec)
    got_fake = scenario(FakeProvider(Clock()), spec)

    assert got_aws == got_fake
    assert got_fake["nodes_at_max"] == 4 and got_fake["target"] == 4


def test_the_cluster_name_setting_tags_launches_and_separates_clusters(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clusters in one account, each operator with its --cluster-name: each launches
    instances tagged with its own name and never counts the other's (the tag was always
    "default", so two clusters' pools of one name were one pool)."""
    from hybridgpu.handlers.capacity import Providers

    make_template(aws)
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws)  # how the operator is pointed at moto
    spec = spot_spec(max_nodes=5)
    europe = Providers("hybridgpu.cloud.fake:FakeProvider", cluster_name="prod-eu")
    america = Providers("hybridgpu.cloud.fake:FakeProvider", cluster_name="prod-us")
    for providers in (europe, america):
        providers.set_pools({"spot": spec})

    europe.scale_up("spot", 2)

    launched = europe.for_spec(spec).instances("spot", spec)
    described = client(aws, "ec2").describe_instances(InstanceIds=[i.instance_id for i in launched])
    tags = [
        {t["Key"]: t["Value"] for t in inst["Tags"]}["hybridgpu.io/cluster"]
        for reservation in described["Reservations"]
        for inst in reservation["Instances"]
    ]
    assert tags == ["prod-eu", "prod-eu"]
    assert america.for_spec(spec).instances("spot", spec) == []
    america.scale_up("spot", 1)
    assert len(america.for_spec(spec).instances("spot", spec)) == 1
    assert len(europe.for_spec(spec).instances("spot", spec)) == 2
