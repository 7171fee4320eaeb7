"""hybridgpu: a Kubernetes operator for hybrid GPU clusters at the lowest cost of ownership."""

__version__ = "0.1.0"
GROUP = "hybridgpu.io"
VERSION = "v1alpha1"
