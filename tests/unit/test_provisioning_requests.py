"""ProvisioningRequests: read into gangs, placed whole by decide(), answered with the
conditions Kueue reads (core/provisioning.py, kube/provisioning.py, handlers/provisioning.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from tests.support.builders import NOW, node, policy, pool, running, snapshot
from tests.support.fake_cluster import FakeCluster

from hybridgpu.core.decide import decide
from hybridgpu.core.provisioning import (
    ATOMIC_SCALE_UP,
    CHECK_CAPACITY,
    POOL_DETAIL,
    answer,
)
from hybridgpu.handlers.provisioning import answer_requests, requests_of_policy, with_requests
from hybridgpu.kube.cluster import KubeCluster
from hybridgpu.kube.convert import rfc3339
from hybridgpu.kube.provisioning import CONSUME_ANNOTATION, read_request, read_requests
from hybridgpu.models.actions import GangState, ScaleUp

pytestmark = pytest.mark.unit

POOLS = [pool("core", "core", per_node=4, max_nodes=1), pool("elastic", "elastic", per_node=4)]


def template(name: str, gpus: int, pool_pin: str | None = "elastic") -> dict[str, Any]:
    selector = {"hybridgpu.io/pool": pool_pin} if pool_pin else {}
    return {
        "metadata": {"name": name, "namespace": "team"},
        "template": {
            "metadata": {"labels": {"hybridgpu.io/criticality": "standard"}},
            "spec": {
                "nodeSelector": selector,
                "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": gpus}}}],
            },
        },
    }


def request(
    name: str,
    count: int,
    cls: str = ATOMIC_SCALE_UP,
    conditions: list[dict[str, Any]] | None = None,
    parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "generation": 1,
            "creationTimestamp": rfc3339(NOW - 60),
        },
        "spec": {
            "provisioningClassName": cls,
            "parameters": parameters or {},
            "podSets": [{"podTemplateRef": {"name": f"{name}-main"}, "count": count}],
        },
        "status": {"conditions": conditions or []},
    }


def condition(kind: str, status: str, at: float) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": "r",
        "message": "m",
        "lastTransitionTime": rfc3339(at),
    }


def fake(*requests: dict[str, Any], gpus: int = 4) -> FakeCluster:
    cluster = FakeCluster()
    for body in requests:
        name = body["metadata"]["name"]
        cluster.provisioning_requests[("team", name)] = body
        cluster.pod_templates[("team", f"{name}-main")] = template(f"{name}-main", gpus)
    return cluster


def tick(cluster: FakeCluster, workloads: list[Any], nodes: list[Any], now: float = NOW) -> Any:
    """What a reconcile tick does with requests: read, add, decide, answer."""
    pools = {p.name: p.spec for p in POOLS}
    requests = requests_of_policy(read_requests(cast(KubeCluster, cluster), []), pools, True)
    snap = with_requests(snapshot(POOLS, nodes, workloads), requests, now)
    plan = decide(snap, policy(), now)
    errors = answer_requests(cast(KubeCluster, cluster), requests, plan, now)
    assert errors == []
    return plan


def conditions_of(cluster: FakeCluster, name: str) -> dict[str, tuple[str, str]]:
    status = cluster.provisioning_requests[("team", name)]["status"]
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def test_an_atomic_request_gets_all_its_nodes_in_one_scale_up_then_is_provisioned() -> None:
    cluster = fake(request("gang", 4))
    plan = tick(cluster, [], [])
    assert [(a.pool, a.nodes) for a in plan.actions if isinstance(a, ScaleUp)] == [("elastic", 4)]
    assert conditions_of(cluster, "gang") == {
        "Accepted": ("True", "Accepted"),
        "Provisioned": ("False", "CapacityIsProvisioning"),
    }
    # The four nodes joined: the gang fits on them, it is provisioned and names its pool.
    nodes = [node(f"e{i}", "elastic", gpus=4) for i in range(4)]
    plan = tick(cluster, [], nodes)
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)]
    assert conditions_of(cluster, "gang")["Provisioned"] == ("True", "CapacityIsProvisioned")
    status = cluster.provisioning_requests[("team", "gang")]["status"]
    assert status["provisioningClassDetails"] == {POOL_DETAIL: "elastic"}
    # Booked: the empty nodes are neither released nor given to other work.
    plan = tick(cluster, [], nodes, now=NOW + 3600)  # idle for an hour, booking over
    assert conditions_of(cluster, "gang")["BookingExpired"] == (
        "True",
        "CapacityReservationTimeExpired",
    )


def test_booked_nodes_are_kept_while_the_booking_holds() -> None:
    provisioned = condition("Provisioned", "True", NOW - 30)
    cluster = fake(
        request("gang", 2, conditions=[condition("Accepted", "True", NOW - 50), provisioned])
    )
    idle = [node(f"e{i}", "elastic", gpus=4, idle_since=NOW - 3600) for i in range(3)]
    plan = tick(cluster, [], idle)
    released = sorted(a.node for a in plan.actions if a.kind.value == "release_node")
    assert len(released) == 1  # two of three idle nodes hold the booking
    assert "CapacityRevoked" not in conditions_of(cluster, "gang")


def test_a_gang_that_cannot_all_fit_gets_no_node_at_all() -> None:
    cluster = fake(request("huge", 11))  # 11 nodes of 4 GPUs; the pool stops at 10
    plan = tick(cluster, [], [])
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)]
    assert conditions_of(cluster, "huge")["Provisioned"] == ("False", "CapacityIsNotFound")


def test_check_capacity_never_buys_and_answers_from_the_nodes_that_exist() -> None:
    cluster = fake(request("check", 2, cls=CHECK_CAPACITY))
    busy = [node("e0", "elastic", gpus=4), node("e1", "elastic", gpus=4)]
    plan = tick(cluster, [running("other", "e0", 4)], busy)
    assert plan.actions == ()
    assert conditions_of(cluster, "check")["Provisioned"] == ("False", "CapacityIsNotFound")
    plan = tick(cluster, [], busy)  # the other work finished: both nodes are free
    assert conditions_of(cluster, "check")["Provisioned"] == ("True", "CapacityIsFound")


def test_a_missing_pod_template_fails_the_request() -> None:
    cluster = fake(request("lost", 1))
    cluster.pod_templates.clear()
    tick(cluster, [], [])
    assert conditions_of(cluster, "lost")["Failed"] == ("True", "InvalidRequest")


def test_valid_until_seconds_fails_a_request_not_provisioned_in_time() -> None:
    cluster = fake(request("late", 20, parameters={"ValidUntilSeconds": "30"}))
    tick(cluster, [], [])
    assert conditions_of(cluster, "late")["Failed"] == ("True", "Expired")


def test_a_consumed_request_is_no_demand_and_gets_no_more_answers() -> None:
    body = request("used", 1, conditions=[condition("Provisioned", "True", NOW - 30)])
    pod = {
        "metadata": {"namespace": "team", "name": "p", "annotations": {CONSUME_ANNOTATION: "used"}},
        "status": {"phase": "Running"},
    }
    read = read_request(body, {"used-main": template("used-main", 4)}, consumed=True)
    assert read.state.consumed
    cluster = fake(body)
    found = read_requests(cast(KubeCluster, cluster), [pod])
    assert found[0].state.consumed
    assert with_requests(snapshot(POOLS), found, NOW).pods == ()
    assert answer(found[0].state, None, NOW) == ([], {})


def test_booked_capacity_that_went_away_is_revoked() -> None:
    provisioned = condition("Provisioned", "True", NOW - 30)
    cluster = fake(
        request("gang", 2, conditions=[condition("Accepted", "True", NOW - 50), provisioned])
    )
    plan = tick(cluster, [], [])  # its nodes are gone
    assert plan.gangs["provisioningrequest:team/gang"].state == GangState.COMING
    assert conditions_of(cluster, "gang")["CapacityRevoked"] == ("True", "CapacityRevoked")


def test_requests_of_other_classes_are_left_alone() -> None:
    cluster = fake(request("other", 1, cls="queued-provisioning.gke.io"))
    plan = tick(cluster, [], [])
    assert plan.actions == ()
    assert ("patch_provisioning_request", "team/other") not in cluster.writes


def test_requests_come_from_the_watch_cache_when_given_and_templates_from_the_apiserver() -> None:
    """The tick passes the watch cache's requests: a request the apiserver's LIST would give
    but the cache does not hold (yet) is not answered, and the cache's one is, with its
    PodTemplate read live."""
    cluster = fake(request("listed", 1), request("cached", 1))
    cached = [r for r in cluster.list_provisioning_requests() if r["metadata"]["name"] == "cached"]
    found = read_requests(cast(KubeCluster, cluster), [], cached)
    assert [r.name for r in found] == ["cached"]
    assert [p.gpus for p in found[0].pods] == [4]  # its PodTemplate asks for 4


def test_a_request_waits_for_owned_gpus_that_free_up_within_its_budget() -> None:
    """The owned node's Job ends in a minute, within the standard waitBudget: the request
    buys no cloud node and says it waits for owned capacity; once the Job ended it is
    provisioned on the owned node."""
    cluster = fake(request("gang", 1))
    cluster.pod_templates[("team", "gang-main")] = template("gang-main", 4, pool_pin=None)
    owned = [node("c0", "core", gpus=4)]
    ends_soon = running("train", "c0", 4, started=NOW - 3600, expected=3660)
    plan = tick(cluster, [ends_soon], owned)
    assert not [a for a in plan.actions if isinstance(a, ScaleUp)], plan.explain()
    assert [p.state for p in plan.gangs.values()] == [GangState.WAITING], plan.gangs
    assert conditions_of(cluster, "gang")["Provisioned"] == ("False", "WaitingForOwnedCapacity")
    plan = tick(cluster, [], owned, now=NOW + 60)
    assert conditions_of(cluster, "gang")["Provisioned"] == ("True", "CapacityIsProvisioned")


def test_without_a_request_hybridgpu_serves_the_pods_are_not_read() -> None:
    """Every tick reads the requests; with none of a class hybridgpu serves (the usual case)
    it does not go through the cluster's GPU pods (thousands, each tick) for consumers."""

    class Untouchable:
        def __iter__(self) -> Any:
            raise AssertionError("the pods were read")

    cluster = fake(request("other", 1, cls="queued-provisioning.gke.io"))
    assert read_requests(cast(KubeCluster, cluster), cast(Any, Untouchable())) == []
    assert read_requests(cast(KubeCluster, cluster), cast(Any, Untouchable()), []) == []
