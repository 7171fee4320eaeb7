"""kopf settings in one place, the adapters built once into ``memo``, probes, cleanup."""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from hybridgpu.cloud import kwok
from hybridgpu.handlers import admission
from hybridgpu.handlers.loop import Reconciler
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.cache import WATCH_SECONDS, WatchCache, serves_streaming_lists
from hybridgpu.kube.cluster import KubeCluster, load_api_client
from hybridgpu.kube.names import FINALIZER, GROUP
from hybridgpu.metrics.exported import serve


class _QuietSuccess(logging.Filter):
    """Drops kopf's "Handler ... succeeded." line for handlers that run on every event of
    many objects (one line per pod event would drown the log); failures still show."""

    def __init__(self, *handlers: Any) -> None:
        """``handlers``: the handler functions, or the ids of webhook handlers."""
        super().__init__()
        self.handler_ids = tuple(f"'{h if isinstance(h, str) else h.__name__}'" for h in handlers)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.endswith("succeeded.") and any(h in message for h in self.handler_ids))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Our finalizer and annotations (not kopf's defaults), short watches, the adapters."""
    options = memo.get("options") or OperatorOptions.from_env()
    memo["options"] = options
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Handler failures and retries become Kubernetes Events users see with kubectl describe.
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    watch_settings(settings, options.watch_seconds)
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8
    logging.getLogger("kopf.objects").addFilter(
        _QuietSuccess(
            admission.report_pods_admitted_without_webhook,
            admission.MUTATE_ID,
            admission.VALIDATE_ID,
        )
    )
    if options.webhook_port is None:
        settings.admission.server = admission.NoWebhookServer()
    else:
        settings.admission.server = admission.webhook_server(options)
        if not options.webhook_cert_dir:
            settings.admission.managed = admission.MANAGED_CONFIGURATION
    if "reconciler" not in memo:
        api = load_api_client(options.kubeconfig)
        # The watches get a client of their own: a long-lived stream per kind must not take
        # the connections the tick's writes use.
        cache = WatchCache.for_api(
            load_api_client(options.kubeconfig),
            listener=lambda kind, event, old, new: _on_cache_event(memo, kind, event, old, new),
            watch_seconds=options.watch_seconds or WATCH_SECONDS,
        )
        # kopf starts (and, after 410 Gone, restarts) its watches with a streaming list
        # where the apiserver serves them: else each restart is a LIST of the kind.
        memo["streaming_lists"] = serves_streaming_lists(api)
        cluster = KubeCluster(api)
        cluster.known_uids = lambda ref: cache.uid_of(ref.kind, ref.name, ref.namespace)
        memo["reconciler"] = Reconciler(cluster, options, reads=cache)
        memo["watch_cache"] = cache
        # The kwok stand-in cloud reads its instances' Nodes from the same cache.
        kwok.read_nodes_from(cache.reflectors["nodes"].view)
        cache.start()
    settings.watching.initial_streaming = bool(memo.get("streaming_lists"))
    # Readiness: the API answers, our CRDs are current, every pool's provider can be built,
    # and the watch caches the ticks read have been listed.
    reconciler: Reconciler = memo["reconciler"]
    reconciler.start_lease_renewal()
    preflight = reconciler.preflight
    preflight.start()
    if options.metrics_port is not None and "metrics_server" not in memo:
        memo["metrics_server"] = serve(
            options.metrics_port,
            options.metrics_address,
            readiness=lambda: [*preflight.problems, *_cache_problems(reconciler)],
        )


def watch_settings(settings: kopf.OperatorSettings, seconds: int | None = None) -> None:
    """How kopf's own watches run: reconnected regularly (every ``seconds``, default 120: a
    silently dropped connection must not blind the operator), and labelled kinds filtered by
    the apiserver."""
    settings.watching.server_timeout = seconds or 120
    settings.watching.client_timeout = (seconds or 120) + 30
    settings.watching.connect_timeout = 10
    for resource, selector in admission.SERVER_SIDE_LABELS.items():
        settings.watching.label_selectors[resource] = selector


def _on_cache_event(memo: kopf.Memo, kind: str, event: str, old: Any, new: Any) -> None:
    reconciler: Reconciler | None = memo.get("reconciler")
    if reconciler is not None:
        reconciler.on_cache_event(kind, event, old, new)


def _cache_problems(reconciler: Reconciler) -> list[str]:
    reads = reconciler.reads
    return reads.problems() if isinstance(reads, WatchCache) else []


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    reconciler = memo.get("reconciler")
    if reconciler is not None:
        reconciler.stop_lease_renewal()
        reconciler.preflight.stop()
        reconciler.cluster.close()
    cache = memo.get("watch_cache")
    if cache is not None:
        cache.stop()
    server = memo.get("metrics_server")
    if server is not None:
        server.shutdown()


STUCK_TICK_SECONDS = 300.0


@kopf.on.probe(id="lastTickAgeSeconds", errors=kopf.ErrorsMode.PERMANENT)
def last_tick_age(memo: kopf.Memo, **_: Any) -> float | None:
    """Seconds since the last reconcile tick (None before the first one)."""
    reconciler: Reconciler | None = memo.get("reconciler")
    if reconciler is None:
        return None
    started = reconciler.tick_started_at
    if started is not None and time.monotonic() - started > STUCK_TICK_SECONDS:
        # Failing the probe makes the kubelet restart a process whose loop hangs.
        raise RuntimeError(f"a tick has been running for over {STUCK_TICK_SECONDS:.0f}s")
    if not reconciler.last_tick_at:
        return None
    return round(time.time() - reconciler.last_tick_at, 1)


@kopf.on.probe(id="notReady")
def not_ready(memo: kopf.Memo, **_: Any) -> list[str]:
    """Why the operator cannot work (start-up checks), one line each; readiness is /readyz."""
    reconciler: Reconciler | None = memo.get("reconciler")
    if reconciler is None:
        return []
    return [*reconciler.preflight.problems, *_cache_problems(reconciler)]


@kopf.on.probe(id="leader")
def leader(memo: kopf.Memo, **_: Any) -> bool:
    """Whether this replica held the leader lease at its last tick."""
    reconciler: Reconciler | None = memo.get("reconciler")
    return bool(reconciler and reconciler.last and reconciler.last.leader)
