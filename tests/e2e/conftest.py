"""e2e fixtures: the operator as a real subprocess (``hybridgpu run``) against the session's
control plane, with kwok nodes as the cloud (the product's kwok provider, hybridgpu.cloud.kwok).

Every operator started is stopped after the test, also when it fails; then the test's
GPUPools and ScalingPolicies are deleted and our finalizer is lifted (the operator that
would have lifted it is gone), so nothing lingers into the next test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from hybridgpu.cloud.kwok import PROVIDER_PREFIX, kwok_node
from support.children import DIE_WITH_PARENT
from support.controlplane import REPO_ROOT, KubeTest, gpu_job, wait_until
from support.ports import free_port

GROUP, VERSION = "hybridgpu.io", "v1alpha1"
STARTUP_SECONDS = 180.0
"""How long an operator may take to start (its first tick): a hang guard, not a target."""
TICKS_TO_ACT = 6
"""Ticks within which the operator must have done what a test waits for (``within_ticks``)."""
STALL_SECONDS = 180.0
"""No tick for this long while a test waits for the operator: it hangs (or nobody leads)."""
KUBE_SECONDS = 180.0
"""Hang guard for what the control plane does on its own (a pod scheduled and run by kwok, a
Job completing): its speed is not what the tests check, and on a loaded machine it varies."""
FINALIZER = "hybridgpu.io/finalizer"
SPOT_TAINT = {"key": "hybridgpu.io/spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


@dataclass
class OperatorProcess:
    """One ``hybridgpu run`` subprocess and its log file."""

    identity: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_url: str
    liveness_url: str

    def metrics(self) -> str:
        """The operator's /metrics page (Prometheus text format)."""
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no chance to finish anything (a crashed pod)."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if not self.alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Operators:
    """Starts operators for one test; everything started is stopped at teardown."""

    kube: KubeTest
    log_dir: Path
    started: list[OperatorProcess] = field(default_factory=list)

    def start(
        self,
        identity: str | None = None,
        *,
        kwok_delay_seconds: float = 1.0,
        lease_seconds: float = 3.0,
        extra_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> OperatorProcess:
        identity = identity or f"op-{uuid.uuid4().hex[:6]}"
        log_path = self.log_dir / f"operator-{identity}-{len(self.started)}.log"
        metrics_port = free_port()
        liveness_port = free_port()
        env = dict(os.environ)
        env.update(
            {
                "KUBECONFIG": str(self.kube.plane.kubeconfig),
                "PYTHONPATH": os.pathsep.join(
                    [str(REPO_ROOT / "tests"), str(REPO_ROOT / "operator")]
                ),
                "HYBRIDGPU_KWOK_DELAY_SECONDS": str(kwok_delay_seconds),
                "HYBRIDGPU_DEBOUNCE_SECONDS": "0.1",
                **(extra_env or {}),
            }
        )
        cmd = [
            sys.executable,
            "-m",
            "hybridgpu.cli",
            "run",
            "--kubeconfig",
            str(self.kube.plane.kubeconfig),
            "--identity",
            identity,
            "--lease-namespace",
            self.kube.namespace,
            "--lease-seconds",
            str(lease_seconds),
            "--liveness",
            f"http://127.0.0.1:{liveness_port}/healthz",
            "--fake-provider",  # pools of type fake get kwok nodes too
            "hybridgpu.cloud.kwok:KwokProvider",
            "--metrics-port",
            str(metrics_port),
            *extra_args,  # later flags win
        ]
        with log_path.open("wb") as out:
            process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO_ROOT,
                preexec_fn=DIE_WITH_PARENT,
            )
        op = OperatorProcess(
            identity=identity,
            process=process,
            log_path=log_path,
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            liveness_url=f"http://127.0.0.1:{liveness_port}/healthz",
        )
        self.started.append(op)
        return op

    def stop_all(self) -> None:
        for op in self.started:
            op.stop()


@pytest.fixture
def operators(cluster: Cluster, tmp_path: Path) -> Iterator[Operators]:
    """Operators of this test; stopped (and their log tails printed) before the test's
    custom objects are released by ``cluster``."""
    ops = Operators(kube=cluster.kube, log_dir=tmp_path)
    try:
        yield ops
    finally:
        ops.stop_all()
        for op in ops.started:
            tail = op.log()[-3000:]
            sys.stderr.write(f"\n--- operator {op.identity} log (tail) ---\n{tail}\n")


def release_custom_objects(kube: KubeTest, created: list[tuple[str, str]]) -> None:
    """Delete the given pools and policies and lift our finalizer from them (the operator
    that would have lifted it is stopped)."""
    for plural, name in created:
        try:
            kube.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            kube.custom.patch_cluster_custom_object(
                GROUP, VERSION, plural, name, {"metadata": {"finalizers": None}}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


# ------------------------------------------------------------------ builders
class Cluster:
    """Builders for one e2e test: names are prefixed by the test's namespace."""

    def __init__(self, kube: KubeTest) -> None:
        self.kube = kube
        self.prefix = f"e{uuid.uuid4().hex[:6]}"
        self.created: list[tuple[str, str]] = []

    def name(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    def policy(self, short: str = "policy", **spec: Any) -> str:
        name = self.name(short)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ScalingPolicy",
            "metadata": {"name": name},
            "spec": {
                "interval": "2s",
                "pendingGracePeriod": "0s",
                "preemption": {"minRuntime": "0s", "checkpointGracePeriod": "5s"},
                **spec,
            },
        }
        self.kube.custom.create_cluster_custom_object(GROUP, VERSION, "scalingpolicies", body)
        self.created.append(("scalingpolicies", name))
        return name

    def pool(
        self,
        short: str,
        *,
        tier: str,
        policy: str,
        per_node: int = 4,
        max_nodes: int = 4,
        min_nodes: int = 0,
        price: float = 10.0,
        taints: list[dict[str, str]] | None = None,
        labels: dict[str, str] | None = None,
        idle_for: str = "2s",
        provider: dict[str, Any] | None = None,
        power: dict[str, Any] | None = None,
        committed: dict[str, Any] | None = None,
        node_selector: dict[str, str] | None = None,
    ) -> str:
        name = self.name(short)
        spec: dict[str, Any] = {
            "tier": tier,
            "gpu": {"model": "A100-80GB", "perNode": per_node, "powerWatts": 400},
            "minNodes": min_nodes,
            "maxNodes": max_nodes,
            "policy": policy,
            "scaleDown": {"enabled": True, "idleFor": idle_for},
            "taints": taints or [],
            "labels": labels or {},
        }
        if tier == "core":
            spec["pricing"] = {"capexPerNode": 250000}
            if provider is not None:
                spec["provider"] = provider
            if power is not None:
                spec["power"] = power
        else:
            spec["pricing"] = {"perNodeHour": price}
            spec["provider"] = provider or {"type": "kwok"}
        if committed is not None:
            spec["committed"] = committed
        if node_selector is not None:
            spec["nodeSelector"] = node_selector
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUPool",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpupools", body)
        self.created.append(("gpupools", name))
        return name

    def core_nodes(self, pool: str, count: int, gpus: int = 4) -> list[str]:
        return self.kube.create_gpu_nodes(pool, count, tier="core", gpus=gpus)

    def cloud_nodes(self, pool: str, count: int) -> list[str]:
        """Nodes the kwok provider owns (providerID kwok://pool/name), as if launched earlier."""
        from hybridgpu.models.pool import GPUPoolSpec

        raw = self.kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
        spec = GPUPoolSpec.model_validate(raw["spec"])
        names = [f"{pool}-pre{i}" for i in range(count)]
        for name in names:
            self.kube.core.create_node(kwok_node(name, pool, spec))
        wait_until(
            lambda: all(node_ready(self.kube, n) for n in names),
            timeout_seconds=KUBE_SECONDS,
            what=f"nodes of {pool} Ready",
        )
        return names

    def pool_nodes(self, pool: str) -> list[Any]:
        return self.kube.core.list_node(label_selector=f"hybridgpu.io/pool={pool}").items

    def pods_summary(self) -> list[str]:
        """The test namespace's pods, one short line each (name, phase, node, and why the
        scheduler has not placed it): what a failed wait prints beside the operator's plan."""
        out = []
        for pod in self.kube.core.list_namespaced_pod(self.kube.namespace).items:
            scheduled = next(
                (c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None
            )
            why = f" {scheduled.reason}" if scheduled is not None and scheduled.reason else ""
            out.append(
                f"{pod.metadata.name} {pod.status.phase} on {pod.spec.node_name or '-'}{why}"
            )
        return out

    def job_pods(self, job: str) -> list[Any]:
        return self.kube.core.list_namespaced_pod(
            self.kube.namespace, label_selector=f"batch.kubernetes.io/job-name={job}"
        ).items

    def job(self, name: str) -> Any:
        return self.kube.batch.read_namespaced_job(name, self.kube.namespace)

    def job_done(self, name: str) -> bool:
        job = self.kube.batch.read_namespaced_job_status(name, self.kube.namespace)
        for cond in job.status.conditions or []:
            if cond.type == "Failed" and cond.status == "True":
                raise AssertionError(f"Job {name} failed: {cond.message}")
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

    def pool_object(self, name: str) -> dict[str, Any]:
        return dict(self.kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", name))

    def policy_status(self, name: str) -> dict[str, Any]:
        obj = self.kube.custom.get_cluster_custom_object(GROUP, VERSION, "scalingpolicies", name)
        return dict(obj.get("status") or {})

    def wait_ticking(self, policy: str, timeout_seconds: float = STARTUP_SECONDS) -> None:
        """Wait until an operator has written a tick of ``policy`` (it is up and leading).

        How long an operator takes to start is not what these tests check: at load 26 on 2
        cores one took 50 s, past the 20-60 s deadlines the tests had for their first step."""
        wait_for(
            lambda: self.policy_status(policy).get("lastTick"),
            timeout_seconds,
            f"a tick of {policy}",
        )

    def wait_ticks(self, policy: str, ticks: int = 2, timeout_seconds: float = 60) -> None:
        """Wait until the policy's ``lastTick`` has changed ``ticks`` times from now on.

        The first change may come from a tick that began before this call; the second comes
        from one that began after it, and so saw everything done before the call. Assert
        that something did *not* happen after this, never after a sleep.
        """
        seen = [self.policy_status(policy).get("lastTick")]

        def advanced() -> bool:
            tick = self.policy_status(policy).get("lastTick")
            if tick != seen[-1]:
                seen.append(tick)
            return len(seen) > ticks

        wait_for(advanced, timeout_seconds, f"{ticks} more ticks of {policy}", interval=0.2)

    def within_ticks(
        self,
        policy: str,
        probe: Callable[[], Any],
        what: str,
        *,
        ticks: int = TICKS_TO_ACT,
        interval: float = 0.1,
    ) -> Any:
        """Wait until ``probe`` returns something truthy, and fail if the operator has ticked
        ``ticks`` times (``lastTick`` changed) without it: a deadline in the operator's own
        progress, not in seconds, so a loaded machine slows the deadline down with the
        operator. A tick that began before the call may count as the first. An operator that
        stops ticking for STALL_SECONDS fails the wait too (hung, or nobody leads)."""
        seen = [self.policy_status(policy).get("lastTick")]
        last_change = time.monotonic()
        while True:
            result = probe()
            if result:
                return result
            tick = self.policy_status(policy).get("lastTick")
            if tick != seen[-1]:
                seen.append(tick)
                last_change = time.monotonic()
            if len(seen) > ticks:
                result = probe()
                if result:
                    return result
                status = self.policy_status(policy)
                raise AssertionError(
                    f"{what}: not done after {ticks} ticks of {policy}; its last plan "
                    f"({status.get('lastTick')}): {status.get('lastPlan')}; the test's pods "
                    f"as the apiserver has them: {self.pods_summary()}"
                )
            if time.monotonic() - last_change > STALL_SECONDS:
                raise TimeoutError(
                    f"{what}: no tick of {policy} for {STALL_SECONDS:.0f}s ({len(seen) - 1} seen)"
                )
            time.sleep(interval)

    def condition(self, policy: str, type_: str) -> dict[str, Any] | None:
        for cond in self.policy_status(policy).get("conditions") or []:
            if cond.get("type") == type_:
                return dict(cond)
        return None

    def events(self, reason: str) -> list[Any]:
        """Events with ``reason`` about this test's pools, policies, nodes and Jobs."""
        mine = [
            e
            for e in self.kube.core.list_namespaced_event("default").items
            if (e.involved_object.name or "").startswith(self.prefix)
        ]
        mine += self.kube.core.list_namespaced_event(self.kube.namespace).items
        return [e for e in mine if e.reason == reason]


def node_ready(kube: KubeTest, name: str) -> bool:
    try:
        node = kube.core.read_node(name)
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def leftover_pending_gpu_pods(kube: KubeTest) -> list[str]:
    """Unbound GPU pods of other (earlier) tests: demand our operator would act on."""
    out = []
    for pod in kube.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items:
        if pod.metadata.namespace == kube.namespace:
            continue
        wants_gpu = any(
            "nvidia.com/gpu" in ((c.resources and c.resources.requests) or {})
            or "nvidia.com/gpu" in ((c.resources and c.resources.limits) or {})
            for c in pod.spec.containers
        )
        if wants_gpu and pod.status.phase == "Pending":
            out.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return out


@pytest.fixture
def cluster(kube: KubeTest) -> Iterator[Cluster]:
    # Earlier tests' namespaces are deleted in the background; wait for their pending GPU
    # pods to go so they are not demand for this test's operator (best effort).
    try:
        wait_until(
            lambda: not leftover_pending_gpu_pods(kube),
            timeout_seconds=60,
            what="pending GPU pods of earlier tests gone",
        )
    except TimeoutError:
        sys.stderr.write(f"leftover pending GPU pods: {leftover_pending_gpu_pods(kube)}\n")
    built = Cluster(kube)
    try:
        yield built
    finally:
        delete_workloads(kube)
        release_custom_objects(kube, built.created)


def delete_workloads(kube: KubeTest) -> None:
    """Delete the test's Jobs and pods and wait until they are gone: a pending GPU pod left
    in a namespace that is still being deleted would be demand for the next test's operator."""
    ns = kube.namespace
    for job in kube.batch.list_namespaced_job(ns).items:
        kube.batch.delete_namespaced_job(job.metadata.name, ns, propagation_policy="Background")
    kube.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_until(
        lambda: not kube.core.list_namespaced_pod(ns).items,
        timeout_seconds=60,
        what=f"pods of {ns} gone",
    )


__all__ = ["PROVIDER_PREFIX", "SPOT_TAINT", "SPOT_TOLERATION", "Cluster", "Operators"]


def core_full_of_preemptible_work(
    cluster: Cluster,
    run_duration: str = "6s",
    before_the_job: Callable[[str], None] | None = None,
    core_idle_for: str = "10m",
) -> tuple[str, str, str]:
    """A core node busy with a running preemptible Job, and an empty spot pool.

    ``before_the_job(policy)`` runs once the pools exist and before the Job is created: a
    test whose operator must act while the Job still runs starts it there and waits for
    its first tick (an operator took 50 s to start at load 26, longer than the Job ran).

    The core node's ``idleFor`` (``core_idle_for``) is long: the tests here follow a move of
    the Job to spot, and a Job waiting for its spot node while the core node it left has
    been idle for its ``idleFor`` rightly goes back there (``_unpin_to_owned``); with 2 s, a
    spot node slow to come on a loaded machine turned these moves into moves back to core."""
    policy = cluster.policy()
    core = cluster.pool(
        "core", tier="core", policy=policy, per_node=4, max_nodes=1, idle_for=core_idle_for
    )
    spot = cluster.pool(
        "spot",
        tier="spot",
        policy=policy,
        per_node=4,
        max_nodes=2,
        price=3.0,
        taints=[SPOT_TAINT],
        idle_for="30s",
    )
    cluster.core_nodes(core, 1, gpus=4)
    if before_the_job is not None:
        before_the_job(policy)
    cluster.kube.create_job(
        gpu_job(
            "batch",
            gpus=4,
            run_duration=run_duration,
            labels={"hybridgpu.io/criticality": "preemptible"},
        )
    )
    wait_for(
        lambda: any(p.status.phase == "Running" for p in cluster.job_pods("batch")),
        KUBE_SECONDS,
        "preemptible Job running on core",
    )
    return policy, core, spot


def wait_for(probe: Any, timeout_seconds: float, what: str, interval: float = 0.1) -> Any:
    return wait_until(probe, timeout_seconds=timeout_seconds, interval_seconds=interval, what=what)


def now() -> float:
    return time.time()


REACTION_LOG = REPO_ROOT / "out" / "e2e-reaction-times.jsonl"


def record_reaction(scenario: str, seconds: float) -> None:
    """Append one measured reaction time (pending pod seen -> first action seen)."""
    import json

    REACTION_LOG.parent.mkdir(parents=True, exist_ok=True)
    with REACTION_LOG.open("a") as out:
        out.write(json.dumps({"scenario": scenario, "seconds": round(seconds, 3)}) + "\n")


def pod_unschedulable(pod: Any) -> bool:
    return not pod.spec.node_name and any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )
