"""A CapacityProvider whose machines are kwok fake Nodes, for local trials and tests.

On a cluster that runs kwok (``make demo``, ``make dev-cluster-up``), a pool with
``provider: {type: kwok}`` behaves like a cloud pool without a cloud: a scale-up creates, after
a boot delay, one Node per instance, labelled ``hybridgpu.io/pool=<pool>`` and shaped like the
pool (``nvidia.com/gpu`` capacity, the pool's labels and taints, annotated
``kwok.x-k8s.io/node: fake`` so kwok plays its kubelet); terminate deletes the Node.

Everything it knows comes from the cluster (its Nodes carry ``providerID: kwok://<pool>/<node>``)
except launches still booting, which live in this process: an operator restarted during a boot
forgets that launch, and its next tick asks again for the capacity still missing.

Like a real machine, a terminated one may take a while to go: with
$HYBRIDGPU_KWOK_TERMINATION_SECONDS (default 0) its Node stays, deleting (held by the finalizer
``hybridgpu.io/kwok-termination``), for that long, as a Karpenter Node does while Karpenter
drains it and terminates its instance, and the provider lists it as ``terminating``.

A real node registers before its device plugin reports its GPUs; with
$HYBRIDGPU_KWOK_GPU_REPORT_SECONDS (default 0) a kwok Node reports none for that long after it
is created, then its pool's (the window in which the operator keeps a new node for a Job:
core/reserve.py).

A spot interruption is announced by annotating a node of the provider with
``hybridgpu.io/kwok-interruption-at: <deadline, epoch seconds>``; the notice stays until the
operator acknowledges it (the annotation is then removed) or the node is gone.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from hybridgpu.cloud import kubeapi
from hybridgpu.cloud.base import Instance, InterruptionNotice, ProviderError
from hybridgpu.cloud.kubeapi import provider_error
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.pool import GPUPoolSpec, product_label
from hybridgpu.models.timestamps import parse_rfc3339

log = logging.getLogger(__name__)

POOL_LABEL = "hybridgpu.io/pool"
TIER_LABEL = "hybridgpu.io/tier"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok plays the kubelet of Nodes annotated ``kwok.x-k8s.io/node: fake``."""
INTERRUPTION_ANNOTATION = "hybridgpu.io/kwok-interruption-at"
PROVIDER_PREFIX = "kwok://"
BOOT_DELAY_ENV = "HYBRIDGPU_KWOK_DELAY_SECONDS"
DEFAULT_BOOT_DELAY_SECONDS = 10.0
GPU_REPORT_ENV = "HYBRIDGPU_KWOK_GPU_REPORT_SECONDS"
"""Seconds from a kwok Node's registration until it reports its GPUs (default 0: at once), as
a real node's device plugin does a while after its kubelet registered it."""
GPU_REPORT_TRIES = 10
"""How many times, a second apart, a GPU report is checked and made again."""
TERMINATION_ENV = "HYBRIDGPU_KWOK_TERMINATION_SECONDS"
TERMINATION_FINALIZER = "hybridgpu.io/kwok-termination"
"""Holds a terminated kwok Node, deleting, while its machine 'shuts down'."""


def _seconds_from_env(name: str, default: float) -> float:
    """$``name`` as a finite number of seconds >= 0, else ``default`` when unset or empty."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ProviderError(
            f"{name}={text!r}: expected a finite number of seconds >= 0", retryable=False
        )
    return seconds


def default_boot_delay_seconds() -> float:
    """$HYBRIDGPU_KWOK_DELAY_SECONDS, else 10 s: the boot delay of pools that set none."""
    return _seconds_from_env(BOOT_DELAY_ENV, DEFAULT_BOOT_DELAY_SECONDS)


def default_gpu_report_seconds() -> float:
    """$HYBRIDGPU_KWOK_GPU_REPORT_SECONDS, else 0: how long a new Node reports no GPUs."""
    return _seconds_from_env(GPU_REPORT_ENV, 0.0)


def default_termination_seconds() -> float:
    """$HYBRIDGPU_KWOK_TERMINATION_SECONDS, else 0: how long a terminated Node lingers."""
    return _seconds_from_env(TERMINATION_ENV, 0.0)


def provider_id(pool: str, node: str) -> str:
    """The Node.spec.providerID of a kwok instance: ``kwok://<pool>/<node>``."""
    return f"{PROVIDER_PREFIX}{pool}/{node}"


def kwok_node(
    name: str, pool: str, spec: GPUPoolSpec, *, gpus_reported: bool = True
) -> dict[str, Any]:
    """A kwok-managed Node of ``pool`` shaped like the pool's spec (labels, taints, GPUs;
    without ``gpus_reported``, no GPUs yet: its device plugin has not reported them)."""
    gpus = str(spec.gpu.per_node)
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU_RESOURCE: gpus}
    if not gpus_reported:
        del capacity[GPU_RESOURCE]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool,
        TIER_LABEL: str(spec.tier),
        "nvidia.com/gpu.product": product_label(spec.gpu),
        "nvidia.com/gpu.count": gpus,
        **spec.labels,
        **(spec.node_selector or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": labels,
        },
        "spec": {
            "providerID": provider_id(pool, name),
            "taints": [t.to_wire() for t in spec.taints],
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


_node_source: Callable[[], Sequence[dict[str, Any]]] | None = None
_selected_from: tuple[Sequence[dict[str, Any]] | None, dict[str, list[dict[str, Any]]]] = (
    None,
    {},
)
"""The last sequence the source returned, and what was selected from it by pool."""


def read_nodes_from(source: Callable[[], Sequence[dict[str, Any]]] | None) -> None:
    """Read Nodes from ``source`` (the operator's watch cache of Nodes) instead of listing
    them on every call: the operator process sets it at start (handlers/startup.py), so a
    tick makes no LIST for the kwok stand-in cloud either. None: list again.

    A source that returns the very same sequence while its Nodes are unchanged (the
    cache's ``Reflector.view``) has each pool's Nodes picked out of it once, not on each
    of the calls a tick makes per pool; a source returning a new sequence each time is
    read afresh each time."""
    global _node_source, _selected_from
    _node_source = source
    _selected_from = (None, {})


def _pool_nodes(nodes: Sequence[dict[str, Any]], pool: str) -> list[dict[str, Any]]:
    """The Nodes of ``nodes`` this provider made for ``pool`` (its label and provider ID),
    remembered while ``nodes`` is the last sequence the source returned."""
    global _selected_from
    seen, by_pool = _selected_from
    if seen is not nodes:
        by_pool = {}
        _selected_from = (nodes, by_pool)
    found = by_pool.get(pool)
    if found is None:
        selector = f"{POOL_LABEL}={pool}"
        found = [n for n in nodes if _matches(n, selector) and _made_for(n, pool)]
        by_pool[pool] = found
    return found


def _made_for(node: dict[str, Any], pool: str) -> bool:
    return (node.get("spec") or {}).get("providerID") == provider_id(pool, node["metadata"]["name"])


def _matches(node: dict[str, Any], label_selector: str | None) -> bool:
    """``key=value`` label selectors (the only kind used here)."""
    if not label_selector:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(
        labels.get(key) == value
        for key, _, value in (term.partition("=") for term in label_selector.split(","))
    )


def _epoch(stamp: str) -> float:
    """Epoch seconds of an RFC 3339 timestamp as the apiserver writes it."""
    return parse_rfc3339(stamp)


def _provider_error(action: str, err: ApiException) -> ProviderError:
    return provider_error("kwok", action, err)


@dataclass(slots=True)
class _Boot:
    pool: str
    launched_at: float
    timer: threading.Timer


class KwokProvider:
    """CapacityProvider backed by kwok Node objects (see the module docstring).

    ``boot_delay_seconds`` applies to pools without ``provider.kwok.bootDelay`` (default:
    $HYBRIDGPU_KWOK_DELAY_SECONDS, else 10 s). Times come from ``clock`` (epoch seconds); the
    boot delay itself runs on a real timer.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        boot_delay_seconds: float | None = None,
        termination_seconds: float | None = None,
        kubeconfig: str | None = None,
        api_client: client.ApiClient | None = None,
    ) -> None:
        self.clock = clock
        self.boot_delay_seconds = (
            default_boot_delay_seconds() if boot_delay_seconds is None else boot_delay_seconds
        )
        self.termination_seconds = (
            default_termination_seconds() if termination_seconds is None else termination_seconds
        )
        self.gpu_report_seconds = default_gpu_report_seconds()
        self.api = api_client if api_client is not None else kubeapi.api_client(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self._lock = threading.Lock()
        self._scale_lock = threading.Lock()
        """Held by set_target: two ticks raising one pool at once would both launch the gap."""
        self._booting: dict[str, _Boot] = {}
        """Node name -> its launch, for instances still in their boot delay."""
        self._reporting: dict[str, threading.Timer] = {}
        """Node name -> the timer that will report its GPUs (GPU_REPORT_ENV)."""
        self._created: dict[str, _Boot] = {}
        """Nodes created but not yet seen in the node source (it trails by a watch event)."""
        self._registered: dict[
            str, tuple[list[dict[str, Any]], tuple[Instance, ...], frozenset[str]]
        ] = {}
        """Pool -> the Nodes last read for it, their instances and names (kept while
        ``_nodes`` returns that same list)."""
        self._deleting: dict[str, tuple[list[dict[str, Any]], list[tuple[str, float]]]] = {}
        """Pool -> the Nodes last read for it, and those of them deleted and still holding
        the termination finalizer (name, deletion time): kept while that list is the one."""
        self._notices_from: tuple[Sequence[dict[str, Any]] | None, list[InterruptionNotice]] = (
            None,
            [],
        )
        """The last sequence the node source returned and the notices read from it."""

    def boot_delay_for(self, spec: GPUPoolSpec) -> float:
        """Seconds from a scale-up of this pool until its Node exists."""
        own = spec.provider.kwok.boot_delay if spec.provider.kwok else None
        return self.boot_delay_seconds if own is None else parse_duration_seconds(own)

    def close(self) -> None:
        """Cancel launches still booting (they never become Nodes) and GPU reports to come."""
        with self._lock:
            boots, self._booting = list(self._booting.values()), {}
            reports, self._reporting = list(self._reporting.values()), {}
        for boot in boots:
            boot.timer.cancel()
        for report in reports:
            report.cancel()

    # --- CapacityProvider -------------------------------------------------------------

    def instances(self, pool: str, spec: GPUPoolSpec) -> list[Instance]:
        nodes = self._nodes(pool)
        self._end_terminations(pool, nodes)
        made = self._registered.get(pool)
        if made is None or made[0] is not nodes:  # the same list: the same Nodes (_pool_nodes)
            made = (
                nodes,
                tuple(
                    Instance(
                        instance_id=n["metadata"]["name"],
                        provider_id=n["spec"]["providerID"],
                        state="terminating"
                        if n["metadata"].get("deletionTimestamp")
                        else "running",
                        launched_at=_epoch(n["metadata"]["creationTimestamp"]),
                    )
                    for n in nodes
                ),
                frozenset(n["metadata"]["name"] for n in nodes),
            )
            self._registered[pool] = made
        out = list(made[1])
        joined = made[2]
        with self._lock:
            for name in joined & self._created.keys():
                del self._created[name]
            booting = [
                (name, b)
                for name, b in [*self._booting.items(), *self._created.items()]
                if b.pool == pool
            ]
        out += [
            Instance(name, provider_id(pool, name), "pending", launched_at=boot.launched_at)
            for name, boot in booting
            if name not in joined  # created a moment ago, not yet forgotten here
        ]
        return out

    def target(self, pool: str, spec: GPUPoolSpec) -> int:
        return sum(1 for i in self.instances(pool, spec) if i.state != "terminating")

    def set_target(self, pool: str, spec: GPUPoolSpec, nodes: int) -> None:
        delay = self.boot_delay_for(spec)
        with self._scale_lock:
            missing = min(nodes, spec.max_nodes) - self.target(pool, spec)
            for _ in range(missing):
                self._launch_later(pool, spec, delay)

    def terminate(self, pool: str, spec: GPUPoolSpec, instance_id: str) -> None:
        with self._lock:
            boot = self._booting.get(instance_id)
            self._created.pop(instance_id, None)
            if boot is not None and boot.pool == pool:
                del self._booting[instance_id]
                boot.timer.cancel()
                return
        try:
            node = self.core.read_node(instance_id)
        except ApiException as err:
            if err.status == 404:
                return  # already gone: terminating again is a no-op
            raise _provider_error(f"read node {instance_id}", err) from err
        if node.spec.provider_id != provider_id(pool, instance_id):
            # Never ours (an owned node, another pool's): a provider deletes only what it made.
            log.warning("kwok: %s is not an instance of pool %s: not deleted", instance_id, pool)
            return
        try:
            if self.termination_seconds > 0 and not node.metadata.deletion_timestamp:
                # The machine takes a while to go: its Node lingers, deleting, until then.
                finalizers = [*(node.metadata.finalizers or []), TERMINATION_FINALIZER]
                self.core.patch_node(instance_id, {"metadata": {"finalizers": finalizers}})
                timer = threading.Timer(
                    self.termination_seconds, self._lift_finalizer, args=(instance_id,)
                )
                timer.daemon = True
                timer.start()
            self.core.delete_node(instance_id)
        except ApiException as err:
            if err.status != 404:
                raise _provider_error(f"delete node {instance_id}", err) from err

    def spot_price_per_node_hour(self, pool: str, spec: GPUPoolSpec) -> float | None:
        return None  # kwok has no market: pools are priced by pricing.perNodeHour

    def interruptions(self) -> list[InterruptionNotice]:
        source = _node_source
        nodes = source() if source is not None else self._list_nodes()
        seen, notices = self._notices_from
        if seen is nodes:  # the cache's same view: the same Nodes, the same notices
            return list(notices)
        notices = []
        for node in nodes:
            meta, spec = node.get("metadata") or {}, node.get("spec") or {}
            deadline = (meta.get("annotations") or {}).get(INTERRUPTION_ANNOTATION)
            if deadline is None or not str(spec.get("providerID") or "").startswith(
                PROVIDER_PREFIX
            ):
                continue
            try:
                deadline_seconds = float(deadline)
            except ValueError:
                name = meta["name"]
                log.warning("kwok: node %s: %r is not epoch seconds", name, deadline)
                continue
            notices.append(
                InterruptionNotice(
                    instance_id=meta["name"],
                    provider_id=spec["providerID"],
                    deadline=deadline_seconds,
                    kind="spot_interruption",
                    receipt=f"{meta['name']}@{deadline}",
                )
            )
        if source is not None:
            self._notices_from = (nodes, notices)
        return list(notices)

    def acknowledge(self, notice: InterruptionNotice) -> None:
        patch = {"metadata": {"annotations": {INTERRUPTION_ANNOTATION: None}}}
        try:
            self.core.patch_node(notice.instance_id, patch)
        except ApiException as err:
            if err.status != 404:
                raise _provider_error(f"acknowledge notice on {notice.instance_id}", err) from err

    # --- internals --------------------------------------------------------------------

    def _end_terminations(self, pool: str, nodes: list[dict[str, Any]]) -> None:
        """Lift the termination finalizer of Nodes deleted longer ago than the termination
        time (the timer that would have lifted it died with an earlier process)."""
        seen = self._deleting.get(pool)
        if seen is None or seen[0] is not nodes:  # the same list: the same Nodes (_pool_nodes)
            deleting = []
            for node in nodes:
                meta = node.get("metadata") or {}
                deleted = meta.get("deletionTimestamp")
                if deleted and TERMINATION_FINALIZER in (meta.get("finalizers") or []):
                    deleting.append((str(meta["name"]), _epoch(deleted)))
            seen = (nodes, deleting)
            self._deleting[pool] = seen
        now = self.clock()
        for name, deleted_at in seen[1]:
            if now - deleted_at >= self.termination_seconds:
                self._lift_finalizer(name)

    def _report_gpus(self, name: str, spec: GPUPoolSpec, tries: int = GPU_REPORT_TRIES) -> None:
        """The node's device plugin reports its GPUs (a timer thread). Checked a second later
        and reported again while they are missing: kwok writes a new Node's status once
        (its node-initialize stage), possibly from a copy read before this report."""
        with self._lock:
            if self._reporting.pop(name, None) is None:
                return  # the provider was closed
        gpus = {GPU_RESOURCE: str(spec.gpu.per_node)}
        body = {"status": {"capacity": gpus, "allocatable": gpus}}
        try:
            node = self.core.read_node(name)
            if (node.status.allocatable or {}).get(GPU_RESOURCE) == gpus[GPU_RESOURCE]:
                return
            self.core.patch_node_status(name, body)
        except ApiException as err:
            if err.status == 404:
                return
            log.warning("kwok: cannot report the GPUs of %s: %s", name, err.reason)
        except Exception:
            log.exception("kwok: cannot report the GPUs of %s", name)
        if tries > 1:
            self._report_gpus_in(1.0, name, spec, tries - 1)

    def _report_gpus_in(
        self, seconds: float, name: str, spec: GPUPoolSpec, tries: int = GPU_REPORT_TRIES
    ) -> None:
        """Report the node's GPUs ``seconds`` from now (a timer the provider's close cancels)."""
        timer = threading.Timer(seconds, self._report_gpus, args=(name, spec, tries))
        timer.daemon = True
        with self._lock:
            self._reporting[name] = timer
        timer.start()

    def _lift_finalizer(self, name: str) -> None:
        """The machine is gone: let its Node go (a timer thread, or the sweep above)."""
        try:
            node = self.core.read_node(name)
            left = [f for f in node.metadata.finalizers or [] if f != TERMINATION_FINALIZER]
            if len(left) != len(node.metadata.finalizers or []):
                self.core.patch_node(name, {"metadata": {"finalizers": left or None}})
        except ApiException as err:
            if err.status != 404:
                log.warning("kwok: cannot end the termination of %s: %s", name, err.reason)

    def _list_nodes(self, **kwargs: Any) -> list[dict[str, Any]]:
        """Nodes as the JSON the apiserver sent (a consistent read: a node this provider
        just created is in it). Not V1Node objects: at thousands of nodes building those
        took seconds of every tick."""
        source = _node_source
        if source is not None:
            return [n for n in source() if _matches(n, kwargs.get("label_selector"))]
        try:
            response = self.core.list_node(_preload_content=False, **kwargs)
        except ApiException as err:
            raise _provider_error("list nodes", err) from err
        return list(json.loads(response.data).get("items") or [])

    def _nodes(self, pool: str) -> list[dict[str, Any]]:
        source = _node_source
        if source is not None:
            return _pool_nodes(source(), pool)
        nodes = self._list_nodes(label_selector=f"{POOL_LABEL}={pool}")
        return [n for n in nodes if _made_for(n, pool)]

    def _launch_later(self, pool: str, spec: GPUPoolSpec, delay_seconds: float) -> None:
        name = f"{pool}-{uuid.uuid4().hex[:6]}"
        timer = threading.Timer(delay_seconds, self._boot, args=(pool, spec, name))
        timer.daemon = True
        with self._lock:
            self._booting[name] = _Boot(pool, self.clock(), timer)
        timer.start()

    def _boot(self, pool: str, spec: GPUPoolSpec, name: str) -> None:
        """The boot delay is over: the instance registers its Node (on a timer thread)."""
        with self._lock:
            if name not in self._booting:
                return  # terminated while booting
        created = False
        later = self.gpu_report_seconds > 0
        try:
            self.core.create_node(kwok_node(name, pool, spec, gpus_reported=not later))
            created = True
            if later:
                self._report_gpus_in(self.gpu_report_seconds, name, spec)
        except ApiException as err:
            # The launch failed; the pool's pending pods make the next tick ask again.
            log.warning("kwok: cannot create node %s of %s: %s", name, pool, err.reason)
        except Exception:
            log.exception("kwok: cannot create node %s of %s", name, pool)
        with self._lock:
            boot = self._booting.pop(name, None)
            terminated_meanwhile = boot is None
            if created and boot is not None and _node_source is not None:
                self._created[name] = boot
        if created and terminated_meanwhile:
            try:
                self.core.delete_node(name)
            except ApiException as err:
                log.warning("kwok: cannot delete node %s terminated during boot: %s", name, err)
