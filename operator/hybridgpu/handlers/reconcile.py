"""The reconcile loop: one daemon per ScalingPolicy ticking at ``spec.interval``, woken
early (debounced) when a GPU pod cannot be scheduled or a node comes or goes (the watch
cache's events, ``Reconciler.on_cache_event``)."""

from __future__ import annotations

from typing import Any

import kopf

from hybridgpu.handlers.loop import Reconciler
from hybridgpu.kube.errors import KubeError
from hybridgpu.kube.names import GROUP, SCALINGPOLICIES, VERSION
from hybridgpu.models.base import parse_duration_seconds
from hybridgpu.models.policy import ScalingPolicySpec

DEFAULT_INTERVAL_SECONDS = 30.0
ERROR_BACKOFF_SECONDS = 2.0


def interval_of(spec: Any) -> float:
    try:
        return parse_duration_seconds(ScalingPolicySpec.model_validate(dict(spec)).interval)
    except Exception:
        return DEFAULT_INTERVAL_SECONDS


@kopf.daemon(GROUP, VERSION, SCALINGPOLICIES, cancellation_timeout=10.0)
def reconcile_policy(
    name: str, spec: Any, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: Any, **_: Any
) -> None:
    """Tick until the policy is deleted or the operator stops (a worker thread)."""
    reconciler: Reconciler = memo["reconciler"]
    monotonic = reconciler.monotonic
    wake = reconciler.wake_event(name)
    try:
        while not stopped:
            wait_seconds = interval_of(spec)
            # Start to start: a tick that takes 8 s of a 10 s interval waits 2 s, not 10.
            deadline = monotonic() + wait_seconds
            try:
                result = reconciler.tick(name)
                for error in result.errors:
                    logger.warning(error)
            except KubeError as err:
                logger.warning(f"tick failed, retrying: {err}")
                deadline = monotonic() + min(wait_seconds, ERROR_BACKOFF_SECONDS)
            except Exception as err:  # a bug in one tick must not kill the loop
                logger.exception(f"tick failed: {err}")
                deadline = monotonic() + min(wait_seconds, ERROR_BACKOFF_SECONDS)
            while not stopped and monotonic() < deadline:
                if wake.wait(timeout=min(0.2, max(0.0, deadline - monotonic()))):
                    wake.clear()
                    # Debounce: a burst of pending pods becomes one tick.
                    stopped.wait(reconciler.options.trigger_debounce_seconds)
                    break
    finally:
        reconciler.forget_wake_event(name)


# Pending GPU pods and nodes that come or go wake the loops from the watch cache's streams
# (Reconciler.on_cache_event): kopf does not watch pods or nodes, so the operator holds one
# stream of each, filtered to GPU pods, instead of two.
