"""What the tests' Go controllers (JobSet, KubeRay, PyTorchJob, LeaderWorkerSet, Kueue) share:
the paths their hack/ script prints after building them (cached by version), running one as a
subprocess against the session's control plane until its log says it started (stopped on
exit), a serving certificate for its webhook server on 127.0.0.1, and registering its webhooks
with the apiserver for as long as it runs."""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.children import DIE_WITH_PARENT
from support.controlplane import REPO_ROOT, ControlPlane
from support.ports import free_port


def hack_paths(script: str, command: str = "build") -> dict[str, Path]:
    """The KEY=path lines ``hack/<script> <command>`` prints (built on first use, then cached)."""
    result = subprocess.run(
        [str(REPO_ROOT / "hack" / script), command], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"hack/{script} {command} failed:\n{result.stderr}")
    pairs = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return {key: Path(value) for key, value in pairs.items()}


@contextmanager
def controller_process(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    what: str,
    started: Callable[[bytes], bool],
    timeout: float = 60.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running with its output in ``log_path``, once ``started(log)`` holds (else a
    RuntimeError naming ``what`` with the log's tail); SIGTERM, then SIGKILL, on exit."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=DIE_WITH_PARENT,
        )
    try:
        deadline = time.monotonic() + timeout
        while not started(log_path.read_bytes()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n" + log_path.read_text()[-4000:])
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


def serving_cert(cert_dir: Path) -> bytes:
    """A self-signed certificate for 127.0.0.1 (its IP in subjectAltName, as the apiserver
    requires of a webhook) written to ``cert_dir``/tls.crt and tls.key; its PEM, which is
    also the CA bundle that trusts it."""
    cert_dir.mkdir(parents=True, exist_ok=True)
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
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (cert_dir / "tls.crt").write_bytes(pem)
    (cert_dir / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem


def webhook_configurations(
    manifests: Path,
    url: str,
    ca_pem: bytes,
    name_prefix: str,
    pod_selector: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The controller's Mutating/ValidatingWebhookConfigurations (kubebuilder's
    config/webhook/manifests.yaml) pointed at its server at ``url`` (its in-cluster Service
    replaced), trusting ``ca_pem``, renamed ``<name_prefix>-<name>``. Webhooks on pods get
    ``pod_selector`` as objectSelector, so pods of the session's other tests never reach a
    controller that is not theirs."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc or not doc.get("kind", "").endswith("WebhookConfiguration"):
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"{name_prefix}-{doc['metadata']['name']}"}
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "")
            hook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": bundle}
            on_pods = any(
                "pods" in (rule.get("resources") or []) and "" in (rule.get("apiGroups") or [])
                for rule in hook.get("rules") or []
            )
            if on_pods and pod_selector is not None:
                hook["objectSelector"] = pod_selector
        out.append(doc)
    return out


@contextmanager
def registered_webhooks(
    plane: ControlPlane, configurations: list[dict[str, Any]]
) -> Iterator[None]:
    """``configurations`` registered with the apiserver; deleted on exit (a webhook whose
    server is gone would fail every request it matches)."""
    documents = yaml.safe_dump_all(configurations)
    plane.kubectl("apply", "-f", "-", stdin=documents)
    try:
        yield
    finally:
        plane.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=documents)


@contextmanager
def configured_webhook_controller(
    plane: ControlPlane,
    work_dir: Path,
    *,
    name: str,
    binary: Path,
    config_group: str,
    webhook_manifests: Path,
    pod_selector: dict[str, Any],
    what: str,
    started: Callable[[bytes], bool],
) -> Iterator[subprocess.Popen[bytes]]:
    """A kubebuilder controller read from its ``Configuration`` file (API group
    ``config_group``) with leader election, metrics and health probes off and its own
    certificate management off: its webhook server on a free 127.0.0.1 port with a
    self-signed certificate, and its webhooks registered with the apiserver while it runs
    (pod webhooks only for pods matching ``pod_selector``); stopped, and its webhooks
    removed, on exit."""
    cert_dir = work_dir / "certs"
    ca = serving_cert(cert_dir)
    port = free_port()
    config = work_dir / f"{name}-config.yaml"
    config.write_text(
        f"apiVersion: {config_group}/v1alpha1\n"
        "kind: Configuration\n"
        "leaderElection: {leaderElect: false}\n"
        "internalCertManagement: {enable: false}\n"
        f"webhook: {{host: 127.0.0.1, port: {port}, certDir: {cert_dir}}}\n"
        'metrics: {bindAddress: "0"}\n'
        'health: {healthProbeBindAddress: "0"}\n'
    )
    webhooks = webhook_configurations(
        webhook_manifests,
        f"https://127.0.0.1:{port}",
        ca,
        f"hybridgpu-tests-{name}-{port}",
        pod_selector=pod_selector,
    )
    with (
        controller_process(
            [str(binary), f"--config={config}"],
            {**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
            work_dir / f"{name}-controller.log",
            what,
            started,
        ) as process,
        registered_webhooks(plane, webhooks),
    ):
        yield process
