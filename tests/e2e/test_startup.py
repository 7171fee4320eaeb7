"""A misconfigured operator says so at start, once, and is not ready: a --fake-provider that
does not import, an API server it cannot reach. (Missing and old CRDs: tests/unit/
test_preflight.py; the session's CRDs are shared by every test.) A running operator's steady
ticks make no LIST request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import GROUP, VERSION, Cluster, Operators, wait_for
from support.children import DIE_WITH_PARENT
from support.controlplane import REPO_ROOT, audit_lists, utc_stamp
from support.ports import free_port
from support.shared import in_ci

pytestmark = pytest.mark.e2e


def readiness(metrics_url: str) -> tuple[int, str]:
    """(HTTP status, body) of /readyz next to ``metrics_url``; (0, why) when not listening."""
    url = metrics_url.rsplit("/", 1)[0] + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
        return 0, str(err)


def test_a_fake_provider_that_does_not_import_fails_readiness_with_one_line(
    cluster: Cluster, operators: Operators
) -> None:
    policy = cluster.policy()
    pool = cluster.name("fakes")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUPool",
        "metadata": {"name": pool},
        "spec": {
            "tier": "elastic",
            "gpu": {"model": "A100-80GB", "perNode": 4},
            "maxNodes": 2,
            "policy": policy,
            "provider": {"type": "fake"},
            "pricing": {"perNodeHour": 10.0},
        },
    }
    cluster.kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpupools", body)
    cluster.created.append(("gpupools", pool))
    operator = operators.start(extra_args=("--fake-provider", "no_such_module:Provider"))

    def not_ready() -> str | None:
        status, text = readiness(operator.metrics_url)
        return text if status == 503 and "cannot be loaded" in text else None

    text = wait_for(not_ready, 60, "/readyz 503 naming the provider")
    assert text.startswith("not ready: --fake-provider no_such_module:Provider cannot be loaded")
    assert f"GPUPool {pool}" not in text  # said once, for the flag, not again per pool

    def policy_condition() -> dict[str, str] | None:
        cond = cluster.condition(policy, "OperatorReady")
        return cond if cond and cond["status"] == "False" else None

    cond = wait_for(policy_condition, 60, "OperatorReady=False on the policy")
    assert cond["reason"] == "ProviderMisconfigured"
    assert "no_such_module" in cond["message"]
    pool_conditions = {
        c["type"]: c for c in (cluster.pool_object(pool).get("status") or {}).get("conditions", [])
    }
    assert pool_conditions["ProviderError"]["status"] == "True"
    lines = [line for line in operator.log().splitlines() if "hybridgpu is not ready" in line]
    assert len(lines) == 1, lines


def test_an_api_server_it_cannot_reach_fails_readiness(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- cluster: {{server: 'https://127.0.0.1:{free_port()}', "
        "insecure-skip-tls-verify: true}\n  name: c\n"
        "contexts:\n- context: {cluster: c, user: u}\n  name: c\ncurrent-context: c\n"
        "users:\n- name: u\n  user: {token: t}\n"
    )
    metrics_port = free_port()
    log_path = tmp_path / "operator.log"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "operator"))
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hybridgpu.cli",
                "run",
                "--kubeconfig",
                str(kubeconfig),
                "--liveness",
                f"http://127.0.0.1:{free_port()}/healthz",
                "--metrics-port",
                str(metrics_port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            preexec_fn=DIE_WITH_PARENT,
        )
    try:
        url = f"http://127.0.0.1:{metrics_port}/metrics"

        def unreachable() -> str | None:
            status, text = readiness(url)
            return text if status == 503 and "cannot reach" in text else None

        text = wait_for(unreachable, 60, "/readyz 503 naming the API server")
        assert text.startswith(
            "not ready: cannot reach the Kubernetes API at https://127.0.0.1:"
        ), text
        assert process.poll() is None  # not ready, still running: it recovers on its own
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    lines = [line for line in log_path.read_text().splitlines() if "hybridgpu is not ready" in line]
    assert len(lines) == 1, lines


def test_steady_ticks_of_the_operator_process_make_no_list_request(
    cluster: Cluster, operators: Operators
) -> None:
    """Issue 14's zero LISTs per steady tick, for the whole ``hybridgpu run`` process: its
    watch caches, kopf's watches, the leader Lease, the start-up checks and the kwok stand-in
    cloud. Every watch is resumed every 2 s here (``HYBRIDGPU_WATCH_SECONDS``), so the ticks
    counted also see watches of both kinds resumed. The apiserver's audit log says who made
    each LIST (tests/conftest.py starts the control plane with one): none may come from the
    operator's clients (``hybridgpu/...``) or kopf's (``kopf/...``). The in-process version,
    for the reconciler alone, is tests/adapters/test_watch_cache.py's
    ``test_ticks_read_the_cache_make_no_list_call...``."""
    audit_log = cluster.kube.plane.audit_log
    if audit_log is None:
        reason = "the control plane was started without an audit log (HYBRIDGPU_AUDIT_LOG)"
        if in_ci():
            pytest.fail(f"{reason}, and CI=true: the test session's control plane keeps one")
        pytest.skip(reason)
    policy = cluster.policy(interval="1s")
    core = cluster.pool("core", tier="core", policy=policy, max_nodes=1)
    cluster.pool("elastic", tier="elastic", policy=policy, price=10.0)
    cluster.kube.create_gpu_nodes(core, 1, tier="core", gpus=4)
    operators.start(extra_env={"HYBRIDGPU_WATCH_SECONDS": "2"})
    cluster.wait_ticking(policy)
    cluster.wait_ticks(policy, ticks=2)  # past the first syncs

    since = utc_stamp()
    started = time.monotonic()
    cluster.wait_ticks(policy, ticks=4)
    while time.monotonic() - started < 8:  # at least three rounds of resumed watches
        cluster.wait_ticks(policy, ticks=1)
    # A LIST this test makes in the window: the audit log is read, and read whole.
    cluster.kube.core.list_namespaced_pod(cluster.kube.namespace)
    cluster.wait_ticks(policy, ticks=1)
    until = utc_stamp()

    lists = audit_lists(audit_log, since, until)
    assert sum(lists.get("pods", {}).values()) >= 1, lists
    operator_lists = {
        (resource, who): n
        for resource, by_client in lists.items()
        for who, n in by_client.items()
        if who.startswith(("hybridgpu/", "kopf/"))
    }
    assert operator_lists == {}
