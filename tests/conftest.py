"""Root fixtures: the real Kubernetes control plane, once per session, and a clean slate per test.

Tier-specific fixtures live in the tier's own conftest.py.

- ``kube_cluster`` (session): starts etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler and kwok on 127.0.0.1 via hack/control-plane.sh (building them on first use),
  installs crds/, and stops everything at the end, also when tests fail. Set
  HYBRIDGPU_KUBECONFIG to a running cluster's kubeconfig (e.g. from `make dev-cluster-up`) to
  reuse it instead; it is then left running.
- ``kube`` (per test): a namespace of its own; the namespace and every node or hybridgpu.io
  object the test created are deleted afterwards.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.controlplane import (
    ControlPlane,
    KubeTest,
    cluster_scoped_inventory,
    create_test_namespace,
    delete_cluster_scoped,
    delete_namespace,
    install_crds,
    start_control_plane,
    stop_control_plane,
)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[ControlPlane]:
    """A real control plane with crds/ installed, shared by the whole session."""
    reuse = os.environ.get("HYBRIDGPU_KUBECONFIG")
    if reuse:
        plane = ControlPlane(kubeconfig=Path(reuse))
        try:
            install_crds(plane)
            yield plane
        finally:
            plane.close()
        return
    plane = start_control_plane(f"pytest-{os.getpid()}", audit=True)
    try:
        install_crds(plane)
        yield plane
    finally:
        stop_control_plane(plane)


@pytest.fixture
def kube(kube_cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[KubeTest]:
    """A namespace for this test; everything the test created is deleted after it."""
    before = cluster_scoped_inventory(kube_cluster)
    namespace = create_test_namespace(kube_cluster, request.node.name)
    try:
        yield KubeTest(plane=kube_cluster, namespace=namespace)
    finally:
        delete_cluster_scoped(kube_cluster, cluster_scoped_inventory(kube_cluster) - before)
        delete_namespace(kube_cluster, namespace)
