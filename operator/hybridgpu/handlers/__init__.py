"""The only kopf code: ``kopf run -m hybridgpu.handlers`` (or ``hybridgpu run``) loads this.

Importing the modules registers their handlers with kopf's default registry.
"""

from hybridgpu.handlers import admission, capacityplan, reconcile, resources, startup

__all__ = ["admission", "capacityplan", "reconcile", "resources", "startup"]
