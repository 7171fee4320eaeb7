"""Watch caches: what a tick reads, kept current by one watch stream per kind.

Each kind (Nodes, GPU pods, GPU Jobs, GPUPools, ScalingPolicies, and JobSets, RayJobs,
PyTorchJobs and Kueue's ProvisioningRequests when their CRD is installed) has a
:class:`Reflector`: a thread that syncs its store the way client-go's reflector does now, by
a *streaming list* (a WATCH with ``sendInitialEvents=true``, served from the apiserver's
watch cache: the current objects as ``ADDED`` events, then a bookmark annotated
``k8s.io/initial-events-end`` carrying their resourceVersion), and then keeps the same watch
going. No LIST request, and no window between a list and its watch in which the list's
version can be compacted away (a paged LIST of 20,000 pods from etcd took minutes on a
loaded machine and its version was gone by the time the watch started). An apiserver that
refuses streaming lists (before v1.32, or the ``WatchList`` gate off) is listed instead with
``resourceVersion=0`` (from its watch cache, one response), then watched.

The objects of a sync are collected aside and replace the store in one step when the sync
is complete: a tick reads the last whole store, never a half-synced one. A change or
deletion that arrives before the bookmark (the contract says it cannot; kubernetes#134846
saw it) is applied to the objects collected, as client-go's reflector applies it to its
temporary store. A watch that ends
(the server's timeout, a dropped connection) is resumed from the last resourceVersion seen;
``410 Gone`` (that version is older than the apiserver keeps) starts a new sync at once,
and the store stays readable, whole and as it was, until the new one replaces it (as an
informer's does). The tick builds its snapshot from the stores, without a round trip to the
apiserver (:meth:`WatchCache.read_objects`).

Pods: the apiserver has no selector on resource requests, so the pod stream is every pod
not yet finished (a field selector on ``status.phase``) and only pods that request GPUs are
kept: memory grows with GPU pods, not with all pods. A pod's GPU request cannot change, so a
pod dropped here never becomes a GPU pod later.

Each stream's bytes are read on a thread of their own and queued as lines (:class:`_LineReader`),
so the socket is read as fast as the apiserver writes, never waiting for the JSON decoding and
conversion behind it: an apiserver closes a watcher whose buffer fills while it sends the
initial events ("Forcing pods watcher close due to unresponsiveness", seen at 5,000 nodes).
An event line that cannot hold an object to keep (a pod's line without ``nvidia.com/gpu``,
:attr:`Kind.hint`) is dropped before it is decoded; most of the pod stream is such lines.

A first sync cut before its end (the connection dropped, the apiserver closed the watcher)
cannot be resumed where it stopped: a streaming list has no continue token, and its initial
events carry no version to watch from until the bookmark that ends them, so the apiserver
must send the whole state again (a new WATCH with ``sendInitialEvents``). What the cut sync
received is kept, keyed by each event line's digest: in the next sync an identical line
(the same object at the same resourceVersion: the apiserver serializes it the same way) reuses
the object decoded the first time instead of decoding it again (:attr:`Counters.reused`).

Objects are stored as the JSON the apiserver sent, without ``metadata.managedFields`` and a
node's ``status.images`` (nothing here reads them and they are most of an object's size). The
stores are replaced object by object, never mutated, so a tick may hold the dicts it read.

Built on the official ``kubernetes`` client the operator already uses (its generated list
functions with ``watch=True`` and ``send_initial_events``, raw JSON with
``_preload_content=False``); see
docs/operator.md for why not kopf's indexes, kubernetes_asyncio or kr8s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from hybridgpu.kube.cluster import ClusterObjects
from hybridgpu.kube.convert import pod_spec_gpus
from hybridgpu.kube.errors import KubeError, NotFound, from_api_exception
from hybridgpu.kube.names import (
    GPU_RESOURCE,
    GPUPOOLS,
    GROUP,
    PROVREQ_GROUP,
    PROVREQ_PLURAL,
    PROVREQ_VERSION,
    REBALANCE_ANNOTATION,
    SCALINGPOLICIES,
    VERSION,
)
from hybridgpu.kube.workloads import CUSTOM_KINDS

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Listener = Callable[[str, Obj | None, Obj | None], None]
"""Called on the reflector's thread with (event type, old object, new object) after the
store changed; ``RELISTED`` with (None, None) after a sync replaced the whole store."""

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_SECONDS = 300
"""Server-side timeout of one watch request (jittered), after which it is resumed."""
CONNECT_SECONDS = 10.0
READ_SLACK_SECONDS = 30.0
"""A watch with no bytes (not even a bookmark) for its timeout plus this is dead."""
MAX_BACKOFF_SECONDS = 30.0
ABSENT_RECHECK_SECONDS = 60.0
"""How often an optional kind whose CRD is missing (or not allowed) is listed again."""
DEPLOYMENTS = "deployments"
REPLICASETS = "replicasets"
HPAS = "horizontalpodautoscalers"
RELISTED = "RELISTED"
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
GPU_HINT = (GPU_RESOURCE.encode(),)
"""A GPU pod's (or pod template's) JSON names the resource: the apiserver's JSON does not
escape it, so a line without these bytes requests no GPU."""


class Gone(Exception):
    """The resourceVersion asked for is older than the apiserver keeps (410)."""


def strip(obj: Obj) -> Obj:
    """``obj`` without the fields nothing in the operator reads (a shallow copy when any)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        obj = {**obj, "metadata": meta}
    status = obj.get("status")
    if obj.get("kind") == "Node" and isinstance(status, dict) and "images" in status:
        obj = {**obj, "status": {k: v for k, v in status.items() if k != "images"}}
    return obj


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def is_gpu_pod(obj: Obj) -> bool:
    return pod_spec_gpus(obj.get("spec") or {}) > 0


def is_serving_deployment(obj: Obj) -> bool:
    """A GPU Deployment, or one carrying a rebalance (it must be finished even if its
    template lost its GPUs meanwhile)."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    return is_gpu_job(obj) or REBALANCE_ANNOTATION in notes


def scales_a_deployment(obj: Obj) -> bool:
    return ((obj.get("spec") or {}).get("scaleTargetRef") or {}).get("kind") == "Deployment"


def is_gpu_job(obj: Obj) -> bool:
    return pod_spec_gpus(((obj.get("spec") or {}).get("template") or {}).get("spec") or {}) > 0


@dataclass(frozen=True)
class Kind:
    """One watched kind: how to list and watch it, and which of its objects to keep."""

    name: str
    list_call: Callable[..., Any]
    """A generated list function of the kubernetes client (it also watches)."""
    args: tuple[Any, ...] = ()
    field_selector: str | None = None
    label_selector: str | None = None
    keep: Callable[[Obj], bool] | None = None
    """Objects to store (None: all); the others are dropped as they arrive."""
    hint: tuple[bytes, ...] = ()
    """Bytes every kept object's JSON holds (one of them): an ADDED, MODIFIED or DELETED line
    with none of them is dropped undecoded (empty: every line is decoded). Only for a
    ``keep`` that cannot be true without one of these strings in the object's JSON."""
    optional: bool = False
    """A kind whose CRD may not be installed (JobSet, RayJob, PyTorchJob, TrainJob,
    ProvisioningRequest): while the apiserver answers 404 (no such resource) or 403 (the
    operator may not list it), its store is empty and counts as synced, and the sync is tried
    again every ``absent_recheck_seconds``."""


@dataclass
class Counters:
    """What a reflector did, for tests, metrics and the benchmark."""

    lists: int = 0
    """LIST requests (only against an apiserver that refuses streaming lists)."""
    syncs: int = 0
    """Whole stores received (a streaming list's initial events, or a LIST)."""
    relists: int = 0
    """Syncs started after the first (410 Gone)."""
    watches: int = 0
    """WATCH requests (each resume is one; a streaming list is one too)."""
    events: int = 0
    errors: int = 0
    absent: int = 0
    """Syncs of an optional kind answered 404 or 403 (its CRD is not installed, or RBAC)."""
    interrupted_syncs: int = 0
    """First syncs (streaming lists) cut before the bookmark that ends their initial events."""
    reused: int = 0
    """Objects of a sync taken from an interrupted one's without decoding them again."""
    skipped: int = 0
    """Event lines dropped undecoded (:attr:`Kind.hint`)."""
    backlog_peak_bytes: int = 0
    """The most bytes read from a stream and not yet decoded, at once."""


class Reflector:
    """One kind's store, synced by a streaming list (or a LIST) and kept by WATCHes resumed
    from the last version."""

    def __init__(
        self,
        kind: Kind,
        *,
        listener: Listener | None = None,
        watch_seconds: int = WATCH_SECONDS,
        absent_recheck_seconds: float = ABSENT_RECHECK_SECONDS,
    ) -> None:
        self.kind = kind
        self.listener = listener
        self.watch_seconds = watch_seconds
        self.absent_recheck_seconds = absent_recheck_seconds
        self.absent_since: float | None = None
        """When an optional kind was found missing (404/403), monotonic; None while present."""
        self.absent_reason: str | None = None
        self.resource_version: str | None = None
        """The last version seen (list, event or bookmark); where a resumed watch starts."""
        self.counters = Counters()
        self.synced = threading.Event()
        """Set once a sync has filled the store; it stays set while a later sync (after 410
        Gone) runs: the store keeps its last whole state until the new one replaces it."""
        self.stream_lists = True
        """Sync by a streaming list; False once the apiserver refused one (then LIST)."""
        self.last_error: str | None = None
        self._store: dict[str, Obj] = {}
        self._generation = 0
        """Counts the store's changes (under ``_lock``): a sorted view of an older one is stale."""
        self._view: tuple[Obj, ...] | None = None
        """The store sorted as a LIST returns it, kept until the store changes (every tick
        reads thousands of unchanged objects; sorting them again each time cost CPU)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hold = threading.Event()
        self._hold.set()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._partial: dict[bytes, tuple[str, Obj]] = {}
        """What interrupted first syncs received, by event line digest (for the next one)."""

    # ----------------------------------------------------------------- reads
    def items(self) -> list[Obj]:
        """The stored objects in the apiserver's LIST order (by namespace, then name)."""
        return list(self.view())

    def view(self) -> tuple[Obj, ...]:
        """:meth:`items` as a tuple that is the same object until the store changes, so a
        reader may keep what it derived from it while ``view() is`` the one it derived from
        (the objects are shared: read them, never change them)."""
        with self._lock:
            view, generation = self._view, self._generation
            if view is not None:
                return view
            pairs = list(self._store.items())
        pairs.sort(key=lambda kv: kv[0])
        view = tuple(obj for _, obj in pairs)
        with self._lock:
            if self._generation == generation:
                self._view = view
        return view

    def _changed(self) -> None:
        """The store changed (call with ``_lock`` held)."""
        self._generation += 1
        self._view = None

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def __len__(self) -> int:
        return len(self._store)

    # --------------------------------------------------------------- control
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"watch-{self.kind.name}", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._hold.set()
        self._drop_connection()
        if self._thread is not None:
            self._thread.join(timeout)

    def drop(self, *, hold: bool = False) -> None:
        """Cut the current watch connection, as a network failure would; with ``hold``, do
        not reconnect until :meth:`release` (tests and the benchmark use it)."""
        if hold:
            self._hold.clear()
        self._drop_connection()

    def release(self) -> None:
        self._hold.set()

    def _drop_connection(self) -> None:
        response = self._response
        if response is not None:
            _shutdown(response)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            self._hold.wait()
            if self._stop.is_set():
                return
            try:
                if self.resource_version is None and not self.stream_lists:
                    self._list()
                self._watch()
                backoff = 0.5
            except Gone:
                log.info(
                    "watch of %s: version %s is gone, syncing again",
                    self.kind.name,
                    self.resource_version,
                )
                self.resource_version = None
                self.counters.relists += 1
            except KubeError as err:
                if self._stop.is_set():
                    return
                if self.kind.optional and err.status in (403, 404):
                    self._absent(err)
                    self._stop.wait(self.absent_recheck_seconds)
                    continue
                if self.resource_version is None and self.stream_lists and err.status in (400, 422):
                    # Refused sendInitialEvents (no WatchList): LIST, then watch, from now on.
                    log.info("%s: no streaming list (%s); listing instead", self.kind.name, err)
                    self.stream_lists = False
                    continue
                backoff = self._failed(err, backoff)
            except Exception as err:  # any failure: wait, then resume from the last version
                if self._stop.is_set():
                    return
                backoff = self._failed(err, backoff)

    def _failed(self, err: Exception, backoff: float) -> float:
        """Count and log a failure, wait, and return the next backoff."""
        self.counters.errors += 1
        self.last_error = str(err)
        log.warning("watch of %s failed, resuming in %.1fs: %s", self.kind.name, backoff, err)
        self._stop.wait(backoff * (0.5 + random.random()))
        return min(MAX_BACKOFF_SECONDS, backoff * 2)

    def _absent(self, err: KubeError) -> None:
        """An optional kind is not served (404) or not allowed (403): an empty, synced store;
        logged once when it goes missing, not on every recheck."""
        self.counters.absent += 1
        self.resource_version = None
        with self._lock:
            had = bool(self._store)
            self._store = {}
            self._changed()
        reason = "not installed" if err.status == 404 else f"not allowed ({err})"
        if self.absent_since is None or reason != self.absent_reason:
            if err.status == 404:
                log.info("%s: CRD not installed; none are managed until it is", self.kind.name)
            else:
                log.warning("%s: %s; none are managed (docs/workloads.md)", self.kind.name, reason)
        else:
            log.debug("%s still %s", self.kind.name, reason)
        self.absent_since = self.absent_since or time.monotonic()
        self.absent_reason = reason
        self.last_error = None
        self.synced.set()
        if had:
            self._notify(RELISTED, None, None)

    def _selectors(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.kind.field_selector:
            out["field_selector"] = self.kind.field_selector
        if self.kind.label_selector:
            out["label_selector"] = self.kind.label_selector
        return out

    def _replace(self, fresh: dict[str, Obj], version: str | None) -> None:
        """A whole sync's objects become the store in one step, then the listener hears it."""
        with self._lock:
            self._store = fresh
            self._changed()
        self.resource_version = version
        self.counters.syncs += 1
        self.synced.set()
        self.last_error = None
        if self.absent_since is not None:
            log.info("%s: served again, %d found", self.kind.name, len(fresh))
            self.absent_since = self.absent_reason = None
        log.debug("synced %d %s at version %s", len(fresh), self.kind.name, version)
        self._notify(RELISTED, None, None)

    def _list(self) -> None:
        """Fill the store from one LIST served by the apiserver's watch cache
        (``resourceVersion=0``: no paging through etcd), for an apiserver without streaming
        lists."""
        self.counters.lists += 1
        try:
            response = self.kind.list_call(
                *self.kind.args,
                resource_version="0",
                _preload_content=False,
                _request_timeout=(CONNECT_SECONDS, 300),
                **self._selectors(),
            )
        except ApiException as exc:
            raise from_api_exception(exc, f"list {self.kind.name}") from exc
        page = json.loads(response.data)
        del response
        keep = self.kind.keep
        fresh = {
            key_of(obj): strip(obj) for obj in page.get("items") or [] if keep is None or keep(obj)
        }
        self._replace(fresh, (page.get("metadata") or {}).get("resourceVersion"))

    def _watch(self) -> None:
        """One WATCH request, applied event by event until it ends: from the last version
        seen, or (no version yet, or 410 Gone) a streaming list whose initial events are
        collected aside and replace the store at the bookmark that ends them."""
        timeout = int(self.watch_seconds * (1 + 0.2 * random.random()))
        self.counters.watches += 1
        version: dict[str, Any]
        syncing = self.resource_version is None
        if syncing:
            # A consistent read: the initial events are at least as new as this request.
            version = {"send_initial_events": True, "resource_version_match": "NotOlderThan"}
        else:
            version = {"resource_version": self.resource_version}
        try:
            response = self.kind.list_call(
                *self.kind.args,
                watch=True,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=(CONNECT_SECONDS, timeout + READ_SLACK_SECONDS),
                **version,
                **self._selectors(),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc)) from exc
            raise from_api_exception(exc, f"watch {self.kind.name}") from exc
        self._response = response
        reader = _LineReader(response, self.counters)
        reader.start()
        try:
            if syncing:
                self._sync(reader)
            else:
                self._follow(reader)
        finally:
            self._response = None
            # Whatever ended the stream, unblock the reader and wait for it before closing.
            _shutdown(response)
            reader.join()
            response.close()
            response.release_conn()

    def _sync(self, reader: _LineReader) -> None:
        """A streaming list's initial events, collected aside until the bookmark that ends
        them replaces the store; then the same stream is followed. Cut before that bookmark,
        what was received is kept for the next sync (see the module docstring)."""
        keep = self.kind.keep
        initial: dict[str, Obj] = {}
        received: dict[bytes, tuple[str, Obj]] = {}
        """What this sync received by line digest, for the next one if this one is cut."""
        partial = self._partial
        complete = False
        try:
            for line in reader.lines(self._stop):
                if self._skip(line, watching=False):
                    continue
                digest = hashlib.blake2b(line, digest_size=16).digest()
                kept = partial.get(digest)
                if kept is not None:
                    self.counters.reused += 1
                    received[digest] = kept
                    initial[kept[0]] = kept[1]
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ADDED":
                    if keep is None or keep(obj):
                        key = key_of(obj)
                        initial[key] = strip(obj)
                        received[digest] = (key, initial[key])
                elif kind in ("MODIFIED", "DELETED"):
                    # Not in the contract before the bookmark, but seen (kubernetes#134846):
                    # the change belongs to the store this sync builds, as in client-go's
                    # temporary store; applied to the store it replaces, it would be lost.
                    key = key_of(obj)
                    if kind == "DELETED" or (keep is not None and not keep(obj)):
                        initial.pop(key, None)
                    else:
                        initial[key] = strip(obj)
                elif kind == "BOOKMARK":
                    meta = obj.get("metadata") or {}
                    if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                        complete = True
                        self._partial = {}
                        self._replace(initial, meta.get("resourceVersion"))
                        break
                else:  # an ERROR before the store was whole
                    self._apply(event)
        finally:
            if not complete and not self._stop.is_set():
                self.counters.interrupted_syncs += 1
                self._partial = partial | received
        if complete:
            self._follow(reader)

    def _follow(self, reader: _LineReader) -> None:
        """Apply a watch's events to the store, one by one, until the stream ends."""
        for line in reader.lines(self._stop):
            if not self._skip(line, watching=True):
                self._apply(json.loads(line))

    def _skip(self, line: bytes, *, watching: bool) -> bool:
        """Whether ``line`` is an object event that cannot hold an object to keep
        (:attr:`Kind.hint`); a followed watch still moves to its resourceVersion."""
        hint = self.kind.hint
        if not hint or not line.startswith(_OBJECT_EVENTS) or any(h in line for h in hint):
            return False
        self.counters.skipped += 1
        if watching:
            self.counters.events += 1
            found = _RESOURCE_VERSION.search(line)
            if found:
                self.resource_version = found.group(1).decode()
        return True

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(str(obj.get("message")))
            raise KubeError(f"watch {self.kind.name}: {obj.get('message')}", status=code or 0)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self.resource_version = version
            return
        self.counters.events += 1
        key = key_of(obj)
        keep = self.kind.keep
        new = None
        with self._lock:
            old = self._store.get(key)
            if kind == "DELETED" or (keep is not None and not keep(obj)):
                if old is not None:
                    del self._store[key]
                    self._changed()
            else:
                new = strip(obj)
                self._store[key] = new
                self._changed()
        if version:
            self.resource_version = version
        if old is not None or new is not None:
            self._notify(str(kind), old, new)

    def _notify(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if self.listener is None:
            return
        try:
            self.listener(kind, old, new)
        except Exception:  # a listener's bug must not stop the stream
            log.exception("listener of %s failed", self.kind.name)


_QUERY = {
    "_continue": "continue",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "limit": "limit",
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "send_initial_events": "sendInitialEvents",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
}


def custom_lister(api: client.ApiClient) -> Callable[..., Any]:
    """A list-and-watch call for custom resources, as the generated
    ``list_cluster_custom_object`` but taking ``send_initial_events`` (the client's generated
    custom-object functions lack it); the same arguments as the generated list functions."""

    def list_custom(
        group: str,
        version: str,
        plural: str,
        *,
        _preload_content: bool = True,
        _request_timeout: Any = None,
        **kwargs: Any,
    ) -> Any:
        unknown = set(kwargs) - set(_QUERY)
        if unknown:
            raise TypeError(f"list_custom: unexpected {', '.join(sorted(unknown))}")
        query = [(_QUERY[k], v) for k, v in kwargs.items() if v is not None]
        return api.call_api(
            f"/apis/{group}/{version}/{plural}",
            "GET",
            query_params=query,
            header_params={
                "Accept": api.select_header_accept(
                    ["application/json", "application/json;stream=watch"]
                )
            },
            auth_settings=["BearerToken"],
            response_types_map={200: "object"},
            _return_http_data_only=True,
            _preload_content=_preload_content,
            _request_timeout=_request_timeout,
        )

    return list_custom


def serves_streaming_lists(api: client.ApiClient) -> bool:
    """Whether the apiserver serves streaming lists (a WATCH with ``sendInitialEvents``,
    v1.32+ with the ``WatchList`` gate on): one short watch of ScalingPolicies, closed as soon
    as it is answered. False when it is refused (400/422) or cannot be asked (then a LIST
    is the safe way to start a watch)."""
    try:
        response = custom_lister(api)(
            GROUP,
            VERSION,
            SCALINGPOLICIES,
            watch=True,
            send_initial_events=True,
            resource_version_match="NotOlderThan",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
            _request_timeout=(CONNECT_SECONDS, 30),
        )
    except Exception as err:  # refused, or no answer: start watches with a LIST
        log.info("streaming lists not served (%s): kopf lists before it watches", err)
        return False
    _shutdown(response)
    response.close()
    response.release_conn()
    return True


_OBJECT_EVENTS = (b'{"type":"ADDED"', b'{"type":"MODIFIED"', b'{"type":"DELETED"')
_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')
"""An object's own version: metadata's fields before it (name, generateName, namespace,
selfLink, uid) are serialized first and cannot hold the pattern."""
_READ_BYTES = 1 << 16


def _shutdown(response: Any) -> None:
    """Shut the response's socket down: a read blocked on it returns at once."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _LineReader:
    """Reads one watch response on a thread of its own and queues its lines (bytes, without
    the newline): the socket is drained as fast as the apiserver writes, however slowly the
    lines are decoded. The queue is not bounded: a backlog costs memory
    (:attr:`Counters.backlog_peak_bytes`), a full buffer on the apiserver's side costs the
    stream."""

    _END = object()

    def __init__(self, response: Any, counters: Counters) -> None:
        self.response = response
        self.counters = counters
        self.received_bytes = 0
        self.decoded_bytes = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._read, name="watch-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)

    def _read(self) -> None:
        tail = b""
        try:
            for chunk in self.response.stream(_READ_BYTES, decode_content=False):
                if not chunk:
                    continue
                self.received_bytes += len(chunk)
                *lines, tail = (tail + chunk).split(b"\n")
                if lines:
                    self._queue.put(lines)
                backlog = self.received_bytes - self.decoded_bytes
                if backlog > self.counters.backlog_peak_bytes:
                    self.counters.backlog_peak_bytes = backlog
            if tail.strip():
                self._queue.put([tail])
            self._queue.put(self._END)
        except BaseException as err:  # the stream's failure is the consumer's to handle
            self._queue.put(err)

    def lines(self, stop: threading.Event) -> Iterator[bytes]:
        """The stream's non-empty lines until it ends; raises what ended it, if it failed."""
        while not stop.is_set():
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            for line in item:
                self.decoded_bytes += len(line) + 1
                if line.strip():
                    yield line
                if stop.is_set():
                    return


@dataclass
class WatchCache:
    """The operator's reads, from one reflector per kind (see the module docstring).

    It answers the same reads as :class:`~hybridgpu.kube.cluster.KubeCluster`
    (``read_objects``, ``list_pools``, ``list_policies``, ``get_policy``), so the tick reads
    either. Reads wait (up to ``sync_timeout``) until every store has been synced, and raise
    a retryable :class:`KubeError` when one has not: nothing is decided from half a cluster.
    """

    reflectors: dict[str, Reflector]
    sync_timeout: float = 30.0
    listeners: list[Listener] = field(default_factory=list)

    @classmethod
    def for_api(
        cls,
        api: client.ApiClient,
        *,
        listener: Callable[[str, str, Obj | None, Obj | None], None] | None = None,
        watch_seconds: int = WATCH_SECONDS,
        sync_timeout: float = 30.0,
        absent_recheck_seconds: float = ABSENT_RECHECK_SECONDS,
    ) -> WatchCache:
        """The operator's kinds on ``api``; ``listener`` gets (kind, event, old, new).

        The suspendable batch kinds beyond batch/v1 Job (JobSet, RayJob, PyTorchJob, TrainJob) and
        ProvisioningRequests are optional streams: empty while their CRD is not installed,
        filled once it is."""
        core = client.CoreV1Api(api)
        batch = client.BatchV1Api(api)
        apps = client.AppsV1Api(api)
        autoscaling = client.AutoscalingV2Api(api)
        custom = custom_lister(api)
        kinds = [
            Kind("nodes", core.list_node),
            Kind(
                "pods",
                core.list_pod_for_all_namespaces,
                field_selector=UNFINISHED_PODS,
                keep=is_gpu_pod,
                hint=GPU_HINT,
            ),
            Kind("jobs", batch.list_job_for_all_namespaces, keep=is_gpu_job, hint=GPU_HINT),
            Kind(GPUPOOLS, custom, (GROUP, VERSION, GPUPOOLS)),
            Kind(
                SCALINGPOLICIES,
                custom,
                (GROUP, VERSION, SCALINGPOLICIES),
            ),
            Kind(
                PROVREQ_PLURAL,
                custom,
                (PROVREQ_GROUP, PROVREQ_VERSION, PROVREQ_PLURAL),
                optional=True,
            ),
            # The serving rebalance's reads (optional: without RBAC for them, no rebalance).
            Kind(
                DEPLOYMENTS,
                apps.list_deployment_for_all_namespaces,
                keep=is_serving_deployment,
                hint=(*GPU_HINT, REBALANCE_ANNOTATION.encode()),
                optional=True,
            ),
            Kind(
                REPLICASETS,
                apps.list_replica_set_for_all_namespaces,
                keep=is_gpu_job,
                hint=GPU_HINT,
                optional=True,
            ),
            Kind(
                HPAS,
                autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
                keep=scales_a_deployment,
                optional=True,
            ),
            *(
                Kind(
                    workload.plural,
                    custom,
                    (workload.group, workload.version, workload.plural),
                    optional=True,
                )
                for workload in CUSTOM_KINDS
            ),
        ]

        def bound(name: str) -> Listener | None:
            if listener is None:
                return None
            return lambda event, old, new: listener(name, event, old, new)

        return cls(
            {
                k.name: Reflector(
                    k,
                    listener=bound(k.name),
                    watch_seconds=watch_seconds,
                    absent_recheck_seconds=absent_recheck_seconds,
                )
                for k in kinds
            },
            sync_timeout=sync_timeout,
        )

    def start(self) -> None:
        for reflector in self.reflectors.values():
            reflector.start()

    def stop(self) -> None:
        for reflector in self.reflectors.values():
            reflector.stop()

    def unsynced(self) -> list[str]:
        """Kinds whose store has not been synced yet (after a 410 the last whole store is
        read while the next sync runs)."""
        return [name for name, r in self.reflectors.items() if not r.synced.is_set()]

    def problems(self) -> list[str]:
        """Readiness: one line when some store is not synced."""
        missing = self.unsynced()
        if not missing:
            return []
        why = "; ".join(
            f"{name}: {self.reflectors[name].last_error}"
            for name in missing
            if self.reflectors[name].last_error
        )
        return [f"watch caches not synced yet: {', '.join(missing)}" + (f" ({why})" if why else "")]

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (self.sync_timeout if timeout is None else timeout)
        for reflector in self.reflectors.values():
            if not reflector.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def _synced(self, *names: str) -> list[Reflector]:
        reflectors = [self.reflectors[n] for n in names]
        deadline = time.monotonic() + self.sync_timeout
        for reflector in reflectors:
            if not reflector.synced.wait(max(0.0, deadline - time.monotonic())):
                raise KubeError(
                    f"the watch cache of {reflector.kind.name} is not synced"
                    + (f": {reflector.last_error}" if reflector.last_error else ""),
                    retryable=True,
                )
        return reflectors

    # ------------------------------------------------------------- the reads
    def read_objects(self) -> ClusterObjects:
        """Nodes, GPU pods (not finished), GPU Jobs and the other suspendable batch kinds
        whose CRD is installed (each object with its ``kind``), as a LIST would return them."""
        nodes, pods, jobs = self._synced("nodes", "pods", "jobs")
        custom = [k for k in CUSTOM_KINDS if k.plural in self.reflectors]
        workloads = [
            obj if obj.get("kind") else {**obj, "kind": kind.kind}
            for kind, reflector in zip(
                custom, self._synced(*(k.plural for k in custom)), strict=True
            )
            for obj in reflector.items()
        ]
        return ClusterObjects(
            nodes=nodes.items(), pods=pods.items(), jobs=jobs.items(), workloads=workloads
        )

    def list_provisioning_requests(self) -> list[Obj]:
        """Every ProvisioningRequest (autoscaling.x-k8s.io/v1); none while its CRD is not
        installed or the operator may not list it."""
        if PROVREQ_PLURAL not in self.reflectors:
            return []
        return self._synced(PROVREQ_PLURAL)[0].items()

    def _serving(self, name: str, what: str) -> list[Obj]:
        """A serving kind's objects; not allowed (403) is the tick's error, as when it listed
        them, so it reports ``serving workloads not read``."""
        reflector = self._synced(name)[0]
        if reflector.absent_since is not None and reflector.absent_reason != "not installed":
            raise KubeError(f"{what}: {reflector.absent_reason}", status=403)
        return reflector.items()

    def list_deployments(self) -> list[Obj]:
        """GPU Deployments (and any carrying a rebalance); other Deployments are not kept."""
        return self._serving(DEPLOYMENTS, "list deployments")

    def list_replicasets(self) -> list[Obj]:
        """ReplicaSets whose pods request GPUs."""
        return self._serving(REPLICASETS, "list replicasets")

    def list_hpas(self) -> list[Obj]:
        """HorizontalPodAutoscalers that scale a Deployment."""
        return self._serving(HPAS, "list horizontalpodautoscalers")

    def absent_kinds(self) -> list[str]:
        """Optional kinds not served now (their CRD is not installed, or RBAC forbids)."""
        return [n for n, r in self.reflectors.items() if r.absent_since is not None]

    def list_pools(self) -> list[Obj]:
        return self._synced(GPUPOOLS)[0].items()

    def list_nodes(self) -> list[Obj]:
        """Every Node the cache keeps (a CapacityPlan counts its pools' nodes)."""
        return self._synced("nodes")[0].items()

    def list_policies(self) -> list[Obj]:
        return self._synced(SCALINGPOLICIES)[0].items()

    def get_policy(self, name: str) -> Obj:
        found = self._synced(SCALINGPOLICIES)[0].get(name)
        if found is None:
            raise NotFound(f"ScalingPolicy {name} not found (watch cache)", status=404)
        return found

    def uid_of(self, kind: str, name: str, namespace: str | None = None) -> str | None:
        """The uid of the object of ``kind`` (a Kubernetes kind: Node, Pod, Job, GPUPool...)
        named ``name`` as the cache has it; None when the cache keeps no such kind or object
        (a Node just launched, a pod without GPUs): then it is read from the apiserver."""
        reflector = self.reflectors.get(self._kind_names.get(kind, ""))
        if reflector is None:
            return None
        found = reflector.get(f"{namespace}/{name}" if namespace else name)
        uid = ((found or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    _kind_names = {
        "Node": "nodes",
        "Pod": "pods",
        "Job": "jobs",
        "GPUPool": GPUPOOLS,
        "ScalingPolicy": SCALINGPOLICIES,
        "Deployment": DEPLOYMENTS,
        **{k.kind: k.plural for k in CUSTOM_KINDS},
    }
    """The cache's stream of each kind an Event may be about."""

    def counters(self) -> dict[str, Counters]:
        return {name: r.counters for name, r in self.reflectors.items()}
