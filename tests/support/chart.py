"""Render and inspect the Helm chart (helm/hybridgpu-operator) with the helm from `make tools`."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from support.controlplane import DEFAULT_TOOLS_BIN, REPO_ROOT

CHART_DIR = REPO_ROOT / "helm" / "hybridgpu-operator"
DASHBOARDS_DIR = CHART_DIR / "dashboards"
DASHBOARD = DASHBOARDS_DIR / "hybridgpu-cost.json"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
"""`helm template --api-versions` this to render the chart's PrometheusRule."""
DOCKERFILE = REPO_ROOT / "Dockerfile"


class HelmNotFound(RuntimeError):
    """No helm binary: run `make tools`."""


def helm_path() -> str:
    """Path of the helm from `make tools` (or $HYBRIDGPU_HELM, or one on PATH)."""
    for candidate in (os.environ.get("HYBRIDGPU_HELM"), str(DEFAULT_TOOLS_BIN / "helm")):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("helm")
    if found:
        return found
    raise HelmNotFound("helm not found: run `make tools`")


def helm(*args: str, timeout_seconds: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with a throwaway home (no repositories, no plugins, nothing written to ~)."""
    home = Path(os.environ.get("TMPDIR", "/tmp")) / f"hybridgpu-helm-{os.getpid()}"
    env = dict(os.environ)
    env |= {
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    env.pop("KUBECONFIG", None)  # lint and template never need a cluster
    return subprocess.run(
        [helm_path(), *args],
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        check=False,
        env=env,
    )


@dataclass(frozen=True)
class Rendered:
    """The objects `helm template` rendered, and the YAML they came from."""

    objects: list[dict[str, Any]]
    text: str

    def kinds(self) -> set[str]:
        return {o["kind"] for o in self.objects}

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]


class RenderError(AssertionError):
    """`helm template` refused the values."""


def render(
    values: dict[str, Any] | None = None,
    *,
    release: str = "hybridgpu",
    namespace: str = "hybridgpu-system",
    values_dir: Path,
    extra_args: Sequence[str] = (),
) -> Rendered:
    """`helm template` the chart with ``values`` (written to a file in ``values_dir``)."""
    args = ["template", release, str(CHART_DIR), "--namespace", namespace, *extra_args]
    if values is not None:
        values_file = values_dir / f"values-{release}.yaml"
        values_file.write_text(yaml.safe_dump(values))
        args += ["--values", str(values_file)]
    result = helm(*args)
    if result.returncode != 0:
        raise RenderError(f"helm template failed ({result.returncode}):\n{result.stderr}")
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return Rendered(objects=objects, text=result.stdout)


def container(deployment: dict[str, Any], name: str = "operator") -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, comments dropped and continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    if pending:
        raise ValueError("Dockerfile ends inside a continued line")
    return instructions
