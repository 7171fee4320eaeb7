"""Nodes for moto's EC2 instances: what the kubelet and the cloud node controller do on AWS.

A background thread reads moto directly (never through the fault proxy: a booting machine
registers whatever the API says to the operator) and, for each pool it is given:

- an instance that is pending or running in the pool (a member of its Auto Scaling group, or
  tagged ``hybridgpu.io/pool=<pool>`` for EC2 Fleet pools) gets, ``boot_delay_seconds`` after
  it was first seen, a kwok Node shaped like the pool (tests/support uses the kwok provider's
  ``kwok_node``) named ``<pool>-<instance id>`` with ``providerID: aws:///<zone>/<id>``;
- a Node whose instance is terminated or gone is deleted, as the cloud node lifecycle
  controller does.

It records every instance it ever saw per pool (:attr:`MotoNodes.launched`), so a test can
compare launches with demand.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from kubernetes.client.rest import ApiException

from hybridgpu.cloud.aws import POOL_TAG, provider_id
from hybridgpu.cloud.kwok import kwok_node
from hybridgpu.models.pool import GPUPoolSpec
from support.faultproxy import FaultProxy
from support.moto import MotoServer

REGION = "us-east-1"


@dataclass
class MotoNodes:
    core_api: Any
    endpoint_url: str
    """moto itself, not the fault proxy."""
    pools: dict[str, GPUPoolSpec]
    boot_delay_seconds: float = 1.0
    launched: dict[str, set[str]] = field(default_factory=dict)
    """Pool -> every instance ID seen in it."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Instance ID -> the Node made for it."""
    errors: list[str] = field(default_factory=list)
    _first_seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=self.endpoint_url)
        self._asg = boto3.client("autoscaling", region_name=REGION, endpoint_url=self.endpoint_url)

    def start(self) -> MotoNodes:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def node_of(self, instance_id: str) -> str:
        return f"{self.pool_of(instance_id)}-{instance_id}"

    def pool_of(self, instance_id: str) -> str:
        for pool, ids in self.launched.items():
            if instance_id in ids:
                return pool
        raise KeyError(instance_id)

    def live(self, pool: str) -> dict[str, str]:
        """Pending or running instances of ``pool`` in moto: instance ID -> zone."""
        spec = self.pools[pool]
        aws = spec.provider.aws
        assert aws is not None
        if aws.auto_scaling_group_name:
            groups = self._asg.describe_auto_scaling_groups(
                AutoScalingGroupNames=[aws.auto_scaling_group_name]
            )["AutoScalingGroups"]
            members = groups[0]["Instances"] if groups else []
            return {
                m["InstanceId"]: m["AvailabilityZone"]
                for m in members
                if m["LifecycleState"] in ("Pending", "InService")
            }
        reservations = self._ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{POOL_TAG}", "Values": [pool]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        return {
            i["InstanceId"]: i["Placement"]["AvailabilityZone"]
            for r in reservations
            for i in r["Instances"]
        }

    def sync(self) -> None:
        """One pass: Nodes for booted instances, none for instances that are gone."""
        now = time.monotonic()
        alive: set[str] = set()
        for pool, spec in self.pools.items():
            for instance_id, zone in self.live(pool).items():
                alive.add(instance_id)
                self.launched.setdefault(pool, set()).add(instance_id)
                born = self._first_seen.setdefault(instance_id, now)
                if instance_id in self.nodes or now - born < self.boot_delay_seconds:
                    continue
                name = f"{pool}-{instance_id}"
                body = kwok_node(name, pool, spec)
                body["spec"]["providerID"] = provider_id(zone, instance_id)
                try:
                    self.core_api.create_node(body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                self.nodes[instance_id] = name
        for instance_id, name in list(self.nodes.items()):
            if instance_id in alive:
                continue
            try:
                self.core_api.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            del self.nodes[instance_id]

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                self.sync()
            except Exception as err:  # keep playing the cloud; the test reads the errors
                self.errors.append(repr(err))


AMI = "ami-12c6146b"  # one of moto's built-in images


def aws_client(endpoint_url: str, service: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint_url)


def make_auto_scaling_group(endpoint_url: str, name: str, max_size: int = 10) -> None:
    """An empty Auto Scaling group ``name`` (launch template ``<name>-lt``) in us-east-1a."""
    aws_client(endpoint_url, "ec2").create_launch_template(
        LaunchTemplateName=f"{name}-lt",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": "p4d.24xlarge"},
    )
    aws_client(endpoint_url, "autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": f"{name}-lt", "Version": "$Latest"},
        MinSize=0,
        MaxSize=max_size,
        DesiredCapacity=0,
        AvailabilityZones=["us-east-1a"],
    )


def make_launch_template(endpoint_url: str, name: str) -> None:
    aws_client(endpoint_url, "ec2").create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": AMI}
    )


def make_queue(endpoint_url: str, name: str) -> str:
    return str(aws_client(endpoint_url, "sqs").create_queue(QueueName=name)["QueueUrl"])


def desired_capacity(endpoint_url: str, group: str) -> int:
    groups = aws_client(endpoint_url, "autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[group]
    )["AutoScalingGroups"]
    return int(groups[0]["DesiredCapacity"])


def instance_state(endpoint_url: str, instance_id: str) -> str:
    reservations = aws_client(endpoint_url, "ec2").describe_instances(InstanceIds=[instance_id])[
        "Reservations"
    ]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def queue_depth(endpoint_url: str, queue_url: str) -> int:
    """Messages in the queue, visible or held by a reader."""
    attributes = aws_client(endpoint_url, "sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def spot_warning(instance_id: str, at: float | None = None) -> str:
    """An EventBridge "EC2 Spot Instance Interruption Warning", as SQS delivers it."""
    moment = time.gmtime(at if at is not None else time.time())
    return json.dumps(
        {
            "version": "0",
            "id": f"warning-{instance_id}",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", moment),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def operator_env(endpoint_url: str) -> dict[str, str]:
    """The environment that points an operator subprocess's boto3 at ``endpoint_url``."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def asg_provider(group: str) -> dict[str, Any]:
    """A GPUPool ``provider`` on the Auto Scaling group ``group``."""
    return {"type": "aws", "aws": {"region": REGION, "autoScalingGroupName": group}}


def fleet_provider(template: str, queue_url: str | None = None) -> dict[str, Any]:
    """A GPUPool ``provider`` launching through EC2 Fleet from ``template``."""
    settings: dict[str, Any] = {
        "region": REGION,
        "launchTemplateName": template,
        "instanceTypes": ["p3.8xlarge", "g5.12xlarge"],
    }
    if queue_url:
        settings["interruptionQueueURL"] = queue_url
    return {"type": "aws", "aws": settings}


LAG_SECONDS = 4.0
"""How late the e2e tests' proxy lists a new instance."""


class CloudNodes:
    """Starts MotoNodes for an e2e test's pools (the e2e ``Cluster`` builders); the
    ``cloud_nodes`` fixture stops them."""

    def __init__(self, cluster: Any, endpoint_url: str) -> None:
        self.cluster = cluster
        self.endpoint_url = endpoint_url
        self.started: list[MotoNodes] = []

    def start(self, *pools: str, boot_delay_seconds: float = 1.0) -> MotoNodes:
        specs = {p: GPUPoolSpec.model_validate(self.cluster.pool_object(p)["spec"]) for p in pools}
        nodes = MotoNodes(self.cluster.kube.core, self.endpoint_url, specs, boot_delay_seconds)
        self.started.append(nodes.start())
        return nodes

    def asg_pool_with_operator(
        self, proxy: FaultProxy, operators: Any, *, idle_for: str, max_nodes: int = 3
    ) -> AsgPool:
        """An elastic pool of 4-GPU nodes behind a new Auto Scaling group in moto, the kwok
        Nodes of its instances, and an operator that reaches AWS through ``proxy``, ticking."""
        group = self.cluster.name("asg")
        make_auto_scaling_group(proxy.upstream, group)
        policy = self.cluster.policy()
        pool = self.cluster.pool(
            "elastic",
            tier="elastic",
            policy=policy,
            per_node=4,
            max_nodes=max_nodes,
            idle_for=idle_for,
            provider=asg_provider(group),
        )
        nodes = self.start(pool)
        operators.start(extra_env=operator_env(proxy.endpoint_url))
        self.cluster.wait_ticking(policy, timeout_seconds=180)
        return AsgPool(policy=policy, pool=pool, group=group, nodes=nodes)


@dataclass(frozen=True)
class AsgPool:
    """What :meth:`CloudNodes.asg_pool_with_operator` made."""

    policy: str
    pool: str
    group: str
    nodes: MotoNodes


@pytest.fixture
def lagging_aws(aws: str) -> Iterator[FaultProxy]:
    """moto (reset) behind a FaultProxy whose lists show a new instance LAG_SECONDS late."""
    proxy = FaultProxy(upstream=aws, lag_seconds=LAG_SECONDS)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def cloud_nodes(cluster: Any, moto_server: MotoServer) -> Iterator[CloudNodes]:
    """Nodes for the test's moto instances; every MotoNodes started is stopped."""
    made = CloudNodes(cluster, moto_server.endpoint_url)
    try:
        yield made
    finally:
        for nodes in made.started:
            nodes.stop()
