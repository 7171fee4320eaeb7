"""Grafana dashboards and Prometheus alerting rules as code.

Each dashboard is one module (``cost``, ``moves``, ``admission``, ``serving``, ``workloads``)
that builds it with grafana-foundation-sdk's typed builders from the metric names of
``metrics.exported``;
``alerts`` writes the chart's PrometheusRule template. ``make dashboards`` (``python -m
hybridgpu.dashboards``) writes them into the chart; the chart tests fail when the checked-in
files drift from what this package generates.

Needs the ``dashboards`` extra (``pip install 'hybridgpu[dashboards]'``); the operator does
not.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

from hybridgpu.dashboards import admission, alerts, cost, moves, serving, workloads
from hybridgpu.dashboards.panels import to_json

DASHBOARD_MODULES: tuple[ModuleType, ...] = (cost, moves, admission, serving, workloads)
DASHBOARDS_DIR = Path("helm/hybridgpu-operator/dashboards")
RULES_TEMPLATE = Path("helm/hybridgpu-operator/templates/prometheusrule.yaml")
"""Where the generated files go, relative to the repository root."""


def _dashboard_json(module: ModuleType) -> str:
    return to_json(module.build())


def generated_files() -> dict[Path, Callable[[], str]]:
    """Path (relative to the repository root) -> a function returning its content."""
    files: dict[Path, Callable[[], str]] = {
        DASHBOARDS_DIR / module.FILE: partial(_dashboard_json, module)
        for module in DASHBOARD_MODULES
    }
    files[RULES_TEMPLATE] = alerts.template
    return files


def write(root: Path) -> list[Path]:
    """Write every generated file under ``root``; returns the files whose content changed."""
    changed = []
    for relative, render in generated_files().items():
        path = root / relative
        text = render()
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed
