"""Kueue for the e2e tests: its CRDs, the ProvisioningRequest CRD, and the controller built
from its Go module (hack/kueue.sh), run as a local process against the test apiserver.

Kueue runs outside the cluster with no webhook registered in the apiserver (Jobs are created
suspended, as its Job webhook would make them) and no certificate management: its webhook
server gets a throwaway self-signed certificate. Kueue reads its metrics certificate from a
fixed path (/etc/kueue/metrics/certs) when it does not manage certificates, so it runs in a
private mount namespace (``unshare``) whose /etc is an overlay holding that certificate: the
machine's /etc is never written.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from support.children import DIE_WITH_PARENT
from support.controlplane import REPO_ROOT, KubeTest, wait_until
from support.gocontroller import serving_cert
from support.ports import free_port

KUEUE_SCRIPT = REPO_ROOT / "hack" / "kueue.sh"


def kueue_paths() -> dict[str, str]:
    """KUEUE_VERSION, KUEUE_BIN and KUEUE_CRDS as hack/kueue.sh names them."""
    out = subprocess.run(
        [str(KUEUE_SCRIPT), "paths"], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def fetch_crds() -> Path:
    """The directory with Kueue's CRDs and the ProvisioningRequest CRD (fetched once)."""
    out = subprocess.run(
        [str(KUEUE_SCRIPT), "crds"], check=True, capture_output=True, text=True
    ).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return Path(paths["KUEUE_CRDS"])


def install_crds(kube: KubeTest, crds: Path, names: list[str] | None = None) -> None:
    """Apply the CRDs of ``crds`` (only the files ``names`` when given) and wait until they
    are served."""
    files = sorted(crds.glob("*.yaml")) if names is None else [crds / n for n in names]
    for path in files:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in files:
        kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(path))


@dataclass
class KueueProcess:
    """A running Kueue controller manager."""

    process: subprocess.Popen[bytes]
    log_path: Path
    health_url: str

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def start_kueue(kube: KubeTest, binary: Path, work: Path) -> KueueProcess:
    """Start Kueue against the test apiserver (its CRDs and the ProvisioningRequest CRD must
    be installed first: Kueue sets up its provisioning admission check only when the
    ProvisioningRequest API is served at start)."""
    if shutil.which("unshare") is None:
        raise RuntimeError("unshare (util-linux) is needed to run Kueue outside a cluster")
    work.mkdir(parents=True, exist_ok=True)
    serving_cert(work / "webhook-certs")
    upper, scratch = work / "etc-upper", work / "etc-work"
    serving_cert(upper / "kueue" / "metrics" / "certs")
    scratch.mkdir(exist_ok=True)
    health_port, webhook_port = free_port(), free_port()
    config = work / "config.yaml"
    config.write_text(
        "\n".join(
            [
                "apiVersion: config.kueue.x-k8s.io/v1beta2",
                "kind: Configuration",
                "namespace: kueue-system",
                "health:",
                f"  healthProbeBindAddress: 127.0.0.1:{health_port}",
                "metrics:",
                '  bindAddress: "0"',
                "webhook:",
                "  host: 127.0.0.1",
                f"  port: {webhook_port}",
                f"  certDir: {work / 'webhook-certs'}",
                "leaderElection:",
                "  leaderElect: false",
                "internalCertManagement:",
                "  enable: false",
                "integrations:",
                "  frameworks: [batch/job]",
                "",
            ]
        )
    )
    kube.kubectl("create", "namespace", "kueue-system", check=False)
    overlay = f"lowerdir=/etc,upperdir={upper},workdir={scratch}"
    cmd = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        f'mount -t overlay overlay -o {overlay} /etc && exec "$0" "$@"',
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kube.plane.kubeconfig}",
        "--feature-gates=VisibilityOnDemand=false,MultiKueue=false",
        "--zap-log-level=3",
    ]
    log_path = work / "kueue.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=DIE_WITH_PARENT,
        )
    kueue = KueueProcess(process, log_path, f"http://127.0.0.1:{health_port}/readyz")

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"Kueue exited with {process.returncode}:\n{kueue.log()[-3000:]}")
        try:
            with urllib.request.urlopen(kueue.health_url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_until(ready, timeout_seconds=120, what="Kueue ready")
    except BaseException:
        kueue.stop()
        raise
    return kueue
