"""hybridgpu: a Kubernetes operator for hybrid GPU clusters at the lowest cost of ownership."""

__version__ = "0.1.0"
GROUP = "hybridgpu.io"
VERSION = "v1alpha1"
USER_AGENT = f"hybridgpu/{__version__}"
"""The operator's user agent on every apiserver request its own clients make (kopf's say
``kopf/...``): an audit log tells its requests from the tests', the benchmarks' and kubectl's."""
