"""The AWS adapter against a moto whose lists are late (tests/support/faultproxy.py,
``lag_seconds``), as EC2's are: a launch must count toward its pool before DescribeInstances
shows it, or the next tick launches it again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hybridgpu.cloud.aws import AWSProvider
from hybridgpu.models.pool import GPUPoolSpec
from support.faultproxy import DROP_AFTER, FaultProxy
from support.moto import REGION, aws, moto_server
from support.moto_nodes import aws_client, make_launch_template

__all__ = ["aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.adapters

TEMPLATE = "gpu-spot-lag"


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
