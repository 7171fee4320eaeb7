"""A CapacityProvider whose machines are kwok Nodes: scale-up creates Node objects for the
pool after a delay, terminate deletes them. It runs inside the operator process under test
(``--fake-provider support.kwok_provider:KwokProvider``), so the e2e loop is closed on the
real control plane.

Everything it knows comes from the cluster (nodes carry ``providerID: kwok://<pool>/<name>``)
except launches still in their delay, so an operator restarted mid-way sees the same fleet.
Tests announce a spot interruption by annotating a node with
``hybridgpu.io/test-interruption-at: <epoch seconds>``; the provider reports it as a notice.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from hybridgpu.cloud.base import Instance, InterruptionNotice
from hybridgpu.models.pool import GPUPoolSpec

POOL_LABEL = "hybridgpu.io/pool"
INTERRUPT_ANNOTATION = "hybridgpu.io/test-interruption-at"
PROVIDER_PREFIX = "kwok://"
PROVISIONING_DELAY_SECONDS = float(os.environ.get("HYBRIDGPU_KWOK_DELAY_SECONDS", "1.0"))


def kwok_node(name: str, pool: str, spec: GPUPoolSpec) -> dict[str, Any]:
    """A kwok-managed Node of ``pool`` shaped like the pool's spec (labels, taints, GPUs)."""
    gpus = str(spec.gpu.per_node)
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool,
        "hybridgpu.io/tier": str(spec.tier),
        "nvidia.com/gpu.product": spec.gpu.model,
        **spec.labels,
        **(spec.node_selector or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": labels,
        },
        "spec": {
            "providerID": f"{PROVIDER_PREFIX}{pool}/{name}",
            "taints": [t.to_wire() for t in spec.taints],
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


class KwokProvider:
    """CapacityProvider backed by kwok Node objects (see the module docstring)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        provisioning_delay_seconds: float = PROVISIONING_DELAY_SECONDS,
        kubeconfig: str | None = None,
    ) -> None:
        self.clock = clock
        self.delay = provisioning_delay_seconds
        self.api = config.new_client_from_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG")
        )
        self.core = client.CoreV1Api(self.api)
        self._lock = threading.Lock()
        self._launching: dict[str, dict[str, float]] = {}
        """pool -> node name -> launch time, for nodes still in their delay."""

    # ------------------------------------------------------------ reads
    def _nodes(self, pool: str) -> list[client.V1Node]:
        nodes = self.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items
        return [n for n in nodes if (n.spec.provider_id or "").startswith(PROVIDER_PREFIX)]

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        out = [
            Instance(
                instance_id=n.metadata.name,
                provider_id=n.spec.provider_id,
                state="terminating" if n.metadata.deletion_timestamp else "running",
                launched_at=n.metadata.creation_timestamp.timestamp(),
            )
            for n in self._nodes(pool)
        ]
        with self._lock:
            for name, at in self._launching.get(pool, {}).items():
                out.append(
                    Instance(name, f"{PROVIDER_PREFIX}{pool}/{name}", "pending", launched_at=at)
                )
        return out

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        return sum(1 for i in self.instances(pool, spec) if i.state != "terminating")

    # ------------------------------------------------------------ writes
    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        wanted = min(nodes, spec.max_nodes)
        missing = wanted - self.target(pool, spec)
        for _ in range(max(0, missing)):
            name = f"{pool}-{uuid.uuid4().hex[:6]}"
            with self._lock:
                self._launching.setdefault(pool, {})[name] = self.clock()
            timer = threading.Timer(self.delay, self._launch, args=(pool, spec, name))
            timer.daemon = True
            timer.start()

    def _launch(self, pool: str, spec: GPUPoolSpec, name: str) -> None:
        try:
            self.core.create_node(kwok_node(name, pool, spec))
        except ApiException as exc:
            if exc.status != 409:
                raise
        finally:
            with self._lock:
                self._launching.get(pool, {}).pop(name, None)

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        with self._lock:
            if self._launching.get(pool, {}).pop(instance_id, None) is not None:
                return
        try:
            self.core.delete_node(instance_id)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        return None

    # ---------------------------------------------------- interruptions
    def interruptions(self) -> list[InterruptionNotice]:
        notices = []
        for node in self.core.list_node().items:
            deadline = (node.metadata.annotations or {}).get(INTERRUPT_ANNOTATION)
            if deadline is None or not (node.spec.provider_id or "").startswith(PROVIDER_PREFIX):
                continue
            created = node.metadata.creation_timestamp.timestamp()
            notices.append(
                InterruptionNotice(
                    instance_id=node.metadata.name,
                    provider_id=node.spec.provider_id,
                    deadline=float(deadline),
                    kind="spot_interruption",
                    receipt=f"{node.metadata.name}@{created}",
                )
            )
        return notices

    def acknowledge(self, notice: InterruptionNotice) -> None:
        return None
