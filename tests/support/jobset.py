"""The JobSet controller built from sigs.k8s.io/jobset (hack/jobset.sh), run against the session's
control plane, and the RayJob/PyTorchJob CRDs (no controller).

The controller runs as a subprocess with leader election, metrics and health probes off. Its
webhooks are not registered with the apiserver (nothing calls them), but the manager still
serves them, so it gets a self-signed certificate on a free 127.0.0.1 port.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import controller_process, hack_paths

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


def _self_signed(cert_dir: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (cert_dir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (cert_dir / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def jobset_controller(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The JobSet controller running against ``plane`` (its CRD installed); stopped on exit."""
    paths = jobset_paths()
    install_workload_crds(plane, "JOBSET_CRDS")
    cert_dir = work_dir / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    _self_signed(cert_dir)
    config = work_dir / "jobset-config.yaml"
    config.write_text(
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\n"
        "kind: Configuration\n"
        "leaderElection: {leaderElect: false}\n"
        "internalCertManagement: {enable: false}\n"
        f"webhook: {{host: 127.0.0.1, port: {_free_port()}, certDir: {cert_dir}}}\n"
        'metrics: {bindAddress: "0"}\n'
        'health: {healthProbeBindAddress: "0"}\n'
    )
    with controller_process(
        [str(paths["JOBSET_BIN"]), f"--config={config}"],
        {**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        work_dir / "jobset-controller.log",
        "the JobSet controller",
        lambda log: b"Starting workers" in log,
    ) as process:
        yield process
