"""The Kubernetes adapter: read a ClusterSnapshot, act on nodes and Jobs, write status.

Everything here talks to the apiserver through the official ``kubernetes`` client and turns
``ApiException`` into :mod:`hybridgpu.kube.errors`. Pure conversion (objects as dicts ->
snapshot types, status bodies, the move protocol's steps) lives in ``convert``, ``status``
and ``moves`` so it is unit-tested without a cluster.
"""
