"""kopf's own watches of kinds outside hybridgpu.io ask the apiserver for the labelled
objects only: kopf filters a handler's labels client-side, so without a server-side selector
it lists and watches every pod of the cluster (at 5,000 nodes its first LIST of 50,000 pods
timed out) to find the few labelled ones."""

from __future__ import annotations

import kopf
import pytest
from kopf._cogs.structs.references import Resource

import hybridgpu.handlers  # noqa: F401  (registers every handler)
from hybridgpu.handlers.startup import watch_settings
from hybridgpu.kube.names import CRITICALITY_LABEL, GROUP

pytestmark = pytest.mark.unit


def settings() -> kopf.OperatorSettings:
    configured = kopf.OperatorSettings()
    watch_settings(configured)
    return configured


def test_pods_and_priority_classes_are_watched_by_their_label_only() -> None:
    selectors = settings().watching.label_selectors
    assert selectors.collect(Resource("", "v1", "pods", namespaced=True)) == [CRITICALITY_LABEL]
    priority = Resource("scheduling.k8s.io", "v1", "priorityclasses")
    assert selectors.collect(priority) == [CRITICALITY_LABEL]
    assert selectors.collect(Resource(GROUP, "v1alpha1", "gpupools")) == []


def test_every_kopf_watch_outside_hybridgpu_io_is_filtered_by_the_apiserver() -> None:
    """A handler added later on another kind (nodes, jobs) must come with its selector."""
    selectors = settings().watching.label_selectors
    registry = kopf.get_default_registry()
    watched = [
        handler
        for handlers in (registry._watching, registry._indexing, registry._changing)
        for handler in handlers.get_all_handlers()
        if handler.selector is not None and handler.selector.group != GROUP
    ]
    assert watched, "no handler found: the registry's layout changed"
    for handler in watched:
        selector = handler.selector
        assert selector is not None
        plural = selector.any_name
        assert isinstance(plural, str), handler.id
        resource = Resource(selector.group or "", selector.version or "v1", plural)
        labels = handler.labels or {}
        assert selectors.collect(resource) == sorted(labels), handler.id
        assert all(value is kopf.PRESENT for value in labels.values()), handler.id


def test_kopf_watches_are_resumed_as_often_as_the_operator_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every 120 s by default; ``HYBRIDGPU_WATCH_SECONDS`` (tests) shortens it."""
    from hybridgpu.handlers.options import OperatorOptions

    assert settings().watching.server_timeout == 120
    assert settings().watching.client_timeout == 150
    monkeypatch.setenv("HYBRIDGPU_WATCH_SECONDS", "2")
    seconds = OperatorOptions.from_env().watch_seconds
    assert seconds == 2
    short = kopf.OperatorSettings()
    watch_settings(short, seconds)
    assert (short.watching.server_timeout, short.watching.client_timeout) == (2, 32)
