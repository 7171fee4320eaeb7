"""Start, reuse and talk to the real control plane built by hack/control-plane.sh.

The control plane is etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok, all
on 127.0.0.1. kwok plays the kubelet of fake nodes: pods bound to a node annotated
``kwok.x-k8s.io/node: fake`` go Running at once, and pods owned by a Job succeed after the
duration in their ``hybridgpu.io/run-duration`` annotation (default 1s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE_SCRIPT = REPO_ROOT / "hack" / "control-plane.sh"
CRDS_DIR = REPO_ROOT / "crds"
EXAMPLES_DIR = REPO_ROOT / "examples"
CACHE_DIR = Path(os.environ.get("HYBRIDGPU_CACHE_DIR", Path.home() / ".cache" / "hybridgpu"))
# Keep in step with KUBECTL_LAYER_VERSION in hack/control-plane.mk.
DEFAULT_TOOLS_BIN = CACHE_DIR / "tools" / "kubectl-layer-v35-2.2.2" / "bin"

POOL_LABEL = "hybridgpu.io/pool"
TIER_LABEL = "hybridgpu.io/tier"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
RUN_DURATION_ANNOTATION = "hybridgpu.io/run-duration"
HYBRIDGPU_GROUP = "hybridgpu.io"

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, stopped or reached."""


def kubectl_path() -> str:
    """Path of the kubectl from `make tools` (or $HYBRIDGPU_KUBECTL, or one on PATH)."""
    candidates = [os.environ.get("HYBRIDGPU_KUBECTL"), str(DEFAULT_TOOLS_BIN / "kubectl")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("kubectl")
    if found:
        return found
    raise ControlPlaneError("kubectl not found: run `make tools`")


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout_seconds: float,
    interval_seconds: float = 0.2,
    what: str = "condition",
) -> T:
    """Call ``probe`` until it returns something truthy and return that; fail after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_seconds:.0f}s waiting for {what}")
        time.sleep(interval_seconds)


@dataclass
class ControlPlane:
    """A running control plane: its kubeconfig and whether this process started it."""

    kubeconfig: Path
    name: str | None = None
    owned: bool = False
    _api: client.ApiClient | None = field(default=None, repr=False)

    @property
    def audit_log(self) -> Path | None:
        """The apiserver's audit log of LIST requests, when it was started with one
        (``HYBRIDGPU_AUDIT_LOG=1``; hack/control-plane.sh keeps it beside the kubeconfig)."""
        path = self.kubeconfig.parent / "logs" / "audit.log"
        return path if path.exists() else None

    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def apiextensions(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout_seconds: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; raise with its stderr when ``check`` fails."""
        cmd = [kubectl_path(), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout_seconds, check=False
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}"
            )
        return result

    def apply_server_side(self, *paths: Path, field_manager: str = "hybridgpu-tests") -> str:
        """``kubectl apply --server-side`` each file or directory; return kubectl's output."""
        args = ["apply", "--server-side", f"--field-manager={field_manager}", "--force-conflicts"]
        for path in paths:
            args += ["-f", str(path)]
        return self.kubectl(*args).stdout

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None


def _script_env(name: str) -> dict[str, str]:
    env = dict(os.environ)
    env["HYBRIDGPU_CLUSTER_NAME"] = name
    env.setdefault("HYBRIDGPU_CACHE_DIR", str(CACHE_DIR))
    return env


def _run_script(
    command: str,
    name: str,
    *,
    extra_env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> str:
    env = _script_env(name) | (extra_env or {})
    result = subprocess.run(
        ["bash", str(CONTROL_PLANE_SCRIPT), command, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"hack/control-plane.sh {command} failed ({result.returncode}):\n"
            f"{result.stderr}{result.stdout}"
        )
    return result.stdout + result.stderr


def script_paths(name: str) -> dict[str, Path]:
    """BIN_DIR, RUN_DIR and KUBECONFIG of the control plane called ``name``."""
    out = _run_script("paths", name)
    pairs = (line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {key: Path(value) for key, value in pairs}


def start_control_plane(name: str, *, audit: bool = False) -> ControlPlane:
    """Start (building first if needed) a control plane called ``name``; it dies with us.
    With ``audit``, its apiserver keeps an audit log of LIST requests (``audit_lists``).

    The script's watchdog stops it if this process exits without calling stop_control_plane.
    """
    extra_env = {"HYBRIDGPU_CP_OWNER_PID": str(os.getpid())}
    if audit:
        extra_env["HYBRIDGPU_AUDIT_LOG"] = "1"
    _run_script("up", name, extra_env=extra_env)
    return ControlPlane(kubeconfig=script_paths(name)["KUBECONFIG"], name=name, owned=True)


def utc_stamp() -> str:
    """Now as the audit log writes its timestamps (RFC 3339, microseconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_lists(audit_log: Path, since: str, until: str | None = None) -> dict[str, dict[str, int]]:
    """LIST requests the apiserver received from ``since`` to ``until`` (``utc_stamp``
    values; None: up to now), by resource and then client (user agent, user), from its
    audit log."""
    out: dict[str, dict[str, int]] = {}
    with audit_log.open() as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line being written
                continue
            received = event.get("requestReceivedTimestamp", "")
            if event.get("verb") != "list" or received < since:
                continue
            if until is not None and received > until:
                continue
            ref = event.get("objectRef") or {}
            user = (event.get("user") or {}).get("username")
            who = f"{event.get('userAgent', '?')} ({user})"
            by_client = out.setdefault(ref.get("resource", "?"), {})
            by_client[who] = by_client.get(who, 0) + 1
    return out


def stop_control_plane(plane: ControlPlane) -> None:
    """Stop a control plane this process started; leaves no process behind."""
    plane.close()
    if plane.owned and plane.name:
        run_dir = script_paths(plane.name)["RUN_DIR"]
        _run_script("down", plane.name)
        # A session's cluster is throwaway: its certificates and logs go with it.
        shutil.rmtree(run_dir, ignore_errors=True)


COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def stop_component(plane: ControlPlane, component: str) -> None:
    """Stop one component of a control plane this process started (an outage); its state
    stays. Bring it back with :func:`start_component`; ``stop_control_plane`` stops the rest.
    """
    _run_script("stop-component", _owned_name(plane, component), args=(component,))


def start_component(plane: ControlPlane, component: str) -> None:
    """Start a stopped component again, on its old port, and wait until it is healthy."""
    _run_script("start-component", _owned_name(plane, component), args=(component,))


def restart_component(plane: ControlPlane, component: str) -> None:
    """SIGTERM one component (its whole process group), start it again and wait until it is
    healthy: what a crashed or rolled static pod does."""
    _run_script("restart", _owned_name(plane, component), args=(component,))


def _owned_name(plane: ControlPlane, component: str) -> str:
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; one of {', '.join(COMPONENTS)}")
    if not plane.owned or not plane.name:
        raise ControlPlaneError("only a control plane this process started can be restarted")
    return plane.name


def install_crds(plane: ControlPlane, crds_dir: Path = CRDS_DIR) -> list[str]:
    """Server-side apply every CRD in ``crds_dir`` and wait until each is Established."""
    files = sorted(crds_dir.glob("*.yaml")) + sorted(crds_dir.glob("*.yml"))
    if not files:
        return []
    plane.apply_server_side(*files)
    names = [
        doc["metadata"]["name"]
        for path in files
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]
    for crd_name in names:
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd_name}")
    return names


# ---------------------------------------------------------------------------------------------
# fake GPU nodes
# ---------------------------------------------------------------------------------------------


def gpu_node(
    name: str,
    *,
    pool: str,
    tier: str,
    gpus: int = 8,
    gpu_model: str = "A100-80GB",
    taints: Sequence[dict[str, str]] = (),
    labels: dict[str, str] | None = None,
    cpu: str = "96",
    memory: str = "1Ti",
) -> dict[str, Any]:
    """A kwok-managed Node manifest with ``gpus`` nvidia.com/gpu in pool ``pool`` of ``tier``."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: pool,
                TIER_LABEL: tier,
                "nvidia.com/gpu.product": gpu_model,
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def node_is_ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def create_gpu_nodes(
    plane: ControlPlane,
    pool: str,
    count: int,
    *,
    tier: str,
    name_prefix: str | None = None,
    wait_ready: bool = True,
    timeout_seconds: float = 60,
    **node_kwargs: Any,
) -> list[str]:
    """Create ``count`` fake GPU nodes in ``pool``; wait until kwok has made them Ready.

    Extra keyword arguments go to :func:`gpu_node` (gpus, gpu_model, taints, labels, ...).
    """
    prefix = name_prefix or f"{pool}-"
    names = [f"{prefix}{i}" for i in range(count)]
    for name in names:
        plane.core.create_node(gpu_node(name, pool=pool, tier=tier, **node_kwargs))
    if wait_ready:
        selector = f"{POOL_LABEL}={pool}"

        def all_ready() -> bool:
            nodes = plane.core.list_node(label_selector=selector).items
            # Ready, and the controller-manager has lifted the not-ready taint it put on at
            # registration: until then the scheduler says "untolerated taint", not "no GPUs".
            ready = {
                n.metadata.name
                for n in nodes
                if node_is_ready(n)
                and not any(t.key in LIFECYCLE_TAINTS for t in n.spec.taints or [])
            }
            return ready.issuperset(names)

        wait_until(all_ready, timeout_seconds=timeout_seconds, what=f"nodes of pool {pool} Ready")
    return names


def gpu_job(
    name: str,
    *,
    gpus: int = 1,
    pool: str | None = None,
    run_duration: str = "1s",
    completions: int = 1,
    parallelism: int = 1,
    suspend: bool = False,
    labels: dict[str, str] | None = None,
    tolerations: Iterable[dict[str, str]] = (),
) -> dict[str, Any]:
    """A batch/v1 Job whose pods request ``gpus`` GPUs and finish after ``run_duration`` on kwok.

    With ``pool`` the pod template selects that pool's nodes (``hybridgpu.io/pool``).
    """
    gpu_request = {GPU_RESOURCE: str(gpus)}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.example/train:latest",
                "resources": {"requests": gpu_request, "limits": gpu_request},
            }
        ],
        "tolerations": [dict(t) for t in tolerations],
    }
    if pool is not None:
        pod_spec["nodeSelector"] = {POOL_LABEL: pool}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "suspend": suspend,
            "completions": completions,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": dict(labels or {}),
                    "annotations": {RUN_DURATION_ANNOTATION: run_duration},
                },
                "spec": pod_spec,
            },
        },
    }


# ---------------------------------------------------------------------------------------------
# clean slate per test
# ---------------------------------------------------------------------------------------------


def _dns_label(text: str, max_len: int) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return label[:max_len].rstrip("-") or "t"


def unique_name(hint: str) -> str:
    """A DNS-1123 label made from ``hint`` plus a random suffix (<= 63 characters)."""
    return f"{_dns_label(hint, 50)}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ClusterScopedKind:
    """A cluster-scoped resource kind whose objects a test may create."""

    group: str
    version: str
    plural: str


def hybridgpu_cluster_kinds(plane: ControlPlane) -> list[ClusterScopedKind]:
    """The cluster-scoped custom resource kinds of the hybridgpu.io group that are installed."""
    kinds = []
    for crd in plane.apiextensions.list_custom_resource_definition().items:
        if crd.spec.group != HYBRIDGPU_GROUP or crd.spec.scope != "Cluster":
            continue
        served = [v.name for v in crd.spec.versions if v.storage] or [crd.spec.versions[0].name]
        kinds.append(ClusterScopedKind(crd.spec.group, served[0], crd.spec.names.plural))
    return kinds


def cluster_scoped_inventory(plane: ControlPlane) -> set[tuple[str, str]]:
    """(kind, name) of every node and hybridgpu.io custom object that exists now."""
    inventory = {("nodes", n.metadata.name) for n in plane.core.list_node().items}
    for kind in hybridgpu_cluster_kinds(plane):
        objects = plane.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural)
        inventory |= {(kind.plural, o["metadata"]["name"]) for o in objects["items"]}
    return inventory


def delete_cluster_scoped(plane: ControlPlane, items: Iterable[tuple[str, str]]) -> None:
    """Delete the given (kind, name) objects; ones already gone are fine."""
    kinds = {k.plural: k for k in hybridgpu_cluster_kinds(plane)}
    for plural, name in items:
        try:
            if plural == "nodes":
                plane.core.delete_node(name)
            elif plural in kinds:
                k = kinds[plural]
                plane.custom.delete_cluster_custom_object(k.group, k.version, k.plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@dataclass
class KubeTest:
    """What one test gets: the control plane and a namespace of its own."""

    plane: ControlPlane
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return self.plane.core

    @property
    def batch(self) -> client.BatchV1Api:
        return self.plane.batch

    @property
    def custom(self) -> client.CustomObjectsApi:
        return self.plane.custom

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, **kwargs)

    def create_gpu_nodes(self, pool: str, count: int, *, tier: str, **kwargs: Any) -> list[str]:
        """Fake GPU nodes named after this test's namespace (deleted after the test)."""
        kwargs.setdefault("name_prefix", f"{self.namespace}-{pool}-"[-40:].lstrip("-"))
        return create_gpu_nodes(self.plane, pool, count, tier=tier, **kwargs)

    def create_job(self, body: dict[str, Any]) -> client.V1Job:
        return self.batch.create_namespaced_job(self.namespace, body)


def create_test_namespace(plane: ControlPlane, hint: str) -> str:
    """Create a namespace and wait for its default ServiceAccount (pods need it to be admitted)."""
    name = unique_name(hint)
    plane.core.create_namespace(
        {"metadata": {"name": name, "labels": {"hybridgpu.io/test": "true"}}}
    )

    def has_default_sa() -> bool:
        try:
            plane.core.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    wait_until(has_default_sa, timeout_seconds=60, what=f"default ServiceAccount in {name}")
    return name


def delete_namespace(plane: ControlPlane, name: str) -> None:
    try:
        plane.core.delete_namespace(name, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


def parse_json(text: str) -> Any:
    return json.loads(text)
