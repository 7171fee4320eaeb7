"""`make demo` keeps its promise: from nothing, within about two minutes, a newcomer watching
the cluster sees a preemptible Job moved to spot and an idle cloud node released; `make
demo-down` leaves no process behind.

It runs hack/demo.sh (what `make demo` runs) on a cluster of its own
(HYBRIDGPU_CLUSTER_NAME), so it never collides with the session's control plane or a dev
cluster, and watches the demo's API like the newcomer would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from support.controlplane import REPO_ROOT, kubectl_path, script_paths, wait_until

pytestmark = pytest.mark.e2e

DEMO = REPO_ROOT / "hack" / "demo.sh"
POOL_LABEL = "hybridgpu.io/pool"
STORY_SECONDS = 150.0
"""The README promises about two minutes; the bound leaves room for a loaded CI machine."""


def demo_env(cluster: str) -> dict[str, str]:
    return {
        **os.environ,
        "HYBRIDGPU_CLUSTER_NAME": cluster,
        "HYBRIDGPU_KUBECTL": kubectl_path(),
        "HYBRIDGPU_BIN": str(Path(sys.executable).parent / "hybridgpu"),
        # The demo goes down with this test process, even if it is killed.
        "HYBRIDGPU_CP_OWNER_PID": str(os.getpid()),
    }


def run_demo(
    command: str, cluster: str, timeout_seconds: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DEMO), command],
        env=demo_env(cluster),
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        check=False,
    )


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the demo's run directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


@dataclass
class DemoWatch:
    """What a newcomer watching `kubectl get gpupools,nodes,jobs` and the events has seen."""

    core: client.CoreV1Api
    batch: client.BatchV1Api
    cloud_nodes_seen: dict[str, str] = field(default_factory=dict)
    """Name -> pool of every elastic or spot node seen so far."""

    def look(self) -> None:
        for node in self.core.list_node().items:
            pool = (node.metadata.labels or {}).get(POOL_LABEL, "")
            if pool in ("elastic", "spot"):
                self.cloud_nodes_seen[node.metadata.name] = pool

    def moved_to_spot(self) -> str | None:
        """A preemptible Job now selecting the spot pool, its pod Running on a spot node."""
        self.look()
        for job in self.batch.list_namespaced_job("default").items:
            if (job.metadata.labels or {}).get("hybridgpu.io/criticality") != "preemptible":
                continue
            if (job.spec.template.spec.node_selector or {}).get(POOL_LABEL) != "spot":
                continue
            pods = self.core.list_namespaced_pod(
                "default", label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}"
            ).items
            for pod in pods:
                if (
                    pod.status.phase == "Running"
                    and self.cloud_nodes_seen.get(pod.spec.node_name or "") == "spot"
                ):
                    return f"{job.metadata.name} on {pod.spec.node_name}"
        return None

    def released_cloud_node(self) -> str | None:
        """An elastic or spot node seen earlier that is gone now."""
        self.look()
        present = {n.metadata.name for n in self.core.list_node().items}
        gone = sorted(set(self.cloud_nodes_seen) - present)
        return gone[0] if gone else None

    def events(self, reason: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event("default").items if e.reason == reason]


@pytest.fixture
def demo_cluster() -> Iterator[str]:
    """The demo's cluster name; whatever happens, the demo is taken down and its state removed."""
    name = f"demo-test-{os.getpid()}"
    run_dir = script_paths(name)["RUN_DIR"]
    try:
        yield name
    finally:
        down = run_demo("down", name, timeout_seconds=90)
        sys.stderr.write(f"\n--- hack/demo.sh down ---\n{down.stderr[-2000:]}\n")
        log = run_dir / "logs" / "operator.log"
        if log.exists():
            sys.stderr.write(f"--- operator log (tail) ---\n{log.read_text()[-4000:]}\n")
        shutil.rmtree(run_dir, ignore_errors=True)


def test_make_demo_shows_a_move_to_spot_and_a_release_within_two_minutes_then_leaves_nothing(
    demo_cluster: str,
) -> None:
    run_dir = script_paths(demo_cluster)["RUN_DIR"]
    started = time.monotonic()

    up = run_demo("up", demo_cluster, timeout_seconds=180)

    assert up.returncode == 0, f"hack/demo.sh up failed:\n{up.stderr[-4000:]}"
    up_seconds = time.monotonic() - started
    kubeconfig = run_dir / "kubeconfig"
    # What the newcomer is told to type, exactly.
    assert f"export KUBECONFIG={kubeconfig}; export PATH=" in up.stdout
    assert "watch -n 2 kubectl get gpupools,nodes,jobs" in up.stdout
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        watch = DemoWatch(client.CoreV1Api(api), client.BatchV1Api(api))
        story_left = STORY_SECONDS - (time.monotonic() - started)
        moved = wait_until(
            watch.moved_to_spot,
            timeout_seconds=story_left,
            interval_seconds=0.5,
            what="a preemptible Job running on a spot node",
        )
        moved_seconds = time.monotonic() - started
        released = wait_until(
            watch.released_cloud_node,
            timeout_seconds=STORY_SECONDS - (time.monotonic() - started),
            interval_seconds=0.5,
            what="an idle cloud node released",
        )
        released_seconds = time.monotonic() - started
        # The operator did it, and says why (what `kubectl get events` shows the newcomer).
        assert any(e.involved_object.name == moved.split()[0] for e in watch.events("Preempt")), (
            "no Preempt Event on the moved Job"
        )
        assert any(released in (e.message or "") for e in watch.events("ReleaseNode")), (
            f"no ReleaseNode Event naming {released}"
        )
    finally:
        api.close()
    sys.stderr.write(
        f"\ndemo: up {up_seconds:.0f}s, {moved} at {moved_seconds:.0f}s, "
        f"{released} released at {released_seconds:.0f}s (from hack/demo.sh up)\n"
    )
    pids = [
        int(text)
        for pid_file in run_dir.glob("*.pid")
        if (text := pid_file.read_text().strip()).isdigit()
    ]
    assert processes_mentioning(str(run_dir)), "expected the demo's processes to be found"

    down = run_demo("down", demo_cluster, timeout_seconds=90)

    assert down.returncode == 0, down.stderr
    assert processes_mentioning(str(run_dir)) == []
    still_alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert still_alive == [], f"demo processes left after down: {still_alive}"
