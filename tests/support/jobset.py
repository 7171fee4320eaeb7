"""The JobSet controller built from sigs.k8s.io/jobset (hack/jobset.sh), run against the session's
control plane with its webhooks registered, and the RayJob/PyTorchJob CRDs (no controller).

The controller runs as a subprocess with leader election, metrics and health probes off. It
serves its webhooks on a free 127.0.0.1 port with a self-signed certificate, and the apiserver
calls them there while it runs (support.gocontroller.registered_webhooks): the JobSet
defaulting and validation webhooks, and its pod webhooks for pods of a JobSet only (the
objectSelector of its own kustomize patches), as in a cluster where JobSet is installed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import configured_webhook_controller, hack_paths

JOBSET_POD_SELECTOR = {
    "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
}

_installed: set[str] = set()


def jobset_paths(command: str = "build") -> dict[str, Path]:
    """JOBSET_BIN, JOBSET_CRDS, WORKLOAD_CRDS: built or fetched on first use, then cached
    (``command`` "crds" fetches only the RayJob and PyTorchJob CRDs)."""
    return hack_paths("jobset.sh", command)


def install_workload_crds(plane: ControlPlane, which: str) -> list[str]:
    """Install JOBSET_CRDS or WORKLOAD_CRDS (RayJob, PyTorchJob) once per process."""
    if which in _installed:
        return []
    names = install_crds(
        plane, jobset_paths("crds" if which == "WORKLOAD_CRDS" else "build")[which]
    )
    _installed.add(which)
    return names


def reinstall_workload_crds_later() -> None:
    """Another version of one of WORKLOAD_CRDS was installed (Trainer v2.2's TrainJob CRD, by
    support.trainer): install WORKLOAD_CRDS again when next asked."""
    _installed.discard("WORKLOAD_CRDS")


@contextmanager
def jobset_controller(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The JobSet controller running against ``plane`` (its CRD installed, its webhooks
    registered); stopped, and its webhooks removed, on exit."""
    paths = jobset_paths()
    install_workload_crds(plane, "JOBSET_CRDS")
    with configured_webhook_controller(
        plane,
        work_dir,
        name="jobset",
        binary=paths["JOBSET_BIN"],
        config_group="config.jobset.x-k8s.io",
        webhook_manifests=paths["JOBSET_WEBHOOKS"],
        pod_selector=JOBSET_POD_SELECTOR,
        what="the JobSet controller",
        started=lambda log: b"Starting workers" in log,
    ) as process:
        yield process
