"""What a user sees with kubectl: fields that cannot apply to a pool's tier are refused (by
the CRD's CEL rule on the apiserver and by the same rule in Python), never silently ignored;
the operator's Events are ones `kubectl describe` lists (tests/e2e/test_kubectl_ux.py shows
both on the real apiserver)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from hybridgpu.kube.cache import WatchCache
from hybridgpu.kube.cluster import KubeCluster, ObjectRef
from hybridgpu.kube.executor import job_ref, node_ref, policy_ref, pool_ref
from hybridgpu.models.pool import GPUPoolSpec

pytestmark = pytest.mark.unit


def cloud_pool(tier: str, **pricing: float) -> dict[str, object]:
    return {
        "tier": tier,
        "gpu": {"model": "A100", "perNode": 8},
        "maxNodes": 4,
        "provider": {"type": "kwok"},
        "pricing": {"perNodeHour": 30.0, **pricing},
    }


@pytest.mark.parametrize("tier", ["elastic", "spot"])
@pytest.mark.parametrize(
    "field",
    ["amortizationYears", "powerWattsPerNode", "pue", "electricityPerKWh", "opsPerNodeHour"],
)
def test_core_cost_model_fields_on_a_cloud_pool_are_refused_naming_them(
    tier: str, field: str
) -> None:
    """A spot pool with pricing.pue (or any field of the owned-hardware cost model) was
    accepted and the figure ignored: the user believed it counted."""
    with pytest.raises(ValidationError) as caught:
        GPUPoolSpec.model_validate(cloud_pool(tier, **{field: 1.5}))
    message = str(caught.value)
    assert field in message
    assert "price owned (core) nodes" in message


def test_the_same_fields_on_a_core_pool_are_accepted() -> None:
    GPUPoolSpec.model_validate(
        {
            "tier": "core",
            "gpu": {"model": "A100", "perNode": 8},
            "maxNodes": 4,
            "pricing": {
                "capexPerNode": 250000,
                "amortizationYears": 4,
                "powerWattsPerNode": 6500,
                "pue": 1.4,
                "electricityPerKWh": 0.12,
                "opsPerNodeHour": 0.5,
            },
        }
    )


class _Events:
    """Stand-in for CoreV1Api: nodes to read, Events created."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)

    def read_node(self, name: str, **_: Any) -> Any:
        if name != "gpu-1":
            raise ApiException(status=404, reason="Not Found")
        return _Response({"metadata": {"name": name, "uid": "node-uid"}})


class _Custom:
    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any:
        return {"metadata": {"name": name, "uid": f"{plural}-uid"}}


@dataclass
class _Response:
    body: dict[str, Any]

    @property
    def data(self) -> bytes:
        return json.dumps(self.body).encode()


@pytest.mark.parametrize(
    ("ref", "uid"),
    [
        (pool_ref("p"), "gpupools-uid"),
        (policy_ref("default"), "scalingpolicies-uid"),
        (node_ref("gpu-1"), "node-uid"),
        (node_ref("gone"), None),
    ],
)
def test_an_event_carries_the_uid_kubectl_describe_selects_on(
    ref: ObjectRef, uid: str | None
) -> None:
    """`kubectl describe` lists Events by involvedObject.uid: one posted without it (all of
    the operator's were) is not shown. An object that is gone gets its Event without."""
    cluster = KubeCluster.__new__(KubeCluster)
    core = _Events()
    cluster.core, cluster.custom = core, _Custom()
    cluster.post_event(ref, reason="ScaleUp", message="one more node", now=0.0)
    (event,) = core.created
    assert event["involvedObject"].get("uid") == uid


class _NoReads:
    """Stand-in for CustomObjectsApi that fails the test if an object is read."""

    def get_cluster_custom_object(self, *args: Any, **_: Any) -> Any:
        raise AssertionError(f"read {args}: the uid was known")


class _Store:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)


def test_an_event_takes_the_uid_the_watch_cache_has_and_reads_only_what_it_lacks() -> None:
    """Every Event read its object to get the uid: two requests per Event, inside the tick.
    The watch caches hold the nodes, pods, Jobs, pools and policies the Events are about: their
    uid is taken from there, and only an object the caches lack (a Node just launched) is
    read."""
    cache = WatchCache.__new__(WatchCache)
    stores: dict[str, Any] = {
        "nodes": _Store({"gpu-1": {"metadata": {"name": "gpu-1", "uid": "cached-node"}}}),
        "gpupools": _Store({"p": {"metadata": {"name": "p", "uid": "cached-pool"}}}),
        "jobs": _Store({"team/train": {"metadata": {"name": "train", "uid": "cached-job"}}}),
    }
    cache.reflectors = stores
    cluster = KubeCluster.__new__(KubeCluster)
    core = _Reads()
    cluster.core, cluster.custom = core, _NoReads()
    cluster.known_uids = lambda ref: cache.uid_of(ref.kind, ref.name, ref.namespace)
    for ref in (node_ref("gpu-1"), pool_ref("p"), job_ref("team", "train")):
        cluster.post_event(ref, reason="ScaleUp", message="one more node", now=0.0)
    assert [e["involvedObject"]["uid"] for e in core.created] == [
        "cached-node",
        "cached-pool",
        "cached-job",
    ]
    assert core.reads == []
    cluster.post_event(node_ref("just-launched"), reason="ScaleUp", message="up", now=0.0)
    assert core.reads == ["just-launched"]
    assert cache.uid_of("Node", "gone") is None
    assert cache.uid_of("CapacityPlan", "plan") is None  # a kind the caches do not keep


class _Reads(_Events):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def read_node(self, name: str, **kw: Any) -> Any:
        self.reads.append(name)
        return super().read_node(name, **kw)
