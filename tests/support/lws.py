"""The LeaderWorkerSet controller built from sigs.k8s.io/lws (hack/lws.sh), run against the
session's control plane with its CRD and its webhooks registered.

Unlike the JobSet controller's, its webhooks are needed: its pod webhook labels each leader pod
with its group index, from which the controller names the group's worker StatefulSet, so
without it no worker is ever created. The controller serves them on a free 127.0.0.1 port with
a self-signed certificate; the apiserver calls them at that URL while the controller runs, and
its pod webhooks only for pods of a LeaderWorkerSet (an objectSelector on the
``leaderworkerset.sigs.k8s.io/name`` label), so no other test's pods depend on it. Leader
election, metrics and health probes are off.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import configured_webhook_controller, hack_paths

LWS_POD_SELECTOR = {
    "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
}


def lws_paths() -> dict[str, Path]:
    """LWS_BIN, LWS_CRDS and LWS_WEBHOOKS: built on first use, then cached by version."""
    return hack_paths("lws.sh")


@contextmanager
def lws_controller(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The LeaderWorkerSet controller running against ``plane`` (its CRD installed, its
    webhooks registered); stopped, and its webhooks removed, on exit."""
    paths = lws_paths()
    install_crds(plane, paths["LWS_CRDS"])
    with configured_webhook_controller(
        plane,
        work_dir,
        name="lws",
        binary=paths["LWS_BIN"],
        config_group="config.lws.x-k8s.io",
        webhook_manifests=paths["LWS_WEBHOOKS"],
        pod_selector=LWS_POD_SELECTOR,
        what="the LeaderWorkerSet controller",
        # One "Starting workers" line per controller (LeaderWorkerSet, Pod).
        started=lambda log: log.count(b"Starting workers") >= 2,
    ) as process:
        yield process
