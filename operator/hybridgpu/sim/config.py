"""Reading a cluster file: the same GPUPool and ScalingPolicy manifests a user applies with
kubectl, so the simulator and the operator read one configuration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hybridgpu.errors import UserError
from hybridgpu.inputs import describe_validation_error, read_yaml_documents
from hybridgpu.models.resources import GPUPool, ScalingPolicy
from hybridgpu.models.snapshot import PoolState

_KINDS: dict[str, type[GPUPool] | type[ScalingPolicy]] = {
    "GPUPool": GPUPool,
    "ScalingPolicy": ScalingPolicy,
}


@dataclass(frozen=True)
class ClusterConfig:
    """Pools and the policy that drives them."""

    pools: tuple[PoolState, ...]
    policy: ScalingPolicy


def parse_manifest(doc: Any, source: str) -> GPUPool | ScalingPolicy:
    """One manifest as a model; raises UserError naming ``source`` and the field."""
    if not isinstance(doc, dict):
        raise UserError(
            f"{source}: expected a Kubernetes object (a mapping), got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    model = _KINDS.get(str(kind))
    if model is None:
        raise UserError(f"{source}: kind {kind!r} is not GPUPool or ScalingPolicy")
    name = (doc.get("metadata") or {}).get("name", "?")
    try:
        return model.model_validate(doc)
    except ValidationError as err:
        raise UserError(f"{source}: {kind} {name!r}: {describe_validation_error(err)}") from None


def load_cluster(path: str | Path) -> ClusterConfig:
    """Pools and the ScalingPolicy (default if absent) of a multi-document YAML file."""
    path = Path(path)
    docs = read_yaml_documents(path, "cluster file")
    pools: list[PoolState] = []
    policies: list[ScalingPolicy] = []
    for i, doc in enumerate(docs, start=1):
        obj = parse_manifest(doc, f"{path} (document {i})")
        if isinstance(obj, GPUPool):
            pools.append(PoolState(name=obj.metadata.name, spec=obj.spec))
        else:
            policies.append(obj)
    if not pools:
        raise UserError(f"{path}: no GPUPool found; expected at least one GPUPool manifest")
    names = [p.name for p in pools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"{path}: GPUPool name(s) used twice: {', '.join(dupes)}")
    policy = next((p for p in policies if p.metadata.name == "default"), None)
    if policy is None:
        policy = (
            policies[0]
            if policies
            else ScalingPolicy.model_validate(
                {
                    "apiVersion": "hybridgpu.io/v1alpha1",
                    "kind": "ScalingPolicy",
                    "metadata": {"name": "default"},
                }
            )
        )
    return ClusterConfig(pools=tuple(pools), policy=policy)
