"""Custom objects of one kind (JobSets, RayJobs, PyTorchJobs, LeaderWorkerSets) that an e2e
test creates in its namespace, deleted with their dependents after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.rest import ApiException

from support.controlplane import KubeTest, wait_until


class CreatedObjects:
    """The objects of ``group/version/plural`` a test created (``names``)."""

    def __init__(self, kube: KubeTest, group: str, version: str, plural: str) -> None:
        self.kube = kube
        self.group, self.version, self.plural = group, version, plural
        self.names: list[str] = []

    def create(self, body: dict[str, Any]) -> None:
        body["metadata"]["namespace"] = self.kube.namespace
        self.kube.custom.create_namespaced_custom_object(
            self.group, self.version, self.kube.namespace, self.plural, body
        )
        self.names.append(body["metadata"]["name"])

    def get(self, name: str) -> dict[str, Any]:
        return dict(
            self.kube.custom.get_namespaced_custom_object(
                self.group, self.version, self.kube.namespace, self.plural, name
            )
        )

    def left(self, plural: str | None = None) -> list[Any]:
        """The objects of ``plural`` (default: this kind) still in the namespace."""
        listed = self.kube.custom.list_namespaced_custom_object(
            self.group, self.version, self.kube.namespace, plural or self.plural
        )
        return list(listed["items"])

    def delete_all(self) -> None:
        for name in self.names:
            try:
                self.kube.custom.delete_namespaced_custom_object(
                    self.group,
                    self.version,
                    self.kube.namespace,
                    self.plural,
                    name,
                    propagation_policy="Foreground",
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise


@contextmanager
def created_objects(
    kube: KubeTest,
    group: str,
    version: str,
    plural: str,
    *,
    gone: Callable[[CreatedObjects], bool] | None = None,
    timeout_seconds: float = 60,
    what: str | None = None,
) -> Iterator[CreatedObjects]:
    """Yield a ``CreatedObjects``; afterwards delete what the test created and wait until
    ``gone`` (default: none of this kind left in the namespace)."""
    objects = CreatedObjects(kube, group, version, plural)
    yield objects
    objects.delete_all()
    done = gone or (lambda o: not o.left())
    wait_until(
        lambda: done(objects),
        timeout_seconds=timeout_seconds,
        interval_seconds=0.1,
        what=what or f"{plural} gone",
    )


def all_running_on(pods: list[Any], nodes: set[str], count: int) -> bool:
    """``count`` pods (none being deleted), every one Running on one of ``nodes``: a custom
    workload's pods where a test expects them."""
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    return (
        len(live) == count
        and all(p.status.phase == "Running" for p in live)
        and {p.spec.node_name for p in live} <= nodes
    )
