"""The KubeRay operator built from github.com/ray-project/kuberay/ray-operator (hack/kuberay.sh),
run against the session's control plane with its CRDs (RayCluster, RayJob, RayService).

It runs as a subprocess with leader election, metrics and health probes off and its webhooks
off (they are only served when ENABLE_WEBHOOKS=true). There is no Ray in kwok: the pods it
creates (a head and the workers) go Running and Ready, but nothing answers on the Ray
dashboard, so a RayJob is submitted the way KubeRay's InteractiveMode expects a person to:
``spec.jobId`` names the job, and KubeRay's queries of its status fail and are retried (the
RayJob stays Running, which is all a move needs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import REPO_ROOT, ControlPlane, install_crds

KUBERAY_SCRIPT = REPO_ROOT / "hack" / "kuberay.sh"


def kuberay_paths() -> dict[str, Path]:
    """KUBERAY_BIN and KUBERAY_CRDS: built on first use, then cached by version."""
    result = subprocess.run(
        [str(KUBERAY_SCRIPT), "build"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"hack/kuberay.sh build failed:\n{result.stderr}")
    pairs = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return {key: Path(value) for key, value in pairs.items()}


@contextmanager
def kuberay_operator(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The KubeRay operator running against ``plane`` (its CRDs installed); stopped on exit."""
    paths = kuberay_paths()
    install_crds(plane, paths["KUBERAY_CRDS"])
    log_path = work_dir / "kuberay-operator.log"
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    env.pop("ENABLE_WEBHOOKS", None)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(paths["KUBERAY_BIN"]),
                "--metrics-addr=0",
                "--health-probe-bind-address=0",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        # One "Starting workers" line per controller (RayCluster, RayService, RayJob).
        while log_path.read_bytes().count(b"Starting workers") < 3:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the KubeRay operator did not start:\n" + log_path.read_text()[-4000:]
                )
            time.sleep(0.2)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
