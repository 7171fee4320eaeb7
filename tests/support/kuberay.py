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
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import controller_process, hack_paths


def kuberay_paths() -> dict[str, Path]:
    """KUBERAY_BIN and KUBERAY_CRDS: built on first use, then cached by version."""
    return hack_paths("kuberay.sh")


@contextmanager
def kuberay_operator(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The KubeRay operator running against ``plane`` (its CRDs installed); stopped on exit."""
    paths = kuberay_paths()
    install_crds(plane, paths["KUBERAY_CRDS"])
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    env.pop("ENABLE_WEBHOOKS", None)
    with controller_process(
        [
            str(paths["KUBERAY_BIN"]),
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--enable-leader-election=false",
            "--log-stdout-encoder=console",
        ],
        env,
        work_dir / "kuberay-operator.log",
        "the KubeRay operator",
        # One "Starting workers" line per controller (RayCluster, RayService, RayJob).
        lambda log: log.count(b"Starting workers") >= 3,
    ) as process:
        yield process
