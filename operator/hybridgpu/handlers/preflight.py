"""Whether the operator can work at all: the Kubernetes API answers, our CRDs are installed at
the version this release writes, and every pool's provider can be built.

Checked at start and then every ``PREFLIGHT_INTERVAL_SECONDS`` in a thread of its own (so a
fix is seen without a restart). The problems, one line each, are the operator's readiness
(``/readyz`` on the metrics port answers 503 with them), one log line when they change, and
the ScalingPolicies' ``OperatorReady`` condition. Nothing here blocks a tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from hybridgpu.handlers.capacity import Providers, load_factory
from hybridgpu.handlers.options import DEFAULT_FAKE_PROVIDER, OperatorOptions
from hybridgpu.kube.errors import KubeError
from hybridgpu.models.crd import all_crds, crd_drift
from hybridgpu.models.pool import GPUPoolSpec

log = logging.getLogger(__name__)

PREFLIGHT_INTERVAL_SECONDS = 30.0
NOT_CHECKED = "starting: the start-up checks have not run yet"


class PreflightCluster(Protocol):
    """What the checks read from the cluster (kube.cluster.KubeCluster)."""

    def server(self) -> str: ...

    def read_crd(self, name: str) -> dict[str, Any] | None: ...

    def list_pools(self) -> list[dict[str, Any]]: ...


def crd_problems(cluster: PreflightCluster) -> list[str]:
    """The API server cannot be asked, or a CRD is missing or older than the models."""
    problems = []
    for expected in all_crds().values():
        name = expected["metadata"]["name"]
        try:
            installed = cluster.read_crd(name)
        except KubeError as err:
            return [f"cannot reach the Kubernetes API at {cluster.server()}: {err}"]
        if installed is None:
            problems.append(
                f"CRD {name} is not installed: apply this release's crds/ "
                "(kubectl apply --server-side -f crds/, or helm upgrade)"
            )
            continue
        drift = crd_drift(installed, expected)
        if drift is not None:
            problems.append(f"{drift}: apply this release's crds/")
    return problems


def provider_problems(
    cluster: PreflightCluster, providers: Providers, options: OperatorOptions
) -> list[str]:
    """Providers that cannot be built or cannot authenticate, one line each."""
    problems = []
    if options.fake_provider != DEFAULT_FAKE_PROVIDER:
        try:
            load_factory(options.fake_provider)
        except Exception as err:
            problems.append(f"--fake-provider {options.fake_provider} cannot be loaded: {err}")
    try:
        pools = cluster.list_pools()
    except KubeError:
        return problems  # crd_problems says why
    seen: set[str] = set()
    for raw in pools:
        name = raw["metadata"]["name"]
        try:
            spec = GPUPoolSpec.model_validate(raw.get("spec") or {})
        except ValidationError:
            continue  # the pool's own conditions say what is wrong with its spec
        kind = spec.provider.type
        if kind == "static" or (kind == "fake" and problems):
            continue
        try:
            provider = providers.for_spec(spec)
        except Exception as err:
            problems.append(f"GPUPool {name}: cannot build its {kind} provider: {err}")
            continue
        check: Callable[[], str | None] | None = getattr(provider, "credentials_problem", None)
        problem = check() if check is not None else None
        if problem is not None and problem not in seen:
            seen.add(problem)
            problems.append(f"GPUPool {name} ({kind}): {problem}")
    return problems


class Preflight:
    """The latest start-up check results, refreshed in a background thread."""

    def __init__(
        self,
        cluster: PreflightCluster,
        providers: Providers,
        options: OperatorOptions,
        *,
        interval_seconds: float = PREFLIGHT_INTERVAL_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.providers = providers
        self.options = options
        self.interval_seconds = interval_seconds
        self.problems: list[str] = [NOT_CHECKED]
        """Why the operator cannot work, one line each; empty when it can."""
        self.reason = "Starting"
        """APIUnreachable, CRDNotCurrent, ProviderMisconfigured or ChecksPassed."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> list[str]:
        """Run every check now; log one line when the answer changed."""
        problems = crd_problems(self.cluster)
        if any(p.startswith("cannot reach") for p in problems):
            reason = "APIUnreachable"
        else:
            reason = "CRDNotCurrent" if problems else "ProviderMisconfigured"
            problems += provider_problems(self.cluster, self.providers, self.options)
        if problems != self.problems:
            if problems:
                log.error("hybridgpu is not ready: %s", "; ".join(problems))
            else:
                log.info("hybridgpu is ready: API, CRDs and providers checked")
        self.problems = problems
        self.reason = reason if problems else "ChecksPassed"
        return problems

    @property
    def checked(self) -> bool:
        return self.reason != "Starting"

    def start(self) -> None:
        """Check now and then every interval until :meth:`stop`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="preflight", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception as err:  # a bug here must not end the checks
                log.exception("start-up checks failed: %s", err)
            self._stop.wait(self.interval_seconds)
