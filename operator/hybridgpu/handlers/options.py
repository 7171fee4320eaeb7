"""Operator options: from `hybridgpu run` flags, or from HYBRIDGPU_* environment variables
when started as ``kopf run -m hybridgpu.handlers``."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from hybridgpu.inputs import (
    check_webhook_cert_dir,
    from_environment,
    non_negative_number,
    non_negative_whole_number,
    port_number,
    positive_number,
    switch,
)

T = TypeVar("T")

DEFAULT_FAKE_PROVIDER = "hybridgpu.cloud.fake:FakeProvider"


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    """How this operator process behaves."""

    kubeconfig: str | None = None
    identity: str = ""
    """Who holds the leader lease: the pod name in a Deployment (stable across container
    restarts, so a restarted container takes its lease back at once)."""
    lease_namespace: str = "default"
    lease_seconds: float = 15.0
    fake_provider: str = DEFAULT_FAKE_PROVIDER
    """``module:attribute`` of the factory used for pools with provider type fake."""
    cluster_name: str = "default"
    """Tag value ``hybridgpu.io/cluster`` of the cloud instances this operator launches and
    finds again: unique per cluster sharing a cloud account."""
    trigger_debounce_seconds: float = 0.3
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = None
    """Serve /metrics (hybridgpu_*) here; None: not served."""
    webhook_port: int | None = None
    """Serve the admission webhook here (0: any free port); None: not served."""
    webhook_address: str = "127.0.0.1"
    webhook_host: str | None = None
    """Host name in the webhook URL kopf registers (default: the address)."""
    webhook_cert_dir: str | None = None
    """tls.crt, tls.key and ca.crt of the webhook (the chart's Secret); None: a self-signed
    CA is made at start and kopf creates the webhook configurations itself (local runs)."""
    profile_ticks: str | None = None
    """A file where the ticks' cProfile statistics are written after each tick (every tick
    since start, added up; read with ``python -m pstats``); None: not profiled. For
    benchmarks (bench/kwok_scale.py --profile), from $HYBRIDGPU_PROFILE_TICKS."""
    freeze_heap: bool = False
    """After the first tick on freshly synced watch caches (and again after the Nodes or
    pods are synced again, e.g. after 410 Gone), collect garbage once and move every object
    then alive out of the garbage collector's sight (``gc.freeze``): the cached Nodes and
    pods, hundreds of thousands of objects at 5,000 nodes, are then not traversed again by
    the full collections that otherwise landed in the middle of ticks (about a sixth of a
    steady tick's CPU at 2,000 nodes). They are still freed when dropped (plain JSON holds
    no reference cycles). From $HYBRIDGPU_FREEZE_HEAP: on unless ``0`` (or false, no, off)."""
    watch_seconds: int | None = None
    """How long each watch request (the watch caches' and kopf's) lasts before it is resumed
    from its last version; None: the defaults (300 s and 120 s). From
    $HYBRIDGPU_WATCH_SECONDS: tests shorten it so that a few ticks see watches resumed."""

    @classmethod
    def from_env(cls, *, check_cert_dir: bool = True) -> OperatorOptions:
        """The options the environment sets; UserError naming a variable whose value its
        flag of `hybridgpu run` would refuse (the same check: ports 0 to 65535, seconds of
        a lease above 0, ...), and one naming the certificate directory of a webhook served
        ($HYBRIDGPU_WEBHOOK_PORT set) without its files."""
        return cls._from(os.environ, check_cert_dir=check_cert_dir)

    @classmethod
    def _from(cls, env: Mapping[str, str], *, check_cert_dir: bool = True) -> OperatorOptions:
        def read(name: str, parse: Callable[[str], T], default: T) -> T:
            value = from_environment(env, name, parse)
            return default if value is None else value

        webhook_port = from_environment(env, "HYBRIDGPU_WEBHOOK_PORT", port_number)
        cert_dir = env.get("HYBRIDGPU_WEBHOOK_CERT_DIR") or None
        if check_cert_dir and cert_dir is not None and webhook_port is not None:
            # Only a webhook that is served needs its files (`run` checks them itself, once
            # its flags say whether it is).
            check_webhook_cert_dir(cert_dir, "$HYBRIDGPU_WEBHOOK_CERT_DIR")
        return cls(
            kubeconfig=env.get("KUBECONFIG") or None,
            identity=env.get("HYBRIDGPU_IDENTITY") or default_identity(),
            lease_namespace=env.get("HYBRIDGPU_LEASE_NAMESPACE")
            or env.get("POD_NAMESPACE")
            or "default",
            lease_seconds=read("HYBRIDGPU_LEASE_SECONDS", positive_number, 15.0),
            fake_provider=env.get("HYBRIDGPU_FAKE_PROVIDER", DEFAULT_FAKE_PROVIDER),
            cluster_name=env.get("HYBRIDGPU_CLUSTER_NAME") or "default",
            trigger_debounce_seconds=read("HYBRIDGPU_DEBOUNCE_SECONDS", non_negative_number, 0.3),
            metrics_address=env.get("HYBRIDGPU_METRICS_ADDRESS") or "127.0.0.1",
            metrics_port=from_environment(env, "HYBRIDGPU_METRICS_PORT", port_number),
            webhook_port=webhook_port,
            webhook_address=env.get("HYBRIDGPU_WEBHOOK_ADDRESS") or "127.0.0.1",
            webhook_host=env.get("HYBRIDGPU_WEBHOOK_HOST") or None,
            webhook_cert_dir=cert_dir,
            profile_ticks=env.get("HYBRIDGPU_PROFILE_TICKS") or None,
            freeze_heap=read("HYBRIDGPU_FREEZE_HEAP", switch, True),
            watch_seconds=from_environment(
                env, "HYBRIDGPU_WATCH_SECONDS", non_negative_whole_number
            ),
        )


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
