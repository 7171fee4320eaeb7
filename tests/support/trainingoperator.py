"""The Kubeflow training operator's PyTorchJob controller built from
github.com/kubeflow/training-operator (hack/training-operator.sh), run against the session's
control plane with the PyTorchJob CRD.

The binary is the module's PyTorchJob reconciler under a main of ours
(hack/go/pytorchjob-controller): no webhooks, no certificate rotation, metrics and health
probes off, so it serves nothing. It creates the master and worker pods and the master's
Service itself; in kwok the pods go Running and never end, so a PyTorchJob runs until deleted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.controlplane import ControlPlane, install_crds
from support.gocontroller import controller_process, hack_paths


def training_operator_paths() -> dict[str, Path]:
    """TRAINING_OPERATOR_BIN and TRAINING_OPERATOR_CRDS: built on first use, then cached."""
    return hack_paths("training-operator.sh")


@contextmanager
def pytorchjob_controller(plane: ControlPlane, work_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The PyTorchJob controller running against ``plane`` (its CRD installed); stopped on
    exit."""
    paths = training_operator_paths()
    install_crds(plane, paths["TRAINING_OPERATOR_CRDS"])
    with controller_process(
        [str(paths["TRAINING_OPERATOR_BIN"])],
        {**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        work_dir / "pytorchjob-controller.log",
        "the PyTorchJob controller",
        lambda log: b"Starting workers" in log,
    ) as process:
        yield process
