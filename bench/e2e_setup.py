"""The set-up the e2e benchmarks share (bench/chaos.py, bench/prometheus_outage.py): a real
control plane (hack/control-plane.sh, built on first use) unless $HYBRIDGPU_KUBECONFIG names
a running one, the CRDs, a test namespace, the e2e builders, and afterwards everything the
run created removed and everything it started stopped."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "operator", ROOT / "tests", ROOT / "tests" / "e2e"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from conftest import Cluster, Operators, delete_workloads, release_custom_objects  # noqa: E402
from support.controlplane import (  # noqa: E402
    ControlPlane,
    KubeTest,
    create_test_namespace,
    delete_namespace,
    install_crds,
    start_control_plane,
    stop_control_plane,
)


@contextmanager
def operator_cluster(name: str) -> Iterator[tuple[Cluster, Operators, Path]]:
    """Yield the e2e ``Cluster`` builder, the ``Operators`` launcher and a scratch directory
    (operator logs), in a fresh namespace ``name`` on the control plane."""
    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    plane = ControlPlane(kubeconfig=Path(reuse)) if reuse else start_control_plane(f"bench-{name}")
    try:
        install_crds(plane)
        kube = KubeTest(plane=plane, namespace=create_test_namespace(plane, name))
        cluster = Cluster(kube)
        with tempfile.TemporaryDirectory(prefix=f"hybridgpu-{name}-") as work:
            operators = Operators(kube=kube, log_dir=Path(work))
            try:
                yield cluster, operators, Path(work)
            finally:
                operators.stop_all()
                delete_workloads(kube)
                release_custom_objects(kube, cluster.created)
                for node in kube.core.list_node().items:
                    if node.metadata.name.startswith(cluster.prefix):
                        kube.core.delete_node(node.metadata.name)
                delete_namespace(plane, kube.namespace)
    finally:
        if reuse:
            plane.close()
        else:
            stop_control_plane(plane)
