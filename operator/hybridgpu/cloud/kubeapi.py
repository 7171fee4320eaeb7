"""What the providers that act through Kubernetes objects share: the API client they are given
or find, and their API errors as the project's ProviderError."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from hybridgpu import kubeclient
from hybridgpu.cloud.base import ProviderError
from hybridgpu.models.timestamps import parse_rfc3339

api_client = kubeclient.api_client
_find_client = api_client  # the constructor's parameter of the same name hides it


class CustomObjectsProvider:
    """The constructor of a provider that acts through custom objects (Cluster API Machines,
    Karpenter NodeClaims): an injected clock, and the API client it is given or finds."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        kubeconfig: str | None = None,
        api_client: client.ApiClient | None = None,
    ) -> None:
        self.clock = clock
        self.api = api_client if api_client is not None else _find_client(kubeconfig)
        self.custom = client.CustomObjectsApi(self.api)


def provider_error(provider: str, action: str, err: ApiException) -> ProviderError:
    """``err`` as a ProviderError: conflicts, throttling and server errors are retryable; a
    forbidden, missing or invalid request will not pass by itself."""
    retryable = err.status in (409, 429) or (err.status or 0) >= 500
    return ProviderError(f"{provider}: {action}: {err.status} {err.reason}", retryable=retryable)


def epoch_seconds(timestamp: str | None) -> float:
    """An RFC 3339 timestamp of a custom object (``2025-01-02T03:04:05Z``) in epoch seconds;
    0.0 when absent (callers treat 0 as unknown)."""
    if not timestamp:
        return 0.0
    return parse_rfc3339(timestamp)


def condition_true(obj: dict[str, Any], type_: str) -> bool:
    """Whether the object's status has condition ``type_`` with status True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def api_problem(provider: str, what: str, err: ApiException) -> str:
    """One line for the operator's readiness: why ``what`` cannot be read."""
    if err.status == 404:
        return f"{what} is not served by the API server: is {provider} installed?"
    if err.status in (401, 403):
        return f"not allowed to read {what}: grant the RBAC of docs/providers.md"
    return f"cannot read {what}: {err.status} {err.reason}"
