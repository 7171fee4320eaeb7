"""The AWS provider (Auto Scaling group pools) under the shared CapacityProvider contract
(tests/support/provider_contract.py), against a real moto_server: the same checks the fake,
kwok, Karpenter and Cluster API providers pass (issue 13)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from hybridgpu.cloud.aws import AWSProvider
from hybridgpu.cloud.base import CapacityProvider, Instance, InterruptionNotice
from hybridgpu.models.pool import GPUPoolSpec
from support.moto import REGION, aws, moto_server
from support.provider_contract import CONTRACT, ProviderHarness

__all__ = ["aws", "moto_server"]  # fixtures used by name

pytestmark = pytest.mark.adapters

AMI = "ami-12c6146b"  # one of moto's built-in images
SPOT_WARNING_LEAD_SECONDS = 120  # EC2's spot interruption warning comes 2 minutes ahead


class AWSHarness:
    """One Auto Scaling group (and interruption queue) per pool, on a reset moto."""

    boots_at_once = True
    """moto puts an Auto Scaling group's instances InService at once."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.provider: CapacityProvider = AWSProvider(
            REGION, endpoint_url=endpoint, sleep=lambda seconds: None
        )
        self.queues: dict[str, str] = {}

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint)

    def new_pool(self, max_nodes: int) -> tuple[str, GPUPoolSpec]:
        pool = f"aws-{uuid.uuid4().hex[:6]}"
        self.client("ec2").create_launch_template(
            LaunchTemplateName=f"{pool}-lt",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "p4d.24xlarge"},
        )
        self.client("autoscaling").create_auto_scaling_group(
            AutoScalingGroupName=pool,
            LaunchTemplate={"LaunchTemplateName": f"{pool}-lt", "Version": "$Latest"},
            MinSize=0,
            MaxSize=20,
            DesiredCapacity=0,
            AvailabilityZones=["us-east-1a"],
        )
        url = self.client("sqs").create_queue(QueueName=f"{pool}-interruptions")["QueueUrl"]
        self.queues[pool] = url
        spec = GPUPoolSpec.model_validate(
            {
                "tier": "elastic",
                "gpu": {"model": "A100", "perNode": 8},
                "maxNodes": max_nodes,
                "provider": {
                    "type": "aws",
                    "aws": {
                        "region": REGION,
                        "autoScalingGroupName": pool,
                        "interruptionQueueURL": url,
                    },
                },
                "pricing": {"perNodeHour": 32.77},
            }
        )
        return pool, spec

    def settle(self, pool: str, spec: GPUPoolSpec) -> None:
        pass  # the group's desired capacity is the target from the request on

    def wait_booted(self, pool: str, spec: GPUPoolSpec) -> None:
        pass  # InService at once (boots_at_once)

    def announce_interruption(self, instance: Instance, deadline: float) -> InterruptionNotice:
        warned_at = datetime.fromtimestamp(deadline - SPOT_WARNING_LEAD_SECONDS, tz=UTC)
        body = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": warned_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [],
            "detail": {"instance-id": instance.instance_id, "instance-action": "terminate"},
        }
        queue = next(iter(self.queues.values()))
        self.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))
        deadline_at = time.monotonic() + 10
        while time.monotonic() < deadline_at:
            notices = [
                n for n in self.provider.interruptions() if n.instance_id == instance.instance_id
            ]
            if notices:
                assert len(notices) == 1, notices
                return notices[0]
        raise AssertionError(f"no notice for {instance.instance_id} within 10 s")


@pytest.mark.parametrize("check", CONTRACT, ids=lambda check: check.__name__)
def test_the_aws_provider_keeps_the_provider_contract(
    check: Callable[[ProviderHarness], None], aws: str
) -> None:
    check(AWSHarness(aws))
