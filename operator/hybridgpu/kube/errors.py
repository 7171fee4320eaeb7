"""The adapter's errors: ``ApiException`` never leaves ``hybridgpu.kube``."""

from __future__ import annotations

import json

from hybridgpu.errors import HybridGPUError


class KubeError(HybridGPUError):
    """The apiserver refused or failed a request; ``retryable`` says whether to try later."""

    def __init__(self, message: str, *, status: int = 0, retryable: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class NotFound(KubeError):
    """The object does not exist (any more)."""


class Conflict(KubeError):
    """Someone else changed the object first (409), or it already exists."""


class Invalid(KubeError):
    """The apiserver rejected the change as invalid (422): retrying the same will not help."""


class DisruptionRefused(KubeError):
    """An eviction was refused by a PodDisruptionBudget (429): try again later."""


def from_api_exception(exc: Exception, what: str) -> KubeError:
    """The project error for a ``kubernetes.client.ApiException`` raised while doing ``what``."""
    status = int(getattr(exc, "status", 0) or 0)
    detail = _message(getattr(exc, "body", None)) or str(getattr(exc, "reason", "") or exc)
    text = f"{what}: {detail}" if detail else what
    if status == 404:
        return NotFound(text, status=status, retryable=False)
    if status == 409:
        return Conflict(text, status=status, retryable=True)
    if status == 422:
        return Invalid(text, status=status, retryable=False)
    if status == 429:
        return DisruptionRefused(text, status=status, retryable=True)
    if status in (400, 401, 403):
        return KubeError(text, status=status, retryable=False)
    return KubeError(text, status=status, retryable=True)


def _message(body: object) -> str:
    if not body:
        return ""
    try:
        parsed = json.loads(body if isinstance(body, str | bytes) else str(body))
    except (TypeError, ValueError):
        return str(body)[:300]
    if isinstance(parsed, dict):
        return str(parsed.get("message", ""))[:300]
    return ""
