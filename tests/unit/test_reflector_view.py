"""A reflector's sorted view is kept between reads while its store does not change (ticks
read thousands of unchanged objects), and is never stale: every change to the store (an
event, a dropped object, a whole sync, an optional kind gone) gives a new one. The kwok
stand-in cloud picks each pool's Nodes out of that view once per change, not per call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes.client import ApiClient

from hybridgpu.cloud import kwok
from hybridgpu.cloud.kwok import KwokProvider, kwok_node, provider_id
from hybridgpu.kube.cache import INITIAL_EVENTS_END, Kind, Reflector
from hybridgpu.kube.errors import KubeError
from hybridgpu.models.pool import GPUPoolSpec


def obj(name: str, version: int, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(version)}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, **extra}


def event(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": body}


def names(view: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in view]


def unused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("no request in this test")


def test_the_view_is_kept_until_the_store_changes_and_is_never_stale() -> None:
    reflector = Reflector(Kind("widgets", unused, optional=True))
    reflector._replace({"b": obj("b", 1), "a": obj("a", 2)}, "2")
    first = reflector.view()
    assert names(first) == ["a", "b"]
    assert reflector.view() is first  # unchanged: the same tuple
    assert reflector.items() == list(first)
    assert reflector.items() is not reflector.items()  # a list of one's own each time

    reflector._apply(event("ADDED", obj("c", 3)))
    added = reflector.view()
    assert names(added) == ["a", "b", "c"]
    assert names(first) == ["a", "b"]  # a view already handed out does not change

    reflector._apply(event("MODIFIED", obj("a", 4, spec={"x": 1})))
    modified = reflector.view()
    assert modified is not added
    assert modified[0]["spec"] == {"x": 1}

    reflector._apply(event("DELETED", obj("zzz", 5)))  # never stored: nothing changed
    assert reflector.view() is modified
    reflector._apply(event("DELETED", obj("b", 6)))
    assert names(reflector.view()) == ["a", "c"]

    reflector._apply(event("BOOKMARK", obj("", 7)))  # a bookmark changes no object
    kept = reflector.view()
    assert reflector.view() is kept

    reflector._replace({"d": obj("d", 8)}, "8")
    assert names(reflector.view()) == ["d"]

    reflector._absent(KubeError("gone", status=404))
    assert reflector.view() == ()


def test_an_object_the_kind_does_not_keep_leaves_the_view() -> None:
    reflector = Reflector(Kind("pods", unused, keep=lambda o: bool(o.get("gpu"))))
    reflector._replace({"ns/a": obj("a", 1, "ns", gpu=True)}, "1")
    before = reflector.view()
    reflector._apply(event("MODIFIED", obj("a", 2, "ns", gpu=False)))
    assert reflector.view() == ()
    assert names(before) == ["a"]


def spec() -> GPUPoolSpec:
    return GPUPoolSpec.model_validate(
        {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 8},
            "maxNodes": 10,
            "provider": {"type": "kwok"},
            "pricing": {"perNodeHour": 32.0},
        }
    )


def node(pool: str, name: str, version: int) -> dict[str, Any]:
    body = kwok_node(name, pool, spec())
    body["metadata"].update(resourceVersion=str(version), creationTimestamp="2026-12-01T00:00:00Z")
    return body


def test_the_kwok_provider_reads_each_pools_nodes_from_the_view_it_was_given() -> None:
    """Same view: the same instances without picking the nodes out again; a new view (a Node
    came, went or changed): the instances follow it at once."""
    reflector = Reflector(Kind("nodes", unused))
    reflector._replace(
        {
            "a-1": node("a", "a-1", 1),
            "b-1": node("b", "b-1", 2),
            "other": obj("other", 3),  # no pool label
        },
        "3",
    )
    calls: list[int] = []

    def source() -> tuple[dict[str, Any], ...]:
        calls.append(1)
        return reflector.view()

    provider = KwokProvider(boot_delay_seconds=0.0, api_client=ApiClient())
    kwok.read_nodes_from(source)
    try:
        first = provider.instances("a", spec())
        assert [(i.instance_id, i.provider_id, i.state) for i in first] == [
            ("a-1", provider_id("a", "a-1"), "running")
        ]
        picked = kwok._selected_from[1]["a"]
        assert provider.instances("a", spec()) == first
        assert kwok._selected_from[1]["a"] is picked  # not picked out again
        assert [i.instance_id for i in provider.instances("b", spec())] == ["b-1"]

        reflector._apply(event("ADDED", node("a", "a-2", 4)))
        assert [i.instance_id for i in provider.instances("a", spec())] == ["a-1", "a-2"]
        deleting = node("a", "a-1", 5)
        deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:01Z"
        reflector._apply(event("MODIFIED", deleting))
        states = {i.instance_id: i.state for i in provider.instances("a", spec())}
        assert states == {"a-1": "terminating", "a-2": "running"}
        assert provider.target("a", spec()) == 1
        reflector._apply(event("DELETED", node("a", "a-2", 6)))
        assert [i.instance_id for i in provider.instances("a", spec())] == ["a-1"]
        assert calls
    finally:
        kwok.read_nodes_from(None)
        provider.close()


def test_a_source_returning_new_lists_is_read_afresh_each_time() -> None:
    shown: list[dict[str, Any]] = [node("a", "a-1", 1)]
    provider = KwokProvider(boot_delay_seconds=0.0, api_client=ApiClient())
    kwok.read_nodes_from(lambda: list(shown))
    try:
        assert [i.instance_id for i in provider.instances("a", spec())] == ["a-1"]
        shown.append(node("a", "a-2", 2))
        assert [i.instance_id for i in provider.instances("a", spec())] == ["a-1", "a-2"]
    finally:
        kwok.read_nodes_from(None)
        provider.close()


class _Lines:
    """A watch response already read: its lines once, then its end."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._lines = iter([json.dumps(e, separators=(",", ":")).encode() for e in events])

    def lines(self, stop: threading.Event) -> Iterator[bytes]:
        return self._lines


def test_events_of_a_sync_before_its_end_bookmark_change_the_store_the_sync_builds() -> None:
    """A MODIFIED or DELETED event that arrives before the bookmark ending a streaming list's
    initial events is kept in the store that sync builds, as client-go's reflector applies
    such events to its temporary store: the apiserver has been seen to send them there
    (kubernetes/kubernetes#134846), and applied to the store being replaced they were lost
    at the bookmark: a pod the scheduler had marked Unschedulable stayed unmarked in the
    cache, and the operator never saw it pending."""
    reflector = Reflector(Kind("widgets", unused))
    reflector._replace({"old": obj("old", 1)}, "1")  # the store a new sync replaces
    end = obj("", 9)
    end["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
    reflector._sync(
        _Lines(  # type: ignore[arg-type]
            [
                event("ADDED", obj("a", 2)),
                event("ADDED", obj("b", 3)),
                event("MODIFIED", obj("a", 5, status={"unschedulable": True})),
                event("DELETED", obj("b", 6)),
                event("MODIFIED", obj("c", 7)),  # first seen as a change: it is there now
                event("BOOKMARK", end),
            ]
        ),
    )
    assert names(reflector.view()) == ["a", "c"]
    assert reflector.get("a")["status"] == {"unschedulable": True}  # type: ignore[index]
    assert reflector.resource_version == "9"
