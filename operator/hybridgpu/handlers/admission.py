"""The admission webhook: kopf glue around core.admission.

Pods labelled ``hybridgpu.io/criticality`` get their criticality's PriorityClass and, when
preemptible, a node affinity to core and spot nodes; a critical pod restricted to spot is
refused. Both webhooks fail open (``failurePolicy: Ignore``): a down operator never blocks
the cluster. What they enforce comes from kopf indexes (PriorityClasses, spot GPUPools, the
default ScalingPolicy), so a request never waits on the apiserver.

With the webhook off (``hybridgpu run --no-webhook``) the handlers stay registered but
:class:`NoWebhookServer` serves nothing, so no webhook configuration points here.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonpatch
import kopf

from hybridgpu.core.admission import (
    AdmissionRules,
    PriorityClassRef,
    mutation,
    not_admitted,
    rejection,
)
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.kube.convert import parse_criticality
from hybridgpu.kube.names import (
    CRITICALITY_LABEL,
    GROUP,
    POOL_LABEL,
    RESERVED_TAINT,
    TIER_LABEL,
    VERSION,
)
from hybridgpu.metrics.exported import METRICS, AdmissionOutcome
from hybridgpu.models.pool import Taint, Tier
from hybridgpu.models.snapshot import Criticality

MANAGED_CONFIGURATION = "admission.hybridgpu.io"
"""Name of the webhook configurations kopf creates when it manages them (local runs)."""
MUTATE_ID = "pod-priority-and-tier"
VALIDATE_ID = "pod-critical-not-spot-only"
"""Handler ids: also the URL paths the chart's webhook configurations call."""
POLICY_FOR_ADMISSION = "default"
"""The ScalingPolicy whose preemption.allowOnDemandForPreemptible admission follows."""

PODS: dict[str, Any] = {"labels": {CRITICALITY_LABEL: kopf.PRESENT}, "operations": ["CREATE"]}

SERVER_SIDE_LABELS: dict[tuple[str, str, str], str] = {
    ("", "v1", "pods"): CRITICALITY_LABEL,
    ("scheduling.k8s.io", "v1", "priorityclasses"): CRITICALITY_LABEL,
}
"""The label selectors kopf's own watches of these kinds send to the apiserver
(``settings.watching.label_selectors``): the handlers below filter on the same label, and
kopf otherwise filters client-side, so it would list and watch every pod of the cluster (at
5,000 nodes its first LIST of 50,000 pods timed out) to find the labelled ones."""


# ---------------------------------------------------------------------------------- indexes


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses", labels={CRITICALITY_LABEL: kopf.PRESENT})
def priority_classes(name: str, body: kopf.Body, labels: Any, **_: Any) -> Any:
    criticality = parse_criticality(labels.get(CRITICALITY_LABEL))
    if criticality is None:
        return None
    policy = str(body.get("preemptionPolicy") or "PreemptLowerPriority")
    return {criticality: PriorityClassRef(name, int(body.get("value") or 0), policy)}


@kopf.index(GROUP, VERSION, "gpupools")
def spot_pools(name: str, spec: Any, **_: Any) -> Any:
    if spec.get("tier") != "spot":
        return None
    return {name: tuple(Taint.model_validate(t) for t in spec.get("taints") or [])}


@kopf.index(GROUP, VERSION, "scalingpolicies")
def on_demand_for_preemptible(name: str, spec: Any, **_: Any) -> Any:
    preemption = spec.get("preemption") or {}
    return {name: bool(preemption.get("allowOnDemandForPreemptible", False))}


def admission_rules(
    priority_classes: kopf.Index[Any, PriorityClassRef],
    spot_pools: kopf.Index[str, tuple[Taint, ...]],
    on_demand_for_preemptible: kopf.Index[str, bool],
) -> AdmissionRules:
    """What the webhooks enforce, from the indexes (the lowest-named class on a tie)."""
    classes = {
        criticality: min(store, key=lambda c: c.name)
        for criticality, store in priority_classes.items()
    }
    allow = any(on_demand_for_preemptible.get(POLICY_FOR_ADMISSION, ()))
    return AdmissionRules(
        tier_label=TIER_LABEL,
        pool_label=POOL_LABEL,
        priority_classes=classes,
        allow_on_demand_for_preemptible=allow,
        spot_pools={name: next(iter(store)) for name, store in spot_pools.items()},
        reservation_taint=RESERVED_TAINT,
        preferred_tier=Tier.CORE.value,
    )


# ---------------------------------------------------------------------------------- webhooks


@kopf.on.mutate("", "v1", "pods", id=MUTATE_ID, ignore_failures=True, **PODS)
async def set_priority_and_tier(
    labels: Any, spec: Any, patch: kopf.Patch, warnings: list[str], **kwargs: Any
) -> None:
    criticality = parse_criticality(labels.get(CRITICALITY_LABEL))
    rules = admission_rules(
        kwargs["priority_classes"], kwargs["spot_pools"], kwargs["on_demand_for_preemptible"]
    )
    no_class = criticality is not None and criticality not in rules.priority_classes
    if no_class:
        warnings.append(f"hybridgpu: no PriorityClass labelled {CRITICALITY_LABEL}={criticality}")
    ops = mutation(criticality, dict(spec), rules)
    if ops:
        patch.fns.append(lambda body: jsonpatch.apply_patch(body, ops, in_place=True))
    outcome = (
        AdmissionOutcome.NO_PRIORITY_CLASS
        if no_class
        else AdmissionOutcome.PATCHED
        if ops
        else AdmissionOutcome.UNCHANGED
    )
    METRICS.record_admission(MUTATE_ID, _criticality_label(criticality), outcome)


@kopf.on.validate("", "v1", "pods", id=VALIDATE_ID, ignore_failures=True, **PODS)
async def refuse_critical_on_spot_only(labels: Any, spec: Any, **kwargs: Any) -> None:
    rules = admission_rules(
        kwargs["priority_classes"], kwargs["spot_pools"], kwargs["on_demand_for_preemptible"]
    )
    criticality = parse_criticality(labels.get(CRITICALITY_LABEL))
    reason = rejection(criticality, dict(spec), rules)
    outcome = AdmissionOutcome.ALLOWED if reason is None else AdmissionOutcome.REFUSED
    METRICS.record_admission(VALIDATE_ID, _criticality_label(criticality), outcome)
    if reason is not None:
        raise kopf.AdmissionError(reason, code=403)


NOT_ADMITTED_REASON = "AdmittedWithoutWebhook"
FINISHED_PHASES = ("Succeeded", "Failed")


@kopf.on.event("", "v1", "pods", labels={CRITICALITY_LABEL: kopf.PRESENT})
async def report_pods_admitted_without_webhook(
    type: str | None, body: kopf.Body, memo: kopf.Memo, logger: Any, **kwargs: Any
) -> None:
    """A labelled pod that exists without what the mutating webhook gives (it was created
    while the webhook was down: it fails open) is reported: a Warning Event on the pod, a log
    line and ``hybridgpu_pods_admitted_without_webhook``, until the pod finishes or is gone.
    kopf lists every existing pod when it starts, so pods admitted while the operator itself
    was down are found when it comes back. Async: it runs on the event loop, one at a time."""
    options: OperatorOptions | None = memo.get("options")
    if options is None or options.webhook_port is None:
        return  # no webhook served: nothing was bypassed
    metadata = body.get("metadata") or {}
    uid = str(metadata.get("uid") or "")
    phase = (body.get("status") or {}).get("phase")
    gone = type == "DELETED" or metadata.get("deletionTimestamp") or phase in FINISHED_PHASES
    criticality = parse_criticality((metadata.get("labels") or {}).get(CRITICALITY_LABEL))
    missing: list[str] = []
    if not gone:
        rules = admission_rules(
            kwargs["priority_classes"], kwargs["spot_pools"], kwargs["on_demand_for_preemptible"]
        )
        missing = not_admitted(criticality, dict(body.get("spec") or {}), rules)
    counted = _criticality_label(criticality) if missing else None
    if METRICS.record_unadmitted(uid, counted):
        message = (
            f"admitted without the hybridgpu webhook (it was down or unreachable): no "
            f"{' and no '.join(missing)}; the scheduler does not order or place it as planned "
            "until it is recreated"
        )
        logger.warning("pod %s/%s %s", metadata.get("namespace"), metadata.get("name"), message)
        kopf.warn(body, reason=NOT_ADMITTED_REASON, message=message)


def _criticality_label(criticality: Criticality | None) -> str:
    """The criticality as a metric label: a label value no level has is ``invalid``."""
    return criticality.value if criticality is not None else "invalid"


# ---------------------------------------------------------------------------------- server


class NoWebhookServer:
    """A webhook "server" that never listens: kopf refuses admission handlers without one."""

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        await asyncio.Event().wait()
        yield kopf.WebhookClientConfig()  # never reached


def webhook_server(options: OperatorOptions) -> kopf.WebhookServer:
    """The HTTPS endpoint the apiserver calls: with the certificate in ``webhook_cert_dir``
    (tls.crt, tls.key, ca.crt: the chart's Secret), else with a self-signed CA made now for
    the listening address (local runs; kopf then manages the webhook configurations)."""
    if options.webhook_cert_dir:
        directory = Path(options.webhook_cert_dir)
        return kopf.WebhookServer(
            addr=options.webhook_address,
            port=options.webhook_port,
            certfile=directory / "tls.crt",
            pkeyfile=directory / "tls.key",
            cafile=directory / "ca.crt",
        )
    host = options.webhook_host or options.webhook_address
    directory = Path(tempfile.mkdtemp(prefix="hybridgpu-webhook-"))
    ca, cert, key = self_signed_tls([host, "localhost", "127.0.0.1"])
    for file, data in (("ca.crt", ca), ("tls.crt", cert), ("tls.key", key)):
        (directory / file).write_bytes(data)
    return kopf.WebhookServer(
        addr=options.webhook_address,
        port=options.webhook_port,
        host=host,
        certfile=directory / "tls.crt",
        pkeyfile=directory / "tls.key",
        cafile=directory / "ca.crt",
    )


def self_signed_tls(hosts: list[str], days: int = 365) -> tuple[bytes, bytes, bytes]:
    """A throwaway CA and a server certificate it signed for ``hosts`` (IPs or DNS names):
    (CA certificate, server certificate, server key), PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hybridgpu-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return (
        ca.public_bytes(pem),
        cert.public_bytes(pem),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
