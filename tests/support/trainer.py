"""The Kubeflow Trainer v2 controller manager built from github.com/kubeflow/trainer/v2
(hack/trainer.sh), run against the session's control plane with its CRDs, its webhooks
registered and its torch-distributed ClusterTrainingRuntime.

Upstream's own main, read from a Configuration file: certificate management, leader election,
metrics and health probes off, its webhook server on a free 127.0.0.1 port with a self-signed
certificate (in ``$TMPDIR/k8s-webhook-server/serving-certs``, controller-runtime's default:
Trainer's Configuration has no certificate directory). Its TrainJob defaulting and validation
webhooks are called by the apiserver while it runs, as in a cluster where Trainer is installed
(the validation refuses a change of ``spec.runtimePatches`` unless the TrainJob is suspended
and its JobSet has no active Job). The TrainJob controller makes a JobSet per TrainJob, so the
JobSet controller (support.jobset) must run too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import (
    controller_process,
    hack_paths,
    registered_webhooks,
    serving_cert,
    webhook_configurations,
)
from support.jobset import reinstall_workload_crds_later
from support.ports import free_port

RUNTIME = "torch-distributed"
"""The ClusterTrainingRuntime the tests' TrainJobs use (upstream's manifest)."""


def trainer_paths() -> dict[str, Path]:
    """TRAINER_BIN, TRAINER_CRDS, TRAINER_WEBHOOKS, TRAINER_RUNTIMES: built on first use,
    then cached."""
    return hack_paths("trainer.sh")


@contextmanager
def trainer_controller(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The Trainer controller manager running against ``plane`` (its CRDs installed, its
    webhooks registered, the torch-distributed ClusterTrainingRuntime created); stopped, and
    its webhooks and runtime removed, on exit. Its TrainJob CRD replaces the v2.0 one the
    adapter tests install (support.jobset installs that again when next asked)."""
    paths = trainer_paths()
    install_crds(plane, paths["TRAINER_CRDS"])
    reinstall_workload_crds_later()
    tmp = work_dir / "tmp"
    ca = serving_cert(tmp / "k8s-webhook-server" / "serving-certs")
    port = free_port()
    config = work_dir / "trainer-config.yaml"
    config.write_text(
        "apiVersion: config.trainer.kubeflow.org/v1alpha1\n"
        "kind: Configuration\n"
        "leaderElection: {leaderElect: false}\n"
        "certManagement: {enable: false}\n"
        f"webhook: {{host: 127.0.0.1, port: {port}}}\n"
        'metrics: {bindAddress: "0"}\n'
        'health: {healthProbeBindAddress: "0"}\n'
    )
    webhooks = webhook_configurations(
        paths["TRAINER_WEBHOOKS"],
        f"https://127.0.0.1:{port}",
        ca,
        f"hybridgpu-tests-trainer-{port}",
    )
    runtime = paths["TRAINER_RUNTIMES"] / "torch_distributed.yaml"
    with (
        controller_process(
            [str(paths["TRAINER_BIN"]), f"--config={config}"],
            {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "TMPDIR": str(tmp)},
            work_dir / "trainer-controller.log",
            "the Trainer controller manager",
            lambda log: b"Starting workers" in log and b"Serving webhook server" in log,
        ) as process,
        registered_webhooks(plane, webhooks),
    ):
        plane.kubectl("apply", "-f", str(runtime))
        try:
            yield process
        finally:
            plane.kubectl("delete", "--ignore-not-found", "-f", str(runtime))
