"""The AWS capacity provider (boto3): Auto Scaling groups, EC2 Fleet, spot prices, SQS notices.

- A pool with ``autoScalingGroupName`` scales its ASG: ``set_desired_capacity`` up (capped at
  maxNodes and the group's MaxSize) and ``terminate_instance_in_auto_scaling_group`` with
  ``ShouldDecrementDesiredCapacity=True`` of the one drained instance down. Elastic pools use
  a plain ASG; a spot pool may use an ASG with a spot MixedInstancesPolicy the same way.
- A pool with ``launchTemplateName`` + ``instanceTypes`` launches through EC2 Fleet of type
  ``instant`` (spot: price-capacity-optimized over all the instance types), tags each
  instance with the pool, and terminates the named instance itself. ``instant`` rather
  than ``maintain``: a maintain fleet would replace an interrupted spot node on its own,
  racing the operator that drains it and decides where the work goes (docs/aws.md).
  Instances a launch returned count toward the pool until DescribeInstances lists them:
  EC2's lists are eventually consistent.
- Interruption, rebalance, state-change and AWS Health scheduled-change events arrive from
  EventBridge in SQS; each becomes an :class:`InterruptionNotice` and its message is deleted
  only when every notice it produced was acknowledged.
- Credentials come from the standard boto3 chain (IRSA, environment, instance profile).
  Reads retry inside botocore (bounded, backoff with jitter). Changes are sent without
  botocore retries: before each attempt the provider reads whether the change already
  happened, so a request that timed out after AWS acted is never repeated (no doubled
  scale-up, no second instance terminated).
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from hybridgpu.cloud.base import (
    CapacityUnavailable,
    Instance,
    InterruptionNotice,
    ProviderError,
)
from hybridgpu.models.pool import AWSProviderSpec, GPUPoolSpec, Tier
from hybridgpu.models.timestamps import parse_rfc3339

log = logging.getLogger(__name__)

POOL_TAG = "hybridgpu.io/pool"
CLUSTER_TAG = "hybridgpu.io/cluster"
SPOT_NOTICE_SECONDS = 120.0
"""EC2 gives a spot instance two minutes between the warning and the interruption."""
NOTICE_RETRY_SECONDS = 5
"""A notice that cannot be placed yet (no zone: EC2 failed, or does not list the instance
yet) is read again after this long."""
LIST_LAG_GRACE_SECONDS = 300.0
"""How long an instance EC2 Fleet launched counts toward its pool while DescribeInstances
does not list it yet (EC2's lists are eventually consistent)."""

# Error codes that say "try again later" (throttling, capacity, AWS-side failures).
_RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "SlowDown",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "InsufficientInstanceCapacity",
        "ScalingActivityInProgress",
        "ResourceContention",
        "RequestTimeout",
    }
)
# Error codes that say "no capacity for this request now" (the pool is not launchable).
_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "InsufficientHostCapacity",
    }
)
_LIVE_EC2_STATES = ("pending", "running")
_ASG_STATE = {
    "Pending": "pending",
    "InService": "running",
    "Standby": "running",
    "Terminated": "terminated",
}
"""Lifecycle states of a group's instances (their prefix before ":"); any other is on its way
out (Terminating, Terminating:Wait, Detaching, ...): "terminating"."""
_GONE_EC2_STATES = ("shutting-down", "terminated")
"""EC2 bills an instance until it enters shutting-down; it lists it for about an hour after."""

_SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
_REBALANCE = "EC2 Instance Rebalance Recommendation"
_STATE_CHANGE = "EC2 Instance State-change Notification"
_HEALTH = "AWS Health Event"
_GOING_AWAY_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


def provider_id(zone: str, instance_id: str) -> str:
    """Node.spec.providerID of an EC2 instance, as the AWS cloud provider sets it."""
    return f"aws:///{zone}/{instance_id}"


def instance_id_of(node_provider_id: str) -> str:
    """The instance ID at the end of ``aws:///<zone>/<instance-id>``."""
    return node_provider_id.rstrip("/").rsplit("/", 1)[-1]


@dataclass(slots=True)
class _HeldMessage:
    queue_url: str
    receipt_handle: str
    notices: dict[str, InterruptionNotice] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _CachedPrice:
    price: float | None
    read_at: float


class AWSProvider:
    """CapacityProvider for pools with ``provider.type: aws``.

    ``region`` is used for queues whose URL names no region; each pool's calls go to its own
    ``provider.aws.region``. ``endpoint_url`` points every client at one endpoint (tests run
    moto_server). ``clock`` and ``sleep`` are injected (seconds).
    """

    def __init__(
        self,
        region: str = "us-east-1",
        *,
        endpoint_url: str | None = None,
        session: boto3.session.Session | None = None,
        cluster: str = "default",
        interruption_queue_urls: tuple[str, ...] = (),
        retry_mode: str = "standard",
        max_attempts: int = 4,
        backoff_base_seconds: float = 0.25,
        backoff_cap_seconds: float = 5.0,
        connect_timeout_seconds: float = 5.0,
        read_timeout_seconds: float = 20.0,
        spot_price_ttl_seconds: float = 300.0,
        visibility_timeout_seconds: int = 300,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if retry_mode not in ("standard", "adaptive"):
            raise ValueError("retry_mode must be standard or adaptive")
        if not 1 <= max_attempts <= 10:
            raise ValueError("max_attempts must be between 1 and 10")
        self.region = region
        self.endpoint_url = endpoint_url
        self.cluster = cluster
        self.max_attempts = max_attempts
        self.backoff_base_seconds = backoff_base_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.spot_price_ttl_seconds = spot_price_ttl_seconds
        self.visibility_timeout_seconds = visibility_timeout_seconds
        self._session = session or boto3.session.Session()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        timeouts = {
            "connect_timeout": connect_timeout_seconds,
            "read_timeout": read_timeout_seconds,
        }
        # Reads retry inside botocore; changes are retried by _change, which checks first.
        self._read_config = Config(
            retries={"mode": retry_mode, "total_max_attempts": max_attempts}, **timeouts
        )
        self._write_config = Config(
            retries={"mode": "standard", "total_max_attempts": 1}, **timeouts
        )
        self._clients: dict[tuple[str, str, bool], Any] = {}
        self._queues: list[str] = list(interruption_queue_urls)
        self._held: dict[str, _HeldMessage] = {}
        self._prices: dict[tuple[str, tuple[str, ...]], _CachedPrice] = {}
        self._fleet_intents: dict[str, tuple[tuple[int, tuple[str, ...]], str]] = {}
        """Open fleet launch per pool: (target, live instances) and its ClientToken."""
        self._launched: dict[str, dict[str, float]] = {}
        """Fleet launches not listed yet, by pool, then instance ID: when CreateFleet
        returned it. A new instance shows up in DescribeInstances late; counting only the
        list would launch it again on the next tick."""

    # --- CapacityProvider -------------------------------------------------------------

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        """Instances of the pool that exist or are launching (terminating ones included)."""
        aws = self._aws(pool, spec)
        with _translated(f"list instances of pool {pool}"):
            if aws.auto_scaling_group_name:
                group = self._group(aws)
                members = [
                    (m["InstanceId"], m["AvailabilityZone"], m["LifecycleState"])
                    for m in group.get("Instances", [])
                ]
                launched = self._launch_times(aws.region, [m[0] for m in members])
                return [
                    Instance(
                        instance_id=iid,
                        provider_id=provider_id(zone, iid),
                        state=_ASG_STATE.get(state.split(":")[0], "terminating"),
                        launched_at=launched.get(iid, 0.0),
                    )
                    for iid, zone, state in members
                ]
            return [
                Instance(
                    instance_id=i["InstanceId"],
                    provider_id=provider_id(i["Placement"]["AvailabilityZone"], i["InstanceId"]),
                    state=_ec2_state(i["State"]["Name"]),
                    launched_at=i["LaunchTime"].timestamp(),
                )
                for i in self._fleet_instances(pool, aws, (*_LIVE_EC2_STATES, *_GONE_EC2_STATES))
            ]

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        """The ASG's desired capacity; for a fleet pool, its pending and running instances."""
        aws = self._aws(pool, spec)
        with _translated(f"read the target of pool {pool}"):
            if aws.auto_scaling_group_name:
                return int(self._group(aws)["DesiredCapacity"])
            return len(self._fleet_members(pool, aws))

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        """Raise the pool to ``nodes`` instances (capped at maxNodes); lower targets are ignored."""
        aws = self._aws(pool, spec)
        wanted = min(nodes, spec.max_nodes)
        if aws.auto_scaling_group_name:
            group_name = aws.auto_scaling_group_name
            with _translated(f"read auto scaling group {group_name}"):
                max_size = int(self._group(aws)["MaxSize"])
            if wanted > max_size:
                log.warning(
                    "pool %s: target %d capped at the MaxSize %d of auto scaling group %s",
                    pool,
                    wanted,
                    max_size,
                    group_name,
                )
                wanted = max_size
            self._change(
                f"set the desired capacity of {group_name} to {wanted}",
                done=lambda: self.target(pool, spec) >= wanted,
                act=lambda: self._client(
                    "autoscaling", aws.region, write=True
                ).set_desired_capacity(
                    AutoScalingGroupName=group_name, DesiredCapacity=wanted, HonorCooldown=False
                ),
            )
            return
        self._change(
            f"launch pool {pool} up to {wanted} instances",
            done=lambda: self.target(pool, spec) >= wanted,
            act=lambda: self._launch_fleet(pool, spec, aws, wanted),
        )

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        """Terminate this instance and lower the pool's target by one; no-op once it is gone."""
        aws = self._aws(pool, spec)
        if aws.auto_scaling_group_name:
            group_name = aws.auto_scaling_group_name

            def asg_done() -> bool:
                found = self._client("autoscaling", aws.region).describe_auto_scaling_instances(
                    InstanceIds=[instance_id]
                )["AutoScalingInstances"]
                if not found:
                    return True
                if found[0]["AutoScalingGroupName"] != group_name:
                    raise ProviderError(
                        f"instance {instance_id} belongs to auto scaling group "
                        f"{found[0]['AutoScalingGroupName']}, not to {group_name} of pool {pool}",
                        retryable=False,
                    )
                return str(found[0]["LifecycleState"]).startswith("Terminat")

            self._change(
                f"terminate {instance_id} in {group_name}",
                done=asg_done,
                act=lambda: self._client(
                    "autoscaling", aws.region, write=True
                ).terminate_instance_in_auto_scaling_group(
                    InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
                ),
            )
            return

        def fleet_done() -> bool:
            found = self._describe_instances(
                aws.region, [{"Name": "instance-id", "Values": [instance_id]}]
            )
            if not found:
                return True
            tags = {t["Key"]: t["Value"] for t in found[0].get("Tags", [])}
            if tags.get(POOL_TAG) != pool:
                raise ProviderError(
                    f"instance {instance_id} is not tagged {POOL_TAG}={pool}; not terminating it",
                    retryable=False,
                )
            return found[0]["State"]["Name"] not in (*_LIVE_EC2_STATES, "stopping", "stopped")

        self._change(
            f"terminate {instance_id} of pool {pool}",
            done=fleet_done,
            act=lambda: self._client("ec2", aws.region, write=True).terminate_instances(
                InstanceIds=[instance_id]
            ),
        )
        self._launched.get(pool, {}).pop(instance_id, None)

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        """Current spot price of one node, dollars/hour, cached for spot_price_ttl_seconds.

        The pool may get any of its instance types, so the price is the dearest type's
        cheapest zone: a budget computed from it is not exceeded. None when unknown.
        """
        aws = self._aws(pool, spec)
        try:
            with _translated(f"read the instance types of pool {pool}"):
                types = tuple(sorted(self._instance_types(aws)))
        except ProviderError as exc:
            log.warning("pool %s: no spot price: %s", pool, exc)
            return None
        if not types:
            return None
        key = (aws.region, types)
        now = self._clock()
        cached = self._prices.get(key)
        if cached is not None and now - cached.read_at < self.spot_price_ttl_seconds:
            return cached.price
        try:
            with _translated(f"read spot prices of {', '.join(types)}"):
                price = self._read_spot_price(aws.region, types, now)
        except ProviderError as exc:
            log.warning("pool %s: spot price unavailable, keeping the last one: %s", pool, exc)
            return cached.price if cached is not None else None
        self._prices[key] = _CachedPrice(price, now)
        return price

    def interruptions(self) -> list[InterruptionNotice]:
        """Notices from the interruption queues that were not acknowledged yet."""
        for queue_url in list(self._queues):
            with _translated(f"receive messages from {queue_url}"):
                self._receive(queue_url)
        return [n for held in self._held.values() for n in held.notices.values()]

    def acknowledge(self, notice: InterruptionNotice) -> None:
        """Forget the notice; its SQS message is deleted once all its notices are handled."""
        message_id = notice.receipt.split("#", 1)[0]
        held = self._held.get(message_id)
        if held is None:
            return
        held.notices.pop(notice.receipt, None)
        if held.notices:
            return
        with _translated(f"delete message {message_id}"):
            self._sqs(held.queue_url).delete_message(
                QueueUrl=held.queue_url, ReceiptHandle=held.receipt_handle
            )
        del self._held[message_id]

    def credentials_problem(self) -> str | None:
        """Why no AWS call can succeed, in one line; None when the standard chain found
        credentials (checked locally: no call is made)."""
        try:
            found = self._session.get_credentials()
        except BotoCoreError as exc:
            return f"AWS credentials cannot be loaded: {exc}"
        if found is None:
            return (
                "no AWS credentials found (IRSA: a service account annotated with "
                "eks.amazonaws.com/role-arn; AWS_ACCESS_KEY_ID; or an instance profile)"
            )
        return None

    # --- helpers ----------------------------------------------------------------------

    def watch_queue(self, queue_url: str) -> None:
        """Also read interruption notices from this queue (each pool's queue is added when
        the pool is first used)."""
        if queue_url not in self._queues:
            self._queues.append(queue_url)

    def _aws(self, pool: str, spec: GPUPoolSpec) -> AWSProviderSpec:
        aws = spec.provider.aws
        if spec.provider.type != "aws" or aws is None:
            raise ProviderError(f"pool {pool} has no provider.aws settings", retryable=False)
        if aws.interruption_queue_url:
            self.watch_queue(aws.interruption_queue_url)
        return aws

    def _client(self, service: str, region: str, *, write: bool = False) -> Any:
        key = (service, region, write)
        client = self._clients.get(key)
        if client is None:
            client = self._session.client(
                service,
                region_name=region,
                endpoint_url=self.endpoint_url,
                config=self._write_config if write else self._read_config,
            )
            self._clients[key] = client
        return client

    def _sqs(self, queue_url: str) -> Any:
        # https://sqs.<region>.amazonaws.com/<account>/<name>; other URLs use the default region.
        host = queue_url.split("/")[2] if "://" in queue_url else ""
        parts = host.split(".")
        region = parts[1] if len(parts) > 3 and parts[0] == "sqs" else self.region
        return self._client("sqs", region)

    def _change(self, what: str, *, done: Callable[[], bool], act: Callable[[], object]) -> None:
        """Make a change at most once: before every attempt, check whether it already happened."""
        for attempt in range(self.max_attempts):
            with _translated(f"check before: {what}"):
                if done():
                    return
            try:
                act()
                return
            except (ClientError, BotoCoreError) as exc:
                error = _provider_error(what, exc)
                if not error.retryable or attempt == self.max_attempts - 1:
                    raise error from exc
                log.info("retrying after a failed attempt to %s: %s", what, exc)
                ceiling = min(self.backoff_cap_seconds, self.backoff_base_seconds * 2**attempt)
                self._sleep(self._rng.uniform(0.0, ceiling))

    def _group(self, aws: AWSProviderSpec) -> dict[str, Any]:
        name = aws.auto_scaling_group_name
        groups = self._client("autoscaling", aws.region).describe_auto_scaling_groups(
            AutoScalingGroupNames=[name]
        )["AutoScalingGroups"]
        if not groups:
            raise ProviderError(
                f"auto scaling group {name} does not exist in {aws.region}", retryable=False
            )
        return dict(groups[0])

    def _describe_instances(
        self, region: str, filters: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        paginator = self._client("ec2", region).get_paginator("describe_instances")
        return [
            inst
            for page in paginator.paginate(Filters=filters)
            for reservation in page["Reservations"]
            for inst in reservation["Instances"]
        ]

    def _launch_times(self, region: str, instance_ids: list[str]) -> dict[str, float]:
        if not instance_ids:
            return {}
        found = self._describe_instances(region, [{"Name": "instance-id", "Values": instance_ids}])
        return {i["InstanceId"]: i["LaunchTime"].timestamp() for i in found}

    def _fleet_instances(
        self, pool: str, aws: AWSProviderSpec, states: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        return self._describe_instances(
            aws.region,
            [
                {"Name": f"tag:{POOL_TAG}", "Values": [pool]},
                {"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]},
                {"Name": "instance-state-name", "Values": list(states)},
            ],
        )

    def _fleet_members(self, pool: str, aws: AWSProviderSpec) -> list[str]:
        """Pending and running instances of a fleet pool: those listed, and those launched
        that the list does not show yet (for up to LIST_LAG_GRACE_SECONDS)."""
        listed = {i["InstanceId"] for i in self._fleet_instances(pool, aws, _LIVE_EC2_STATES)}
        launched = self._launched.get(pool, {})
        now = self._clock()
        for instance_id, at in list(launched.items()):
            if instance_id in listed or now - at > LIST_LAG_GRACE_SECONDS:
                del launched[instance_id]
        return sorted(listed | set(launched))

    def _launch_fleet(
        self, pool: str, spec: GPUPoolSpec, aws: AWSProviderSpec, wanted: int
    ) -> None:
        live = self._fleet_members(pool, aws)
        missing = wanted - len(live)
        if missing <= 0:
            return
        # One token per intent (this target from these instances), reused only by its own
        # retries: EC2 answers a token it saw (for 24 h+) with the old response, so a token
        # derived from the request would make a later 0->2 launch nothing.
        intent = (wanted, tuple(live))
        open_intent = self._fleet_intents.get(pool)
        if open_intent is None or open_intent[0] != intent:
            open_intent = (intent, uuid.uuid4().hex)
            self._fleet_intents[pool] = open_intent
        token = open_intent[1]
        try:
            response = self._create_fleet(pool, spec, aws, token, missing)
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if status < 500:  # EC2 answered: the intent is over; 5xx may have acted
                self._fleet_intents.pop(pool, None)
            raise
        self._fleet_intents.pop(pool, None)  # answered: a later launch is a new intent
        now = self._clock()
        for launch in response.get("Instances", []):
            for instance_id in launch.get("InstanceIds", []):
                self._launched.setdefault(pool, {})[instance_id] = now
        launched = sum(len(i.get("InstanceIds", [])) for i in response.get("Instances", []))
        if launched == 0 and response.get("Errors"):
            first = response["Errors"][0]
            code = str(first.get("ErrorCode"))
            error = CapacityUnavailable if code in _CAPACITY_CODES else ProviderError
            raise error(
                f"EC2 Fleet launched nothing for pool {pool}: {code}: {first.get('ErrorMessage')}",
                retryable=True,
            )

    def _create_fleet(
        self, pool: str, spec: GPUPoolSpec, aws: AWSProviderSpec, token: str, missing: int
    ) -> dict[str, Any]:
        spot = spec.tier == Tier.SPOT
        tags = [
            {"Key": POOL_TAG, "Value": pool},
            {"Key": CLUSTER_TAG, "Value": self.cluster},
        ]
        response: dict[str, Any] = self._client("ec2", aws.region, write=True).create_fleet(
            ClientToken=token,
            Type="instant",
            TargetCapacitySpecification={
                "TotalTargetCapacity": missing,
                "DefaultTargetCapacityType": "spot" if spot else "on-demand",
            },
            SpotOptions={"AllocationStrategy": "price-capacity-optimized"},
            OnDemandOptions={"AllocationStrategy": "lowest-price"},
            LaunchTemplateConfigs=[
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateName": aws.launch_template_name,
                        "Version": "$Latest",
                    },
                    "Overrides": [{"InstanceType": t} for t in aws.instance_types],
                }
            ],
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "fleet", "Tags": tags},
            ],
        )
        return response

    def _instance_types(self, aws: AWSProviderSpec) -> set[str]:
        if aws.instance_types:
            return set(aws.instance_types)
        group = self._group(aws)
        overrides = group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {})
        types = {o["InstanceType"] for o in overrides.get("Overrides", []) if "InstanceType" in o}
        if types:
            return types
        ids = [m["InstanceId"] for m in group.get("Instances", [])]
        if not ids:
            return set()
        found = self._describe_instances(aws.region, [{"Name": "instance-id", "Values": ids}])
        return {i["InstanceType"] for i in found}

    def _read_spot_price(self, region: str, types: tuple[str, ...], now: float) -> float | None:
        paginator = self._client("ec2", region).get_paginator("describe_spot_price_history")
        latest: dict[tuple[str, str], tuple[float, float]] = {}
        for page in paginator.paginate(
            InstanceTypes=list(types),
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            StartTime=datetime.fromtimestamp(now - 3600, UTC),
        ):
            for entry in page["SpotPriceHistory"]:
                key = (entry["InstanceType"], entry["AvailabilityZone"])
                stamp = entry["Timestamp"].timestamp()
                if key not in latest or stamp > latest[key][0]:
                    latest[key] = (stamp, float(entry["SpotPrice"]))
        cheapest: dict[str, float] = {}
        for (itype, _zone), (_stamp, price) in latest.items():
            cheapest[itype] = min(price, cheapest.get(itype, price))
        return max(cheapest.values()) if cheapest else None

    def _receive(self, queue_url: str) -> None:
        sqs = self._sqs(queue_url)
        for _ in range(10):  # at most 100 messages per call; the rest come next tick
            messages = sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                VisibilityTimeout=self.visibility_timeout_seconds,
            ).get("Messages", [])
            if not messages:
                return
            for message in messages:
                self._hold(queue_url, message)

    def _hold(self, queue_url: str, message: dict[str, Any]) -> None:
        message_id = message["MessageId"]
        held = self._held.get(message_id)
        if held is not None:  # seen before: its visibility ran out; keep the newest handle
            held.receipt_handle = message["ReceiptHandle"]
            if not held.notices:  # all handled, but the delete failed: delete it now
                self._sqs(queue_url).delete_message(
                    QueueUrl=queue_url, ReceiptHandle=held.receipt_handle
                )
                del self._held[message_id]
            return
        events = parse_event(message.get("Body", ""))
        if not events:
            # Not a notice (e.g. a state change to running): nothing to handle, drop it now.
            sqs = self._sqs(queue_url)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            return
        zones = self._zones_of(queue_url, [e.instance_id for e in events])
        unlisted = zones is not None and any(
            e.instance_id not in zones and self._launched_recently(e.instance_id) for e in events
        )
        if zones is None or unlisted:
            # Not held (a notice without a provider ID could match nodes that have none, the
            # owned ones): EC2 did not answer, or does not list an instance we just launched
            # yet. Read it again in a few seconds, not after the whole visibility timeout:
            # a spot warning gives two minutes.
            self._read_again_soon(queue_url, message["ReceiptHandle"])
            return
        held = _HeldMessage(queue_url, message["ReceiptHandle"])
        for event in events:
            receipt = f"{message_id}#{event.instance_id}"
            zone = zones.get(event.instance_id)
            if zone is None:
                log.info(
                    "notice for %s: no such instance any more, nothing to drain", event.instance_id
                )
                continue
            held.notices[receipt] = InterruptionNotice(
                instance_id=event.instance_id,
                provider_id=provider_id(zone, event.instance_id),
                deadline=event.deadline,
                kind=event.kind,
                receipt=receipt,
            )
        if not held.notices:
            self._sqs(queue_url).delete_message(
                QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
            return
        self._held[message_id] = held

    def _launched_recently(self, instance_id: str) -> bool:
        """Whether a fleet launch returned this instance and no list has shown it yet."""
        return any(instance_id in launched for launched in self._launched.values())

    def _read_again_soon(self, queue_url: str, receipt_handle: str) -> None:
        try:
            self._sqs(queue_url).change_message_visibility(
                QueueUrl=queue_url,
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=NOTICE_RETRY_SECONDS,
            )
        except (ClientError, BotoCoreError) as exc:
            log.warning("notice comes back after its visibility timeout: %s", exc)

    def _zones_of(self, queue_url: str, instance_ids: list[str]) -> dict[str, str] | None:
        """Zone of each instance that still exists; None when EC2 could not be asked."""
        region = self._sqs(queue_url).meta.region_name
        try:
            found = self._describe_instances(
                region, [{"Name": "instance-id", "Values": instance_ids}]
            )
        except (ClientError, BotoCoreError) as exc:
            log.warning("no zones for %s, reading the notice again later: %s", instance_ids, exc)
            return None
        return {i["InstanceId"]: i["Placement"]["AvailabilityZone"] for i in found}


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """One instance an EventBridge event says will go away."""

    instance_id: str
    deadline: float
    kind: str


def parse_event(body: str) -> list[ParsedEvent]:
    """Instances an EventBridge message (as SQS delivers it) announces will go away.

    Understands the formats AWS Node Termination Handler and Karpenter consume: spot
    interruption warnings (deadline: event time + 2 minutes), rebalance recommendations
    (same lead, drained early), state changes to stopping/stopped/shutting-down/terminated
    (deadline: the event time) and AWS Health scheduled changes for EC2 (deadline: the
    event's start time). Anything else gives an empty list.
    """
    try:
        event = json.loads(body)
        if isinstance(event, dict) and "detail-type" not in event and "Message" in event:
            event = json.loads(event["Message"])  # delivered through SNS
    except (json.JSONDecodeError, TypeError):
        return []
    if not isinstance(event, dict):
        return []
    detail = event.get("detail") or {}
    kind = event.get("detail-type")
    at = _timestamp(event.get("time"))
    if kind in (_SPOT_WARNING, _REBALANCE) and detail.get("instance-id") and at is not None:
        return [
            ParsedEvent(
                detail["instance-id"],
                at + SPOT_NOTICE_SECONDS,
                "spot_interruption" if kind == _SPOT_WARNING else "rebalance",
            )
        ]
    if kind == _STATE_CHANGE and detail.get("state") in _GOING_AWAY_STATES and at is not None:
        return [ParsedEvent(detail["instance-id"], at, "state_change")]
    if (
        kind == _HEALTH
        and detail.get("service") == "EC2"
        and detail.get("eventTypeCategory") == "scheduledChange"
    ):
        start = _timestamp(detail.get("startTime")) or at
        if start is None:
            return []
        return [
            ParsedEvent(entity["entityValue"], start, "scheduled_change")
            for entity in detail.get("affectedEntities", [])
            if str(entity.get("entityValue", "")).startswith("i-")
        ]
    return []


def _timestamp(text: object) -> float | None:
    """Seconds since the epoch of an ISO 8601 or RFC 1123 time, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        pass
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


def _ec2_state(name: str) -> str:
    if name in _LIVE_EC2_STATES:
        return name
    return "terminated" if name in _GONE_EC2_STATES else "terminating"


def _provider_error(what: str, exc: Exception) -> ProviderError:
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        retryable = code in _RETRYABLE_CODES or status >= 500 or status == 429
        if code in _CAPACITY_CODES:
            return CapacityUnavailable(f"could not {what}: {code}: {exc}", retryable=True)
        return ProviderError(f"could not {what}: {code}: {exc}", retryable=retryable)
    # Connection errors, timeouts, dropped responses: the call may or may not have happened.
    return ProviderError(f"could not {what}: {exc}", retryable=True)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """boto3 errors become ProviderError (retryable for throttling, 5xx and lost connections)."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise _provider_error(what, exc) from exc
